//! What the parts of a running consumer share: the [`Pool`] of handlers
//! every shard's loop uses, and each shard's own [`Shared`] state, which
//! its loop and its delivery tasks hold.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use tokio::sync::{mpsc, watch, AcquireError, Notify, OwnedSemaphorePermit, Semaphore};

use super::acker::AckItem;
use super::context::Context;
use super::lease::Leases;
use super::scheduler::Kicks;
use crate::store::{Keys, Shard};
use crate::Handler;

/// What the loops of every queue and shard a consumer reads share: the
/// handler slots and their limits.
pub(crate) struct Pool {
    /// One permit per handler that may run at once; taken through [`Pool::slot`].
    workers: Arc<Semaphore>,
    /// Messages claimed and not finished, over all loops.
    pub in_flight: AtomicUsize,
    /// One per loop, each signalled whenever any delivery finishes.
    pub done: Vec<Notify>,
    /// One per queue, in the consumer's order.
    pub lanes: Vec<Lane>,
    /// Whether a queue claims only while no queue before it has work
    /// waiting; else each queue's part of the limit is by its weight.
    pub strict: bool,
    /// Moving average of handler run time, 0 until the first one ends.
    avg_handler_us: AtomicU64,
    pub stop: watch::Receiver<bool>,
}

/// What the pool knows of one queue.
pub(crate) struct Lane {
    pub weight: u64,
    /// Its loops whose last look found messages waiting to be claimed.
    pub waiting: AtomicUsize,
    /// Its messages claimed and not finished.
    pub in_flight: AtomicUsize,
}

impl Lane {
    /// A queue of `weight` read by `loops` loops, each of which starts out
    /// looking for work.
    pub(crate) fn new(weight: u64, loops: usize) -> Self {
        Lane {
            weight,
            waiting: AtomicUsize::new(loops),
            in_flight: AtomicUsize::new(0),
        }
    }
}

impl Pool {
    pub(crate) fn new(
        concurrency: usize,
        loops: usize,
        lanes: Vec<Lane>,
        strict: bool,
        stop: watch::Receiver<bool>,
    ) -> Self {
        Pool {
            workers: Arc::new(Semaphore::new(concurrency)),
            in_flight: AtomicUsize::new(0),
            done: (0..loops).map(|_| Notify::new()).collect(),
            lanes,
            strict,
            avg_handler_us: AtomicU64::new(0),
            stop,
        }
    }

    /// Queue `lane`'s part of the claim limit, as (its weight, the weight
    /// of every queue with work waiting, its own included): all of it for
    /// a consumer of one queue; nothing under strict order while a queue
    /// before it has work waiting.
    pub(crate) fn part(&self, lane: usize) -> (u64, u64) {
        let waits = |l: &Lane| l.waiting.load(Ordering::Acquire) > 0;
        if self.strict {
            let first = self.lanes[..lane].iter().any(waits);
            return (u64::from(!first), 1);
        }
        let others: u64 = (self.lanes.iter().enumerate())
            .filter(|&(i, l)| i != lane && waits(l))
            .map(|(_, l)| l.weight)
            .sum();
        let mine = self.lanes[lane].weight;
        (mine, mine + others)
    }

    /// Wakes every loop: the parts of the limit have changed.
    pub(crate) fn wake_all(&self) {
        for done in &self.done {
            done.notify_one();
        }
    }

    /// A place in line for a handler slot, taken now. The semaphore grants
    /// permits in the order its waiters first polled, and the first poll
    /// happens here, so slots go in the order of these calls (claim order),
    /// whichever delivery task the runtime happens to run first.
    pub(crate) fn slot(&self) -> Slot {
        // Unconstrained: a claim that used up its task's coop budget must
        // still join the line on this poll, not merely be told to yield.
        let mut acquire: Acquiring = Box::pin(tokio::task::unconstrained(self.workers.clone().acquire_owned()));
        // Takes a free permit, or joins the wait list with a no-op waker
        // that the delivery task's first poll replaces.
        match acquire.as_mut().now_or_never() {
            Some(permit) => Slot::Taken(permit),
            None => Slot::Waiting(acquire),
        }
    }

