//! The consume loop: moves due messages, claims them in batches, runs the
//! handler on each, and acks or nacks the outcome.
//!
//! One loop task per shard sweeps on every `fetch_interval` (timed-out
//! deliveries back to retry, garbage collected) and in between sleeps until
//! the earliest due time it knows of, or until a handler frees a slot. Each
//! claimed message gets a task of its own, which waits for one of the
//! `concurrency` permits before it runs the handler. The loops of a sharded
//! queue share the handlers and `fetch_limit`, each claiming no more than
//! its share while the others have work.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use tokio::sync::{mpsc, watch, Notify, Semaphore};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::Instrument;

use crate::acker::{self, AckItem};
use crate::events::{self, Event};
use crate::lease::{self, Lease, Leases};
use crate::store::ops::claim::Claim;
use crate::store::ops::gc::Gc;
use crate::store::ops::nack::{Nack, NackMode, NackOutcome};
use crate::store::ops::promote::Promote;
use crate::store::ops::timeout::Timeout;
use crate::store::{Keys, Op};
use crate::wake;
use crate::{DelayQueue, Error, Handler, HandlerError, Message, MessageId, RetryAfter, SkipRetry};

/// Most script calls of one kind in a row before the loop does other work.
const MAX_ROUNDS: usize = 8;

/// Most ids one claim call leases, whatever `batch_size`: a claim does
/// several calls per id, and at 512 ids it ran up to ~8 ms with 1,000,000
/// keys in Redis (docs/performance.md). More are claimed in further calls.
const MAX_CLAIM: usize = 256;

/// A running consumer. Stop it with [`shutdown`](Consumer::shutdown).
///
/// Dropping it stops it the same way without waiting: it claims nothing
/// more, and in the background its running handlers finish (each within
/// its time limit) and are acked or nacked, and unstarted deliveries are
/// handed back. Should the tokio runtime end first, those tasks end with
/// it and their messages are delivered again once their leases run out.
#[derive(Debug)]
#[must_use = "dropping a Consumer stops it"]
pub struct Consumer {
    stop: watch::Sender<bool>,
    /// The loop of each shard, then the wake-up task.
    tasks: Vec<JoinHandle<()>>,
    /// The queue's name, for logs.
    name: String,
}

impl Consumer {
    pub(crate) async fn start(queue: DelayQueue, handler: Arc<dyn Handler>) -> Self {
        let (stop, stop_rx) = watch::channel(false);
        let shards = &queue.inner.shards;
        let channels = shards.iter().map(|k| k.wake.clone()).collect();
        let (wakes, waker) = wake::spawn(&queue.inner.client, channels, stop_rx.clone()).await;
        let me = MessageId::generate();
        let pool = Arc::new(Pool {
            handler,
            workers: Semaphore::new(queue.inner.config.concurrency),
            in_flight: AtomicUsize::new(0),
            done: shards.iter().map(|_| Notify::new()).collect(),
            avg_handler_us: AtomicU64::new(0),
            stop: stop_rx,
        });
        let mut tasks: Vec<JoinHandle<()>> = shards
            .iter()
            .zip(wakes)
            .enumerate()
            .map(|(index, (keys, wakes))| {
                let (acks, acker) = acker::spawn(queue.clone(), keys.clone());
                let leases = Arc::new(Leases::default());
                let renewer = queue
                    .inner
                    .config
                    .renews_leases()
                    .then(|| lease::spawn(queue.clone(), keys.clone(), leases.clone()));
                let shared = Arc::new(Shared {
                    queue: queue.clone(),
                    receipt: keys.claim(me.as_str()),
                    keys: keys.clone(),
                    index,
                    pool: pool.clone(),
                    in_flight: AtomicUsize::new(0),
                    acking: AtomicUsize::new(0),
                    claims: AtomicU64::new(0),
                    acks,
                    leases,
                });
                tokio::spawn(run(shared, acker, wakes, renewer))
            })
            .collect();
        tasks.push(waker);
        match shards.len() {
            1 => tracing::info!(queue = %queue.name(), "consumer started"),
            n => tracing::info!(queue = %queue.name(), shards = n, "consumer started"),
        }
        Consumer {
            stop,
            tasks,
            name: queue.name().to_string(),
        }
    }

