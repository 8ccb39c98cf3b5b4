//! `gc`: deletes dead messages (`lua/gc.lua`).

use std::time::Duration;

use fred::prelude::Value;

use super::{count, ms, number, Op};
use crate::store::keys::Keys;
use crate::store::scripts::{self, LuaScript};
use crate::Error;

/// Deletes at most `limit` dead messages: of `ids` those that are dead,
/// or without ids those dead longer than `retention`, then the oldest
/// beyond `max_kept`.
pub(crate) struct Gc<'a> {
    pub limit: usize,
    /// Zero: every dead message qualifies.
    pub dead_letter_retention: Duration,
    pub max_kept: u64,
    pub ids: Vec<&'a str>,
}

impl Op for Gc<'_> {
    /// How many it deleted.
    type Reply = u64;
    const KEYS: &'static [&'static str] = &["dead", "attempts", "totals"];

    fn script() -> &'static LuaScript {
        &scripts::GC
    }

    fn keys(&self, k: &Keys) -> Vec<String> {
        vec![k.dead.clone(), k.attempts.clone(), k.totals.clone()]
    }

    fn args(&self, k: &Keys) -> Vec<Value> {
        let mut args: Vec<Value> = vec![
            k.msg_prefix.as_str().into(),
            count(self.limit as u64),
            ms(self.dead_letter_retention),
            count(self.max_kept),
        ];
        args.extend(self.ids.iter().map(|&id| Value::from(id)));
        args
    }

    fn reply(&self, v: Value) -> Result<Self::Reply, Error> {
        number::<Self>(&v)
    }
}
