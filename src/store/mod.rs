//! The Redis store: everything that knows how a queue lies in Redis.
//!
//! - [`keys`] names the keys of a queue (or of one shard of it);
//! - [`stored`] encodes the value stored per message;
//! - [`scripts`] loads the Lua scripts of `lua/` and sends them;
//! - [`nodes`] sends them, on a cluster, to the primary of their slot;
//! - [`ops`] has one typed operation per script: its KEYS, its ARGV and
//!   its reply, each written once, next to each other;
//! - [`flows`] reads flows and relays their completions.
//!
//! The rest of the crate reaches Redis's queue state only through a
//! [`Shard`]: build an operation, [`Shard::run`] it, get its typed reply.
//! The script tests (`script_tests/`, `cluster_tests.rs`)
//! build the same operations, so a script's contract is written once in
//! Lua and once in Rust. Nothing here knows the queue handle or the
//! consumer's runtime.

pub(crate) mod assembly;
pub(crate) mod flows;
pub(crate) mod keys;
pub(crate) mod nodes;
pub(crate) mod ops;
pub(crate) mod scripts;
pub(crate) mod stored;

#[cfg(test)]
mod cluster_tests;
#[cfg(test)]
mod script_tests;

use fred::prelude::{Client, Value};

pub(crate) use keys::Keys;
pub(crate) use ops::Op;

use crate::Error;

/// The narrow handle the rest of the crate runs operations through: the
/// client, the keys of one shard, and the queue's name for errors.
/// Borrowed, so making one per call costs nothing.
#[derive(Clone, Copy)]
pub(crate) struct Shard<'a> {
    client: &'a Client,
    keys: &'a Keys,
    queue: &'a str,
}

impl<'a> Shard<'a> {
    pub(crate) fn new(client: &'a Client, keys: &'a Keys, queue: &'a str) -> Self {
        Shard { client, keys, queue }
    }

    /// Runs `op` and reads its reply.
    pub(crate) async fn run<O: Op>(&self, op: &O) -> Result<O::Reply, Error> {
        op.reply(self.eval(op).await?)
    }

    /// Runs `op` and returns its reply unread, mapping WRONGTYPE, OOM and
    /// a server without Lua to their own errors. Private to the store (the
    /// script tests read raw replies with it): the rest of the crate gets
    /// typed replies from [`Shard::run`].
    async fn eval<O: Op>(&self, op: &O) -> Result<Value, Error> {
        let keys = op.keys(self.keys);
        debug_assert!(ops::fits(O::KEYS, keys.len()), "{} KEYS {keys:?}", O::script().name);
        scripts::stage(self.client, op.staged(self.keys), self.queue).await?;
        // Boxed: the client's future is kilobytes, which every caller's
        // future (and a debug build's poll frames) would carry otherwise.
        Box::pin(O::script().run(self.client, keys, op.args(self.keys), self.queue)).await
    }
}
