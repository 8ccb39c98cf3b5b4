//! The scripts of flows (docs/workflows.md): `flow_deps` and `flow_complete`
//! on a parent's slot, `flow_link` and `outbox` on a child's.

use std::time::Duration;

use fred::bytes::Bytes;
use fred::prelude::Value;

use super::{array, count, ints, ms, number, numbered, unexpected, Op};
use crate::store::keys::Keys;
use crate::store::scripts::{self, LuaScript};
use crate::Error;

/// Adds children (each `"<child's base> <child id>"`) to the set parent
/// `id` waits for.
pub(crate) struct FlowDeps<'a> {
    pub id: &'a str,
    pub children: &'a [String],
    /// Adds none to a live parent (a send's, which send.lua will refuse
    /// as a duplicate); false for a batch's member joining its callbacks.
    pub unless_live: bool,
}

/// What [`FlowDeps`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DepsAdded {
    /// How many children were new to the set.
    Added(u64),
    /// The parent is live: none added; per child, whether its set holds it.
    Live(Vec<bool>),
}

impl Op for FlowDeps<'_> {
    type Reply = DepsAdded;
    const KEYS: &'static [&'static str] = &["deps", "msg.."];

    fn script() -> &'static LuaScript {
        &scripts::FLOW_DEPS
    }

    fn keys(&self, k: &Keys) -> Vec<String> {
        let mut keys = vec![k.deps(self.id)];
        if self.unless_live {
            keys.push(k.msg(self.id));
        }
        keys
    }

    fn args(&self, _k: &Keys) -> Vec<Value> {
        self.children.iter().map(|c| Value::from(c.as_str())).collect()
    }

    fn reply(&self, v: Value) -> Result<Self::Reply, Error> {
        match ints::<Self>(v)?[..] {
            [-1, ref held @ ..] if held.len() == self.children.len() => {
                Ok(DepsAdded::Live(held.iter().map(|&h| h == 1).collect()))
            }
            [added] if added >= 0 => Ok(DepsAdded::Added(added as u64)),
            ref other => Err(unexpected::<Self>(format!("{other:?}"))),
        }
    }
}

numbered! {
    /// What linking did with one child.
    pub(crate) enum LinkStatus {
        /// Not stored: finished (acked, cancelled, deleted) or never sent.
        Gone = 0,
        /// Linked: its completion will reach the parent.
        Linked = 1,
        /// Dead, and the policy does not wait for it.
        Dead = 2,
        /// Not stored but its result kept (acked): its completion, recorded
        /// in its queue's outbox, reaches the parent through the relay.
        Recorded = 3,
    }
}

/// Links children `ids` of this shard to a parent (`link`:
/// `"<policy> <parent's base> <parent id>"`).
pub(crate) struct FlowLink<'a> {
    pub link: &'a str,
    pub ids: &'a [String],
}

impl Op for FlowLink<'_> {
    /// One status per child, in order.
    type Reply = Vec<LinkStatus>;
    const KEYS: &'static [&'static str] = &["parents", "dead", "totals"];

    fn script() -> &'static LuaScript {
        &scripts::FLOW_LINK
    }

    fn keys(&self, k: &Keys) -> Vec<String> {
        vec![k.parents(), k.dead.clone(), k.totals.clone()]
    }

    fn args(&self, k: &Keys) -> Vec<Value> {
        let mut args: Vec<Value> = vec![k.msg_prefix.as_str().into(), self.link.into()];
        args.extend(self.ids.iter().map(|id| Value::from(id.as_str())));
        args
    }

    fn reply(&self, v: Value) -> Result<Self::Reply, Error> {
        let reply = ints::<Self>(v)?;
        if reply.len() != self.ids.len() {
            return Err(unexpected::<Self>(format!("{reply:?} for {} children", self.ids.len())));
        }
        reply
            .into_iter()
            .map(|n| LinkStatus::from_number(n).ok_or_else(|| unexpected::<Self>(format!("status {n}"))))
            .collect()
    }
}

/// One child's completion, for its parent.
#[derive(Debug, Clone)]
pub(crate) struct Completion {
    pub parent: String,
    /// `"<child's base> <child id>"`.
    pub child: String,
    /// Outcome then policy letter, e.g. `"af"`.
    pub how: String,
    pub result: Bytes,
}

/// Applies completions to parents of this shard.
pub(crate) struct FlowComplete<'a> {
    pub completions: &'a [Completion],
    pub dead_letter_retention: Duration,
}