    /// Stops gracefully: claims nothing more, lets running handlers finish
    /// (each within its `handler_timeout`), acks or nacks them, hands
    /// claimed-but-unstarted messages back without counting a delivery, and
    /// returns once nothing is left claimed by this consumer.
    pub async fn shutdown(mut self) -> Result<(), Error> {
        let _ = self.stop.send(true);
        for task in std::mem::take(&mut self.tasks) {
            task.await
                .map_err(|e| Error::Internal(format!("consumer task failed: {e}")))?;
        }
        tracing::info!(queue = %self.name, "consumer stopped");
        Ok(())
    }
}

impl Drop for Consumer {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

/// What the loops of every shard share: the handlers and their limits.
struct Pool {
    handler: Arc<dyn Handler>,
    /// One permit per handler that may run at once.
    workers: Semaphore,
    /// Messages claimed and not finished, over all shards.
    in_flight: AtomicUsize,
    /// One per shard loop, each signalled whenever any delivery finishes.
    done: Vec<Notify>,
    /// Moving average of handler run time, 0 until the first one ends.
    avg_handler_us: AtomicU64,
    stop: watch::Receiver<bool>,
}

/// State of one shard's loop, shared with its delivery tasks.
struct Shared {
    queue: DelayQueue,
    /// The keys of this loop's shard.
    keys: Keys,
    /// This shard's number; its loop waits on `pool.done[index]`.
    index: usize,
    pool: Arc<Pool>,
    /// Messages of this shard claimed and not finished.
    in_flight: AtomicUsize,
    /// Finished deliveries of this shard whose ack has not been sent yet.
    acking: AtomicUsize,
    /// Key of this consumer's claim receipt.
    receipt: String,
    /// Claim requests answered so far; numbers each request for its receipt.
    claims: AtomicU64,
    acks: mpsc::UnboundedSender<AckItem>,
    /// Leases of running handlers, renewed when handlers outlive a lease.
    leases: Arc<Leases>,
}

/// When the loop next has something to do.
struct Schedule {
    /// Next sweep (timed-out deliveries, garbage); also a promote and a claim.
    sweep: Instant,
    /// When the earliest pending message is due, as far as this consumer knows.
    promote: Instant,
    /// Whether ready or retry may hold messages this consumer could claim.
    claim: bool,
}

async fn run(
    shared: Arc<Shared>,
    acker: JoinHandle<()>,
    mut wakes: mpsc::UnboundedReceiver<Instant>,
    renewer: Option<JoinHandle<()>>,
) {
    let interval = shared.queue.inner.config.fetch_interval;
    let mut stop = shared.pool.stop.clone();
    let now = Instant::now();
    let mut at = Schedule {
        sweep: now,
        promote: now,
        claim: true,
    };
    let mut failures = 0u32;
    tracing::debug!(queue = %shared.queue.name(), shard = shared.index, "shard loop started");
    while !*stop.borrow() {
        let (until, on_slot) = match step(&shared, &mut at).await {
            Ok(slot) => {
                if failures > 0 {
                    tracing::info!(queue = %shared.queue.name(), failed_steps = failures, "consumer step succeeded again");
                }
                failures = 0;
                (at.sweep.min(at.promote), slot)
            }
            Err(e) => {
                failures += 1;
                let backoff =
                    (Duration::from_millis(50) * 2u32.pow(failures.min(10))).min(interval.max(Duration::from_secs(1)));
                // An outage is one event: one warning, then one line when it ends.
                if failures == 1 {
                    tracing::warn!(queue = %shared.queue.name(), error = %e, retry_in = ?backoff, "consumer step failed; backing off");
                } else {
                    tracing::debug!(queue = %shared.queue.name(), error = %e, retry_in = ?backoff, failures, "consumer step failed again");
                }
                (Instant::now() + backoff, false)
            }
        };
        if at.claim && !on_slot && failures == 0 {
            continue;
        }
        tokio::select! {
            _ = stop.changed() => {}
            _ = tokio::time::sleep_until(until) => {}
            _ = shared.pool.done[shared.index].notified(), if on_slot => {}
            Some(due) = wakes.recv() => {
                let now = Instant::now();
                for due in std::iter::once(due).chain(std::iter::from_fn(|| wakes.try_recv().ok())) {
                    at.promote = at.promote.min(due);
                    // Due now: a retry or a due message; either way, look.
                    at.claim |= due <= now;
                }
            }
        }
    }
    // Claiming nothing deletes the receipt. Should it replay a request that
    // failed, the replayed deliveries see the stop and are handed back. It
    // expires on its own, so a Redis that does not answer only gets a moment.
    match tokio::time::timeout(Duration::from_secs(2), claim(&shared, 0)).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => tracing::debug!(error = %e, "could not delete the claim receipt; it expires on its own"),
        Err(_) => tracing::debug!("claim receipt not deleted in time; it expires on its own"),
    }
    while shared.in_flight.load(Ordering::Acquire) > 0 {
        shared.pool.done[shared.index].notified().await;
    }
    if let Some(renewer) = renewer {
        renewer.abort();
    }
    let (name, shard) = (shared.queue.name().to_string(), shared.index);
    drop(shared);
    let _ = acker.await;
    tracing::debug!(queue = %name, shard, "shard loop stopped");
}

