//! The public handle: [`DelayQueue`], what users send, cancel, inspect and
//! consume with, and its operations, one file each (build, send, inspect, batch consume,
//! dead letters, pause, integrity, durability, discovery). It runs scripts through
//! the store layer (`crate::store`) and starts the consume runtime
//! (`crate::consume`).

mod browse;
mod builder;
mod config;
mod consume_batch;
mod dead_letters;
mod discover;
mod durability;
mod flows;
mod groups;
mod inspect;
mod integrity;
mod limits;
mod live;
mod pause;
mod results;
mod schedules;
mod send;
mod worker;

pub use browse::{Browse, Search, MAX_SCAN};
pub use builder::DelayQueueBuilder;
pub(crate) use config::Config;
pub use consume_batch::ConsumeBatch;
pub use discover::{find_queues, recorded_shards, FoundQueue};
pub use durability::Durability;
#[allow(deprecated)]
pub use flows::cohorts::{Batch, BatchBuilder, BatchStatus, BATCH_HEADER};
pub use flows::cohorts::{Cohort, CohortBuilder, CohortStatus, COHORT_HEADER};
pub use flows::Flow;
pub use integrity::{Anomaly, IntegrityReport};
pub use live::{consumers, MAX_CONSUMERS_LISTED};
pub use send::{NewMessage, Sent};
pub use worker::Worker;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use fred::prelude::Client;
use tokio::sync::broadcast;

use crate::consume;
use crate::events::{self, Action, Events};
use crate::meters::Meters;
use crate::store::ops::{
    cancel::{Abort, Cancel},
    purge::{Purge, Sweep},
    reschedule::Reschedule,
    shards::ShardRecord,
    stats::Stats,
};
use crate::store::{Keys, Shard};
use crate::{AbortOutcome, Consumer, Counts, Error, Event, Handler, MessageId, QueueStatus};
use durability::WaitAofFound;

/// A delayed message queue stored in Redis.
///
/// Cheap to clone; clones share the client and settings. See the
/// [crate docs](crate) for a full example.
#[derive(Debug, Clone)]
pub struct DelayQueue {
    pub(crate) inner: Arc<Inner>,
}

#[derive(Debug)]
pub(crate) struct Inner {
    pub name: String,
    pub prefix: String,
    /// The keys of each shard: one set for an ordinary queue.
    pub shards: Arc<[Keys]>,
    /// The keys of the unsharded layout, whose totals record the shard
    /// count (`lua/shards.lua`).
    pub record: Keys,
    /// Set once the record was found to agree with `shards`.
    pub recorded: tokio::sync::OnceCell<()>,
    /// Whether the server has `WAITAOF` (for `Durability::Aof`), once
    /// asked: with a receiver of the client's reconnections since, so a
    /// new connection (maybe to another server) is asked again.
    pub waitaof_checked: std::sync::Mutex<WaitAofFound>,
    pub config: Config,
    pub client: Client,
    /// On a cluster, the primaries the queue's commands go to.
    pub nodes: crate::store::nodes::Hold,
    /// Shared with its consumers: a copy of its keys per consumer would
    /// cost each idle queue more than all else it holds.
    pub meters: Arc<Meters>,
    pub events: Events,
}

impl DelayQueue {
    /// The queue's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// How many shards the queue is spread over; see
    /// [`DelayQueueBuilder::shards`]. 1 for an ordinary queue.
    pub fn shards(&self) -> usize {
        self.inner.shards.len()
    }

    /// The keys of the shard that holds message `id`: a hash of the id
    /// (Redis's key-slot CRC16), so every producer and consumer agrees on it
    /// without asking Redis.
    pub(crate) fn shard_of(&self, id: &str) -> &Keys {
        &self.inner.shards[self.shard_index(id)]
    }

    /// The number of the shard that holds message `id`.
    pub(crate) fn shard_index(&self, id: &str) -> usize {
        shard_of(id, self.inner.shards.len())
    }