/// What [`FlowComplete`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Completed {
    pub applied: u64,
    pub due: u64,
    pub dead: u64,
    pub removed: u64,
}

impl Op for FlowComplete<'_> {
    type Reply = Completed;
    const KEYS: &'static [&'static str] = &["waiting", "pending", "dead", "attempts", "totals"];

    fn script() -> &'static LuaScript {
        &scripts::FLOW_COMPLETE
    }

    fn keys(&self, k: &Keys) -> Vec<String> {
        vec![
            k.flow_waiting.clone(),
            k.pending.clone(),
            k.dead.clone(),
            k.attempts.clone(),
            k.totals.clone(),
        ]
    }

    fn args(&self, k: &Keys) -> Vec<Value> {
        let mut args: Vec<Value> = vec![
            k.msg_prefix.as_str().into(),
            k.wake.as_str().into(),
            ms(self.dead_letter_retention),
        ];
        for c in self.completions {
            args.push(c.parent.as_str().into());
            args.push(c.child.as_str().into());
            args.push(c.how.as_str().into());
            args.push(Value::Bytes(c.result.clone()));
        }
        args
    }

    fn reply(&self, v: Value) -> Result<Self::Reply, Error> {
        match counts::<Self>(v)?[..] {
            [applied, due, dead, removed] => Ok(Completed {
                applied,
                due,
                dead,
                removed,
            }),
            ref other => Err(unexpected::<Self>(format!("{other:?}"))),
        }
    }
}

/// One entry of an outbox, as `outbox` reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum OutboxEntry {
    /// Child `child` of this shard finished with `outcome` for the parent
    /// its link names.
    Done {
        entry: String,
        outcome: char,
        child: String,
        policy: char,
        parent_base: String,
        parent: String,
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

/// An outbox entry and the value `outbox` read with it.
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
    let outcome = single(kind)?;
    let child = parts.next()?.to_string();
    let policy = single(parts.next()?)?;
    let parent_base = parts.next()?.to_string();
    let parent = parts.next()?.to_string();
    let result = match extra {
        Value::Bytes(b) => b,
        Value::String(s) => Bytes::from(s.to_string()),
        _ => Bytes::new(),
    };
    Some(OutboxEntry::Done {
        entry,
        outcome,
        child,
        policy,
        parent_base,
        parent,
        result,
    })
}

/// A reply of counts.
fn counts<O: Op>(v: Value) -> Result<Vec<u64>, Error> {
    ints::<O>(v)?
        .into_iter()
        .map(|n| u64::try_from(n).map_err(|_| unexpected::<O>(format!("negative: {n}"))))
        .collect()
}

/// The one character of `s`.
fn single(s: &str) -> Option<char> {
    let mut chars = s.chars();
    let c = chars.next()?;
    chars.next().is_none().then_some(c)
}

/// Where parent `id`'s children stand (a batch's status).
pub(crate) struct FlowStatus<'a> {
    pub id: &'a str,
    /// The member that keeps a batch open (`"<base> "`), if it is one.
    pub open_member: Option<&'a str>,
}

/// What [`FlowStatus`] read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct FlowCounts {
    pub waiting: bool,
    pub stored: bool,
    pub left: u64,
    pub acked: u64,
    pub dead: u64,
    pub cancelled: u64,
    pub open: bool,
}

impl Op for FlowStatus<'_> {
    type Reply = FlowCounts;
    const KEYS: &'static [&'static str] = &["waiting"];

    fn script() -> &'static LuaScript {
        &scripts::FLOW_STATUS
    }

    fn keys(&self, k: &Keys) -> Vec<String> {
        vec![k.flow_waiting.clone()]
    }

    fn args(&self, k: &Keys) -> Vec<Value> {
        vec![
            k.msg_prefix.as_str().into(),
            self.id.into(),
            self.open_member.unwrap_or("").into(),
        ]
    }

    fn reply(&self, v: Value) -> Result<Self::Reply, Error> {
        match counts::<Self>(v)?[..] {
            [waiting, stored, left, acked, dead, cancelled, open] => Ok(FlowCounts {
                waiting: waiting == 1,
                stored: stored == 1,
                left,
                acked,
                dead,
                cancelled,
                open: open == 1,
            }),
            ref other => Err(unexpected::<Self>(format!("{other:?}"))),
        }
    }
}
