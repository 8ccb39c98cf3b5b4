//! `outbox` on a child's slot: drops the outbox entries the relay
//! delivered to the parents' slots (docs/workflows.md); `relay` took them.

use fred::prelude::Value;

use super::{number, Op};
use crate::store::keys::Keys;
use crate::store::scripts::{self, LuaScript};
use crate::Error;

/// Drops outbox entries, each with the children of a cancelled parent
/// that were cancelled (empty for others).
pub(crate) struct OutboxDrop<'a> {
    pub entries: &'a [(String, Vec<String>)],
}

impl Op for OutboxDrop<'_> {
    /// How many entries it dropped.
    type Reply = u64;
    const KEYS: &'static [&'static str] = &["outbox"];

    fn script() -> &'static LuaScript {
        &scripts::OUTBOX
    }

    fn keys(&self, k: &Keys) -> Vec<String> {
        vec![k.outbox.clone()]
    }

    fn args(&self, k: &Keys) -> Vec<Value> {
        let mut args: Vec<Value> = vec![k.msg_prefix.as_str().into()];
        for (entry, done) in self.entries {
            args.push(entry.as_str().into());
            args.push(done.join(" ").into());
        }
        args
    }

    fn reply(&self, v: Value) -> Result<Self::Reply, Error> {
        number::<Self>(&v)
    }
}