/// One round: sweep when due, promote when something is due, claim what
/// fits. Returns true when claimable work waits for a free slot.
async fn step(shared: &Arc<Shared>, at: &mut Schedule) -> Result<bool, Error> {
    let config = &shared.queue.inner.config;
    let now = Instant::now();
    if now >= at.sweep {
        sweep(&shared.queue, &shared.keys).await?;
        at.sweep = now + config.fetch_interval;
        at.promote = now;
        at.claim = true;
    }
    if now >= at.promote {
        let (moved, next_due) = promote(&shared.queue, &shared.keys).await?;
        // Nothing pending: the next sweep looks again, or a wake-up comes first.
        at.promote = next_due.map_or(at.sweep, |d| now + d);
        at.claim |= moved > 0;
    }
    if !at.claim {
        return Ok(false);
    }
    let want = claim_capacity(shared);
    if want == 0 {
        return Ok(true);
    }
    let popped = claim(shared, want).await?;
    // A full batch means more may wait.
    at.claim = popped >= want;
    Ok(false)
}

/// Takes back timed-out deliveries and collects garbage, a bounded number of batches.
async fn sweep(queue: &DelayQueue, k: &Keys) -> Result<(), Error> {
    let inner = &queue.inner;
    let batch = inner.config.batch_size;
    let timeout = Timeout {
        limit: batch,
        default_retry_count: inner.config.default_retry_count,
        retention: inner.config.dead_retention,
    };
    for _ in 0..MAX_ROUNDS {
        let reply = queue.store(k).run(&timeout).await?;
        let (timed_out, buried) = (reply.count, reply.dead);
        let dead = buried.len() as u64;
        if timed_out > 0 {
            // The buried ones get a line each below.
            if timed_out > dead {
                tracing::warn!(
                    queue = %inner.name, count = timed_out - dead,
                    "deliveries exceeded max_consume_duration; redelivering"
                );
            }
            inner.meters.timed_out.increment(timed_out);
            inner.meters.retried.increment(timed_out - dead);
            inner.meters.dead.increment(dead);
            events::emit(&inner.events, || Event::TimedOut { count: timed_out, dead });
        }
        for (id, attempt) in buried {
            tracing::warn!(
                queue = %inner.name, %id, attempt, reason = "timeout",
                "delivery exceeded max_consume_duration and used up its deliveries; moved to the dead letters"
            );
            events::emit(&inner.events, || Event::Dead {
                id,
                attempt,
                reason: "timeout".into(),
            });
        }
        if timed_out < batch as u64 {
            break;
        }
    }
    let gc = Gc {
        limit: batch,
        retention: inner.config.dead_retention,
        max_kept: inner.config.dead_limit,
        ids: Vec::new(),
    };
    for _ in 0..MAX_ROUNDS {
        let collected = queue.store(k).run(&gc).await?;
        if collected > 0 {
            tracing::debug!(queue = %inner.name, collected, "dead letters past their retention deleted");
        }
        if collected < batch as u64 {
            break;
        }
    }
    Ok(())
}

