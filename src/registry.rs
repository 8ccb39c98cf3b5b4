//! The registry of live consumers (docs/operations.md, "Live consumers"):
//! the entry each running [`Consumer`](crate::Consumer) writes of itself at
//! each heartbeat, and how a listing reads entries back. Entries are JSON
//! with a shape version (`v`); one of another version, or one that is not
//! an entry at all, is skipped with the reason, never trusted.

use serde::{Deserialize, Serialize};

/// The shape version of the entries this crate writes and reads.
pub const ENTRY_VERSION: u64 = 1;
/// Most running messages an entry lists; [`ConsumerInfo::running_total`]
/// counts them all.
pub const MAX_RUNNING_LISTED: usize = 100;
/// Most queues an entry lists; [`ConsumerInfo::queues_total`] counts them all.
pub const MAX_QUEUES_LISTED: usize = 100;
/// Longest entry, in bytes: lua/heartbeat.lua refuses longer ones, and a
/// listing reads none longer.
pub const MAX_ENTRY_BYTES: usize = 65536;

/// One live consumer, as its last heartbeat described it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ConsumerInfo {
    /// Its id in the registry: one per process, client and key prefix (the
    /// [`Consumer`](crate::Consumer)s of a client in a process share one
    /// entry), new each time the first of them starts.
    #[serde(default)]
    pub id: String,
    /// The host it runs on.
    pub host: String,
    /// Its process id.
    pub pid: u32,
    /// The version of this crate it runs.
    pub version: String,
    /// When it started, in ms since the Unix epoch.
    pub started_ms: u64,
    /// When it wrote this entry, in ms since the Unix epoch.
    pub heartbeat_ms: u64,
    /// How long the entry lives without another heartbeat.
    pub ttl_ms: u64,
    /// Handlers it runs at once, over all its queues.
    pub concurrency: usize,
    /// Whether its queues are served in strict order rather than by weight.
    pub strict: bool,
    /// The queues it reads, the first [`MAX_QUEUES_LISTED`].
    pub queues: Vec<ConsumedQueue>,
    /// How many queues it reads.
    pub queues_total: usize,
    /// The messages its handlers run now, longest running first, the first
    /// [`MAX_RUNNING_LISTED`].
    pub running: Vec<RunningMessage>,
    /// How many messages its handlers run now.
    pub running_total: usize,
}

/// A queue a consumer reads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ConsumedQueue {
    /// Its name.
    pub name: String,
    /// Its weight in the consumer ([`Worker::queue`](crate::Worker::queue); 1 alone).
    pub weight: u64,
    /// How many shards it has.
    pub shards: usize,
}

/// A message a consumer's handler runs now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RunningMessage {
    /// Its queue.
    pub queue: String,
    /// Its id.
    pub id: String,
    /// When its handler started, in ms since the Unix epoch.
    pub since_ms: u64,
    /// Which delivery this is, from 1.
    pub attempt: u32,
}

/// An entry of the registry that was not listed, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct SkippedEntry {
    /// The consumer id it is filed under.
    pub id: String,
    /// Why it was skipped.
    pub reason: String,
}

/// The live consumers of a registry
/// ([`consumers`](crate::consumers), [`DelayQueue::consumers`](crate::DelayQueue::consumers)).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct LiveConsumers {
    /// Their entries, soonest to expire first.
    pub consumers: Vec<ConsumerInfo>,
    /// Entries that could not be read, with the reason.
    pub skipped: Vec<SkippedEntry>,
    /// Consumers whose heartbeat is live in the registry, read or not (a
    /// listing reads a bounded number).
    pub live: u64,
}

/// An entry as the registry holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RawEntry {
    /// Its bytes.
    Text(Vec<u8>),
    /// Longer than a listing reads: its length.
    TooLong(u64),
    /// Its key holds no string.
    NotText,
}

/// The entry of `info`, with the shape version, its lists cut until it
/// fits [`MAX_ENTRY_BYTES`].
pub(crate) fn encode(info: &ConsumerInfo) -> Vec<u8> {
    #[derive(Serialize)]
    struct Versioned<'a> {
        v: u64,
        #[serde(flatten)]
        info: &'a ConsumerInfo,
    }
    let mut info = info.clone();
    info.queues.truncate(MAX_QUEUES_LISTED);
    info.running.truncate(MAX_RUNNING_LISTED);
    loop {
        let bytes = serde_json::to_vec(&Versioned {
            v: ENTRY_VERSION,
            info: &info,
        })
        .unwrap_or_default();
        if bytes.len() <= MAX_ENTRY_BYTES || (info.running.is_empty() && info.queues.is_empty()) {
            return bytes;
        }
        info.running.truncate(info.running.len() / 2);
        info.queues.truncate(info.queues.len() / 2);
    }
}

