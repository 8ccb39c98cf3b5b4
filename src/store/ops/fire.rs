//! `fire`: sends one fire of a schedule and moves its cursor past it, in
//! one step (`lua/fire.lua`).

use std::time::Duration;

use fred::prelude::Value;

use super::{count, int, ms, numbered, unexpected, Op};
use crate::store::keys::Keys;
use crate::store::scripts::{self, LuaScript};
use crate::store::stored::FORMAT_VERSION;
use crate::Error;

/// One fire of schedule `name` at `at_ms` (ms since the epoch), as message
/// `id`, moving the cursor to `cursor_ms`; or, with `version` `None`, a
/// manual trigger: a message due now, the cursor left alone.
pub(crate) struct Fire<'a> {
    pub name: &'a str,
    pub id: &'a str,
    pub version: Option<&'a str>,
    pub at_ms: i64,
    pub cursor_ms: i64,
    pub expire_after: Option<Duration>,
}

numbered! {
    /// What the script did with the fire.
    pub(crate) enum Fired {
        /// The cursor is at or past the fire time: sent already, by this
        /// scheduler or another.
        Behind = 0,
        Sent = 1,
        /// The fire's payload key holds another type; the cursor moved.
        WrongType = 2,
        /// A message with the fire's id is live; the cursor moved.
        Live = 3,
        /// The schedule is gone or changed since it was read.
        Changed = 4,
        Paused = 5,
    }
}

impl Op for Fire<'_> {
    type Reply = Fired;
    const KEYS: &'static [&'static str] = &[
        "schedules",
        "schedule",
        "pending",
        "attempts",
        "processing",
        "dead",
        "totals",
        "msg",
    ];

    fn script() -> &'static LuaScript {
        &scripts::FIRE
    }

    fn keys(&self, k: &Keys) -> Vec<String> {
        vec![
            k.schedules.clone(),
            k.schedule(self.name),
            k.pending.clone(),
            k.attempts.clone(),
            k.processing.clone(),
            k.dead.clone(),
            k.totals.clone(),
            k.msg(self.id),
        ]
    }

    fn args(&self, k: &Keys) -> Vec<Value> {
        vec![
            self.name.into(),
            self.id.into(),
            self.version.unwrap_or("").into(),
            self.at_ms.into(),
            self.cursor_ms.into(),
            self.expire_after.map_or(count(0), ms),
            k.wake.as_str().into(),
            count(FORMAT_VERSION.into()),
        ]
    }

    fn reply(&self, v: Value) -> Result<Self::Reply, Error> {
        let n = int::<Self>(&v)?;
        Fired::from_number(n).ok_or_else(|| unexpected::<Self>(format!("status {n}")))
    }
}