/// Moves due messages to ready; returns how many moved and how long until
/// the next one is due.
async fn promote(queue: &DelayQueue, k: &Keys) -> Result<(usize, Option<Duration>), Error> {
    let inner = &queue.inner;
    let batch = inner.config.batch_size;
    let (mut total, mut wait) = (0, None);
    for _ in 0..MAX_ROUNDS {
        let reply = queue.store(k).run(&Promote { limit: batch }).await?;
        for late in &reply.late {
            inner.meters.lateness.record(late.as_secs_f64());
        }
        total += reply.moved as usize;
        wait = reply.next_due;
        if reply.moved < batch as u64 {
            break;
        }
    }
    Ok((total, wait))
}

/// How many messages to claim now: free slots, but no more than the
/// handlers can start before the visibility timeout, judged by how long
/// they have taken so far. A shard of several takes at most its share of
/// that (but enough to keep every handler busy), so a shard whose claims
/// happen to come first cannot crowd out the others.
fn claim_capacity(shared: &Shared) -> usize {
    let config = &shared.queue.inner.config;
    let pool = &shared.pool;
    let in_flight = pool.in_flight.load(Ordering::Acquire);
    let avg_us = pool.avg_handler_us.load(Ordering::Relaxed);
    let startable = match avg_us {
        0 => config.concurrency,
        avg => {
            (config.max_consume_duration.as_micros() as u64 / avg).saturating_mul(config.concurrency as u64) as usize
        }
    };
    let limit = startable.max(config.concurrency).min(config.fetch_limit);
    let share = limit.div_ceil(pool.done.len()).max(config.concurrency.min(limit));
    let mine = share.saturating_sub(shared.in_flight.load(Ordering::Acquire));
    // Acks that fall behind (Redis slower than the handlers) hold back
    // claims, or their leases would run out while they wait to be sent.
    let lagging = shared.acking.load(Ordering::Acquire).saturating_sub(acker::ACK_SLACK);
    limit
        .saturating_sub(in_flight + lagging)
        .min(mine)
        .min(config.batch_size)
        .min(MAX_CLAIM)
}

/// A finished delivery counted in its shard's `acking` until its ack is
/// sent (or given up).
struct Acking(Arc<Shared>);

impl Acking {
    fn new(shared: &Arc<Shared>) -> Self {
        shared.acking.fetch_add(1, Ordering::AcqRel);
        Acking(shared.clone())
    }
}

impl Drop for Acking {
    fn drop(&mut self) {
        self.0.acking.fetch_sub(1, Ordering::AcqRel);
        self.0.pool.done[self.0.index].notify_one();
    }
}

