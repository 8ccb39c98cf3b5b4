//! `probe`: which of a consumer's periodic steps have work (`lua/probe.lua`).

use std::time::Duration;

use fred::prelude::Value;

use super::{count, ints, ms, state_keys, unexpected, Op};
use crate::store::keys::Keys;
use crate::store::scripts::{self, LuaScript};
use crate::Error;

/// Looks at a shard without writing: what its consumer has to do now.
pub(crate) struct Probe {
    pub dead_letter_retention: Duration,
    pub dead_limit: u64,
}

/// What a probe found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Probed {
    /// How long until a sweep has work: zero when a lease has run out or
    /// a dead letter is due for deletion now, else until the earliest lease
    /// runs out or the oldest dead letter is past its retention; `None`
    /// when no lease is held and no dead letter kept.
    pub sweep: Option<Duration>,
    /// How long until the earliest pending message is due (zero when one
    /// is due now); `None` when pending is empty.
    pub next_due: Option<Duration>,
    /// Ready, retry or the priority zset hold ids.
    pub claim: bool,
    /// The shard has schedules.
    pub schedules: bool,
    /// Its outbox holds entries for the relay (docs/workflows.md).
    pub relay: bool,
}

impl Op for Probe {
    type Reply = Probed;
    const KEYS: &'static [&'static str] = &["pending", "ready", "processing", "retry", "dead"];

    fn script() -> &'static LuaScript {
        &scripts::PROBE
    }

    fn keys(&self, k: &Keys) -> Vec<String> {
        state_keys(k)
    }

    fn args(&self, k: &Keys) -> Vec<Value> {
        vec![
            k.prio.as_str().into(),
            k.schedules.as_str().into(),
            ms(self.dead_letter_retention),
            count(self.dead_limit),
            k.group_prefix.as_str().into(),
            k.outbox.as_str().into(),
        ]
    }

    fn reply(&self, v: Value) -> Result<Self::Reply, Error> {
        let reply = ints::<Self>(v)?;
        let [sweep @ -1..=i64::MAX, wait, claim @ (0 | 1), schedules @ (0 | 1), relay @ (0 | 1)] = reply[..] else {
            return Err(unexpected::<Self>(format!("{reply:?}")));
        };
        Ok(Probed {
            sweep: u64::try_from(sweep).ok().map(Duration::from_millis),
            next_due: u64::try_from(wait).ok().map(Duration::from_millis),
            claim: claim == 1,
            schedules: schedules == 1,
            relay: relay == 1,
        })
    }
}
