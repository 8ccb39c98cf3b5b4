//! One typed operation per script of `lua/`: what the script takes (its
//! KEYS and ARGV, built from typed inputs) and what it answers (its reply,
//! read into Rust types), next to each other in one file per script.
//!
//! Production code and the script tests build the same operations and run
//! them through [`Shard::run`](super::Shard::run), so ARGV and KEYS are
//! built in one place. Each operation names its KEYS as its script's header
//! does; a test reads the headers and holds the two to each other.
//! Numbers the scripts use for modes, states and outcomes are Rust enums
//! here, each number written once (see [`numbered!`]).

pub(crate) mod ack;
pub(crate) mod cancel;
pub(crate) mod change_schedule;
pub(crate) mod claim;
pub(crate) mod consumers;
pub(crate) mod extend;
pub(crate) mod fire;
pub(crate) mod flow_complete;
pub(crate) mod flow_deps;
pub(crate) mod flow_link;
pub(crate) mod flow_status;
pub(crate) mod gc;
pub(crate) mod get;
pub(crate) mod groups;
pub(crate) mod heartbeat;
pub(crate) mod inspect;
pub(crate) mod limits;
pub(crate) mod list;
pub(crate) mod list_groups;
pub(crate) mod nack;
pub(crate) mod note;
pub(crate) mod outbox;
pub(crate) mod pause;
pub(crate) mod probe;
pub(crate) mod promote;
pub(crate) mod purge;
pub(crate) mod read_schedules;
pub(crate) mod relay;
pub(crate) mod requeue;
pub(crate) mod reschedule;
pub(crate) mod scan;
pub(crate) mod send;
pub(crate) mod shards;
pub(crate) mod stats;
pub(crate) mod timeout;
pub(crate) mod wait;
pub(crate) mod walk;

use std::time::Duration;

use fred::bytes::Bytes;
use fred::prelude::Value;

use super::keys::Keys;
use super::scripts::LuaScript;
use crate::{Error, MessageState};

/// One call of one script.
pub(crate) trait Op: Sync {
    /// The script's reply, read.
    type Reply: Send;

    /// The names of the script's KEYS, in order, as its header in `lua/`
    /// gives them (`KEYS[i] <name> ...`); a last name ending in `..` stands
    /// for any number of keys of that name.
    const KEYS: &'static [&'static str];

    /// The script.
    fn script() -> &'static LuaScript;

    /// KEYS, for the shard with keys `k`, in the order of [`Op::KEYS`].
    fn keys(&self, k: &Keys) -> Vec<String>;

    /// ARGV, in the order of the script's header.
    fn args(&self, k: &Keys) -> Vec<Value>;

    /// Values the caller SETs (with a TTL) at these keys of the shard
    /// right before the script runs: a staged send's (lua/send.lua), which
    /// keeps big payloads out of Lua. None for every other script.
    fn staged(&self, _k: &Keys) -> Vec<(String, Bytes)> {
        Vec::new()
    }

    /// Reads the reply, or fails with [`Error::UnexpectedReply`].
    fn reply(&self, v: Value) -> Result<Self::Reply, Error>;
}