/// Claims up to `want` messages and starts a delivery task for each; returns how many ids were popped.
async fn claim(shared: &Arc<Shared>, want: usize) -> Result<usize, Error> {
    let inner = &shared.queue.inner;
    let claim = Claim {
        receipt: &shared.receipt,
        limit: want,
        visibility: inner.config.max_consume_duration,
        seq: shared.claims.load(Ordering::Relaxed),
        retention: inner.config.dead_retention,
    };
    let sent = Instant::now();
    // A failed request keeps its sequence number, so repeating it replays
    // whatever it leased if it did reach Redis.
    let reply = shared.queue.store(&shared.keys).eval(&claim).await?;
    shared.claims.fetch_add(1, Ordering::Relaxed);
    let reply = claim.reply(reply)?;
    let (popped, lease) = (reply.popped, reply.lease);
    // Redis ran the script after `sent`, so by this host's clock the lease
    // ends no earlier than this.
    let deadline = sent + reply.left;
    for id in reply.expired {
        tracing::warn!(
            queue = %inner.name, %id,
            "message expired (its expire_after passed, or its payload was gone) before delivery; moved to the dead letters"
        );
        inner.meters.expired.increment(1);
        events::emit(&inner.events, || Event::Expired { id });
    }
    for delivery in reply.deliveries {
        // One unreadable message must not cost its batch mates their
        // delivery: they are leased already, and nothing would replay them.
        let Some(msg) = delivery.message(lease) else {
            // The value's length only: it may hold a payload, and payloads are never logged.
            tracing::error!(
                queue = %inner.name, id = ?delivery.id, value_bytes = delivery.value.len(),
                attempt = delivery.attempt,
                "unreadable message (written by something else?); moving it to the dead letters"
            );
            if let Some(id) = delivery.id {
                let shared = shared.clone();
                let failure = Failure::new(Mode::Dead, Cause::Unreadable, "unreadable stored value".into());
                tokio::spawn(async move { nack(&shared, &id, 1, lease, deadline, failure).await });
            }
            continue;
        };
        shared.in_flight.fetch_add(1, Ordering::AcqRel);
        shared.pool.in_flight.fetch_add(1, Ordering::AcqRel);
        tokio::spawn(deliver(shared.clone(), msg, deadline));
    }
    Ok(popped as usize)
}

/// How much of its lease a delivery needs left to start its handler: a
/// quarter (a renewed lease reaches its first renewal with that), and
/// without renewals at least twice the recent handler time (up to half the
/// lease), so a handler is not started only to be cut at the lease's end.
fn least_lease_to_start(shared: &Shared) -> Duration {
    let config = &shared.queue.inner.config;
    let vis = config.max_consume_duration;
    let recent = Duration::from_micros(shared.pool.avg_handler_us.load(Ordering::Relaxed)) * 2;
    match config.renews_leases() {
        true => vis / 4,
        false => (vis / 4).max(recent.min(vis / 2)),
    }
}

