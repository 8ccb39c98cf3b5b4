//! `outbox` on a child's slot: reads or drops the completions recorded
//! there for parents elsewhere, and the cancelled parents' children
//! (docs/workflows.md); the relay (`store/flows/relay.rs`) delivers them.

use fred::bytes::Bytes;
use fred::prelude::Value;

use super::{array, count, number, unexpected, Op};
use crate::flow::wire::{Outcome, ParentLink};
use crate::flow::ChildPolicy;
use crate::store::keys::Keys;
use crate::store::scripts::{self, LuaScript};
use crate::Error;

/// One entry of an outbox, as `outbox` reads it.
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
}

/// Most bytes of children's results one outbox read returns (a bigger
/// result is read alone), and so one relay round carries to
/// `flow_complete`: as for a claim ([`CLAIM_BYTES`](super::claim::CLAIM_BYTES)),
/// Redis spends time on every byte a script reads or is given, and refuses
/// a call of over 1 GB, which a thousand results of `MAX_RESULT_SIZE` would be.
pub(crate) const OUTBOX_BYTES: u64 = 1 << 20;

/// Reads or drops outbox entries.
pub(crate) enum Outbox<'a> {
    Read {
        limit: usize,
    },
    /// Entries, each with the children of a cancelled parent that were
    /// cancelled (empty for others).
    Drop {
        entries: &'a [(String, Vec<String>)],
    },
}

impl Op for Outbox<'_> {
    /// Read: the entries, and 1 when more may be left after them (it
    /// stopped at its limit or [`OUTBOX_BYTES`]); drop: no entries and
    /// how many it dropped.
    type Reply = (Vec<OutboxEntry>, u64);
    const KEYS: &'static [&'static str] = &["outbox"];

    fn script() -> &'static LuaScript {
        &scripts::OUTBOX
    }

    fn keys(&self, k: &Keys) -> Vec<String> {
        vec![k.outbox.clone()]
    }

    fn args(&self, k: &Keys) -> Vec<Value> {
        let mut args: Vec<Value> = vec![k.msg_prefix.as_str().into(), k.result_prefix.as_str().into()];
        match self {
            Outbox::Read { limit } => {
                args.push("read".into());
                args.push(count(*limit as u64));
                args.push(count(OUTBOX_BYTES));
            }
            Outbox::Drop { entries } => {
                args.push("drop".into());
                for (entry, done) in *entries {
                    args.push(entry.as_str().into());
                    args.push(done.join(" ").into());
                }
            }
        }
        args
    }

    fn reply(&self, v: Value) -> Result<Self::Reply, Error> {
        if let Outbox::Drop { .. } = self {
            return Ok((Vec::new(), number::<Self>(&v)?));
        }
        let values = array::<Self>(v)?;
        let bad = |what: &str| unexpected::<Self>(what.to_string());
        let (more, values) = values.split_first().ok_or_else(|| bad("an empty reply"))?;
        let more = more.as_u64().ok_or_else(|| bad("no flag of entries left"))?;
        let mut out = Vec::with_capacity(values.len() / 2);
        for pair in values.chunks(2) {
            let [entry, extra] = pair else {
                return Err(bad("an entry without its value"));
            };
            let entry = entry.as_string().ok_or_else(|| bad("an entry that is no string"))?;
            out.push(parse_entry(entry, extra.clone()).ok_or_else(|| bad("a malformed entry"))?);
        }
        Ok((out, more))
    }
}

/// An outbox entry (`"x <parent>"`, or `"<outcome> <child> <policy>
/// <parent's base> <parent>"`) and the value `outbox` read with it.
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
