//! `change_schedule`: sets, removes, pauses or resumes a schedule
//! (`lua/change_schedule.lua`).

use fred::bytes::Bytes;
use fred::prelude::Value;

use super::{count, int, numbered, unexpected, Op};
use crate::store::keys::Keys;
use crate::store::scripts::{self, LuaScript};
use crate::Error;

/// What to do with the schedule.
#[derive(Debug)]
pub(crate) enum Change {
    /// Creates or replaces it with these definition fields, unless the
    /// shard holds `max` schedules already.
    Set {
        fields: Vec<(&'static str, Bytes)>,
        max: usize,
    },
    Remove,
    Pause,
    Resume,
}

/// One change of schedule `name`.
pub(crate) struct ChangeSchedule<'a> {
    pub name: &'a str,
    pub change: Change,
}

numbered! {
    /// What the script did.
    pub(crate) enum Changed {
        /// Set: replaced; pause, resume: it was so already.
        No = 0,
        /// Set: created; remove, pause, resume: done.
        Yes = 1,
        /// Set: the same definition, nothing written; else no such schedule.
        Same = 2,
        /// Set: the shard holds the most schedules already.
        Full = 3,
    }
}

impl Op for ChangeSchedule<'_> {
    type Reply = Changed;
    const KEYS: &'static [&'static str] = &["schedules", "schedule", "pending", "totals"];

    fn script() -> &'static LuaScript {
        &scripts::CHANGE_SCHEDULE
    }

    fn keys(&self, k: &Keys) -> Vec<String> {
        vec![
            k.schedules.clone(),
            k.schedule(self.name),
            k.pending.clone(),
            k.totals.clone(),
        ]
    }

    fn args(&self, k: &Keys) -> Vec<Value> {
        let mode: i64 = match self.change {
            Change::Set { .. } => 1,
            Change::Remove => 2,
            Change::Pause => 3,
            Change::Resume => 4,
        };
        let mut args: Vec<Value> = vec![
            self.name.into(),
            k.msg_prefix.as_str().into(),
            mode.into(),
            k.wake.as_str().into(),
        ];
        if let Change::Set { fields, max } = &self.change {
            args.push(count(*max as u64));
            for (field, value) in fields {
                args.push((*field).into());
                args.push(Value::Bytes(value.clone()));
            }
        }
        args
    }

    fn reply(&self, v: Value) -> Result<Self::Reply, Error> {
        let n = int::<Self>(&v)?;
        Changed::from_number(n).ok_or_else(|| unexpected::<Self>(format!("status {n}")))
    }
}
