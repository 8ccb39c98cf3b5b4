//! `pause`: sets or clears a queue's paused flag (`lua/pause.lua`).

use fred::prelude::Value;

use super::{flag, Op};
use crate::store::keys::Keys;
use crate::store::scripts::{self, LuaScript};
use crate::Error;

/// Pauses the shard (`paused: true`) or resumes it.
pub(crate) struct Pause {
    pub paused: bool,
}

impl Op for Pause {
    /// Whether the flag changed.
    type Reply = bool;
    const KEYS: &'static [&'static str] = &["totals"];

    fn script() -> &'static LuaScript {
        &scripts::PAUSE
    }

    fn keys(&self, k: &Keys) -> Vec<String> {
        vec![k.totals.clone()]
    }

    fn args(&self, k: &Keys) -> Vec<Value> {
        vec![Value::from(i64::from(self.paused)), k.wake.as_str().into()]
    }

    fn reply(&self, v: Value) -> Result<Self::Reply, Error> {
        flag::<Self>(&v)
    }
}