/// Runs one delivery: waits for a worker permit, runs the handler within
/// its time limit (renewing the lease meanwhile when the limit is longer than
/// a lease), then acks or nacks. A delivery that cannot start with enough of
/// its lease left is handed back uncounted while the lease still holds, so
/// a wait for a slot never turns into a failed delivery.
async fn deliver(shared: Arc<Shared>, msg: Message, deadline: Instant) {
    let pool = &shared.pool;
    let give_up = deadline.checked_sub(least_lease_to_start(&shared)).unwrap_or(deadline);
    let permit = tokio::time::timeout_at(give_up, pool.workers.acquire()).await;
    let config = &shared.queue.inner.config;
    let (id, attempt, lease) = (msg.id.clone(), msg.attempt, msg.lease);
    let name = shared.queue.name().to_string();
    let left = deadline.saturating_duration_since(Instant::now());
    if *pool.stop.borrow() || permit.is_err() || left < least_lease_to_start(&shared) {
        tracing::debug!(queue = %name, %id, "handing back an unstarted delivery");
        nack(&shared, &id, attempt, lease, deadline, Failure::release()).await;
    } else {
        // Only a renewed lease can change while the handler runs.
        let renewed = config.renews_leases().then(|| Lease::new(id.clone(), lease, deadline));
        let renewing = renewed.as_ref().map(|l| shared.leases.renew(l));
        let limit = match renewed {
            Some(_) => config.handler_timeout(),
            None => left.min(config.handler_timeout()),
        };
        let backoff = msg.backoff.clone();
        tracing::trace!(queue = %name, %id, attempt, "delivering");
        shared.queue.inner.meters.delivered.increment(1);
        events::emit(&shared.queue.inner.events, || Event::Delivered {
            id: id.clone(),
            attempt,
        });
        // The handler's own logs carry the message they are about.
        let span = tracing::info_span!("delayqueue.handle", queue = %name, id = %id, attempt);
        let handled = AssertUnwindSafe(pool.handler.handle(msg))
            .catch_unwind()
            .instrument(span);
        let started = Instant::now();
        let outcome = tokio::time::timeout(limit, handled).await;
        record_duration(&shared, started.elapsed());
        drop(renewing);
        let (lease, deadline) = match renewed {
            Some(l) => {
                let held = l.finish(&shared.queue, &shared.keys).await;
                (held.lease, held.deadline)
            }
            None => (lease, deadline),
        };
        let failure = match outcome {
            Ok(Ok(Ok(()))) => {
                let _ = shared.acks.send(AckItem {
                    id: id.clone(),
                    lease,
                    deadline,
                    _acking: Box::new(Acking::new(&shared)),
                });
                None
            }
            Ok(Ok(Err(e))) => Some(Failure::from_error(e)),
            Ok(Err(panic)) => {
                let what = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                Some(Failure::new(Mode::Fail(None), Cause::Panic, format!("panic: {what}")))
            }
            // The configured limit, not the time measured, so that failures
            // of one cause share one reason.
            Err(_) => Some(Failure::new(
                Mode::Fail(None),
                Cause::TimeLimit,
                format!("handler timed out (limit {:?})", config.handler_timeout()),
            )),
        };
        if let Some(mut failure) = failure {
            shared.queue.inner.meters.nacked.increment(1);
            if let Mode::Fail(delay @ None) = &mut failure.mode {
                let backoff = backoff.as_ref().unwrap_or(&config.backoff);
                *delay = Some(backoff.delay(attempt));
            }
            nack(&shared, &id, attempt, lease, deadline, failure).await;
        }
    }
    drop(permit);
    shared.in_flight.fetch_sub(1, Ordering::AcqRel);
    pool.in_flight.fetch_sub(1, Ordering::AcqRel);
    // Any shard's loop may be waiting for a slot.
    for done in &pool.done {
        done.notify_one();
    }
}

fn record_duration(shared: &Shared, took: Duration) {
    shared.queue.inner.meters.handler_duration.record(took.as_secs_f64());
    let us = (took.as_micros() as u64).max(1);
    // A slowdown counts at once, a speed-up gradually: claims sized by fast
    // handlers would otherwise outlast their leases waiting for a slot.
    let _ = shared
        .pool
        .avg_handler_us
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |avg| {
            Some(if avg == 0 || us > avg { us } else { (avg * 7 + us) / 8 })
        });
}

/// Longest failure reason stored with a message, in bytes.
const MAX_REASON: usize = 1000;

/// Why and how a delivery ends without an ack.
struct Failure {
    mode: Mode,
    cause: Cause,
    reason: String,
}

/// What ended a delivery without an ack: the subject of its one log line,
/// which the nack writes once it knows the outcome.
#[derive(Clone, Copy, PartialEq)]
enum Cause {
    /// The handler returned an error.
    Error,
    /// The handler panicked: a bug, logged at ERROR.
    Panic,
    /// The handler ran past its time limit and was cancelled.
    TimeLimit,
    /// The claimed value was unreadable; the claim logged it at ERROR.
    Unreadable,
    /// The delivery never started; handing it back is routine.
    Unstarted,
}

