//! What the parts of a running consumer share: the [`Pool`] of handlers
//! every shard's loop uses, and each shard's own [`Shared`] state, which
//! its loop and its delivery tasks hold.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use tokio::sync::{oneshot, watch, Notify};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::acker::{self, AckLine, Acks};
use super::context::Context;
use super::heartbeat::Running;
use super::lease::Leases;
use super::scheduler::Kicks;
use super::wake::Bell;
use crate::store::{Keys, Shard};
use crate::Handler;

/// The least time the handlers stand still before they count as stalled
/// ([`Pool::stalled`]): long beside a fast handler's run or a scheduling
/// hiccup, short beside the wait for another consumer to start a message.
const STALL_FLOOR: Duration = Duration::from_millis(100);

/// What the loops of every queue and shard a consumer reads share: the
/// handler slots and their limits.
pub(crate) struct Pool {
    /// The handler slots, taken through [`Pool::slot`].
    workers: Arc<Slots>,
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
    /// The messages whose handlers run now, for the heartbeat.
    pub running: Arc<Running>,
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
            workers: Arc::new(Slots::new(concurrency)),
            in_flight: AtomicUsize::new(0),
            done: (0..loops).map(|_| Notify::new()).collect(),
            lanes,
            strict,
            avg_handler_us: AtomicU64::new(0),
            stop,
            running: Arc::default(),
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

    /// A place in line for a handler slot, taken now, for a message of
    /// queue `lane` in `group`: see [`Slots`] for the order slots go in.
    pub(crate) fn slot(&self, lane: usize, group: Option<&str>) -> Slot {
        self.workers.take(group.map(|g| (lane, Box::from(g))))
    }

    /// The recent handler run time in microseconds; 0 before the first run ends.
    pub(crate) fn avg_handler_us(&self) -> u64 {
        self.avg_handler_us.load(Ordering::Relaxed)
    }

    /// How long the handlers may stand still (every slot taken, none
    /// coming free) before they count as stalled: four recent handler
    /// runs, at least [`STALL_FLOOR`].
    pub(crate) fn stall_bound(&self) -> Duration {
        (Duration::from_micros(self.avg_handler_us()) * 4).max(STALL_FLOOR)
    }

    /// Whether the handlers stall: deliveries claimed ahead of them wait
    /// behind slow runs while another consumer's handlers may be free.
    pub(crate) fn stalled(&self) -> bool {
        self.workers.stalled() >= self.stall_bound()
    }

    /// Counts one handler run that `took` into the average.
    pub(crate) fn record_handler_time(&self, took: Duration) {
        let us = (took.as_micros() as u64).max(1);
        let _ = self
            .avg_handler_us
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |avg| Some(next_average(avg, us)));
    }
}

/// Whose line a delivery waits in: a group of a queue (by the queue's
/// lane), or `None` for messages without a group, of every queue.
type Member = Option<(usize, Box<str>)>;

/// The handler slots of a consumer: `concurrency` of them, and the
/// deliveries claimed and waiting for one, in a line per group (messages
/// without a group, of every queue, are one more line). A slot that frees
/// goes to the lines in turn, each line in the order its places were taken
/// (claim order), so a group's message claimed behind a batch of another
/// group's starts at the next free slot, not after that batch: the claim's
/// turns between groups (docs/groups.md) hold in the consumer too. A
/// consumer that never sees groups has one line, first come first served.
pub(crate) struct Slots {
    line: Mutex<Line>,
}

struct Line {
    free: usize,
    /// When a slot last came free (or the slots began): with none free,
    /// how long the handlers have stood still.
    freed: Instant,
    /// The members with deliveries waiting, in turn order.
    turns: VecDeque<Member>,
    waiting: HashMap<Member, VecDeque<oneshot::Sender<Permit>>>,
}