    /// Cancels a message that waits for delivery (pending, ready, retry)
    /// or a dead letter. Returns `true` when it was removed
    /// and will not be delivered; `false` when the id is unknown, or the
    /// message is being processed right now (that delivery finishes and
    /// decides its fate). O(log n): nothing is scanned.
    ///
    /// Every call that takes an id takes any string (`&str`, `String`,
    /// `&MessageId`); an invalid one fails with [`Error::InvalidMessageId`]
    /// before Redis is asked.
    ///
    /// ```no_run
    /// # async fn run(queue: delayqueue::DelayQueue) -> Result<(), delayqueue::Error> {
    /// let id = queue.send("close order 42").id("order-42").await?;
    /// let cancelled = queue.cancel("order-42").await?;   // or queue.cancel(&id)
    /// # let _ = cancelled;
    /// # Ok(()) }
    /// ```
    pub async fn cancel(&self, id: impl AsRef<str>) -> Result<bool, Error> {
        let id = id.as_ref();
        MessageId::check(id)?;
        let k = self.shard_of(id);
        let removed = self.store(k).run(&Cancel { id }).await?;
        tracing::debug!(queue = %self.inner.name, %id, removed, "cancel");
        if removed {
            self.cancelled(k, id).await;
        }
        Ok(removed)
    }

