//! `send`: stores a batch of messages in pending (`lua/send.lua`).

use std::time::Duration;

use fred::bytes::Bytes;
use fred::prelude::Value;

use super::{count, ints, ms, numbered, unexpected, Op};
use crate::store::keys::Keys;
use crate::store::scripts::{self, LuaScript};
use crate::store::stored::FORMAT_VERSION;
use crate::{Error, MessageId};

/// One message to store.
#[derive(Debug)]
pub(crate) struct Outgoing {
    pub id: MessageId,
    /// The value to store (`stored::encode_stored`).
    pub value: Bytes,
    /// When it is due, from when Redis runs the script.
    pub delay: Duration,
    /// How long past its due time it may wait undelivered; `None`: forever.
    pub expire_after: Option<Duration>,
    /// The caller chose the id, so it may have had an earlier message; a
    /// generated one has no past, which spares the script its clean-up.
    pub own_id: bool,
    /// Staged (a big value, [`encode_staged`](crate::store::stored::encode_staged)): the token naming its
    /// staging string (`Keys::staging`), where it is SET before the script
    /// runs, instead of passing through ARGV.
    pub stage: Option<String>,
}

/// Stores messages of one shard, each whole or not at all.
pub(crate) struct SendBatch {
    pub msgs: Vec<Outgoing>,
}

numbered! {
    /// What the script did with one message.
    pub(crate) enum SendOutcome {
        /// The id is live already: a duplicate, or stored by an earlier
        /// run of this very call.
        Live = 0,
        Stored = 1,
        /// Its payload key holds another type; nothing was written for it.
        WrongType = 2,
        /// Its staged value was gone when the script ran (evicted, or its
        /// TTL passed); nothing was written for it.
        StagedGone = 3,
    }
}

impl Op for SendBatch {
    /// One outcome per message, in order.
    type Reply = Vec<SendOutcome>;
    const KEYS: &'static [&'static str] = &["pending", "attempts", "processing", "dead", "totals", "msg.."];

    fn staged(&self, k: &Keys) -> Vec<(String, Bytes)> {
        self.msgs
            .iter()
            .filter_map(|m| Some((k.staging(m.stage.as_deref()?), m.value.clone())))
            .collect()
    }

    fn script() -> &'static LuaScript {
        &scripts::SEND
    }

    fn keys(&self, k: &Keys) -> Vec<String> {
        let mut keys = vec![
            k.pending.clone(),
            k.attempts.clone(),
            k.processing.clone(),
            k.dead.clone(),
            k.totals.clone(),
        ];
        keys.extend(self.msgs.iter().map(|m| k.msg(m.id.as_str())));
        keys.extend(self.staged(k).into_iter().map(|(key, _)| key));
        keys
    }

    fn args(&self, k: &Keys) -> Vec<Value> {
        let mut args: Vec<Value> = Vec::with_capacity(2 + 5 * self.msgs.len());
        args.push(k.wake.as_str().into());
        args.push(count(FORMAT_VERSION.into()));
        for m in &self.msgs {
            args.push(m.id.as_str().into());
            // A staged value waits at its staging string.
            args.push(match m.stage {
                Some(_) => Value::Bytes(Bytes::new()),
                None => Value::Bytes(m.value.clone()),
            });
            args.push(ms(m.delay));
            // 0: never expires.
            args.push(m.expire_after.map_or(count(0), ms));
            args.push(count(u64::from(m.own_id)));
        }
        args
    }

    fn reply(&self, v: Value) -> Result<Self::Reply, Error> {
        let statuses = ints::<Self>(v)?;
        if statuses.len() != self.msgs.len() {
            return Err(unexpected::<Self>(format!(
                "{} statuses for {} messages",
                statuses.len(),
                self.msgs.len()
            )));
        }
        statuses
            .into_iter()
            .map(|s| SendOutcome::from_number(s).ok_or_else(|| unexpected::<Self>(format!("status {s}"))))
            .collect()
    }
}
