//! The process's heartbeat: the [`Consumer`](super::Consumer)s of one
//! client under one key prefix share one entry in the registry of live
//! consumers and one task, which writes it (lua/heartbeat.lua) every
//! `heartbeat` interval, with a TTL of [`TTL_BEATS`] intervals, and
//! removes it when the last of them stops. One script call per interval
//! per process, whatever the number of consumers, queues and messages;
//! each delivery only adds itself to and removes itself from [`Running`],
//! in memory.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fred::prelude::{Client, ClientLike};
use tokio::sync::Notify;
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

/// What one [`Consumer`](super::Consumer) adds to its process's entry.
pub(crate) struct Part {
    pub queues: Vec<ConsumedQueue>,
    pub concurrency: usize,
    pub strict: bool,
    /// Its `heartbeat` setting: the entry beats as often as its most
    /// frequent part asks.
    pub every: Duration,
    /// The messages its handlers run now.
    pub running: Arc<Running>,
}

/// The one entry of the consumers of a client (its clones share it) under
/// one key prefix in this process, and its task.
struct Heart {
    client: Client,
    registry: Keys,
    id: MessageId,
    /// The host's name, read once.
    host: String,
    started_ms: u64,
    /// The consumers in it, by a number each.
    parts: Mutex<Vec<(u64, Part)>>,
    next: AtomicU64,
    /// Wakes the task: a part joined or left (write now), or the last
    /// left (remove the entry and end).
    changed: Notify,
    /// The task, awaited by the last part to leave.
    task: Mutex<Option<JoinHandle<()>>>,
}

/// The hearts of the process, by client id and key prefix; a heart leaves
/// with its last part, so a consumer started after that starts a new one.
static HEARTS: Mutex<Vec<(String, Arc<Heart>)>> = Mutex::new(Vec::new());

/// A consumer's place in its process's entry; [`Membership::leave`] (or
/// dropping it) takes it out, and the last one out removes the entry.
pub(crate) struct Membership {
    heart: Arc<Heart>,
    part: u64,
    left: bool,
}

/// Puts the consumer described by `part` of queues of `first`'s client
/// and prefix in its process's entry, starting the entry and its task if
/// it is the first; `None` when that prefix is refused (the queue's own
/// keys were built with it, so never).
pub(crate) fn join(first: &Context, part: Part) -> Option<Membership> {
    let key = format!("{} {}", first.client.id(), first.prefix);
    let mut hearts = HEARTS.lock().unwrap_or_else(|e| e.into_inner());
    let number;
    let heart = match hearts.iter().find(|(k, _)| *k == key) {
        Some((_, heart)) => {
            number = heart.next.fetch_add(1, Ordering::Relaxed);
            heart.parts().push((number, part));
            heart.changed.notify_one();
            heart.clone()
        }
        None => {
            number = 0;
            let heart = Arc::new(Heart {
                client: first.client.clone(),
                registry: Keys::registry(&first.prefix).ok()?,
                id: MessageId::generate(),
                host: host_name(),
                started_ms: now_ms(),
                parts: Mutex::new(vec![(number, part)]),
                next: AtomicU64::new(1),
                changed: Notify::new(),
                task: Mutex::new(None),
            });
            hearts.push((key, heart.clone()));
            let task = tokio::spawn(beat(heart.clone()));
            *heart.task.lock().unwrap_or_else(|e| e.into_inner()) = Some(task);
            heart
        }
    };
    Some(Membership {
        heart,
        part: number,
        left: false,
    })
}

impl Membership {
    /// Takes the consumer out of the entry; when it was the last, waits
    /// until the entry is removed.
    pub(crate) async fn leave(mut self) {
        self.left = true;
        if self.heart.remove(self.part) {
            let task = self.heart.task.lock().unwrap_or_else(|e| e.into_inner()).take();
            if let Some(task) = task {
                // A panic of the task leaves the entry to its TTL.
                let _ = task.await;
            }
        }
    }
}

impl std::fmt::Debug for Membership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Membership")
            .field("entry", &self.heart.id)
            .field("part", &self.part)
            .finish()
    }
}

impl Drop for Membership {
    fn drop(&mut self) {
        if !self.left {
            self.heart.remove(self.part);
        }
    }
}

impl Heart {
    fn parts(&self) -> std::sync::MutexGuard<'_, Vec<(u64, Part)>> {
        self.parts.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes part `number` out; returns whether it was the last, the heart
    /// then out of [`HEARTS`] and its task told to remove the entry.
    fn remove(self: &Arc<Self>, number: u64) -> bool {
        let mut hearts = HEARTS.lock().unwrap_or_else(|e| e.into_inner());
        let mut parts = self.parts();
        parts.retain(|(n, _)| *n != number);
        let last = parts.is_empty();
        if last {
            hearts.retain(|(_, h)| !Arc::ptr_eq(h, self));
        }
        self.changed.notify_one();
        last
    }

    /// The entry now and how often to write it; `None` once no part is left.
    fn entry(&self) -> Option<(ConsumerInfo, Duration)> {
        let parts = self.parts();
        let every = parts.iter().map(|(_, p)| p.every).min()?;
        let (mut running, mut running_total) = (Vec::new(), 0);
        for (_, p) in parts.iter() {
            let names: Vec<String> = p.queues.iter().map(|q| q.name.clone()).collect();
            let (listed, total) = p.running.snapshot(&names);
            running.extend(listed);
            running_total += total;
        }
        running.sort_unstable_by_key(|m| m.since_ms);
        running.truncate(registry::MAX_RUNNING_LISTED);
        let queues: Vec<ConsumedQueue> = parts.iter().flat_map(|(_, p)| p.queues.iter().cloned()).collect();
        let info = ConsumerInfo {
            id: self.id.as_str().to_string(),
            host: self.host.clone(),
            pid: std::process::id(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            started_ms: self.started_ms,
            heartbeat_ms: now_ms(),
            ttl_ms: u64::try_from((every * TTL_BEATS).as_millis()).unwrap_or(u64::MAX),
            concurrency: parts.iter().map(|(_, p)| p.concurrency).sum(),
            strict: parts.iter().any(|(_, p)| p.strict),
            queues_total: queues.len(),
            queues,
            running,
            running_total,
        };
        Some((info, every))
    }
}

/// The heart's task: writes the entry at once, at each change and every
/// interval, until no part is left; then removes it.
async fn beat(heart: Arc<Heart>) {
    while let Some((info, every)) = heart.entry() {
        write(&heart, every * TTL_BEATS, &registry::encode(&info)).await;
        let _ = tokio::time::timeout(every, heart.changed.notified()).await;
    }
    write(&heart, Duration::ZERO, b"").await;
}

/// A queue of the consumer, as its entry lists it.
pub(crate) fn consumed(ctx: &Context, weight: u64) -> ConsumedQueue {
    ConsumedQueue {
        name: ctx.name.clone(),
        weight,
        shards: ctx.shards.len(),
    }
}

/// Runs one heartbeat (a zero `ttl`: the removal); a failure is logged,
/// and the next heartbeat tries again.
async fn write(heart: &Heart, ttl: Duration, entry: &[u8]) {
    let op = Heartbeat {
        id: heart.id.as_str(),
        ttl,
        entry,
    };
    let store = Shard::new(&heart.client, &heart.registry, "(consumer registry)");
    if let Err(e) = store.run(&op).await {
        tracing::warn!(error = %e, consumer = %heart.id, "consumer heartbeat failed");
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
