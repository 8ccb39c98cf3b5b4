//! `purge`: deletes messages whatever their state (`lua/purge.lua`).

use fred::prelude::Value;

use super::{count, id_keys, int, Op};
use crate::store::keys::Keys;
use crate::store::scripts::{self, LuaScript};
use crate::Error;

/// Deletes at most `limit` messages; once none is left, forgets idle
/// groups, then the attempts and totals go. Run until it returns 0.
pub(crate) struct Purge {
    pub limit: usize,
}

impl Op for Purge {
    /// Ids removed, list entries included; negative: that many known groups
    /// forgotten (none is left to remove).
    type Reply = i64;
    const KEYS: &'static [&'static str] = &["pending", "ready", "processing", "retry", "dead", "attempts", "totals"];

    fn script() -> &'static LuaScript {
        &scripts::PURGE
    }

    fn keys(&self, k: &Keys) -> Vec<String> {
        let mut keys = id_keys(k);
        keys.push(k.totals.clone());
        keys
    }

    fn args(&self, k: &Keys) -> Vec<Value> {
        vec![
            k.msg_prefix.as_str().into(),
            count(self.limit as u64),
            k.prio.as_str().into(),
            k.group_prefix.as_str().into(),
            k.marker_prefix.as_str().into(),
        ]
    }

    fn reply(&self, v: Value) -> Result<Self::Reply, Error> {
        int::<Self>(&v)
    }
}
