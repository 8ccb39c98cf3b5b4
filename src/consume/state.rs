//! What the parts of a running consumer share: the [`Pool`] of handlers
//! every shard's loop uses, and each shard's own [`Shared`] state, which
//! its loop and its delivery tasks hold.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch, Notify, Semaphore};

use super::acker::AckItem;
use super::context::Context;
use super::lease::Leases;
use crate::store::{Keys, Shard};
use crate::Handler;

/// What the loops of every shard share: the handlers and their limits.
pub(crate) struct Pool {
    pub handler: Arc<dyn Handler>,
    /// One permit per handler that may run at once.
    pub workers: Semaphore,
    /// Messages claimed and not finished, over all shards.
    pub in_flight: AtomicUsize,
    /// One per shard loop, each signalled whenever any delivery finishes.
    pub done: Vec<Notify>,
    /// Moving average of handler run time, 0 until the first one ends.
    avg_handler_us: AtomicU64,
    pub stop: watch::Receiver<bool>,
}

impl Pool {
    pub(crate) fn new(
        handler: Arc<dyn Handler>,
        concurrency: usize,
        shards: usize,
        stop: watch::Receiver<bool>,
    ) -> Self {
        Pool {
            handler,
            workers: Semaphore::new(concurrency),
            in_flight: AtomicUsize::new(0),
            done: (0..shards).map(|_| Notify::new()).collect(),
            avg_handler_us: AtomicU64::new(0),
            stop,
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

/// State of one shard's loop, shared with its delivery tasks.
pub(crate) struct Shared {
    pub ctx: Arc<Context>,
    /// The keys of this loop's shard.
    pub keys: Keys,
    /// This shard's number; its loop waits on `pool.done[index]`.
    pub index: usize,
    pub pool: Arc<Pool>,
    /// Messages of this shard claimed and not finished.
    pub in_flight: AtomicUsize,
    /// Finished deliveries of this shard whose ack has not been sent yet.
    pub acking: AtomicUsize,
    /// Key of this consumer's claim receipt.
    pub receipt: String,
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_handler_time_average_rises_at_once_and_falls_gradually() {
        assert_eq!(next_average(0, 800), 800, "the first run sets it");
        assert_eq!(next_average(800, 1600), 1600, "a slowdown counts at once");
        assert_eq!(next_average(1600, 800), 1500, "a speed-up an eighth at a time");
        assert_eq!(next_average(8, 8), 8);
        let pool = Pool::new(
            Arc::new(|_m: crate::Message| async { Ok::<(), crate::HandlerError>(()) }),
            1,
            1,
            watch::channel(false).1,
        );
        assert_eq!(pool.avg_handler_us(), 0);
        pool.record_handler_time(Duration::ZERO);
        assert_eq!(pool.avg_handler_us(), 1, "never 0 once a run has ended");
        pool.record_handler_time(Duration::from_millis(2));
        assert_eq!(pool.avg_handler_us(), 2000);
    }
}
