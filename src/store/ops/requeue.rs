//! `requeue`: gives dead messages a new life in ready (`lua/requeue.lua`).

use fred::prelude::Value;

use super::{count, ints, unexpected, Op};
use crate::store::keys::Keys;
use crate::store::scripts::{self, LuaScript};
use crate::Error;

/// Moves at most `limit` dead messages back to ready: `ids` if given,
/// else the oldest.
pub(crate) struct Requeue<'a> {
    pub limit: usize,
    pub ids: Vec<&'a str>,
}

/// What one requeue did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Requeued {
    /// Moved back to ready.
    pub requeued: u64,
    /// Taken out of the dead letters: requeued, or deleted for a payload gone.
    pub taken: u64,
}

impl Op for Requeue<'_> {
    type Reply = Requeued;
    const KEYS: &'static [&'static str] = &["dead", "attempts", "ready"];

    fn script() -> &'static LuaScript {
        &scripts::REQUEUE
    }

    fn keys(&self, k: &Keys) -> Vec<String> {
        vec![k.dead.clone(), k.attempts.clone(), k.ready.clone()]
    }

    fn args(&self, k: &Keys) -> Vec<Value> {
        let mut args: Vec<Value> = vec![
            k.msg_prefix.as_str().into(),
            count(self.limit as u64),
            k.wake.as_str().into(),
            k.prio.as_str().into(),
            k.group_prefix.as_str().into(),
        ];
        args.extend(self.ids.iter().map(|&id| Value::from(id)));
        args
    }

    fn reply(&self, v: Value) -> Result<Self::Reply, Error> {
        let reply = ints::<Self>(v)?;
        match reply[..] {
            [requeued, taken] if 0 <= requeued && requeued <= taken => Ok(Requeued {
                requeued: requeued as u64,
                taken: taken as u64,
            }),
            _ => Err(unexpected::<Self>(format!("{reply:?}"))),
        }
    }
}
