//! `nack`: ends a delivery that did not succeed (`lua/nack.lua`).

use std::time::Duration;

use fred::prelude::Value;

use super::{count, int, ms, numbered, unexpected, Op};
use crate::store::keys::Keys;
use crate::store::scripts::{self, LuaScript};
use crate::Error;

/// How a delivery ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NackMode {
    /// It failed and counts: retried after `delay` while it has deliveries
    /// left, else dead.
    Fail { delay: Duration },
    /// It failed and retrying cannot help: dead at once.
    Dead,
    /// It never started: it does not count, and goes back where a claim
    /// takes it next (a retry to the front of retry, a first delivery
    /// among the due messages of its priority).
    Release,
    /// The handler asked for a later delivery that does not count this
    /// one: retried after `delay` whatever deliveries it has left.
    Defer { delay: Duration },
}

impl NackMode {
    /// The mode as the script names it.
    fn name(self) -> &'static str {
        match self {
            NackMode::Fail { .. } => "fail",
            NackMode::Dead => "dead",
            NackMode::Release => "release",
            NackMode::Defer { .. } => "defer",
        }
    }
}

/// Ends one delivery, while its lease is current.
pub(crate) struct Nack<'a> {
    pub id: &'a str,
    pub lease: i64,
    pub mode: NackMode,
    /// Why it failed, kept with its delivery count ("": no reason).
    pub reason: &'a str,
    /// The delivery's count (its attempt number).
    pub attempt: u32,
    /// Retries of a message whose stored value does not say.
    pub default_retry_count: u32,
    /// How long a dead message is kept.
    pub dead_letter_retention: Duration,
}

numbered! {
    /// What the script did.
    pub(crate) enum NackOutcome {
        /// The lease ran out: nothing done, the message was taken back.
        LeaseLost = 0,
        /// Back in retry or pending (or released).
        Retried = 1,
        /// Moved to the dead letters.
        Dead = 2,
        /// Neither in processing nor stored: the message finished since
        /// (delivered again and acked), whether or not an earlier run of
        /// this call did its work (the consumer reads it as a lost lease
        /// once the lease's deadline has passed). Nothing done.
        Finished = 3,
        /// The message was aborted while its handler ran: it ended as
        /// aborted, whatever the mode (lua/include/abort.lua).
        Aborted = 4,
    }
}

impl Op for Nack<'_> {
    type Reply = NackOutcome;
    const KEYS: &'static [&'static str] = &[
        "processing",
        "attempts",
        "retry",
        "pending",
        "dead",
        "msg",
        "totals",
        "marker",
    ];

    fn script() -> &'static LuaScript {
        &scripts::NACK
    }

    fn keys(&self, k: &Keys) -> Vec<String> {
        vec![
            k.processing.clone(),
            k.attempts.clone(),
            k.retry.clone(),
            k.pending.clone(),
            k.dead.clone(),
            k.msg(self.id),
            k.totals.clone(),
            k.marker(self.id),
        ]
    }

    fn args(&self, k: &Keys) -> Vec<Value> {
        let delay = match self.mode {
            NackMode::Fail { delay } | NackMode::Defer { delay } => delay,
            NackMode::Dead | NackMode::Release => Duration::ZERO,
        };
        vec![
            self.id.into(),
            self.lease.into(),
            ms(delay),
            self.mode.name().into(),
            count(self.default_retry_count.into()),
            k.wake.as_str().into(),
            self.reason.into(),
            ms(self.dead_letter_retention),
            count(self.attempt.into()),
            k.group_prefix.as_str().into(),
            k.ready.as_str().into(),
            k.prio.as_str().into(),
        ]
    }

    fn reply(&self, v: Value) -> Result<Self::Reply, Error> {
        let n = int::<Self>(&v)?;
        NackOutcome::from_number(n).ok_or_else(|| unexpected::<Self>(format!("outcome {n}")))
    }
}
