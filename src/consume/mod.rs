//! The consume runtime: moves due messages, claims them in batches, runs
//! the handler on each, and acks or nacks the outcome.
//!
//! It is given a [`Context`] (the client, each shard's keys, the
//! [`Settings`], metrics and events) and talks to Redis only through the
//! store's operations; it knows nothing of the queue handle. One loop task
//! per shard, a delivery task per claimed message, and per shard an ack
//! task and (when handlers outlive a lease) a renewal task; one wake-up
//! task for all shards. The loops of a sharded queue share the handlers
//! and `fetch_limit`, each claiming no more than its share while the
//! others have work. The files, one part each:
//!
//! - `mod.rs`: [`Consumer`], which starts the tasks and shuts them down;
//! - `context.rs`, `settings.rs`: what the queue handle gives a consumer;
//! - `state.rs`: what the tasks share: the handler pool, each shard's state;
//! - `shard_loop.rs`: one shard's loop and its schedule, and its shutdown;
//! - `sweep.rs`: timed-out deliveries back to retry, old dead letters deleted;
//! - `promote.rs`: due messages to ready;
//! - `claim.rs`: how many to claim now (`claim_capacity`), and the claim;
//! - `delivery.rs`: one delivery: slot, early hand-back, handler, time limit;
//! - `outcome.rs`: how a delivery ended, and how a failure is classified;
//! - `settle.rs`: an outcome turned into an ack, a nack or a hand-back;
//! - `acker.rs`: each shard's acks, coalesced into batches;
//! - `lease.rs`: lease renewal for handlers that outlive a lease;
//! - `wake.rs`: wake-ups from Redis pub/sub;
//! - `scheduler.rs`: the fires of the queue's schedules, sent ahead.

mod acker;
mod claim;
mod context;
mod delivery;
mod lease;
mod outcome;
mod promote;
mod scheduler;
mod settings;
mod settle;
mod shard_loop;
mod state;
mod sweep;
mod wake;

use std::sync::Arc;

use tokio::sync::watch;
use tokio::task::JoinHandle;

pub(crate) use context::Context;
pub use scheduler::Scheduler;
pub(crate) use scheduler::PAGE as SCHEDULE_PAGE;
pub(crate) use settings::{Settings, DEFAULT_FETCH_LIMIT, DEFAULT_FETCH_PER_HANDLER};

use crate::{Error, Handler, MessageId};
use lease::Leases;
use state::{Pool, Shared};

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
    /// The loop of each shard, then the wake-up task and the scheduler.
    tasks: Vec<JoinHandle<()>>,
    /// The queue's name, for logs.
    name: String,
}

impl Consumer {
    /// Starts consuming the queue `ctx` describes with `handler`.
    pub(crate) async fn start(ctx: Context, handler: Arc<dyn Handler>) -> Self {
        let ctx = Arc::new(ctx);
        let (stop, stop_rx) = watch::channel(false);
        let shards = &ctx.shards;
        let channels = shards.iter().map(|k| k.wake.clone()).collect();
        let (wakes, waker) = wake::spawn(&ctx.client, channels, stop_rx.clone()).await;
        let me = MessageId::generate();
        let scheduler = tokio::spawn(scheduler::run(ctx.clone(), stop_rx.clone()));
        let pool = Arc::new(Pool::new(handler, ctx.settings.concurrency, shards.len(), stop_rx));
        let mut tasks: Vec<JoinHandle<()>> = shards
            .iter()
            .zip(wakes)
            .enumerate()
            .map(|(index, (keys, wakes))| {
                let (acks, acker) = acker::spawn(ctx.clone(), keys.clone());
                let leases = Arc::new(Leases::default());
                let renewer = ctx
                    .settings
                    .renews_leases()
                    .then(|| lease::spawn(ctx.clone(), keys.clone(), leases.clone()));
                let shared = Arc::new(Shared {
                    ctx: ctx.clone(),
                    claim_key: keys.claim(me.as_str()),
                    keys: keys.clone(),
                    index,
                    pool: pool.clone(),
                    in_flight: Default::default(),
                    acking: Default::default(),
                    claims: Default::default(),
                    paused: Default::default(),
                    acks,
                    leases,
                });
                tokio::spawn(shard_loop::run(shared, acker, wakes, renewer))
            })
            .collect();
        tasks.push(waker);
        tasks.push(scheduler);
        match shards.len() {
            1 => tracing::info!(queue = %ctx.name, "consumer started"),
            n => tracing::info!(queue = %ctx.name, shards = n, "consumer started"),
        }
        Consumer {
            stop,
            tasks,
            name: ctx.name.clone(),
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
