//! The consumer's heartbeat: one task per [`Consumer`](super::Consumer)
//! that writes its entry in the registry of live consumers
//! (lua/heartbeat.lua) every `heartbeat` interval, with a TTL of
//! [`TTL_BEATS`] intervals, and removes it when the consumer stops. One
//! script call per interval, whatever the number of queues and messages;
//! each delivery only adds itself to and removes itself from [`Running`],
//! in memory.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fred::prelude::Client;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::context::Context;
use crate::registry::{self, ConsumedQueue, ConsumerInfo, RunningMessage};
use crate::store::ops::heartbeat::Heartbeat;
use crate::store::{Keys, Shard};
use crate::MessageId;

/// A killed consumer's entry outlives its last heartbeat by this many
/// intervals: two heartbeats may be late or lost before a live consumer
/// drops out of the listing.
pub(crate) const TTL_BEATS: u32 = 3;

/// The messages a consumer's handlers run now, by a number per delivery.
#[derive(Default)]
pub(crate) struct Running {
    next: AtomicU64,
    now: Mutex<HashMap<u64, (usize, MessageId, u64, u32)>>,
}

/// A delivery's place in [`Running`], left when dropped.
pub(crate) struct Entered<'a> {
    running: &'a Running,
    key: u64,
}

impl Running {
    /// Notes that the handler of message `id` (its `attempt`) of the
    /// consumer's queue number `lane` starts now, until the guard drops.
    pub(crate) fn enter(&self, lane: usize, id: &MessageId, attempt: u32) -> Entered<'_> {
        let key = self.next.fetch_add(1, Ordering::Relaxed);
        let entry = (lane, id.clone(), now_ms(), attempt);
        self.now.lock().unwrap_or_else(|e| e.into_inner()).insert(key, entry);
        Entered { running: self, key }
    }

    /// The longest running [`registry::MAX_RUNNING_LISTED`] messages, with
    /// their queues' names from `names`, and the count of all.
    fn snapshot(&self, names: &[String]) -> (Vec<RunningMessage>, usize) {
        let now = self.now.lock().unwrap_or_else(|e| e.into_inner());
        let mut all: Vec<_> = now.values().collect();
        all.sort_unstable_by_key(|(_, _, since, _)| *since);
        let listed = all
            .iter()
            .take(registry::MAX_RUNNING_LISTED)
            .map(|(lane, id, since, attempt)| RunningMessage {
                queue: names.get(*lane).cloned().unwrap_or_default(),
                id: id.as_str().to_string(),
                since_ms: *since,
                attempt: *attempt,
            });
        (listed.collect(), now.len())
    }
}

impl Drop for Entered<'_> {
    fn drop(&mut self) {
        self.running
            .now
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.key);
    }
}

/// What a heartbeat task needs: where to write, how often, and what it
/// writes besides the running messages.
pub(crate) struct Beat {
    pub client: Client,
    /// The registry's keys.
    pub registry: Keys,
    pub id: MessageId,
    pub every: Duration,
    /// The entry without its running messages and times of the heartbeat.
    pub info: ConsumerInfo,
    /// The messages the entry lists.
    pub running: Arc<Running>,
}

/// Starts the heartbeat: it writes the entry at once and every
/// `beat.every`, until `leave` says true or is dropped; then it removes
/// the entry.
pub(crate) fn spawn(beat: Beat, mut leave: watch::Receiver<bool>) -> JoinHandle<()> {
    tokio::spawn(async move {
        let names: Vec<String> = beat.info.queues.iter().map(|q| q.name.clone()).collect();
        loop {
            let (running, total) = beat.running.snapshot(&names);
            let info = ConsumerInfo {
                heartbeat_ms: now_ms(),
                running,
                running_total: total,
                ..beat.info.clone()
            };
            write(&beat, beat.every * TTL_BEATS, &registry::encode(&info)).await;
            let changed = tokio::time::timeout(beat.every, leave.changed()).await;
            if matches!(changed, Ok(Err(_))) || *leave.borrow() {
                break;
            }
        }
        write(&beat, Duration::ZERO, b"").await;
    })
}

/// A queue of the consumer, as its entry lists it.
pub(crate) fn consumed(ctx: &Context, weight: u64) -> ConsumedQueue {
    ConsumedQueue {
        name: ctx.name.clone(),
        weight,
        shards: ctx.shards.len(),
    }
}

/// The heartbeat of consumer `id` of `queues`, the first of which is
/// `first`, under the registry of its key prefix; `None` when that prefix
/// is refused (the queue's own keys were built with it, so never).
pub(crate) fn beat_of(
    first: &Context,
    queues: Vec<ConsumedQueue>,
    id: &MessageId,
    running: Arc<Running>,
    strict: bool,
) -> Option<Beat> {
    let every = first.settings.heartbeat;
    Some(Beat {
        client: first.client.clone(),
        registry: Keys::registry(&first.prefix).ok()?,
        id: id.clone(),
        every,
        info: ConsumerInfo {
            id: id.as_str().to_string(),
            host: host_name(),
            pid: std::process::id(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            started_ms: now_ms(),
            heartbeat_ms: 0,
            ttl_ms: u64::try_from((every * TTL_BEATS).as_millis()).unwrap_or(u64::MAX),
            concurrency: first.settings.concurrency,
            strict,
            queues_total: queues.len(),
            queues,
            running: Vec::new(),
            running_total: 0,
        },
        running,
    })
}

/// Runs one heartbeat (a zero `ttl`: the removal); a failure is logged,
/// and the next heartbeat tries again.
async fn write(beat: &Beat, ttl: Duration, entry: &[u8]) {
    let op = Heartbeat {
        id: beat.id.as_str(),
        ttl,
        entry,
    };
    let store = Shard::new(&beat.client, &beat.registry, "(consumer registry)");
    if let Err(e) = store.run(&op).await {
        tracing::warn!(error = %e, consumer = %beat.id, "consumer heartbeat failed");
    }
}

/// The host's name, for the entry: the kernel's, else `HOSTNAME`, else "unknown".
pub(crate) fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        // A hostile environment's name stays short.
        .map(|h| h.trim().chars().take(255).collect::<String>())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

/// Now, in ms since the Unix epoch.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
