//! The scheduler: keeps the schedules of a queue's shards fed, so that
//! each schedule's next fire is always stored ahead as a pending message.
//! Every consumer runs one per queue, started by the first probe that
//! finds schedules, which reads a shard's schedules only when the shard's
//! probe found it has some ([`Kicks`]);
//! [`Scheduler`] runs one without consuming, which reads every tick.
//!
//! Any number of them may run: each fire is sent by `fire.lua`, which
//! moves the schedule's cursor past it in the same step and refuses a fire
//! at or before the cursor, so no fire is sent twice and none needs a
//! leader. Once per tick (the queue's `fetch_interval`) each shard's due
//! schedules are read (`read_schedules.lua`, pages of [`PAGE`]) and every fire
//! up to now + the horizon is sent, planned [`STEPS`] at a time.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;

use super::Context;
use crate::events::{self, Event};
use crate::schedule::{self, Step, Timing};
use crate::store::ops::fire::{Fire, Fired};
use crate::store::ops::read_schedules::{ReadSchedules, StoredSchedule, Which};
use crate::store::Keys;
use crate::{Error, MessageId};

/// Schedules read per script call.
pub(crate) const PAGE: usize = 100;
/// Fires planned at a time: [`feed`] plans and sends rounds of them until
/// the plan reaches the horizon.
const STEPS: usize = 64;

/// How far ahead of now fires are stored: two ticks and a margin, so a
/// tick that comes late still finds the next fires pending.
pub(crate) fn horizon(tick: Duration) -> Duration {
    2 * tick + Duration::from_millis(500)
}

/// A running scheduler without a consumer, for processes that only
/// produce: from [`DelayQueue::run_schedules`](crate::DelayQueue::run_schedules).
/// A consumer runs one of its own. Dropping it stops it.
#[derive(Debug)]
#[must_use = "dropping a Scheduler stops it"]
pub struct Scheduler {
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
}

impl Scheduler {
    pub(crate) fn start(ctx: Context) -> Self {
        let (stop, stop_rx) = watch::channel(false);
        let task = tokio::spawn(run(Arc::new(ctx), Trigger::Tick, stop_rx));
        Scheduler { stop, task: Some(task) }
    }

    /// Stops it, after the tick under way.
    pub async fn shutdown(mut self) -> Result<(), Error> {
        let _ = self.stop.send(true);
        if let Some(task) = self.task.take() {
            task.await
                .map_err(|e| Error::Internal(format!("scheduler task failed: {e}")))?;
        }
        Ok(())
    }
}

impl Drop for Scheduler {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

/// The shards of a queue whose probe found schedules, for the consumer's
/// scheduler to read: a shard without schedules costs it nothing, and a
/// queue without any holds no scheduler task.
pub(crate) struct Kicks {
    wanted: Vec<AtomicBool>,
    notify: Notify,
    task: Mutex<Task>,
}

impl std::fmt::Debug for Kicks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kicks").field("shards", &self.wanted.len()).finish()
    }
}

/// A consumer's scheduler task: what it needs until started, then the task.
struct Task {
    unstarted: Option<(Arc<Context>, watch::Receiver<bool>)>,
    started: Option<JoinHandle<()>>,
}

impl Kicks {
    /// For the queue of `ctx`, its scheduler to run until `stop` says so.
    pub(crate) fn new(ctx: Arc<Context>, stop: watch::Receiver<bool>) -> Self {
        Kicks {
            wanted: (0..ctx.shards.len()).map(|_| AtomicBool::new(false)).collect(),
            notify: Notify::new(),
            task: Mutex::new(Task {
                unstarted: Some((ctx, stop)),
                started: None,
            }),
        }
    }

    /// Asks for one pass over `shard`'s schedules, starting the scheduler
    /// task at the first.
    pub(crate) fn kick(self: &Arc<Self>, shard: usize) {
        self.wanted[shard].store(true, Ordering::Release);
        self.notify.notify_one();
        let mut task = self.task.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((ctx, stop)) = task.unstarted.take() {
            task.started = Some(tokio::spawn(run(ctx, Trigger::Kicked(self.clone()), stop)));
        }
    }

