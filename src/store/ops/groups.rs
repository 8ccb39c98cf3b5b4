//! `groups`: sets a group's concurrency or the default of every group,
//! or pauses or resumes a group (`lua/groups.lua`).

use fred::prelude::Value;

use super::{flag, Op};
use crate::store::keys::Keys;
use crate::store::scripts::{self, LuaScript};
use crate::Error;

/// One change of one shard's groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GroupChange<'a> {
    /// The concurrency of a group (`Some`) or the default of every group
    /// (`None`); `None` as the value clears it.
    Limit(Option<&'a str>, Option<u64>),
    /// The rate `(n, per ms)` of a group or the default, as `Limit`.
    Rate(Option<&'a str>, Option<(u64, u64)>),
    Pause(&'a str),
    Resume(&'a str),
}

/// Changes one shard's groups.
pub(crate) struct ChangeGroups<'a> {
    pub change: GroupChange<'a>,
}

impl Op for ChangeGroups<'_> {
    /// Whether anything changed.
    type Reply = bool;
    const KEYS: &'static [&'static str] = &["totals"];

    fn script() -> &'static LuaScript {
        &scripts::GROUPS
    }

    fn keys(&self, k: &Keys) -> Vec<String> {
        vec![k.totals.clone()]
    }

    fn args(&self, k: &Keys) -> Vec<Value> {
        let (what, group, value) = match self.change {
            GroupChange::Limit(group, n) => ("limit", group.unwrap_or(""), n.map(|n| n.to_string())),
            GroupChange::Rate(group, r) => ("rate", group.unwrap_or(""), r.map(|(n, per)| format!("{n} {per}"))),
            GroupChange::Pause(group) => ("pause", group, None),
            GroupChange::Resume(group) => ("resume", group, None),
        };
        vec![
            k.group_prefix.as_str().into(),
            what.into(),
            group.into(),
            value.unwrap_or_default().into(),
            k.wake.as_str().into(),
        ]
    }

    fn reply(&self, v: Value) -> Result<Self::Reply, Error> {
        flag::<Self>(&v)
    }
}
