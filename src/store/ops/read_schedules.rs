//! `read_schedules`: reads schedules with their cursors and definitions
//! (`lua/read_schedules.lua`).

use std::time::Duration;

use fred::bytes::Bytes;
use fred::prelude::Value;

use super::{array, count, int, ms, unexpected, Op};
use crate::schedule::{Misfire, Timing};
use crate::store::keys::Keys;
use crate::store::scripts::{self, LuaScript};
use crate::Error;

/// Which schedules to read.
#[derive(Debug)]
pub(crate) enum Which<'a> {
    /// A page in cursor order: those whose cursor is at most Redis now +
    /// `horizon` (`None`: all, the paused ones too), from just after the
    /// last schedule the page before read (`None`: from the first).
    Page {
        horizon: Option<Duration>,
        after: Option<&'a StoredSchedule>,
        limit: usize,
    },
    /// The one of this name.
    Named(&'a str),
}

/// Reads schedules of one shard.
pub(crate) struct ReadSchedules<'a> {
    pub which: Which<'a>,
}

/// One schedule as stored.
#[derive(Debug, Clone)]
pub(crate) struct StoredSchedule {
    pub name: String,
    /// The cursor, ms since the epoch; `None` while paused (+inf).
    pub cursor: Option<i64>,
    /// The hash: definition and the scripts' own fields.
    pub fields: Vec<(String, Bytes)>,
}

impl StoredSchedule {
    /// The value of `field`, if the hash has it.
    pub(crate) fn field(&self, field: &str) -> Option<&Bytes> {
        self.fields.iter().find(|(f, _)| f == field).map(|(_, v)| v)
    }

    /// The value of `field` as text, if the hash has it.
    pub(crate) fn text(&self, field: &str) -> Option<&str> {
        self.field(field).and_then(|v| std::str::from_utf8(v).ok())
    }

    /// A number field.
    pub(crate) fn number(&self, field: &str) -> Option<i64> {
        self.text(field).and_then(|v| v.parse().ok())
    }

    /// When it fires; why not, when its definition cannot be read.
    pub(crate) fn timing(&self) -> Result<Timing, String> {
        let spec = self.text("spec").ok_or("no spec")?;
        let tz = self.text("tz").unwrap_or("UTC");
        let misfire = self
            .text("misfire")
            .and_then(Misfire::parse)
            .ok_or("no misfire policy")?;
        let grace = self.number("grace").ok_or("no misfire grace")?;
        let anchor = self.number("anchor").ok_or("no anchor")?;
        Timing::parse(spec, tz, misfire, grace, anchor)
    }
}

/// Redis now (ms since the epoch) and the schedules read.
#[derive(Debug)]
pub(crate) struct SchedulePage {
    pub now_ms: i64,
    pub schedules: Vec<StoredSchedule>,
}

impl Op for ReadSchedules<'_> {
    type Reply = SchedulePage;
    const KEYS: &'static [&'static str] = &["schedules"];

    fn script() -> &'static LuaScript {
        &scripts::READ_SCHEDULES
    }

    fn keys(&self, k: &Keys) -> Vec<String> {
        vec![k.schedules.clone()]
    }

    fn args(&self, k: &Keys) -> Vec<Value> {
        let (horizon, after, limit, name) = match self.which {
            Which::Page { horizon, after, limit } => (horizon.map_or((-1).into(), ms), after, limit, ""),
            Which::Named(name) => (count(0), None, 1, name),
        };
        let (cursor, after) = after.map_or((String::new(), ""), |s| {
            (s.cursor.map_or("inf".to_string(), |c| c.to_string()), s.name.as_str())
        });
        vec![
            k.schedule_prefix.as_str().into(),
            horizon,
            cursor.into(),
            after.into(),
            count(limit as u64),
            name.into(),
        ]
    }

    fn reply(&self, v: Value) -> Result<Self::Reply, Error> {
        let mut items = array::<Self>(v)?.into_iter();
        let now_ms = int::<Self>(&items.next().ok_or_else(|| unexpected::<Self>("empty reply"))?)?;
        let text =
            |v: Value| -> Result<String, Error> { v.into_string().ok_or_else(|| unexpected::<Self>("not a string")) };
        let mut schedules = Vec::new();
        while let Some(name) = items.next() {
            let (Some(cursor), Some(fields)) = (items.next(), items.next()) else {
                return Err(unexpected::<Self>("a schedule without cursor or fields"));
            };
            let cursor = text(cursor)?;
            let cursor = match cursor.as_str() {
                "inf" => None,
                c => Some(
                    c.parse::<f64>()
                        .map_err(|_| unexpected::<Self>(format!("cursor {c:?}")))? as i64,
                ),
            };
            let mut pairs = Vec::new();
            let mut fields = array::<Self>(fields)?.into_iter();
            while let (Some(f), Some(v)) = (fields.next(), fields.next()) {
                let value = match v {
                    Value::Bytes(b) => b,
                    Value::String(s) => s.into_inner(),
                    other => return Err(unexpected::<Self>(format!("field value {other:?}"))),
                };
                pairs.push((text(f)?, value));
            }
            schedules.push(StoredSchedule {
                name: text(name)?,
                cursor,
                fields: pairs,
            });
        }
        Ok(SchedulePage { now_ms, schedules })
    }
}