impl Cause {
    fn describe(self) -> &'static str {
        match self {
            Cause::Error => "handler failed",
            Cause::Panic => "handler panicked",
            Cause::TimeLimit => "handler exceeded its time limit and was cancelled",
            Cause::Unreadable => "unreadable message",
            Cause::Unstarted => "unstarted delivery handed back",
        }
    }
}

enum Mode {
    /// The delivery failed and counts; retry after the delay (the backoff's
    /// when None).
    Fail(Option<Duration>),
    /// The delivery failed and retrying cannot help: dead at once.
    Dead,
    /// The delivery never started; it does not count.
    Release,
}

impl Failure {
    fn new(mode: Mode, cause: Cause, mut reason: String) -> Self {
        if reason.len() > MAX_REASON {
            let mut end = MAX_REASON;
            while !reason.is_char_boundary(end) {
                end -= 1;
            }
            reason.truncate(end);
        }
        Failure { mode, cause, reason }
    }

    fn release() -> Self {
        Failure::new(Mode::Release, Cause::Unstarted, String::new())
    }

    /// A handler's error; [`SkipRetry`] and [`RetryAfter`] steer the retry.
    fn from_error(e: HandlerError) -> Self {
        let mode = if e.is::<SkipRetry>() {
            Mode::Dead
        } else {
            Mode::Fail(e.downcast_ref::<RetryAfter>().map(|r| r.delay.min(crate::MAX_DELAY)))
        };
        Failure::new(mode, Cause::Error, e.to_string())
    }

    /// The one line about this failed delivery, once its `outcome` is
    /// known: ERROR for a panic, WARN for a failure, DEBUG for what needs
    /// no attention or was logged already.
    fn log(&self, queue: &str, id: &MessageId, attempt: u32, outcome: &str, retry_in: Option<Duration>) {
        let (what, reason) = (self.cause.describe(), &self.reason);
        let retry_in = retry_in.map(tracing::field::debug);
        match self.cause {
            Cause::Panic => tracing::error!(%queue, %id, attempt, %reason, retry_in, "{what}; {outcome}"),
            Cause::Error | Cause::TimeLimit => {
                tracing::warn!(%queue, %id, attempt, %reason, retry_in, "{what}; {outcome}")
            }
            Cause::Unreadable | Cause::Unstarted => {
                tracing::debug!(%queue, %id, attempt, %reason, retry_in, "{what}; {outcome}")
            }
        }
    }
}

