//! `reschedule`: moves the due time of a pending message
//! (`lua/reschedule.lua`).

use std::time::Duration;

use fred::prelude::Value;

use super::{flag, ms, Op};
use crate::store::keys::Keys;
use crate::store::scripts::{self, LuaScript};
use crate::Error;

/// Makes pending message `id` due `delay` from now, by Redis's clock.
pub(crate) struct Reschedule<'a> {
    pub id: &'a str,
    pub delay: Duration,
}

impl Op for Reschedule<'_> {
    /// Whether it was pending and moved (`false`: nothing done).
    type Reply = bool;
    const KEYS: &'static [&'static str] = &["pending", "msg", "attempts"];

    fn script() -> &'static LuaScript {
        &scripts::RESCHEDULE
    }

    fn keys(&self, k: &Keys) -> Vec<String> {
        vec![k.pending.clone(), k.msg(self.id), k.attempts.clone()]
    }

    fn args(&self, k: &Keys) -> Vec<Value> {
        vec![self.id.into(), ms(self.delay), k.wake.as_str().into()]
    }

    fn reply(&self, v: Value) -> Result<Self::Reply, Error> {
        flag::<Self>(&v)
    }
}
