//! `promote`: moves due messages from pending to ready (`lua/promote.lua`).

use std::time::Duration;

use fred::prelude::Value;

use super::{count, ints, unexpected, Op};
use crate::store::keys::Keys;
use crate::store::scripts::{self, LuaScript};
use crate::store::stored::FORMAT_VERSION;
use crate::Error;

/// Moves at most `limit` due messages to ready, oldest first; wakes the
/// other consumers when more moved than the caller claims next (`room`).
pub(crate) struct Promote {
    pub limit: usize,
    pub room: usize,
}

/// What one promote did.
#[derive(Debug)]
pub(crate) struct Promoted {
    pub moved: u64,
    /// How long until the next pending message is due, or a waiting
    /// group's wait is over (zero when more are due now); `None` when
    /// neither waits.
    pub next_due: Option<Duration>,
    /// Groups whose wait was over and went back to the ring: a claim has
    /// work though no message moved.
    pub woken: u64,
    /// How late each moved message moved, oldest first.
    pub late: Vec<Duration>,
}

impl Op for Promote {
    type Reply = Promoted;
    const KEYS: &'static [&'static str] = &["pending", "ready", "totals"];

    fn script() -> &'static LuaScript {
        &scripts::PROMOTE
    }

    fn keys(&self, k: &Keys) -> Vec<String> {
        vec![k.pending.clone(), k.ready.clone(), k.totals.clone()]
    }

    fn args(&self, k: &Keys) -> Vec<Value> {
        vec![
            count(self.limit as u64),
            k.prio.as_str().into(),
            k.msg_prefix.as_str().into(),
            count(FORMAT_VERSION.into()),
            k.group_prefix.as_str().into(),
            count(self.room as u64),
            k.wake.as_str().into(),
        ]
    }

    fn reply(&self, v: Value) -> Result<Self::Reply, Error> {
        let reply = ints::<Self>(v)?;
        let bad = || unexpected::<Self>(format!("{reply:?}"));
        let [moved, next, woken, ref late @ ..] = reply[..] else {
            return Err(bad());
        };
        let (Ok(moved), Ok(woken)) = (u64::try_from(moved), u64::try_from(woken)) else {
            return Err(bad());
        };
        if late.len() as u64 != moved {
            return Err(bad());
        }
        let ms = |n: i64| Duration::from_millis(u64::try_from(n).unwrap_or(0));
        // Lateness in µs: in ms it would round to 0 for most messages.
        let us = |n: i64| Duration::from_micros(u64::try_from(n).unwrap_or(0));
        Ok(Promoted {
            moved,
            next_due: (next >= 0).then(|| ms(next)),
            woken,
            late: late.iter().copied().map(us).collect(),
        })
    }
}
