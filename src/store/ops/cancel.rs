//! `cancel`: deletes a message waiting for delivery (`lua/cancel.lua`).

use fred::prelude::Value;

use super::{flag, Op};
use crate::store::keys::Keys;
use crate::store::scripts::{self, LuaScript};
use crate::Error;

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
        vec![
            k.pending.clone(),
            k.attempts.clone(),
            k.processing.clone(),
            k.dead.clone(),
            k.totals.clone(),
            k.msg(self.id),
            k.marker(self.id),
        ]
    }

    fn args(&self, k: &Keys) -> Vec<Value> {
        vec![self.id.into(), k.group_prefix.as_str().into()]
    }

    fn reply(&self, v: Value) -> Result<Self::Reply, Error> {
        flag::<Self>(&v)
    }
}
