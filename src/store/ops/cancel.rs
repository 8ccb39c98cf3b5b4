//! `cancel`: deletes a message waiting for delivery, or with an abort
//! also marks one being processed aborted (`lua/cancel.lua`).

use fred::prelude::Value;

use super::{flag, int, unexpected, Op};
use crate::store::keys::Keys;
use crate::store::scripts::{self, LuaScript};
use crate::{AbortOutcome, Error};

/// Deletes message `id` unless it is being processed.
pub(crate) struct Cancel<'a> {
    pub id: &'a str,
}

impl Op for Cancel<'_> {
    /// Whether a waiting message was removed (`false`: unknown or processing).
    type Reply = bool;
    const KEYS: &'static [&'static str] = &["pending", "attempts", "processing", "dead", "totals", "msg", "marker"];

    fn script() -> &'static LuaScript {
        &scripts::CANCEL
    }

    fn keys(&self, k: &Keys) -> Vec<String> {
        keys(k, self.id)
    }

    fn args(&self, k: &Keys) -> Vec<Value> {
        vec![self.id.into(), k.group_prefix.as_str().into()]
    }

    fn reply(&self, v: Value) -> Result<Self::Reply, Error> {
        flag::<Self>(&v)
    }
}

/// Cancel's KEYS for message `id`: an abort's too.
fn keys(k: &Keys, id: &str) -> Vec<String> {
    vec![
        k.pending.clone(),
        k.attempts.clone(),
        k.processing.clone(),
        k.dead.clone(),
        k.totals.clone(),
        k.msg(id),
        k.marker(id),
    ]
}

/// Deletes message `id` when it waits, marks it aborted when it is being
/// processed (cancel.lua's abort).
pub(crate) struct Abort<'a> {
    pub id: &'a str,
}

impl Op for Abort<'_> {
    type Reply = AbortOutcome;
    const KEYS: &'static [&'static str] = Cancel::KEYS;

    fn script() -> &'static LuaScript {
        &scripts::CANCEL
    }

    fn keys(&self, k: &Keys) -> Vec<String> {
        keys(k, self.id)
    }

    fn args(&self, k: &Keys) -> Vec<Value> {
        vec![
            self.id.into(),
            k.group_prefix.as_str().into(),
            "abort".into(),
            k.wake.as_str().into(),
        ]
    }

    fn reply(&self, v: Value) -> Result<Self::Reply, Error> {
        match int::<Self>(&v)? {
            0 => Ok(AbortOutcome::NotFound),
            1 => Ok(AbortOutcome::Cancelled),
            2 => Ok(AbortOutcome::Aborting),
            3 => Ok(AbortOutcome::AlreadyAborted),
            n => Err(unexpected::<Self>(format!("outcome {n}"))),
        }
    }
}