    /// The scheduler task, if one was started (once: its waiter takes it).
    pub(crate) fn started(&self) -> Option<JoinHandle<()>> {
        self.task.lock().unwrap_or_else(|e| e.into_inner()).started.take()
    }
}

/// What starts a scheduler's pass.
pub(crate) enum Trigger {
    /// Every `fetch_interval`, over every shard.
    Tick,
    /// Each kick, over the shards kicked.
    Kicked(Arc<Kicks>),
}

/// Runs passes until `stop` says so.
pub(crate) async fn run(ctx: Arc<Context>, trigger: Trigger, mut stop: watch::Receiver<bool>) {
    let every = ctx.settings.fetch_interval;
    let mut failing = false;
    while !*stop.borrow() {
        // Boxed, so that the waiting task does not hold a pass's state.
        let pass = match &trigger {
            Trigger::Tick => Box::pin(tick(&ctx, horizon(every))).await,
            Trigger::Kicked(kicks) => Box::pin(kicked(&ctx, kicks, horizon(every))).await,
        };
        match pass {
            Ok(_) if failing => {
                tracing::info!(queue = %ctx.name, "scheduler reaches Redis again");
                failing = false;
            }
            Ok(_) => {}
            Err(e) if !failing => {
                tracing::warn!(queue = %ctx.name, error = %e, "scheduler tick failed; trying every fetch_interval");
                failing = true;
            }
            Err(e) => tracing::debug!(queue = %ctx.name, error = %e, "scheduler tick failed"),
        }
        match &trigger {
            Trigger::Tick => tokio::select! {
                _ = stop.changed() => {}
                _ = tokio::time::sleep(every) => {}
            },
            Trigger::Kicked(kicks) => tokio::select! {
                _ = stop.changed() => {}
                _ = kicks.notify.notified() => {}
            },
        }
    }
}

/// One pass over the shards kicked since the last; returns the fires it sent.
async fn kicked(ctx: &Context, kicks: &Kicks, horizon: Duration) -> Result<u64, Error> {
    let mut sent = 0;
    for (keys, wanted) in ctx.shards.iter().zip(&kicks.wanted) {
        if wanted.swap(false, Ordering::AcqRel) {
            sent += tick_shard(ctx, keys, horizon).await?;
        }
    }
    Ok(sent)
}

/// One pass over every shard; returns the fires this pass sent.
pub(crate) async fn tick(ctx: &Context, horizon: Duration) -> Result<u64, Error> {
    let mut sent = 0;
    for keys in ctx.shards.iter() {
        sent += tick_shard(ctx, keys, horizon).await?;
    }
    Ok(sent)
}

async fn tick_shard(ctx: &Context, keys: &Keys, horizon: Duration) -> Result<u64, Error> {
    let store = ctx.store(keys);
    let mut sent = 0;
    let mut after = None;
    // A schedule whose fires moved its cursor past the page's end, still
    // within the horizon, is read again further on (with nothing left to
    // send, mostly): twice the pages of the most schedules a shard holds.
    for _ in 0..2 * schedule::MAX_SCHEDULES.div_ceil(PAGE) {
        let read = store
            .run(&ReadSchedules {
                which: Which::Page {
                    horizon: Some(horizon),
                    after: after.as_ref(),
                    limit: PAGE,
                },
            })
            .await?;
        for s in &read.schedules {
            sent += feed(ctx, keys, s, read.now_ms, horizon).await?;
        }
        if read.schedules.len() < PAGE {
            break;
        }
        after = read.schedules.into_iter().last();
    }
    Ok(sent)
}