impl Slots {
    fn new(concurrency: usize) -> Self {
        Slots {
            line: Mutex::new(Line {
                free: concurrency,
                freed: Instant::now(),
                turns: VecDeque::new(),
                waiting: HashMap::new(),
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Line> {
        // The line is consistent between statements: a panic elsewhere leaves it usable.
        self.line.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A free slot when no one waits, else a place at the end of `member`'s
    /// line (the member goes to the end of the turns when it had none).
    fn take(self: &Arc<Self>, member: Member) -> Slot {
        let mut guard = self.lock();
        let line = &mut *guard;
        if line.free > 0 && line.turns.is_empty() {
            line.free -= 1;
            return Slot::Taken(Permit(Some(self.clone())));
        }
        let (tx, rx) = oneshot::channel();
        match line.waiting.entry(member) {
            Entry::Occupied(mut places) => places.get_mut().push_back(tx),
            Entry::Vacant(places) => {
                line.turns.push_back(places.key().clone());
                places.insert(VecDeque::from([tx]));
            }
        }
        Slot::Waiting(rx)
    }

    /// How long every slot has been taken with none coming free; zero
    /// while one is free.
    fn stalled(&self) -> Duration {
        let line = self.lock();
        match line.free {
            0 => line.freed.elapsed(),
            _ => Duration::ZERO,
        }
    }

    /// Hands a freed slot to the first place of the member whose turn it
    /// is (that member goes to the end of the turns while it has more),
    /// skipping places given up; else counts it free.
    fn release(self: &Arc<Self>) {
        let mut guard = self.lock();
        let line = &mut *guard;
        line.freed = Instant::now();
        while let Some(member) = line.turns.pop_front() {
            let Some(places) = line.waiting.get_mut(&member) else {
                continue;
            };
            let next = places.pop_front();
            if places.is_empty() {
                line.waiting.remove(&member);
            } else {
                line.turns.push_back(member);
            }
            if let Some(place) = next {
                match place.send(Permit(Some(self.clone()))) {
                    Ok(()) => return,
                    // Given up: not handed, so not released again.
                    Err(mut permit) => permit.0 = None,
                }
            }
        }
        line.free += 1;
    }
}

/// A handler slot; dropping it frees it for the next in turn.
pub(crate) struct Permit(Option<Arc<Slots>>);

impl Drop for Permit {
    fn drop(&mut self) {
        if let Some(slots) = self.0.take() {
            slots.release();
        }
    }
}

/// A delivery's place in line for a handler slot ([`Pool::slot`]).
/// Dropping it gives up the place, or the slot once taken.
pub(crate) enum Slot {
    /// Taken at once: a slot was free and no one waited.
    Taken(Permit),
    /// In its member's line.
    Waiting(oneshot::Receiver<Permit>),
}

impl Slot {
    /// The handler slot, once its turn comes.
    pub(crate) async fn acquired(self) -> Option<Permit> {
        match self {
            Slot::Taken(permit) => Some(permit),
            // Closed only should the pool be gone: the consumer is.
            Slot::Waiting(place) => place.await.ok(),
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
    /// Finished deliveries of this shard whose ack is not done yet: not
    /// sent, or a flow child's completion not yet relayed to its parent.
    pub acking: AckLine,
    /// Key of this consumer's claim receipt.
    pub claim_key: String,
    /// Claim requests answered so far; numbers each request for its receipt.
    pub claims: AtomicU64,
    /// Whether the last claim found the queue paused.
    pub paused: AtomicBool,
    /// Its wake-ups, and whether they reach it.
    pub bell: Arc<Bell>,
    /// Its ack task, started when first needed.
    pub writers: Writers,
    /// Leases of running handlers, renewed when handlers outlive a lease.
    pub leases: Arc<Leases>,
    /// The task handing the last claim's deliveries to their tasks.
    pub handing: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

/// A loop's ack task (with its relay task), started at its first use: a
/// loop that never claims (an idle queue's) holds neither task nor channel.
#[derive(Default)]
pub(crate) struct Writers {
    acks: OnceLock<Acks>,
    /// The tasks started, for the loop's shutdown to wait for.
    started: Mutex<Vec<JoinHandle<()>>>,
}

impl Writers {
    fn start<T>(&self, (sender, task): (T, JoinHandle<()>)) -> T {
        self.started.lock().unwrap_or_else(PoisonError::into_inner).push(task);
        sender
    }

    /// The tasks started so far; they end once their loop's [`Shared`]
    /// is dropped (their senders with it) and they sent what they were given.
    pub(crate) fn started(&self) -> Vec<JoinHandle<()>> {
        std::mem::take(&mut *self.started.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

impl Shared {
    /// Its ack task: where acks and handlers' progress and log lines go,
    /// and its relay task's trigger.
    pub(crate) fn acks(&self) -> &Acks {
        let w = &self.writers;
        w.acks
            .get_or_init(|| w.start(acker::spawn(self.ctx.clone(), self.shard)))
    }

    /// The keys of this loop's shard.
    pub(crate) fn keys(&self) -> &Keys {
        &self.ctx.shards[self.shard]
    }

    /// The store handle of this shard.
    pub(crate) fn store(&self) -> Shard<'_> {
        self.ctx.store(self.keys())
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

    /// Runs a task per place of `waiting` (spawned last first), each taking
    /// its slot, logging its name and holding the slot for a moment, and
    /// frees `first`; returns the names in the order they got a slot.
    async fn order_of_slots(first: Slot, waiting: Vec<(&'static str, Slot)>) -> Vec<&'static str> {
        let n = waiting.len();
        let (log, mut done) = tokio::sync::mpsc::unbounded_channel();
        for (name, slot) in waiting.into_iter().rev() {
            let log = log.clone();
            tokio::spawn(async move {
                let _permit = slot.acquired().await.unwrap();
                log.send(name).unwrap();
                tokio::task::yield_now().await;
            });
        }
        drop(first);
        let mut got = Vec::new();
        while got.len() < n {
            let next = tokio::time::timeout(Duration::from_secs(30), done.recv()).await;
            got.push(next.expect("a slot within 30 s").unwrap());
        }
        got
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn slots_go_in_the_order_they_were_taken_whichever_task_runs_first() {
        let pool = pool(1);
        let first = pool.slot(0, None);
        assert!(matches!(first, Slot::Taken(_)), "a free slot is taken at once");
        const NAMES: [&str; 20] = [
            "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12", "13", "14", "15", "16", "17", "18", "19",
            "20",
        ];
        let waiting: Vec<_> = NAMES.iter().map(|&n| (n, pool.slot(0, None))).collect();
        assert!(waiting.iter().all(|(_, s)| matches!(s, Slot::Waiting(_))));
        assert_eq!(order_of_slots(first, waiting).await, NAMES);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_free_slot_goes_to_the_groups_lines_in_turn_each_in_claim_order() {
        let pool = pool(1);
        let first = pool.slot(0, None);
        // One claim: three of group a, one without a group, one of b,
        // one without, one more of a, and one of a group a of queue 1.
        let claimed = [
            ("a1", 0, Some("a")),
            ("a2", 0, Some("a")),
            ("a3", 0, Some("a")),
            ("u1", 0, None),
            ("b1", 0, Some("b")),
            ("u2", 1, None),
            ("a4", 0, Some("a")),
            ("x1", 1, Some("a")),
        ];
        let waiting = claimed.map(|(name, lane, group)| (name, pool.slot(lane, group)));
        let got = order_of_slots(first, waiting.into()).await;
        assert_eq!(got, ["a1", "u1", "b1", "x1", "a2", "u2", "a3", "a4"]);
        let freed = async {
            while pool.workers.lock().free < 1 {
                tokio::task::yield_now().await;
            }
        };
        tokio::time::timeout(Duration::from_secs(30), freed)
            .await
            .expect("the last one frees its slot");
        let line = pool.workers.lock();
        assert!(line.turns.is_empty() && line.waiting.is_empty(), "the line is empty");
    }

    #[tokio::test]
    async fn a_slot_given_up_passes_its_place_on() {
        let pool = pool(300);
        let slots: Vec<_> = (0..300).map(|_| pool.slot(0, None)).collect();
        assert!(slots.iter().all(|s| matches!(s, Slot::Taken(_))));
        assert_eq!(pool.workers.lock().free, 0);
        let queued = pool.slot(0, Some("g"));
        let behind = pool.slot(0, Some("g"));
        drop(queued);
        drop(slots);
        let permit = tokio::time::timeout(Duration::from_secs(30), behind.acquired()).await;
        let permit = permit.expect("the place given up is passed on");
        assert!(permit.is_some());
        drop(permit);
        assert_eq!(pool.workers.lock().free, 300, "no slot lost");
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

    #[tokio::test]
    async fn the_handlers_stall_once_every_slot_is_taken_and_none_frees_for_the_bound() {
        let pool = pool(1);
        let bound = pool.stall_bound();
        assert_eq!(bound, STALL_FLOOR, "no handler ran yet");
        assert_eq!(pool.workers.stalled(), Duration::ZERO, "a slot is free");
        let running = pool.slot(0, None).acquired().await;
        let waiting = pool.slot(0, None);
        tokio::time::sleep(bound).await;
        assert!(pool.stalled(), "taken for {bound:?} and none freed");
        let freed_after = Instant::now();
        drop(running);
        assert!(
            pool.workers.stalled() <= freed_after.elapsed(),
            "a freed slot starts the count anew"
        );
        let next = waiting.acquired().await;
        assert!(next.is_some(), "the freed slot went to the one in line");
        drop(next);
        assert_eq!(pool.workers.stalled(), Duration::ZERO, "free again");
        pool.record_handler_time(Duration::from_secs(1));
        assert_eq!(pool.stall_bound(), Duration::from_secs(4), "four recent runs");
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
