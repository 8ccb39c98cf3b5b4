//! The consume runtime: moves due messages, claims them in batches, runs
//! the handlers, and acks or nacks the outcomes.
//!
//! It is given, per queue, a [`Context`] (the client, each shard's keys,
//! the [`Settings`], metrics and events), a handler and a weight, and
//! talks to Redis only through the store's operations; it knows nothing
//! of the queue handle. One runtime serves one queue
//! (`DelayQueue::start_consume`) or several (`Worker`): one loop task per
//! queue and shard, a delivery task per claimed message, per loop an ack
//! task, a relay task, a notes task and (when handlers outlive a lease) a
//! renewal task, per queue a scheduler task, and one wake-up connection
//! per client for all of them.
//! The loops share the handler slots and `fetch_limit`, each claiming no
//! more than its queue's part (by weight or order) and its shard's share
//! of that while the others have work. The ack, relay, notes and
//! scheduler tasks start when first needed, so an idle queue holds its
//! loop task alone. The files, one part each:
//!
//! - `mod.rs`: [`Consumer`], which starts the tasks and shuts them down;
//! - `context.rs`, `settings.rs`: what the queue handle gives a consumer;
//! - `state.rs`: what the tasks share: the pool and its lanes, each loop's state;
//! - `shard_loop.rs`: one loop, its probe and schedule, and its shutdown;
//! - `sweep.rs`: timed-out deliveries back to retry, old dead letters deleted;
//! - `promote.rs`: due messages to ready;
//! - `claim.rs`: how many to claim now (`claim_capacity`), and the claim;
//! - `delivery.rs`: one delivery: slot, early hand-back, handler, time limit;
//! - `outcome.rs`: how a delivery ended, and how a failure is classified;
//! - `settle.rs`: an outcome turned into an ack, a nack or a hand-back;
//! - `batcher.rs`: script calls coalesced from many callers' items;
//! - `acker.rs`: each loop's acks, coalesced into batches, and its relay;
//! - `lease.rs`: lease renewal for handlers that outlive a lease;
//! - `aborts.rs`: aborts reaching running handlers (their tokens by id);
//! - `scribe.rs`: a delivery's progress and log lines, through its shard;
//! - `notary.rs`: the shard's notes task, sending them in batches;
//! - `wake.rs`: wake-ups from Redis pub/sub, one connection per client;
//! - `scheduler.rs`: the fires of the queue's schedules, sent ahead.

mod aborts;
mod acker;
mod batcher;
mod claim;
mod context;
mod delivery;
mod heartbeat;
mod lease;
mod notary;
pub(crate) mod outcome;
mod promote;
mod scheduler;
mod scribe;
pub(crate) mod settings;
mod settle;
mod shard_loop;
mod state;
mod sweep;
pub(crate) mod wake;

use std::sync::Arc;

use tokio::sync::watch;
use tokio::task::JoinHandle;

pub(crate) use context::Context;
pub use scheduler::Scheduler;
pub(crate) use scheduler::PAGE as SCHEDULE_PAGE;
pub(crate) use settings::{default_fetch_limit, Settings};

use crate::{Error, Handler, MessageId};
use lease::Leases;
use scheduler::Kicks;
use state::{Lane, Pool, Shared};

/// A running consumer of one queue ([`DelayQueue::start_consume`](crate::DelayQueue::start_consume))
/// or of several ([`Worker::start`](crate::Worker::start)). Stop it with
/// [`shutdown`](Consumer::shutdown).
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
    /// The loop of each queue and shard.
    tasks: Vec<JoinHandle<()>>,
    /// Each queue's scheduler, started at its first kick.
    schedulers: Vec<Arc<Kicks>>,
    /// Each queue's place in its client's wake-up hub.
    listening: Vec<wake::Wakes>,
    /// The queue's name, or how many queues, for logs.
    name: String,
    /// Its place in the process's entry of live consumers.
    heart: Option<heartbeat::Membership>,
}

/// One queue a consumer reads: its context, its handler, its weight.
pub(crate) struct Member {
    pub ctx: Context,
    pub handler: Arc<dyn Handler>,
    pub weight: u64,
}

