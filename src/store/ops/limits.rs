//! `limits`: sets or clears one of a queue's limits (`lua/limits.lua`).

use fred::prelude::Value;

use super::{flag, Op};
use crate::store::keys::Keys;
use crate::store::scripts::{self, LuaScript};
use crate::Error;

/// One limit of one shard, `None` to clear it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Limit {
    /// Most messages in processing at once.
    Concurrency(Option<u64>),
    /// Most leases in any window of `per_ms`: `(limit, per_ms)`.
    Rate(Option<(u64, u64)>),
}

/// Sets one limit of a shard.
pub(crate) struct SetLimit {
    pub limit: Limit,
}

impl Op for SetLimit {
    /// Whether the limit changed.
    type Reply = bool;
    const KEYS: &'static [&'static str] = &["totals"];

    fn script() -> &'static LuaScript {
        &scripts::LIMITS
    }

    fn keys(&self, k: &Keys) -> Vec<String> {
        vec![k.totals.clone()]
    }

    fn args(&self, k: &Keys) -> Vec<Value> {
        let (which, value) = match self.limit {
            Limit::Concurrency(n) => ("concurrency", n.map(|n| n.to_string())),
            Limit::Rate(r) => ("rate", r.map(|(n, per)| format!("{n} {per}"))),
        };
        vec![which.into(), value.unwrap_or_default().into(), k.wake.as_str().into()]
    }

    fn reply(&self, v: Value) -> Result<Self::Reply, Error> {
        flag::<Self>(&v)
    }
}