    /// The recent handler run time in microseconds; 0 before the first run ends.
    pub(crate) fn avg_handler_us(&self) -> u64 {
        self.avg_handler_us.load(Ordering::Relaxed)
    }

    /// Counts one handler run that `took` into the average.
    pub(crate) fn record_handler_time(&self, took: Duration) {
        let us = (took.as_micros() as u64).max(1);
        let _ = self
            .avg_handler_us
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |avg| Some(next_average(avg, us)));
    }
}

type Acquiring = Pin<Box<dyn Future<Output = Result<OwnedSemaphorePermit, AcquireError>> + Send>>;

/// A delivery's place in line for a handler slot ([`Pool::slot`]).
/// Dropping it gives up the place, or the slot once taken.
pub(crate) enum Slot {
    /// Taken at once: a permit was free.
    Taken(Result<OwnedSemaphorePermit, AcquireError>),
    /// In the semaphore's wait list.
    Waiting(Acquiring),
}

impl Slot {
    /// The handler slot, once every place ahead in line has taken or given up its own.
    pub(crate) async fn acquired(self) -> Result<OwnedSemaphorePermit, AcquireError> {
        match self {
            Slot::Taken(permit) => permit,
            Slot::Waiting(acquire) => acquire.await,
        }
    }
}

/// The handler-time average after a run of `us` microseconds. A slowdown
/// counts at once, a speed-up gradually: claims sized by fast handlers
/// would otherwise outlast their leases waiting for a slot.
fn next_average(avg: u64, us: u64) -> u64 {
    if avg == 0 || us > avg {
        us
    } else {
        (avg * 7 + us) / 8
    }
}

/// State of one loop (a shard of a queue), shared with its delivery tasks.
pub(crate) struct Shared {
    pub ctx: Arc<Context>,
    /// The handler of this loop's queue.
    pub handler: Arc<dyn Handler>,
    /// The keys of this loop's shard.
    pub keys: Keys,
    /// This loop's number; it waits on `pool.done[index]`.
    pub index: usize,
    /// The number of its queue: `pool.lanes[lane]`.
    pub lane: usize,
    /// The number of its shard in the queue.
    pub shard: usize,
    /// Its queue's scheduler, told when the shard has schedules.
    pub schedules: Arc<Kicks>,
    pub pool: Arc<Pool>,
    /// Messages of this shard claimed and not finished.
    pub in_flight: AtomicUsize,
    /// Finished deliveries of this shard whose ack has not been sent yet.
    pub acking: AtomicUsize,
    /// Key of this consumer's claim receipt.
    pub claim_key: String,
    /// Claim requests answered so far; numbers each request for its receipt.
    pub claims: AtomicU64,
    /// Whether the last claim found the queue paused.
    pub paused: AtomicBool,
    pub acks: mpsc::UnboundedSender<AckItem>,
    /// Leases of running handlers, renewed when handlers outlive a lease.
    pub leases: Arc<Leases>,
}