/// An enum whose variants carry the numbers a script uses for them, and
/// [`from_number`](IdKey::from_number) to read one: each number is
/// written once, at its variant.
macro_rules! numbered {
    ($(#[$meta:meta])* $vis:vis enum $name:ident { $($(#[$vmeta:meta])* $variant:ident = $n:literal,)* }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        $vis enum $name { $($(#[$vmeta])* $variant = $n,)* }

        impl $name {
            /// The variant the script numbers `n`.
            pub(crate) fn from_number(n: i64) -> Option<Self> {
                match n {
                    $($n => Some($name::$variant),)*
                    _ => None,
                }
            }
        }
    };
}
pub(crate) use numbered;

numbered! {
    /// A key that holds ids, numbered as `list`, `walk`, `get` and `scan` number
    /// it: its place in their KEYS, from 1. Payload keys, which only `scan`
    /// pages through, come after them.
    pub(crate) enum IdKey {
        Pending = 1,
        Ready = 2,
        Processing = 3,
        Retry = 4,
        Dead = 5,
        Attempts = 6,
        Payloads = 7,
        /// unique_for markers without TTL (docs/dedup.md).
        Markers = 8,
        /// Result keys without TTL (always an anomaly).
        Results = 11,
        /// Progress keys without TTL (always an anomaly).
        Progress = 12,
        /// Log keys without TTL (always an anomaly).
        Logs = 13,
    }
}

impl IdKey {
    /// Every key that holds ids, in order.
    pub(crate) const ALL: [IdKey; 11] = [
        IdKey::Pending,
        IdKey::Ready,
        IdKey::Processing,
        IdKey::Retry,
        IdKey::Dead,
        IdKey::Attempts,
        IdKey::Payloads,
        IdKey::Markers,
        IdKey::Results,
        IdKey::Progress,
        IdKey::Logs,
    ];

    /// The key of the messages in `state`.
    pub(crate) fn of(state: MessageState) -> Self {
        match state {
            MessageState::Pending => IdKey::Pending,
            MessageState::Ready => IdKey::Ready,
            MessageState::Processing => IdKey::Processing,
            MessageState::Retry => IdKey::Retry,
            MessageState::Dead => IdKey::Dead,
            // Refused before any list or walk (queue::inspect::listable):
            // no script pages through the waiting zset.
            MessageState::Waiting => IdKey::Pending,
        }
    }

    /// The state of the messages this key holds, if it holds messages.
    pub(crate) fn state(self) -> Option<MessageState> {
        match self {
            IdKey::Pending => Some(MessageState::Pending),
            IdKey::Ready => Some(MessageState::Ready),
            IdKey::Processing => Some(MessageState::Processing),
            IdKey::Retry => Some(MessageState::Retry),
            IdKey::Dead => Some(MessageState::Dead),
            IdKey::Attempts | IdKey::Payloads | IdKey::Markers | IdKey::Results | IdKey::Progress | IdKey::Logs => None,
        }
    }
}

/// Whether `n` keys fit KEYS named `names` (see [`Op::KEYS`]).
pub(super) fn fits(names: &[&str], n: usize) -> bool {
    match names.last() {
        Some(last) if last.ends_with("..") => n >= names.len() - 1,
        _ => n == names.len(),
    }
}

/// The key of each state, in [`IdKey`] order: `pending ready processing
/// retry dead`.
fn state_keys(k: &Keys) -> Vec<String> {
    vec![
        k.pending.clone(),
        k.ready.clone(),
        k.processing.clone(),
        k.retry.clone(),
        k.dead.clone(),
    ]
}

/// The KEYS of the scripts that look at every key holding ids, in
/// [`IdKey`] order: the state keys, then `attempts`.
fn id_keys(k: &Keys) -> Vec<String> {
    let mut keys = state_keys(k);
    keys.push(k.attempts.clone());
    keys
}

/// A duration as the scripts take it: whole milliseconds.
fn ms(d: Duration) -> Value {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX).into()
}

/// A count or size as the scripts take it.
fn count(n: u64) -> Value {
    i64::try_from(n).unwrap_or(i64::MAX).into()
}

/// The error for a reply of `O` this version does not understand.
fn unexpected<O: Op>(detail: impl Into<String>) -> Error {
    Error::UnexpectedReply {
        script: O::script().name,
        detail: detail.into(),
    }
}

/// A reply that must be an array.
fn array<O: Op>(v: Value) -> Result<Vec<Value>, Error> {
    match v {
        Value::Array(values) => Ok(values),
        other => Err(unexpected::<O>(format!("not an array: {other:?}"))),
    }
}

/// A reply that must be an integer.
fn int<O: Op>(v: &Value) -> Result<i64, Error> {
    match v {
        Value::Integer(n) => Ok(*n),
        other => Err(unexpected::<O>(format!("not an integer: {other:?}"))),
    }
}

/// A reply that must be a count.
fn number<O: Op>(v: &Value) -> Result<u64, Error> {
    u64::try_from(int::<O>(v)?).map_err(|_| unexpected::<O>(format!("negative: {v:?}")))
}

/// A reply that must be 1 (yes) or 0 (no).
fn flag<O: Op>(v: &Value) -> Result<bool, Error> {
    match int::<O>(v)? {
        0 => Ok(false),
        1 => Ok(true),
        n => Err(unexpected::<O>(format!("{n} is not 0 or 1"))),
    }
}

/// A reply that must be an array of integers.
fn ints<O: Op>(v: Value) -> Result<Vec<i64>, Error> {
    array::<O>(v)?.iter().map(int::<O>).collect()
}

/// A reply of one numbered outcome per item, in order, read with `read`:
/// exactly `items` of them, each of `what` (for the error).
fn each<O: Op, T>(v: Value, items: usize, what: &str, read: impl Fn(i64) -> Option<T>) -> Result<Vec<T>, Error> {
    let reply = ints::<O>(v)?;
    if reply.len() != items {
        return Err(unexpected::<O>(format!("{reply:?} for {items} {what}")));
    }
    reply
        .into_iter()
        .map(|n| read(n).ok_or_else(|| unexpected::<O>(format!("outcome {n}"))))
        .collect()
}