/// Sends the fires schedule `s` needs now; returns how many it sent.
async fn feed(ctx: &Context, keys: &Keys, s: &StoredSchedule, now_ms: i64, horizon: Duration) -> Result<u64, Error> {
    let (Some(mut cursor), Some(timing), Some(version)) = (s.cursor, timing_of(ctx, s), s.text("version")) else {
        return Ok(0);
    };
    let horizon_ms = horizon.as_millis() as i64;
    let mut sent = 0;
    for _ in 0..timing.most_fires(horizon_ms).div_ceil(STEPS) {
        let steps = schedule::plan(&timing, cursor, now_ms, horizon_ms, STEPS);
        for step in &steps {
            match fire(ctx, keys, s, version, step).await? {
                Some(true) => sent += 1,
                Some(false) => {}
                // Another scheduler was first, or the schedule changed: read it again next tick.
                None => return Ok(sent),
            }
            cursor = step.cursor_ms;
        }
        if steps.len() < STEPS {
            break;
        }
    }
    Ok(sent)
}

/// Sends the fire `step` of `s` planned from `version`: `Some(true)` when
/// it was sent, `Some(false)` when it was skipped (logged), `None` when the
/// plan no longer holds.
async fn fire(
    ctx: &Context,
    keys: &Keys,
    s: &StoredSchedule,
    version: &str,
    step: &Step,
) -> Result<Option<bool>, Error> {
    let id = schedule::fire_id(&s.name, step.at_ms);
    let op = Fire {
        name: &s.name,
        id: &id,
        version: Some(version),
        at_ms: step.at_ms,
        cursor_ms: step.cursor_ms,
        expire_after: None,
    };
    Ok(match ctx.store(keys).run(&op).await? {
        Fired::Sent => {
            ctx.meters.fired.increment(1);
            ctx.meters.sent.increment(1);
            tracing::debug!(queue = %ctx.name, schedule = %s.name, %id, "schedule fired");
            events::emit(&ctx.events, || Event::Fired {
                schedule: s.name.clone(),
                id: MessageId::from(id.clone()),
                at: schedule::from_ms(step.at_ms),
            });
            Some(true)
        }
        Fired::Live => {
            tracing::warn!(queue = %ctx.name, schedule = %s.name, %id, "a message with the fire's id is live already; fire not sent again");
            Some(false)
        }
        Fired::WrongType => {
            tracing::warn!(queue = %ctx.name, schedule = %s.name, %id, "the fire's payload key holds another type; fire skipped");
            Some(false)
        }
        Fired::Behind | Fired::Changed | Fired::Paused => None,
    })
}

/// The timing of a stored schedule; `None` (logged) when it cannot be read.
fn timing_of(ctx: &Context, s: &StoredSchedule) -> Option<Timing> {
    s.timing()
        .map_err(
            |e| tracing::warn!(queue = %ctx.name, schedule = %s.name, error = %e, "schedule cannot be read; not fired"),
        )
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::RedisServer;
    use crate::{DelayQueue, Schedule};

    /// More schedules due at once than a page holds: one tick feeds each,
    /// though every fire moves its schedule's cursor while the tick pages on.
    #[tokio::test]
    async fn one_tick_feeds_every_due_schedule_of_more_than_a_page() {
        let server = RedisServer::start().await;
        let queue = DelayQueue::builder("q", server.client().await).build().unwrap();
        let n = 2 * PAGE + PAGE / 2;
        for i in 0..n {
            let yearly = Schedule::cron("0 0 1 1 *", "y");
            assert!(queue.set_schedule(&format!("s{i:03}"), yearly).await.unwrap());
        }
        let sent = tick(&queue.consume_context(), horizon(Duration::from_secs(1)))
            .await
            .unwrap();
        let unfed: Vec<String> = queue
            .schedules()
            .await
            .unwrap()
            .into_iter()
            .filter(|s| s.fired == 0)
            .map(|s| s.name)
            .collect();
        assert!(unfed.is_empty(), "{} of {n} not fed: {unfed:?}", unfed.len());
        assert_eq!(sent, n as u64);
    }
}
