//! `send`: stores a batch of messages in pending (`lua/send.lua`).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fred::bytes::Bytes;
use fred::prelude::Value;

use super::{count, ints, ms, numbered, unexpected, Op};
use crate::store::keys::Keys;
use crate::store::scripts::{self, LuaScript};
use crate::store::stored::FORMAT_VERSION;
use crate::{Error, MessageId};

/// One message to store.
#[derive(Debug, Clone)]
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
    /// How it meets an earlier message of its id (docs/dedup.md); `None`:
    /// a plain send.
    pub mode: Option<SendMode>,
    /// A flow's parent (docs/workflows.md): stored waiting while its set of
    /// children to wait for is not empty. Never with a `mode`.
    pub wait: bool,
}

/// How a send with a caller-chosen id meets an earlier message of that id
/// (docs/dedup.md), as send.lua's mode letters say it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SendMode {
    /// Refused while the id is live, and for this long after its message
    /// finished.
    Unique(Duration),
    /// Refused for this long after the first send.
    Throttle(Duration),
    /// A pending message of the id is replaced, due after the send's delay.
    Debounce,
    /// A pending message of the id is replaced; refused otherwise. `true`:
    /// due after the send's delay; `false`: its due time kept.
    Replace { move_due: bool },
}

impl SendMode {
    /// The argument send.lua reads after the id flag.
    fn letters(self) -> String {
        match self {
            SendMode::Unique(d) => format!("u{}", d.as_millis()),
            SendMode::Throttle(d) => format!("t{}", d.as_millis()),
            SendMode::Debounce => "d".into(),
            SendMode::Replace { move_due: false } => "r".into(),
            SendMode::Replace { move_due: true } => "R".into(),
        }
    }

    /// Whether it stores a marker (one more key of the script's KEYS).
    fn marked(self) -> bool {
        matches!(self, SendMode::Unique(_) | SendMode::Throttle(_))
    }
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
        /// Refused by the id's unique_for or throttle marker.
        Held = 4,
        /// A pending message of the id was replaced (debounce, replace).
        Replaced = 5,
        /// A replace found no live message of the id; nothing written.
        Missing = 6,
        /// A flow's parent whose set of children to wait for was empty
        /// (its `flow_deps`, pipelined with the send, had not run); nothing
        /// written.
        Unfilled = 7,
        /// A flow's parent stored (as `Stored`) after a child linked to it
        /// finished, whose completion was not applied: link its children
        /// again.
        Overtaken = 8,
    }
}

impl Op for SendBatch {
    /// One outcome per message, in order; with [`SendOutcome::Held`], when
    /// the marker that refused it expires, by Redis's clock (`None`: it has
    /// no TTL, its message is live).
    type Reply = Vec<(SendOutcome, Option<SystemTime>)>;
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
        keys.extend(
            self.msgs
                .iter()
                .filter(|m| m.mode.is_some_and(SendMode::marked))
                .map(|m| k.marker(m.id.as_str())),
        );
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
            args.push(match m.mode {
                Some(mode) => format!("{}{}", u8::from(m.own_id), mode.letters()).into(),
                None if m.wait => format!("{}w", u8::from(m.own_id)).into(),
                None => count(u64::from(m.own_id)),
            });
        }
        args
    }

    fn reply(&self, v: Value) -> Result<Self::Reply, Error> {
        let reply = ints::<Self>(v)?;
        let bad = || unexpected::<Self>(format!("{reply:?} for {} messages", self.msgs.len()));
        let (statuses, mut untils) = match reply.split_at_checked(self.msgs.len()) {
            Some((statuses, untils)) => (statuses, untils.iter()),
            None => return Err(bad()),
        };
        let mut out = Vec::with_capacity(statuses.len());
        for &s in statuses {
            let outcome = SendOutcome::from_number(s).ok_or_else(bad)?;
            let until = match outcome {
                SendOutcome::Held => {
                    let ms = *untils.next().ok_or_else(bad)?;
                    u64::try_from(ms).ok().map(|ms| UNIX_EPOCH + Duration::from_millis(ms))
                }
                _ => None,
            };
            out.push((outcome, until));
        }
        if untils.next().is_some() {
            return Err(bad());
        }
        Ok(out)
    }
}
