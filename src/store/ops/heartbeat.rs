//! `heartbeat`: writes or removes a consumer's entry in the registry of
//! live consumers (`lua/heartbeat.lua`). Run on the registry's keys
//! ([`Keys::registry`]).

use std::time::Duration;

use fred::prelude::Value;

use super::{ms, number, Op};
use crate::store::keys::Keys;
use crate::store::scripts::{self, LuaScript};
use crate::Error;

/// Consumer `id`'s heartbeat: its `entry`, kept for `ttl`; a zero `ttl`
/// removes the entry (a clean stop).
pub(crate) struct Heartbeat<'a> {
    pub id: &'a str,
    pub ttl: Duration,
    pub entry: &'a [u8],
}

impl Op for Heartbeat<'_> {
    /// Expired index members dropped.
    type Reply = u64;
    const KEYS: &'static [&'static str] = &["consumers", "entry"];

    fn script() -> &'static LuaScript {
        &scripts::HEARTBEAT
    }

    fn keys(&self, k: &Keys) -> Vec<String> {
        vec![k.consumers(), k.consumer(self.id)]
    }

    fn args(&self, _k: &Keys) -> Vec<Value> {
        vec![self.id.into(), ms(self.ttl), Value::Bytes(self.entry.to_vec().into())]
    }

    fn reply(&self, v: Value) -> Result<Self::Reply, Error> {
        number::<Self>(&v)
    }
}