impl Consumer {
    /// Starts consuming the queues of `members`, in that order (the order
    /// strict priority follows), all sharing the handler slots of the
    /// first's settings (`concurrency`, `fetch_limit`: a [`Worker`] sets
    /// the same in each).
    pub(crate) async fn start(members: Vec<Member>, strict: bool) -> Self {
        let (stop, stop_rx) = watch::channel(false);
        let me = MessageId::generate();
        let concurrency = members.first().map_or(1, |m| m.ctx.settings.concurrency);
        let lanes = members
            .iter()
            .map(|m| Lane::new(m.weight, m.ctx.shards.len()))
            .collect();
        let loops = members.iter().map(|m| m.ctx.shards.len()).sum();
        let pool = Arc::new(Pool::new(concurrency, loops, lanes, strict, stop_rx.clone()));
        let heart = start_heart(&members, &pool, strict);
        let mut tasks = Vec::new();
        let mut schedulers = Vec::new();
        let mut listening = Vec::new();
        let mut names = Vec::new();
        let mut loops_started = 0;
        for (lane, Member { ctx, handler, .. }) in members.into_iter().enumerate() {
            let ctx = Arc::new(ctx);
            let channels = ctx.shards.iter().map(|k| k.wake.clone()).collect();
            let (bells, listener) = wake::listen(&ctx.client, channels).await;
            listening.push(listener);
            let kicks = Arc::new(Kicks::new(ctx.clone(), stop_rx.clone()));
            schedulers.push(kicks.clone());
            for (shard, (keys, bell)) in ctx.shards.iter().zip(bells).enumerate() {
                let leases = Arc::new(Leases::default());
                let renewer = ctx
                    .settings
                    .renews_leases()
                    .then(|| lease::spawn(ctx.clone(), shard, leases.clone()));
                let shared = Arc::new(Shared {
                    ctx: ctx.clone(),
                    handler: handler.clone(),
                    claim_key: keys.claim(me.as_str()),
                    index: loops_started,
                    lane,
                    shard,
                    schedules: kicks.clone(),
                    pool: pool.clone(),
                    in_flight: Default::default(),
                    acking: Default::default(),
                    claims: Default::default(),
                    handing: Default::default(),
                    paused: Default::default(),
                    bell,
                    writers: Default::default(),
                    leases,
                });
                tasks.push(tokio::spawn(shard_loop::run(shared, renewer)));
                loops_started += 1;
            }
            match ctx.shards.len() {
                1 => tracing::info!(queue = %ctx.name, "consumer started"),
                n => tracing::info!(queue = %ctx.name, shards = n, "consumer started"),
            }
            names.push(ctx.name.clone());
        }
        Consumer {
            stop,
            tasks,
            schedulers,
            listening,
            name: match &names[..] {
                [one] => one.clone(),
                all => format!("{} queues", all.len()),
            },
            heart,
        }
    }

    /// Stops gracefully: claims nothing more, lets running handlers finish
    /// (each within its `handler_timeout`), acks or nacks them, hands
    /// claimed-but-unstarted messages back without counting a delivery, and
    /// returns once nothing is left claimed by this consumer.
    pub async fn shutdown(mut self) -> Result<(), Error> {
        let _ = self.stop.send(true);
        // The loops first: a probe may start a scheduler until they end.
        let loops = std::mem::take(&mut self.tasks);
        let schedulers = std::mem::take(&mut self.schedulers);
        for task in loops.into_iter().chain(schedulers.iter().filter_map(|k| k.started())) {
            task.await
                .map_err(|e| Error::Internal(format!("consumer task failed: {e}")))?;
        }
        self.listening.clear();
        if let Some(heart) = self.heart.take() {
            heart.leave().await;
        }
        tracing::info!(queue = %self.name, "consumer stopped");
        Ok(())
    }
}

/// The place of the consumer of `members` in its process's entry of live
/// consumers (lua/heartbeat.lua).
fn start_heart(members: &[Member], pool: &Pool, strict: bool) -> Option<heartbeat::Membership> {
    let first = &members.first()?.ctx;
    let part = heartbeat::Part {
        queues: members.iter().map(|m| heartbeat::consumed(&m.ctx, m.weight)).collect(),
        concurrency: first.settings.concurrency,
        strict,
        every: first.settings.heartbeat,
        running: pool.running.clone(),
    };
    heartbeat::join(first, part)
}

impl Drop for Consumer {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}