impl Shared {
    /// The store handle of this shard.
    pub(crate) fn store(&self) -> Shard<'_> {
        self.ctx.store(&self.keys)
    }

    /// The queue's name, for logs.
    pub(crate) fn name(&self) -> &str {
        &self.ctx.name
    }

    /// Tells the pool whether this loop has work waiting to be claimed
    /// (`now`), when that changed since `was`; returns `now`. When it has
    /// none left, the other queues' parts grow: their loops are woken.
    pub(crate) fn publish_waiting(&self, was: bool, now: bool) -> bool {
        if was == now {
            return now;
        }
        let lane = &self.pool.lanes[self.lane];
        if now {
            lane.waiting.fetch_add(1, Ordering::AcqRel);
        } else if lane.waiting.fetch_sub(1, Ordering::AcqRel) == 1 && self.pool.lanes.len() > 1 {
            self.pool.wake_all();
        }
        now
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(concurrency: usize) -> Pool {
        Pool::new(concurrency, 1, vec![Lane::new(1, 1)], false, watch::channel(false).1)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn slots_go_in_the_order_they_were_taken_whichever_task_runs_first() {
        let pool = pool(1);
        let first = pool.slot();
        assert!(matches!(first, Slot::Taken(Ok(_))), "a free permit is taken at once");
        let waiting: Vec<_> = (1..=20).map(|n| (n, pool.slot())).collect();
        assert!(waiting.iter().all(|(_, s)| matches!(s, Slot::Waiting(_))));
        let (log, mut done) = mpsc::unbounded_channel();
        // Spawned last first, each holding its slot for a moment.
        for (n, slot) in waiting.into_iter().rev() {
            let log = log.clone();
            tokio::spawn(async move {
                let _permit = slot.acquired().await.unwrap();
                log.send(n).unwrap();
                tokio::task::yield_now().await;
            });
        }
        drop(first);
        let mut got = Vec::new();
        while got.len() < 20 {
            let next = tokio::time::timeout(Duration::from_secs(30), done.recv()).await;
            got.push(next.expect("a slot within 30 s").unwrap());
        }
        assert_eq!(got, (1..=20).collect::<Vec<_>>());
    }

    #[tokio::test]
    async fn a_slot_given_up_passes_its_place_on_and_a_task_out_of_budget_still_takes_free_ones() {
        let pool = pool(300);
        let slots: Vec<_> = (0..300).map(|_| pool.slot()).collect();
        assert!(slots.iter().all(|s| matches!(s, Slot::Taken(Ok(_)))));
        assert_eq!(pool.workers.available_permits(), 0);
        let queued = pool.slot();
        let behind = pool.slot();
        drop(queued);
        drop(slots);
        let permit = tokio::time::timeout(Duration::from_secs(30), behind.acquired()).await;
        assert!(permit.expect("the place given up is passed on").is_ok());
    }

    #[test]
    fn a_queues_part_is_by_weight_among_those_waiting_or_by_order() {
        let lanes = |strict| {
            let stop = watch::channel(false).1;
            Pool::new(
                1,
                3,
                vec![Lane::new(6, 1), Lane::new(3, 1), Lane::new(1, 1)],
                strict,
                stop,
            )
        };
        let weighted = lanes(false);
        assert_eq!(weighted.part(0), (6, 10));
        assert_eq!(weighted.part(2), (1, 10));
        weighted.lanes[1].waiting.store(0, Ordering::Release);
        assert_eq!(weighted.part(0), (6, 7), "a queue without work leaves its part");
        assert_eq!(weighted.part(1), (3, 10), "the one asking counts itself");
        let strict = lanes(true);
        assert_eq!(strict.part(0), (1, 1));
        assert_eq!(strict.part(2), (0, 1), "queues before it have work");
        strict.lanes[0].waiting.store(0, Ordering::Release);
        strict.lanes[1].waiting.store(0, Ordering::Release);
        assert_eq!(strict.part(2), (1, 1));
    }

    #[test]
    fn the_handler_time_average_rises_at_once_and_falls_gradually() {
        assert_eq!(next_average(0, 800), 800, "the first run sets it");
        assert_eq!(next_average(800, 1600), 1600, "a slowdown counts at once");
        assert_eq!(next_average(1600, 800), 1500, "a speed-up an eighth at a time");
        assert_eq!(next_average(8, 8), 8);
        let pool = pool(1);
        assert_eq!(pool.avg_handler_us(), 0);
        pool.record_handler_time(Duration::ZERO);
        assert_eq!(pool.avg_handler_us(), 1, "never 0 once a run has ended");
        pool.record_handler_time(Duration::from_millis(2));
        assert_eq!(pool.avg_handler_us(), 2000);
    }
}
