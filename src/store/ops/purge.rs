//! `purge`: deletes messages whatever their state (`lua/purge.lua`).

use fred::prelude::Value;

use super::{array, count, id_keys, int, unexpected, Op};
use crate::store::keys::{glob_escape, Keys};
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
        purge_args(k, self.limit)
    }

    fn reply(&self, v: Value) -> Result<Self::Reply, Error> {
        int::<Self>(&v)
    }
}

/// The arguments both modes of the script start with.
fn purge_args(k: &Keys, limit: usize) -> Vec<Value> {
    vec![
        k.msg_prefix.as_str().into(),
        count(limit as u64),
        k.prio.as_str().into(),
        k.group_prefix.as_str().into(),
        k.marker_prefix.as_str().into(),
    ]
}

/// Purge's sweep, once [`Purge`] returned 0: looks at `limit` keys of the
/// node from `cursor` on and deletes the queue's results, and the progress
/// and logs of ids not in processing. Run from `"0"` until the cursor
/// returned is `"0"`.
pub(crate) struct Sweep<'a> {
    pub cursor: &'a str,
    pub limit: usize,
}

impl Op for Sweep<'_> {
    /// The next cursor (`"0"`: done) and how many keys it deleted.
    type Reply = (String, u64);
    const KEYS: &'static [&'static str] = Purge::KEYS;

    fn script() -> &'static LuaScript {
        &scripts::PURGE
    }

    fn keys(&self, k: &Keys) -> Vec<String> {
        Purge { limit: self.limit }.keys(k)
    }

    fn args(&self, k: &Keys) -> Vec<Value> {
        let mut args = purge_args(k, self.limit);
        args.push(self.cursor.into());
        args.push(glob_escape(&k.base).into());
        args
    }

    fn reply(&self, v: Value) -> Result<Self::Reply, Error> {
        let values = array::<Self>(v)?;
        match &values[..] {
            [cursor, deleted] => match (cursor.as_string(), deleted.as_u64()) {
                (Some(cursor), Some(deleted)) => Ok((cursor, deleted)),
                _ => Err(unexpected::<Self>(format!("{values:?}"))),
            },
            _ => Err(unexpected::<Self>(format!("{values:?}"))),
        }
    }
}
