//! `shards`: reads, and records once, a queue's shard count (`lua/shards.lua`).

use fred::prelude::Value;

use super::{number, Op};
use crate::store::keys::Keys;
use crate::store::scripts::{self, LuaScript};
use crate::Error;

/// Run on the keys of the queue's unsharded layout
/// ([`Keys::new`](crate::store::Keys::new)), whatever its shard count.
pub(crate) enum ShardRecord {
    /// Only reads the recorded count.
    Read,
    /// Records this count when none is (and it is above 1); fails with
    /// [`Error::ShardCount`] when another is.
    Claim(usize),
}

impl Op for ShardRecord {
    /// The recorded count; `None` when none is.
    type Reply = Option<usize>;
    const KEYS: &'static [&'static str] = &["totals"];

    fn script() -> &'static LuaScript {
        &scripts::SHARDS
    }

    fn keys(&self, k: &Keys) -> Vec<String> {
        vec![k.totals.clone()]
    }

    fn args(&self, _k: &Keys) -> Vec<Value> {
        let n = match self {
            ShardRecord::Read => 0,
            ShardRecord::Claim(n) => *n,
        };
        vec![Value::from(n as i64)]
    }

    fn reply(&self, v: Value) -> Result<Self::Reply, Error> {
        let n = number::<Self>(&v)?;
        Ok((n > 0).then_some(n as usize))
    }
}