/// Nacks one delivery, retrying on Redis errors while the lease lasts;
/// after that the visibility timeout takes the message back anyway.
async fn nack(shared: &Shared, id: &MessageId, attempt: u32, lease: i64, deadline: Instant, failure: Failure) {
    let inner = &shared.queue.inner;
    let op = Nack {
        id: id.as_str(),
        lease,
        mode: match failure.mode {
            Mode::Fail(delay) => NackMode::Fail {
                delay: delay.unwrap_or_default(),
            },
            Mode::Dead => NackMode::Dead,
            Mode::Release => NackMode::Release,
        },
        reason: &failure.reason,
        attempt,
        default_retry_count: inner.config.default_retry_count,
        retention: inner.config.dead_retention,
    };
    let mut backoff = Duration::from_millis(20);
    loop {
        match shared.queue.store(&shared.keys).run(&op).await {
            Ok(NackOutcome::LeaseLost) => {
                tracing::warn!(
                    queue = %inner.name, %id, attempt, reason = %failure.reason,
                    "{}, but its lease ran out before the nack; the message was already taken back",
                    failure.cause.describe()
                );
                inner.meters.lease_lost.increment(1);
                events::emit(&inner.events, || Event::LeaseLost { id: id.clone() });
                return;
            }
            Ok(NackOutcome::Dead) => {
                let outcome = match (failure.cause, &op.mode) {
                    (Cause::Unreadable, _) => "moved to the dead letters",
                    (_, NackMode::Dead) => "retrying cannot help; moved to the dead letters",
                    _ => "it used up its deliveries; moved to the dead letters",
                };
                failure.log(&inner.name, id, attempt, outcome, None);
                inner.meters.dead.increment(1);
                events::emit(&inner.events, || Event::Dead {
                    id: id.clone(),
                    attempt,
                    reason: failure.reason.clone(),
                });
                return;
            }
            Ok(NackOutcome::Retried) => {
                if let NackMode::Fail { delay } = op.mode {
                    failure.log(&inner.name, id, attempt, "retrying", Some(delay));
                    inner.meters.retried.increment(1);
                    events::emit(&inner.events, || Event::Failed {
                        id: id.clone(),
                        attempt,
                        reason: failure.reason.clone(),
                        retry_in: delay,
                    });
                }
                return;
            }
            // Only giving up is worth a warning: a retry that works changes nothing.
            Err(e) if Instant::now() + backoff < deadline => {
                tracing::debug!(queue = %inner.name, %id, error = %e, "nack failed; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
            }
            Err(e) => {
                tracing::warn!(
                    queue = %inner.name, %id, attempt, reason = %failure.reason, error = %e,
                    "{}; the nack failed until its lease ran out, so the visibility timeout will redeliver it",
                    failure.cause.describe()
                );
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Message;

    fn pool(shards: usize, concurrency: usize) -> Arc<Pool> {
        Arc::new(Pool {
            handler: Arc::new(|_m: Message| async { Ok::<(), HandlerError>(()) }),
            workers: Semaphore::new(concurrency),
            in_flight: AtomicUsize::new(0),
            done: (0..shards).map(|_| Notify::new()).collect(),
            // Fast handlers: fetch_limit, not the lease, bounds claims.
            avg_handler_us: AtomicU64::new(1),
            stop: watch::channel(false).1,
        })
    }

    /// An idle shard `index` of a consumer of `queue`; nothing is sent.
    fn shard(queue: &DelayQueue, pool: &Arc<Pool>, index: usize) -> Shared {
        Shared {
            queue: queue.clone(),
            keys: queue.inner.shards[index].clone(),
            index,
            pool: pool.clone(),
            in_flight: AtomicUsize::new(0),
            acking: AtomicUsize::new(0),
            receipt: String::new(),
            claims: AtomicU64::new(0),
            acks: mpsc::unbounded_channel().0,
            leases: Arc::new(Leases::default()),
        }
    }

    fn queue(shards: usize, fetch_limit: usize) -> DelayQueue {
        let client = fred::prelude::Builder::default_centralized().build().unwrap();
        DelayQueue::builder("q", client)
            .shards(shards)
            .concurrency(8)
            .fetch_limit(fetch_limit)
            .build()
            .unwrap()
    }

    #[test]
    fn a_shard_claims_its_share_of_what_is_free() {
        let (q, pool) = (queue(4, 256), pool(4, 8));
        let (a, b) = (shard(&q, &pool, 0), shard(&q, &pool, 1));
        assert_eq!(claim_capacity(&a), 64, "a quarter of fetch_limit");
        a.in_flight.store(60, Ordering::Release);
        pool.in_flight.store(250, Ordering::Release);
        assert_eq!(claim_capacity(&a), 4, "its share, less what it holds");
        assert_eq!(claim_capacity(&b), 6, "what is left of fetch_limit");
        pool.in_flight.store(200, Ordering::Release);
        assert_eq!(claim_capacity(&b), 56);
        // Acks waiting beyond the slack hold claims back one for one.
        b.acking.store(acker::ACK_SLACK + 3, Ordering::Release);
        assert_eq!(claim_capacity(&b), 53);
        b.acking.store(acker::ACK_SLACK, Ordering::Release);
        assert_eq!(claim_capacity(&b), 56);
    }

    #[test]
    fn one_claim_leases_at_most_max_claim_ids() {
        let (q, pool) = (queue(1, 1000), pool(1, 8));
        assert_eq!(claim_capacity(&shard(&q, &pool, 0)), MAX_CLAIM);
    }
}