    /// Aborts a message: cancels it when it waits (pending, ready, retry)
    /// or is a dead letter, as [`cancel`](Self::cancel) does; when it is
    /// being processed, marks it aborted, so that the handler holding it is
    /// told ([`Message::aborted`](crate::Message::aborted), within
    /// milliseconds through the consumer's wake-up connection, else at its
    /// next lease renewal) and the message ends as aborted whatever the
    /// handler returns: not retried, not a dead letter, counted in
    /// [`Totals::aborted`](crate::Totals) with an [`Event::Aborted`](crate::Event::Aborted).
    /// The handler is not stopped: it decides how to wind down. If the
    /// consumer holding it dies, the message ends as aborted at its
    /// lease's end, never delivered again. One script decides, so an abort
    /// racing the handler's ack has one outcome: the ack first, the message
    /// is acked (and the abort answers [`AbortOutcome::NotFound`]); the
    /// abort first, it ends as aborted. O(log n).
    ///
    /// ```no_run
    /// # async fn run(queue: delayqueue::DelayQueue) -> Result<(), delayqueue::Error> {
    /// use delayqueue::AbortOutcome;
    /// match queue.abort("export-7").await? {
    ///     AbortOutcome::Aborting => println!("its handler is told; it ends as aborted"),
    ///     AbortOutcome::Cancelled => println!("it was waiting: deleted"),
    ///     other => println!("nothing to abort: {other:?}"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn abort(&self, id: impl AsRef<str>) -> Result<AbortOutcome, Error> {
        let id = id.as_ref();
        MessageId::check(id)?;
        let k = self.shard_of(id);
        let outcome = self.store(k).run(&Abort { id }).await?;
        tracing::debug!(queue = %self.inner.name, %id, ?outcome, "abort");
        match outcome {
            AbortOutcome::Cancelled => self.cancelled(k, id).await,
            AbortOutcome::Aborting => self.changed(Action::Aborted, Some(id), 1),
            _ => {}
        }
        Ok(outcome)
    }

    /// After message `id` of shard `k` was cancelled: the event, then a
    /// cancelled child's completion to its parent, a cancelled parent's
    /// cancel to its children (docs/workflows.md); what fails here a
    /// consumer's relay delivers.
    async fn cancelled(&self, k: &Keys, id: &str) {
        self.changed(Action::Cancelled, Some(id), 1);
        let retention = self.inner.config.consume.dead_letter_retention;
        if let Err(e) = crate::store::flows::relay::relay(&self.inner.client, k, retention).await {
            tracing::debug!(queue = %self.inner.name, error = %e, "relay after cancel failed");
        }
    }

    /// Moves the due time of a message that has not become due yet to
    /// `delay` from now (by Redis's clock), e.g. to restart a timeout each
    /// time the user acts. Returns `false`, changing nothing, when the
    /// message is no longer pending: already due, being processed, dead or
    /// unknown. O(log n).
    ///
    /// ```no_run
    /// # async fn run(queue: delayqueue::DelayQueue) -> Result<(), delayqueue::Error> {
    /// use std::time::Duration;
    /// // The user typed again: log them out 15 minutes from now, not before.
    /// if !queue.reschedule("logout-user-7", Duration::from_secs(900)).await? {
    ///     queue.send("user 7").delay(Duration::from_secs(900)).id("logout-user-7").await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn reschedule(&self, id: impl AsRef<str>, delay: Duration) -> Result<bool, Error> {
        let id = id.as_ref();
        MessageId::check(id)?;
        if delay > crate::MAX_DELAY {
            return Err(Error::InvalidArgument("delay is longer than MAX_DELAY".into()));
        }
        let k = self.shard_of(id);
        let moved = self.store(k).run(&Reschedule { id, delay }).await?;
        tracing::debug!(queue = %self.inner.name, %id, ?delay, moved, "reschedule");
        if moved {
            self.changed(Action::Rescheduled, Some(id), 1);
        }
        Ok(moved)
    }

    /// Like [`reschedule`](Self::reschedule), to the time `at`: turned into
    /// a delay by this host's clock at the call (as
    /// [`NewMessage::at`] does); a time in the past means due now.
    ///
    /// ```no_run
    /// # async fn run(queue: delayqueue::DelayQueue) -> Result<(), delayqueue::Error> {
    /// use std::time::{Duration, SystemTime};
    /// let moved = queue.reschedule_at("report-7", SystemTime::now() + Duration::from_secs(3600)).await?;
    /// # let _ = moved;
    /// # Ok(()) }
    /// ```
    pub async fn reschedule_at(&self, id: impl AsRef<str>, at: SystemTime) -> Result<bool, Error> {
        self.reschedule(id, delay_until(at)).await
    }

    /// Whether the queue was ever sent to or given a schedule (and not
    /// purged since, unless it had schedules): its totals exist. O(1) per shard; see [`find_queues`](crate::find_queues)
    /// to list them all.
    pub async fn exists(&self) -> Result<bool, Error> {
        use fred::prelude::KeysInterface;
        let found: Vec<i64> = self
            .each_shard(|k| async move { self.inner.client.exists(&k.totals).await })
            .await
            .map_err(|e| Error::from_redis(&self.inner.name, e))?;
        Ok(found.contains(&1))
    }

    /// How many messages are in each state, taken atomically: the
    /// `counts` part of [`status`](Self::status), for when the rest is not
    /// needed. O(1) per shard.
    pub async fn counts(&self) -> Result<Counts, Error> {
        Ok(self.status().await?.counts)
    }

    /// Counts per state, the latency (how long the oldest due message has
    /// waited to start), the age of the oldest dead letter, and running
    /// totals (sent, acked, failed, dead, expired), taken atomically (on a
    /// sharded queue: each shard atomically, all shards at once, summed).
    /// A bounded number of reads per shard (docs/operations.md §5).
    ///
    /// ```no_run
    /// # async fn run(queue: delayqueue::DelayQueue) -> Result<(), delayqueue::Error> {
    /// let status = queue.status().await?;
    /// if status.latency > Some(std::time::Duration::from_secs(60)) {
    ///     eprintln!("is any consumer running? {:?}", status.counts);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn status(&self) -> Result<QueueStatus, Error> {
        let shards = self.shard_statuses().await?;
        Ok(shards.into_iter().reduce(QueueStatus::merge).unwrap_or_default())
    }

    /// The [`status`](Self::status) of each shard, in shard order (one for
    /// an ordinary queue; see [`DelayQueueBuilder::shards`]), each taken
    /// atomically, all shards at once; `status` is their sum. O(1) per
    /// shard.
    ///
    /// ```no_run
    /// # async fn run(queue: delayqueue::DelayQueue) -> Result<(), delayqueue::Error> {
    /// for (shard, status) in queue.shard_statuses().await?.iter().enumerate() {
    ///     println!("shard {shard}: {} pending", status.counts.pending);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn shard_statuses(&self) -> Result<Vec<QueueStatus>, Error> {
        self.each_shard(|k| self.shard_status(k)).await
    }

    /// The status of one shard, taken atomically.
    pub(crate) async fn shard_status(&self, k: &Keys) -> Result<QueueStatus, Error> {
        self.store(k).run(&Stats).await
    }

    /// Deletes every message of the queue, whatever its state, its flow
    /// keys and its totals, in batches of `batch_size` (each one script
    /// call); then its results, and the progress and logs of messages not
    /// being processed, paging through the keys of the queue's Redis node
    /// (`SCAN`, `batch_size` keys a call). Running deliveries finish, but
    /// their acks find nothing to ack. A paused queue stays paused. Returns
    /// how many entries it removed.
    pub async fn purge(&self) -> Result<u64, Error> {
        let mut removed = 0u64;
        let limit = self.inner.config.consume.batch_size;
        for k in self.inner.shards.iter() {
            loop {
                // Negative: groups forgotten, nothing removed; call again.
                match self.store(k).run(&Purge { limit }).await? {
                    0 => break,
                    n => removed += n.max(0).unsigned_abs(),
                }
            }
            let mut cursor = "0".to_string();
            loop {
                let (next, _) = self.store(k).run(&Sweep { cursor: &cursor, limit }).await?;
                if next == "0" {
                    break;
                }
                cursor = next;
            }
        }
        if removed > 0 {
            tracing::info!(queue = %self.inner.name, removed, "queue purged");
            self.changed(Action::Purged, None, removed);
        }
        Ok(removed)
    }

    /// A stream of what happens to this queue's messages in this process
    /// (sends, deliveries, acks, failures, dead letters, ...), for code
    /// that reacts to them. Each receiver sees every event sent after it
    /// subscribed; one that falls 4096 events behind misses the oldest.
    ///
    /// ```no_run
    /// # async fn run(queue: delayqueue::DelayQueue) {
    /// use delayqueue::Event;
    /// let mut events = queue.events();
    /// tokio::spawn(async move {
    ///     while let Ok(event) = events.recv().await {
    ///         if let Event::Dead { id, reason, .. } = event {
    ///             eprintln!("alert: {id} is dead: {reason}");
    ///         }
    ///     }
    /// });
    /// # }
    /// ```
    pub fn events(&self) -> broadcast::Receiver<Event> {
        self.inner.events.subscribe()
    }

    /// Starts a consumer that delivers this queue's due messages to
    /// `handler`, on the caller's tokio runtime. Stop it with
    /// [`Consumer::shutdown`].
    ///
    /// Fails when Redis cannot be reached or a queue key has the wrong type.
    /// Logs a warning when Redis may evict keys (`maxmemory-policy` other
    /// than `noeviction`): an evicted payload is a lost message.
    pub async fn start_consume(&self, handler: impl Handler) -> Result<Consumer, Error> {
        self.consume_with(Arc::new(handler), |_| {}).await
    }

    /// Starts a consumer of this queue alone, its settings as built but
    /// for what `adjust` changes.
    pub(crate) async fn consume_with(
        &self,
        handler: Arc<dyn Handler>,
        adjust: impl FnOnce(&mut consume::Settings),
    ) -> Result<Consumer, Error> {
        self.prepare_consume().await?;
        let mut ctx = self.consume_context();
        adjust(&mut ctx.settings);
        let member = consume::Member {
            ctx,
            handler,
            weight: 1,
        };
        Ok(Consumer::start(vec![member], false).await)
    }

    /// What every consumer of the queue does before it starts: records the
    /// shard count, checks the key types, writes the configured limits,
    /// and warns of evictions and of shards beyond its own.
    pub(crate) async fn prepare_consume(&self) -> Result<(), Error> {
        self.claim_shard_count().await?;
        self.counts().await?;
        self.apply_configured_limits().await?;
        self.warn_if_evicting().await;
        self.warn_if_more_shards_exist().await;
        Ok(())
    }

    /// Records this handle's shard count for the queue, or fails with
    /// [`Error::ShardCount`] when another is recorded; once per handle. A
    /// sharded producer runs it before its first send, every consumer at
    /// start (an ordinary queue's sends are checked by the send script).
    pub(crate) async fn claim_shard_count(&self) -> Result<(), Error> {
        let inner = &self.inner;
        inner
            .recorded
            .get_or_try_init(|| async {
                let op = ShardRecord::Claim(inner.shards.len());
                Shard::new(&inner.client, &inner.record, &inner.name)
                    .run(&op)
                    .await
                    .map(drop)
            })
            .await
            .map(drop)
    }

    /// Whether `other` is a handle for the same queue (prefix and name).
    pub(crate) fn same_queue(&self, other: &DelayQueue) -> bool {
        (&self.inner.prefix, &self.inner.name) == (&other.inner.prefix, &other.inner.name)
    }

    /// Handlers a consumer of this handle runs at once.
    pub(crate) fn concurrency(&self) -> usize {
        self.inner.config.consume.concurrency
    }

    /// What the consume runtime (a consumer, a scheduler) runs with.
    pub(crate) fn consume_context(&self) -> consume::Context {
        let inner = &self.inner;
        consume::Context {
            name: inner.name.clone(),
            prefix: inner.prefix.clone(),
            client: inner.client.clone(),
            _nodes: inner.nodes.clone(),
            shards: inner.shards.clone(),
            settings: inner.config.consume.clone(),
            meters: inner.meters.clone(),
            events: inner.events.clone(),
        }
    }

    /// Messages sent with more shards than this consumer has sit in
    /// shards it does not read: say so. Only the shard just past the last
    /// is looked at, a key that an ACL for this sharded queue
    /// (`~<prefix>{<name>#*}*`) allows; fewer shards, or an ordinary queue
    /// of the same name, strand nothing in this queue's shards.
    async fn warn_if_more_shards_exist(&self) {
        use fred::prelude::KeysInterface;
        let n = self.shards();
        if n == 1 {
            return;
        }
        let next = Keys::shard(&self.inner.prefix, &self.inner.name, n);
        if let Ok(1) = self.inner.client.exists::<i64, _>(&next.totals).await {
            tracing::warn!(
                queue = %self.inner.name, shards = n, found = %next.totals,
                "this queue has a shard beyond its shard count: a producer uses more shards, and this \
                 consumer does not read the messages there. Use the same shards(n) everywhere (docs/scaling.md)"
            );
        }
    }

    /// Runs `f` on every shard's keys at once; the results in shard order.
    pub(crate) async fn each_shard<'a, T, E, F, Fut>(&'a self, f: F) -> Result<Vec<T>, E>
    where
        F: Fn(&'a Keys) -> Fut,
        Fut: std::future::Future<Output = Result<T, E>>,
    {
        futures::future::try_join_all(self.inner.shards.iter().map(f)).await
    }

    async fn warn_if_evicting(&self) {
        use fred::prelude::ClientLike;
        let info: Result<String, _> = self.inner.client.info(Some(fred::types::InfoKind::Memory)).await;
        match info {
            Ok(info) => {
                let policy = info
                    .lines()
                    .find_map(|l| l.strip_prefix("maxmemory_policy:"))
                    .map(str::trim);
                if let Some(policy) = policy.filter(|p| *p != "noeviction") {
                    tracing::warn!(
                        queue = %self.inner.name,
                        policy,
                        "Redis maxmemory-policy is not noeviction: under memory pressure Redis may evict \
                         message payloads, and evicted messages are lost. Set maxmemory-policy noeviction."
                    );
                }
            }
            Err(e) => tracing::debug!(error = %e, "could not read maxmemory-policy"),
        }
    }

    /// The store handle of the shard with keys `k`.
    /// Emits [`Event::Changed`] for an operator's action that changed something.
    pub(crate) fn changed(&self, action: Action, id: Option<&str>, count: u64) {
        self.changed_schedule(action, None, id, count);
    }

    /// [`changed`](Self::changed) for an action on group `group`.
    pub(crate) fn changed_group(&self, action: Action, group: Option<&str>) {
        events::emit(&self.inner.events, || Event::Changed {
            action,
            id: None,
            count: 0,
            schedule: None,
            group: group.map(str::to_string),
        });
    }

    /// [`changed`](Self::changed) for an action on schedule `schedule`.
    pub(crate) fn changed_schedule(&self, action: Action, schedule: Option<&str>, id: Option<&str>, count: u64) {
        events::emit(&self.inner.events, || Event::Changed {
            action,
            id: id.map(|id| MessageId::from(id.to_string())),
            count,
            schedule: schedule.map(str::to_string),
            group: None,
        });
    }

    pub(crate) fn store<'a>(&'a self, k: &'a Keys) -> Shard<'a> {
        Shard::new(&self.inner.client, k, &self.inner.name)
    }
}

/// The shard of `shards` that message id or group name `key` lives in.
pub(crate) fn shard_of(key: &str, shards: usize) -> usize {
    usize::from(fred::util::redis_keyslot(key.as_bytes())) % shards
}

/// The delay until `at` by this host's clock; zero when it has passed.
pub(crate) fn delay_until(at: SystemTime) -> Duration {
    at.duration_since(SystemTime::now()).unwrap_or(Duration::ZERO)
}
