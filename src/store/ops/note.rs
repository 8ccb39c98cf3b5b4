//! `note`: a running delivery's progress or log line, fenced by its lease
//! (`lua/note.lua`).

use std::time::Duration;

use fred::prelude::Value;

use super::{int, ms, numbered, unexpected, Op};
use crate::store::keys::Keys;
use crate::store::scripts::{self, LuaScript};
use crate::Error;

/// Writes progress (when `progress` is set) or a log line.
pub(crate) struct Note<'a> {
    pub id: &'a str,
    /// The delivery's current lease.
    pub lease: i64,
    /// The progress as JSON text.
    pub progress: Option<&'a str>,
    /// The log line, when `progress` is `None`.
    pub line: Option<&'a str>,
    /// Log lines kept.
    pub max_lines: usize,
    /// TTL of the progress and log keys.
    pub ttl: Duration,
}

numbered! {
    /// What the script did.
    pub(crate) enum Noted {
        /// The lease was not the current one: nothing written.
        LeaseLost = 0,
        Written = 1,
    }
}

impl Op for Note<'_> {
    type Reply = Noted;
    const KEYS: &'static [&'static str] = &["processing", "progress", "log"];

    fn script() -> &'static LuaScript {
        &scripts::NOTE
    }

    fn keys(&self, k: &Keys) -> Vec<String> {
        vec![k.processing.clone(), k.progress(self.id), k.log(self.id)]
    }

    fn args(&self, _: &Keys) -> Vec<Value> {
        let (what, text) = match self.progress {
            Some(p) => ("p", p),
            None => ("l", self.line.unwrap_or_default()),
        };
        vec![
            self.id.into(),
            self.lease.into(),
            what.into(),
            text.into(),
            i64::try_from(self.max_lines).unwrap_or(i64::MAX).into(),
            ms(self.ttl),
        ]
    }

    fn reply(&self, v: Value) -> Result<Self::Reply, Error> {
        let n = int::<Self>(&v)?;
        Noted::from_number(n).ok_or_else(|| unexpected::<Self>(format!("outcome {n}")))
    }
}