/// A reply of counts.
fn counts<O: Op>(v: Value) -> Result<Vec<u64>, Error> {
    ints::<O>(v)?
        .into_iter()
        .map(|n| u64::try_from(n).map_err(|_| unexpected::<O>(format!("negative: {n}"))))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::scripts;
    use crate::MessageId;

    /// `O`'s script, KEYS names and KEYS for a sample call.
    fn entry<O: Op>(op: O, k: &Keys) -> (&'static LuaScript, &'static [&'static str], Vec<String>) {
        (O::script(), O::KEYS, op.keys(k))
    }

    /// One sample call of every operation.
    fn every_op(k: &Keys) -> Vec<(&'static LuaScript, &'static [&'static str], Vec<String>)> {
        let id = MessageId::from("a");
        let receipt = k.claim("c");
        let outgoing = |id: &str| send::Outgoing {
            stage: None,
            mode: None,
            id: id.into(),
            value: Default::default(),
            delay: Duration::ZERO,
            expire_after: None,
            own_id: false,
            wait: false,
        };
        let d = Duration::from_secs(1);
        vec![
            entry(
                send::SendBatch {
                    msgs: vec![outgoing("a"), outgoing("b")],
                },
                k,
            ),
            entry(pause::Pause { paused: true }, k),
            entry(shards::ShardRecord::Claim(3), k),
            entry(
                fire::Fire {
                    name: "s",
                    id: "{s}@1",
                    version: Some("1"),
                    at_ms: 1,
                    cursor_ms: 1,
                    expire_after: None,
                },
                k,
            ),
            entry(
                change_schedule::ChangeSchedule {
                    name: "s",
                    change: change_schedule::Change::Remove,
                },
                k,
            ),
            entry(
                read_schedules::ReadSchedules {
                    which: read_schedules::Which::Named("s"),
                },
                k,
            ),
            entry(
                limits::SetLimit {
                    limit: limits::Limit::Concurrency(Some(1)),
                },
                k,
            ),
            entry(promote::Promote { limit: 1, room: 1 }, k),
            entry(
                probe::Probe {
                    dead_letter_retention: d,
                    dead_limit: 1,
                },
                k,
            ),
            entry(
                claim::Claim {
                    receipt: &receipt,
                    limit: 1,
                    max_consume_duration: d,
                    seq: 0,
                    dead_letter_retention: d,
                    group_share: 0,
                },
                k,
            ),
            entry(extend::Extend { renewals: vec![] }, k),
            entry(ack::Ack::plain(&[]), k),
            entry(
                note::Notes {
                    notes: vec![note::Note {
                        id: "a",
                        lease: 0,
                        kind: crate::scribe::NoteKind::Log,
                        text: "1",
                    }],
                    max_lines: 1,
                    ttl: d,
                },
                k,
            ),
            entry(wait::Wait { id: "a", wait: d }, k),
            entry(
                nack::Nack {
                    id: "a",
                    lease: 0,
                    mode: nack::NackMode::Dead,
                    reason: "",
                    attempt: 1,
                    default_retry_count: 0,
                    dead_letter_retention: d,
                },
                k,
            ),
            entry(
                timeout::Timeout {
                    limit: 1,
                    default_retry_count: 0,
                    dead_letter_retention: d,
                },
                k,
            ),
            entry(cancel::Cancel { id: "a" }, k),
            entry(reschedule::Reschedule { id: "a", delay: d }, k),
            entry(
                gc::Gc {
                    limit: 1,
                    dead_letter_retention: d,
                    max_kept: 0,
                    ids: vec![],
                },
                k,
            ),
            entry(requeue::Requeue { limit: 1, ids: vec![] }, k),
            entry(purge::Purge { limit: 1 }, k),
            entry(stats::Stats, k),
            entry(
                list::List {
                    state: MessageState::Ready,
                    offset: 0,
                    limit: 1,
                    preview: 1,
                },
                k,
            ),
            entry(
                walk::Walk {
                    state: MessageState::Pending,
                    order: crate::Order::Asc,
                    after: None,
                    read: 1,
                    limit: 1,
                    preview: 1,
                    text: "",
                },
                k,
            ),
            entry(get::Get { id: id.as_str() }, k),
            entry(
                scan::Scan {
                    of: scan::Scanned::Ids(IdKey::Ready),
                    cursor: "0",
                    page: 1,
                },
                k,
            ),
            entry(inspect::Inspect { ids: vec!["a"] }, k),
            entry(
                list_groups::ListGroups {
                    offset: 0,
                    limit: 1,
                    only: None,
                },
                k,
            ),
            entry(
                flow_deps::FlowDeps {
                    id: "a",
                    children: &[],
                    unless_live: true,
                },
                k,
            ),
            entry(
                flow_link::FlowLink {
                    parent: &crate::flow::wire::ParentLink {
                        policy: crate::ChildPolicy::Fail,
                        base: String::new(),
                        id: String::new(),
                    },
                    ids: &[],
                    new: false,
                },
                k,
            ),
            entry(
                flow_complete::FlowComplete {
                    completions: &[],
                    dead_letter_retention: d,
                },
                k,
            ),
            entry(outbox::OutboxDrop { entries: &[] }, k),
            entry(
                relay::Relay {
                    limit: 1,
                    dead_letter_retention: d,
                },
                k,
            ),
            entry(
                flow_status::FlowStatus {
                    id: "a",
                    open_member: None,
                },
                k,
            ),
            entry(
                groups::ChangeGroups {
                    change: groups::GroupChange::Pause("g"),
                },
                k,
            ),
            entry(
                heartbeat::Heartbeat {
                    id: "c",
                    ttl: Duration::from_secs(15),
                    entry: b"{}",
                },
                k,
            ),
            entry(consumers::ListConsumers { limit: 1, max_bytes: 1 }, k),
        ]
    }

    /// The KEYS names in a script's header: the word after each
    /// `KEYS[<i>]`, with `..` added for a `KEYS[<i>..]` (a `KEYS[n]` in
    /// the prose declares nothing).
    fn header_keys(file: &str) -> Vec<String> {
        let header = file.split("]]").next().unwrap_or_default();
        let mut names = Vec::new();
        for (at, _) in header.match_indices("KEYS[") {
            let rest = &header[at + "KEYS[".len()..];
            let Some((index, rest)) = rest.split_once(']') else {
                continue;
            };
            let (first, tail) = match index.strip_suffix("..") {
                Some(first) => (first, ".."),
                None => (index, ""),
            };
            let Ok(i) = first.parse::<usize>() else { continue };
            assert_eq!(i, names.len() + 1, "KEYS[{index}] out of order");
            let name = rest.split_whitespace().next().expect("a name after KEYS[i]");
            names.push(format!("{name}{tail}"));
        }
        names
    }

    #[test]
    fn every_script_header_names_the_keys_its_op_passes() {
        let k = Keys::new("dq:", "q").unwrap();
        let ops = every_op(&k);
        let mut covered: Vec<&str> = ops.iter().map(|(s, _, _)| s.name).collect();
        covered.sort_unstable();
        let mut all: Vec<&str> = scripts::ALL.iter().map(|s| s.name).collect();
        all.sort_unstable();
        assert_eq!(covered, all, "one operation per script");
        // `{q}:pending` names KEYS "pending", and so on.
        let tag = k.totals.strip_suffix("totals").unwrap();
        for (script, names, keys) in ops {
            let name = script.name;
            assert_eq!(
                header_keys(script.file),
                names,
                "lua/{name}.lua header against its op's KEYS"
            );
            let (fixed, rest) = match names.last().and_then(|n| n.strip_suffix("..")) {
                Some(tail) => (&names[..names.len() - 1], Some(tail)),
                None => (names, None),
            };
            let named = |key: &str, n: &str| match n {
                "msg" => key.starts_with(&k.msg_prefix),
                "marker" => key.starts_with(&k.marker_prefix),
                "receipt" => key.starts_with(&k.claim("")),
                "schedule" => key.starts_with(&k.schedule_prefix),
                "deps" => key.starts_with(&k.deps("")),
                "waiting" => *key == k.flow_waiting,
                "result" => key.starts_with(&k.result_prefix),
                "progress" => key.starts_with(&k.progress_prefix),
                "log" => key.starts_with(&k.log_prefix),
                // The key a note writes: its message's progress or log.
                "note" => key.starts_with(&k.progress_prefix) || key.starts_with(&k.log_prefix),
                // Of the registry's keys (a queue's here, in the sample).
                "entry" => key.starts_with(&k.consumer("")),
                // Key strings that keep their wire names (docs/wire-format.md).
                "processing" => *key == k.processing,
                "dead" => *key == k.dead,
                "attempts" => *key == k.attempts,
                _ => key.strip_prefix(tag) == Some(n),
            };
            let expected = fixed.iter().copied().chain(std::iter::repeat(rest.unwrap_or("")));
            let expected: Vec<&str> = expected.take(keys.len().max(fixed.len())).collect();
            assert_eq!(keys.len(), expected.len(), "{name}: {keys:?} for KEYS {names:?}");
            for (key, n) in keys.iter().zip(expected) {
                assert!(named(key, n), "{name}: {key} passed as KEYS {n}");
            }
        }
    }

    #[test]
    fn numbered_enums_read_their_numbers() {
        for key in IdKey::ALL {
            assert_eq!(IdKey::from_number(key as i64), Some(key));
            if let Some(state) = key.state() {
                assert_eq!(IdKey::of(state), key);
            }
        }
        assert_eq!(IdKey::from_number(0), None);
        assert_eq!(IdKey::from_number(14), None);
    }
}
