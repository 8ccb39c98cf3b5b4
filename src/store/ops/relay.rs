//! `relay` on a child's slot: takes the oldest outbox entries, applies
//! those of parents in the same slot and drops them, and reads the others
//! for the relay (`store/flows/relay.rs`) to deliver to the parents' slots
//! (docs/workflows.md).

use std::time::Duration;

use fred::bytes::Bytes;
use fred::prelude::Value;

use super::flow_complete::parents_keys;
use super::{array, count, ms, unexpected, Op};
use crate::flow::wire::{Outcome, ParentLink};
use crate::flow::ChildPolicy;
use crate::store::keys::Keys;
use crate::store::scripts::{self, LuaScript};
use crate::Error;

/// One entry of an outbox that `relay` left, as it read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum OutboxEntry {
    /// Child `child` of this shard finished with `outcome` for `parent`.
    Done {
        entry: String,
        outcome: Outcome,
        child: String,
        parent: ParentLink,
        result: Bytes,
    },
    /// Parent `parent` of this shard was cancelled; `children` are some of
    /// those it still waited for, `"<base> <id>"` each.
    Cancelled {
        entry: String,
        parent: String,
        children: Vec<String>,
    },
}

impl OutboxEntry {
    /// The entry as stored.
    pub(crate) fn entry(&self) -> &str {
        match self {
            OutboxEntry::Done { entry, .. } | OutboxEntry::Cancelled { entry, .. } => entry,
        }
    }

    /// Entry `entry` as an ack recorded it, with its child's `result`.
    pub(crate) fn parse(entry: String, result: Option<&[u8]>) -> Option<Self> {
        parse_entry(
            entry,
            result.map_or(Value::Null, |r| Value::Bytes(Bytes::copy_from_slice(r))),
        )
    }

    /// The base of the parent a completion goes to.
    pub(crate) fn parent_base(&self) -> Option<&str> {
        match self {
            OutboxEntry::Done { parent, .. } => Some(&parent.base),
            OutboxEntry::Cancelled { .. } => None,
        }
    }
}

/// Most bytes of children's results one relay call reads (a bigger result
/// is read alone), and so one relay round carries to `flow_complete`: as
/// for a claim ([`CLAIM_BYTES`](super::claim::CLAIM_BYTES)), Redis spends
/// time on every byte a script reads or is given, and refuses a call of
/// over 1 GB, which a thousand results of `MAX_RESULT_SIZE` would be.
pub(crate) const OUTBOX_BYTES: u64 = 1 << 20;

/// Takes up to `limit` of the oldest outbox entries.
pub(crate) struct Relay {
    pub limit: usize,
    pub dead_letter_retention: Duration,
}

/// What [`Relay`] did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Relayed {
    /// It stopped at its limit or [`OUTBOX_BYTES`]: entries may be left
    /// after those it took.
    pub more: bool,
    /// Entries of parents in this slot, applied and dropped.
    pub applied: u64,
    /// Parents made due: to ready (due now) or pending.
    pub due: u64,
    pub dead: u64,
    pub removed: u64,
    /// The entries it left, to deliver to other slots.
    pub left: Vec<OutboxEntry>,
}

impl Op for Relay {
    type Reply = Relayed;
    const KEYS: &'static [&'static str] = &["outbox", "waiting", "pending", "dead", "attempts", "totals"];

    fn script() -> &'static LuaScript {
        &scripts::RELAY
    }

    fn keys(&self, k: &Keys) -> Vec<String> {
        let mut keys = vec![k.outbox.clone()];
        keys.extend(parents_keys(k));
        keys
    }

    fn args(&self, k: &Keys) -> Vec<Value> {
        vec![
            k.msg_prefix.as_str().into(),
            k.result_prefix.as_str().into(),
            k.wake.as_str().into(),
            ms(self.dead_letter_retention),
            count(self.limit as u64),
            count(OUTBOX_BYTES),
        ]
    }

    fn reply(&self, v: Value) -> Result<Self::Reply, Error> {
        let values = array::<Self>(v)?;
        let bad = |what: &str| unexpected::<Self>(what.to_string());
        if values.len() < 5 || values.len() % 2 == 0 {
            return Err(bad("not five counts followed by entries and values"));
        }
        let (head, rest) = values.split_at(5);
        let mut n = [0u64; 5];
        for (slot, v) in n.iter_mut().zip(head) {
            *slot = v.as_u64().ok_or_else(|| bad("a count that is no number"))?;
        }
        let mut left = Vec::with_capacity(rest.len() / 2);
        for pair in rest.chunks(2) {
            let [entry, extra] = pair else {
                return Err(bad("an entry without its value"));
            };
            let entry = entry.as_string().ok_or_else(|| bad("an entry that is no string"))?;
            left.push(parse_entry(entry, extra.clone()).ok_or_else(|| bad("a malformed entry"))?);
        }
        Ok(Relayed {
            more: n[0] == 1,
            applied: n[1],
            due: n[2],
            dead: n[3],
            removed: n[4],
            left,
        })
    }
}

/// An outbox entry (`"x <parent>"`, or `"<outcome> <child> <policy>
/// <parent's base> <parent>"`) and the value `relay` read with it.
fn parse_entry(entry: String, extra: Value) -> Option<OutboxEntry> {
    let mut parts = entry.split(' ');
    let kind = parts.next()?;
    if kind == "x" {
        let parent = parts.next()?.to_string();
        let children = match extra {
            Value::Array(members) => members.iter().filter_map(Value::as_string).collect(),
            _ => Vec::new(),
        };
        return Some(OutboxEntry::Cancelled {
            entry,
            parent,
            children,
        });
    }
    let outcome = Outcome::of_letter(kind)?;
    let child = parts.next()?.to_string();
    let policy = ChildPolicy::of_letter(parts.next()?)?;
    let base = parts.next()?.to_string();
    let id = parts.next()?.to_string();
    let result = match extra {
        Value::Bytes(b) => b,
        Value::String(s) => Bytes::from(s.to_string()),
        _ => Bytes::new(),
    };
    Some(OutboxEntry::Done {
        entry,
        outcome,
        child,
        parent: ParentLink { policy, base, id },
        result,
    })
}