/// Reads the entry of consumer `id`, or says why it is not one this crate
/// reads: never trusts its lists to be within the bounds.
pub(crate) fn decode(id: &str, raw: RawEntry) -> Result<ConsumerInfo, SkippedEntry> {
    let skip = |reason: String| SkippedEntry {
        id: id.to_string(),
        reason,
    };
    let bytes = match raw {
        RawEntry::Text(bytes) => bytes,
        RawEntry::TooLong(n) => return Err(skip(format!("{n} bytes, over the {MAX_ENTRY_BYTES} read"))),
        RawEntry::NotText => return Err(skip("its key holds no string".into())),
    };
    let value: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| skip(format!("not a JSON entry: {e}")))?;
    match value.get("v").and_then(serde_json::Value::as_u64) {
        Some(ENTRY_VERSION) => {}
        Some(v) => return Err(skip(format!("entry version {v}, this client reads {ENTRY_VERSION}"))),
        None => return Err(skip("no entry version (field v)".into())),
    }
    let mut info: ConsumerInfo =
        serde_json::from_value(value).map_err(|e| skip(format!("not an entry of version {ENTRY_VERSION}: {e}")))?;
    info.id = id.to_string();
    info.queues.truncate(MAX_QUEUES_LISTED);
    info.running.truncate(MAX_RUNNING_LISTED);
    Ok(info)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(running: usize) -> ConsumerInfo {
        ConsumerInfo {
            id: String::new(),
            host: "h".into(),
            pid: 7,
            version: "0.1.0".into(),
            started_ms: 1,
            heartbeat_ms: 2,
            ttl_ms: 15_000,
            concurrency: 4,
            strict: false,
            queues: vec![ConsumedQueue {
                name: "q".into(),
                weight: 1,
                shards: 1,
            }],
            queues_total: 1,
            running: (0..running)
                .map(|i| RunningMessage {
                    queue: "q".repeat(128),
                    id: format!("{i:0>200}"),
                    since_ms: 3,
                    attempt: 1,
                })
                .collect(),
            running_total: running,
        }
    }

    #[test]
    fn entries_read_back_as_written_and_stay_within_their_bound() {
        let one = sample(2);
        let back = decode("c1", RawEntry::Text(encode(&one))).unwrap();
        assert_eq!(back, ConsumerInfo { id: "c1".into(), ..one });
        let big = encode(&sample(10_000));
        assert!(big.len() <= MAX_ENTRY_BYTES, "{}", big.len());
        let back = decode("c2", RawEntry::Text(big)).unwrap();
        assert_eq!(back.running_total, 10_000);
        assert!(!back.running.is_empty() && back.running.len() <= MAX_RUNNING_LISTED);
    }

    #[test]
    fn bad_entries_are_skipped_with_a_reason() {
        let reason = |raw: RawEntry| decode("x", raw).unwrap_err().reason;
        assert!(reason(RawEntry::Text(b"{nope".to_vec())).contains("not a JSON entry"));
        assert!(reason(RawEntry::Text(b"[1,2]".to_vec())).contains("no entry version"));
        assert!(reason(RawEntry::Text(br#"{"v":2,"host":"h"}"#.to_vec())).contains("version 2"));
        assert!(reason(RawEntry::Text(br#"{"v":1,"host":5}"#.to_vec())).contains("not an entry of version 1"));
        assert!(reason(RawEntry::TooLong(1 << 30)).contains("over the"));
        assert!(reason(RawEntry::NotText).contains("no string"));
        // A hostile writer's long lists are cut to the bounds.
        let mut long = sample(0);
        long.queues = vec![long.queues[0].clone(); 1000];
        let json = serde_json::to_vec(&serde_json::json!({"v": 1, "host": "h", "pid": 1, "version": "x",
            "started_ms": 0, "heartbeat_ms": 0, "ttl_ms": 0, "concurrency": 1, "strict": false,
            "queues": long.queues, "queues_total": 1000, "running": [], "running_total": 0}))
        .unwrap();
        assert_eq!(
            decode("x", RawEntry::Text(json)).unwrap().queues.len(),
            MAX_QUEUES_LISTED
        );
    }
}
