//! The history of a randomized run (`tests/history.rs`) and the model it is
//! checked against: the at-least-once promise, rule by rule.
//!
//! The driver records every send, cancel, reschedule and requeue with its
//! result and the instants it started and ended, every delivery a handler
//! saw (id, attempt, start, end, outcome), every `LeaseLost` event and every
//! fault it injected. [`check`] replays that history and returns each broken
//! rule with the history lines of the message it is about. The rules of
//! flows and cohorts, on the run's two flow queues, are in `flows`.
//!
//! Std and `delayqueue`-free on purpose (ids and payloads are strings), so
//! the rules read without the machinery that produced the history.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

mod flows;
mod liveness;
pub use flows::{check_flow_final, check_results, flow_result, ChildrenRead, FlowFinal, FlowMsg, LateNote};
pub use liveness::{liveness_judged, ConsumerRec, GroupOp, LIVENESS_BOUND};

/// The wall clock in µs since the epoch: Redis's clock, for a server on
/// this host (Redis reads the same system clock).
pub fn wall_us() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_micros() as i64
}

/// Clock tolerance: due times are kept in Redis in milliseconds, and Redis's
/// wall clock and this process's monotonic clock may tick apart by a little.
pub const CLOCK_SLACK: Duration = Duration::from_millis(15);

/// How a handler run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Returned `Ok`: the message should be acked.
    Ok,
    /// Returned an ordinary error.
    Error,
    /// Panicked.
    Panic,
    /// Returned `RetryAfter` with this delay.
    RetryAfter(Duration),
    /// Returned `SkipRetry`: dead at once.
    Skip,
    /// Dropped before it returned: the handler time-out, or its consumer's
    /// runtime was dropped (a crash).
    Cancelled,
}

impl Outcome {
    /// Whether the delivery counts as failed.
    pub fn failed(self) -> bool {
        self != Outcome::Ok
    }
}

/// One send of one message (a batch records one per message).
#[derive(Debug, Clone)]
pub struct SendRec {
    /// Unique per send: how a delivery of a generated id whose send failed is matched.
    pub payload: String,
    /// The caller's id, or the id the send returned.
    pub id: Option<String>,
    pub caller_id: bool,
    pub delay: Duration,
    pub retry_count: u32,
    pub start: Instant,
    pub end: Instant,
    /// `None`: `Ok`. Otherwise the error; the message may or may not be stored.
    pub error: Option<String>,
    /// "delay", "at" or "batch"; for the sends of docs/dedup.md "unique"
    /// (unique_for), "debounce" (stored as a new message, or refused),
    /// "replaced" (a debounce or replace that replaced the pending message:
    /// not a new message) and "replace" (a replace refused).
    pub how: &'static str,
    /// 0 to 9.
    pub priority: u8,
    /// Name and value pairs, in the order the send set them.
    pub headers: Vec<(String, String)>,
    /// Its group (docs/groups.md), if any.
    pub group: Option<String>,
}

/// A cancel, abort, reschedule or requeue of one id (`*`: every dead letter).
#[derive(Debug, Clone)]
pub struct IdOp {
    pub kind: &'static str,
    pub id: String,
    pub delay: Option<Duration>,
    pub start: Instant,
    pub end: Instant,
    /// `Ok(true)`: cancelled / moved / requeued; `Err`: outcome unknown.
    pub result: Result<bool, String>,
}

/// Whether `o` is a cancel or an abort: after either returned true its
/// message is never delivered again (an abort's ends cancelled, or as
/// aborted once its running handler returns or its lease runs out).
fn ends(o: &IdOp) -> bool {
    o.kind == "cancel" || o.kind == "abort"
}

impl IdOp {
    /// Whether the result says for sure what the call did. A cancel,
    /// reschedule or requeue whose reply a fault could have swallowed may
    /// have run twice (fred re-sends it): the re-run of one whose first run
    /// did the work answers `false`, a limit the library documents
    /// (docs/design.md §3, §11). So `Ok(false)` across such a fault
    /// and `Err` are uncertain; `Ok(true)` always holds, and `Ok(false)`
    /// without such a fault is certain (the id was unknown or in a state
    /// the call does not touch).
    pub fn certain(&self, h: &History, limits: Limits) -> bool {
        match self.result {
            Ok(true) => true,
            Ok(false) => !h.faults.iter().any(|f| f.loses_replies(self.start, self.end, limits)),
            Err(_) => false,
        }
    }

    /// Whether the call may have cancelled, moved or requeued its message.
    pub fn may_have_worked(&self, h: &History, limits: Limits) -> bool {
        self.result == Ok(true) || !self.certain(h, limits)
    }
}

/// One handler run.
#[derive(Debug, Clone)]
pub struct Delivery {
    pub id: String,
    pub payload: String,
    pub attempt: u32,
    pub retry_count: u32,
    pub consumer: String,
    /// Whether its consumer renews leases (handler_timeout > lease).
    pub renews: bool,
    /// Its consumer's `concurrency` (handlers at once).
    pub concurrency: usize,
    pub start: Instant,
    pub end: Option<(Instant, Outcome)>,
    pub priority: u8,
    pub headers: Vec<(String, String)>,
    /// The group the message says it has.
    pub group: Option<String>,
    /// When its claim ran, in µs of Redis time (its lease's deadline less
    /// the visibility timeout): every delivery of one claim has the same.
    pub leased_us: i64,
    /// The handler's start and end by the wall clock, in µs: Redis's clock
    /// (the server runs on this host).
    pub start_us: i64,
    pub end_us: Option<i64>,
}

/// A change of a schedule (`set`, `remove`, `pause`, `resume`), repeated
/// until it answered, so its effect is known and took place (by Redis's
/// clock) within `start_ms..=end_ms` (wall clock ms: Redis's clock).
#[derive(Debug, Clone)]
pub struct ScheduleOp {
    pub kind: &'static str,
    pub name: String,
    /// `set`: the definition's payload, unique to it, and its fire times.
    pub def: Option<(String, Grid)>,
    pub start_ms: i64,
    pub end_ms: i64,
    pub start: Instant,
    pub end: Instant,
    /// `Err`: no attempt answered; what it did is unknown.
    pub result: Result<bool, String>,
}

/// The fire times of a definition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Grid {
    /// `Schedule::every`: every this many ms from its anchor, the Redis
    /// time its set ran.
    Every(i64),
    /// A cron expression's fire times (ms) over the run, precomputed.
    Times(Vec<i64>),
}

/// A queue-wide change: `pause`, `resume` (repeated until they answered),
/// `rate` (`value` leases per `per_ms`; `None` clears it) or `concurrency`
/// (`value`), by `set_*` or by a consumer's start (its builder's limits).
/// Took effect within `start_us..=end_us` (Redis's clock).
#[derive(Debug, Clone)]
pub struct QueueOp {
    pub kind: &'static str,
    pub value: Option<u64>,
    pub per_ms: i64,
    pub start_us: i64,
    pub end_us: i64,
    pub result: Result<bool, String>,
}

/// One injected fault, from when it began until it was over.
#[derive(Debug, Clone)]
pub struct FaultRec {
    pub kind: &'static str,
    pub start: Instant,
    pub end: Instant,
    pub detail: String,
}

/// How long before a request a reply-swallowing cut may have been armed and
/// still swallow its reply (a connection stays armed until its next reply).
const REPLY_ARMED: Duration = Duration::from_secs(1);

impl FaultRec {
    /// Redis stopped answering writes for the whole fault (a pause, a
    /// restart, or a failover: a cluster's primary killed once its replica
    /// had every write, the replica promoted), or its replies came late (a slow link: renewals and acks
    /// ran in time but their callers did not hear of it; or a stall of the
    /// machine the run observed, `stalled`, which acts like one).
    pub fn stalls(&self) -> bool {
        matches!(self.kind, "pause" | "restart" | "failover" | "slow" | "stalled")
    }

    fn overlaps(&self, from: Instant, to: Instant) -> bool {
        self.start <= to && self.end >= from
    }

    /// Whether a request made from `from` to `to` may have lost its reply to
    /// this fault, so that fred sent it again: a cut (armed up to a second
    /// before the request it swallows), a restart or failover, or a pause
    /// longer than the command time-out.
    pub fn loses_replies(&self, from: Instant, to: Instant, limits: Limits) -> bool {
        let armed = from.checked_sub(REPLY_ARMED).unwrap_or(from);
        match self.kind {
            // A slow link's replies held back pile up behind each other
            // and time out, before and after the delay was set.
            "cut" | "slow" | "stalled" => self.overlaps(armed, to),
            "restart" | "failover" => self.overlaps(from, to),
            "pause" => self.overlaps(from, to) && self.end - self.start >= limits.command_timeout,
            _ => false,
        }
    }

    /// Whether this fault can leave a delivery claimed from `from` to `to`
    /// (its lease window) counted without a handler run, that is, with its
    /// lease run out before its consumer handed it back: the consumer
    /// crashed; a reply was lost (a cut, a restart or a failover), the claim's, so its
    /// deliveries were never seen, or the hand-back's; or Redis was paused
    /// longer than the command time-out (the claim's reply is lost) or than
    /// the least an unstarted delivery has left when it is handed back (a
    /// quarter of a lease).
    pub fn risks_lease(&self, from: Instant, to: Instant, limits: Limits) -> bool {
        match self.kind {
            "crash" => self.overlaps(from, to),
            "cut" | "restart" | "failover" | "slow" | "stalled" => self.loses_replies(from, to, limits),
            "pause" => {
                self.overlaps(from, to)
                    && self.end - self.start + SCHED_SLACK >= limits.command_timeout.min(limits.lease / 4)
            }
            _ => false,
        }
    }
}

/// A loaded machine's delay between a consumer measuring what a lease has
/// left and its command reaching Redis.
pub const SCHED_SLACK: Duration = Duration::from_millis(50);

/// Everything a run did and saw.
#[derive(Debug, Clone)]
pub struct History {
    pub t0: Instant,
    pub sends: Vec<SendRec>,
    pub ops: Vec<IdOp>,
    pub deliveries: Vec<Delivery>,
    pub faults: Vec<FaultRec>,
    /// `Event::LeaseLost` as a consumer reported it: (consumer, id, when).
    pub lease_lost: Vec<(String, String, Instant)>,
    pub schedule_ops: Vec<ScheduleOp>,
    pub queue_ops: Vec<QueueOp>,
    /// The groups sends may name, each with its concurrency (1: ordered),
    /// set before the first consumer started and never changed.
    pub groups: Vec<(String, u64)>,
    /// The groups with a rate of their own: (group, starts, per ms), set
    /// before the first consumer started and never changed.
    pub group_rates: Vec<(String, u64, i64)>,
    /// Changes of a group's concurrency, pauses and resumes of a group,
    /// made while the run goes on.
    pub group_ops: Vec<GroupOp>,
    /// The consumers of the main queue, each from its start to its stop.
    pub consumers: Vec<ConsumerRec>,
    /// Deliveries a consumer handed back unstarted (its debug log): (id,
    /// claimed, handed back), wall µs. The history has no other trace of
    /// their claims.
    pub handbacks: Vec<(String, i64, i64)>,
    /// The consumers' `fetch_interval`: how often each probes (and
    /// sweeps), whatever wake-ups it gets.
    pub fetch_interval: Duration,
    /// The messages of flows and cohorts, in the flow queues.
    pub flow_msgs: Vec<FlowMsg>,
    /// The deliveries of the flow queues (the queue-wide rules of the main
    /// queue leave them out).
    pub flow_deliveries: Vec<Delivery>,
    /// Progress and log writes made after the ack.
    pub late_notes: Vec<LateNote>,
    /// What parents' handlers read of their children.
    pub children_reads: Vec<ChildrenRead>,
    /// The flow queues once drained, before their dead letters were requeued.
    pub flow_final: Option<FlowFinal>,
    /// The crashes right after a flow message's handler returned `Ok`:
    /// how many completions the flow queues' outboxes held then.
    pub crashes_by_ok: Vec<u64>,
    /// `t0` by the wall clock, in µs.
    pub t0_us: i64,
}

impl Default for History {
    fn default() -> Self {
        History::new()
    }
}

impl History {
    /// An empty history that starts now.
    pub fn new() -> History {
        History {
            t0: Instant::now(),
            sends: Vec::new(),
            ops: Vec::new(),
            deliveries: Vec::new(),
            faults: Vec::new(),
            lease_lost: Vec::new(),
            schedule_ops: Vec::new(),
            queue_ops: Vec::new(),
            groups: Vec::new(),
            group_rates: Vec::new(),
            group_ops: Vec::new(),
            consumers: Vec::new(),
            handbacks: Vec::new(),
            fetch_interval: Duration::from_millis(100),
            flow_msgs: Vec::new(),
            flow_deliveries: Vec::new(),
            late_notes: Vec::new(),
            children_reads: Vec::new(),
            flow_final: None,
            crashes_by_ok: Vec::new(),
            t0_us: wall_us(),
        }
    }

    /// The process instant of wall-clock time `us`: only for the windows
    /// in which a fault may excuse something, never for a rule's bound.
    pub fn instant_of_us(&self, us: i64) -> Instant {
        let d = Duration::from_micros(us.abs_diff(self.t0_us));
        if us >= self.t0_us {
            self.t0 + d
        } else {
            self.t0.checked_sub(d).unwrap_or(self.t0)
        }
    }

    fn us(&self, us: i64) -> String {
        format!("{:>7}ms", (us - self.t0_us) / 1000)
    }

    fn ms(&self, t: Instant) -> String {
        format!("{:>7}ms", t.saturating_duration_since(self.t0).as_millis())
    }

    /// Every history line about message `id` (sent with `payload`), in time
    /// order, with the faults in the same time span.
    pub fn lines_of(&self, id: &str) -> String {
        let payloads: HashSet<&str> = self
            .deliveries
            .iter()
            .filter(|d| d.id == id)
            .map(|d| d.payload.as_str())
            .collect();
        let mut lines: Vec<(Instant, String)> = Vec::new();
        for s in &self.sends {
            if s.id.as_deref() == Some(id) || payloads.contains(s.payload.as_str()) {
                let result = s.error.as_deref().map_or("Ok".to_string(), |e| format!("Err({e})"));
                lines.push((
                    s.start,
                    format!(
                        "{} send[{}] payload={} delay={:?} retry_count={} priority={} group={:?} caller_id={} -> {result} \
                         (returned at {})",
                        self.ms(s.start),
                        s.how,
                        s.payload,
                        s.delay,
                        s.retry_count,
                        s.priority,
                        s.group,
                        s.caller_id,
                        self.ms(s.end)
                    ),
                ));
            }
        }
        // Of the requeues of every dead letter, only the first after each
        // delivery of this id: the one that may have moved it.
        let mut shown: HashSet<usize> = HashSet::new();
        for d in self.deliveries.iter().filter(|d| d.id == id) {
            let end = d.end.map_or(d.start, |e| e.0);
            if let Some(i) = self.ops.iter().position(|o| o.id == "*" && o.end >= end) {
                shown.insert(i);
            }
        }
        for (i, o) in self.ops.iter().enumerate() {
            if o.id != id && !shown.contains(&i) {
                continue;
            }
            lines.push((
                o.start,
                format!(
                    "{} {}{} -> {:?} (returned at {})",
                    self.ms(o.start),
                    o.kind,
                    o.delay.map(|d| format!(" delay={d:?}")).unwrap_or_default(),
                    o.result,
                    self.ms(o.end)
                ),
            ));
        }
        for d in self.deliveries.iter().filter(|d| d.id == id) {
            lines.push((d.start, self.delivery_line(d)));
        }
        // A flow message's send, and its children's deliveries.
        for m in self.flow_msgs.iter().filter(|m| m.id == id) {
            lines.push((
                m.start,
                format!(
                    "{} {} to {} policy={} children={:?} closed at {:?} -> {:?} (returned at {})",
                    self.ms(m.start),
                    m.role,
                    m.queue,
                    m.policy,
                    m.children,
                    m.closed_us.map(|us| self.us(us)),
                    m.result,
                    self.ms(m.end)
                ),
            ));
            for d in self.flow_deliveries.iter().filter(|d| m.children.contains(&d.id)) {
                lines.push((d.start, format!("child {}: {}", d.id, self.delivery_line(d))));
            }
        }
        for d in self.flow_deliveries.iter().filter(|d| d.id == id) {
            lines.push((d.start, self.delivery_line(d)));
        }
        // A fire's schedule's changes (their times by Redis's clock).
        if let Some((name, at)) = fire_of(id) {
            lines.push((
                self.instant_of_us(at * 1000),
                format!("{} fire time {at}", self.us(at * 1000)),
            ));
            for o in self.schedule_ops.iter().filter(|o| o.name == name) {
                let def = o
                    .def
                    .as_ref()
                    .map(|(p, g)| format!(" payload={p} {g:?}"))
                    .unwrap_or_default();
                let def = if def.len() > 120 {
                    format!("{}...", &def[..120])
                } else {
                    def
                };
                lines.push((
                    o.start,
                    format!(
                        "{} schedule {} {name}{def} ran within {}..={}ms -> {:?}",
                        self.ms(o.start),
                        o.kind,
                        o.start_ms,
                        o.end_ms,
                        o.result
                    ),
                ));
            }
        }
        for (consumer, _, at) in self.lease_lost.iter().filter(|l| l.1 == id) {
            lines.push((*at, format!("{} LeaseLost event on {consumer}", self.ms(*at))));
        }
        if let (Some(first), Some(last)) = (lines.iter().map(|l| l.0).min(), lines.iter().map(|l| l.0).max()) {
            // From as early as a cut that may have lost the first line's reply.
            let (first, last) = (
                first.checked_sub(REPLY_ARMED).unwrap_or(first),
                last + Duration::from_secs(10),
            );
            for f in self.faults.iter().filter(|f| f.overlaps(first, last)) {
                lines.push((f.start, self.fault_line(f)));
            }
            // Queue-wide changes in the span: the limits and pauses the
            // queue's rules count with.
            let span = first.checked_sub(Duration::from_secs(5)).unwrap_or(first)..=last;
            for o in &self.queue_ops {
                let at = self.instant_of_us(o.start_us);
                if span.contains(&at) {
                    let value = o.value.map_or("none".into(), |v| v.to_string());
                    lines.push((
                        at,
                        format!(
                            "{} queue {} {value} (per {}ms) ran within {}..={} -> {:?}",
                            self.us(o.start_us),
                            o.kind,
                            o.per_ms,
                            self.us(o.start_us),
                            self.us(o.end_us),
                            o.result
                        ),
                    ));
                }
            }
        }
        lines.sort_by_key(|l| l.0);
        lines.into_iter().map(|l| format!("    {}\n", l.1)).collect()
    }

    /// The first stall in `from..to` that outlasted what a lease had left
    /// (see `outlasted`), as its history line.
    fn stall(&self, limits: Limits, started: Option<(Instant, bool)>, from: Instant, to: Instant) -> Option<String> {
        self.faults
            .iter()
            .find(|f| outlasted(f, started, from, to, limits))
            .map(|f| self.fault_line(f))
    }

    /// The first fault in `from..to` that can leave a delivery counted
    /// without a handler run (see `FaultRec::risks_lease`), as its line.
    /// Whether no operation touched message `id` and no send replaced it
    /// or may have: a replace keeps a due time no send recorded, so the
    /// order rules leave such ids out.
    fn untouched(&self, id: &str) -> bool {
        !self.ops.iter().any(|o| o.id == id)
            && !self
                .sends
                .iter()
                .any(|s| s.id.as_deref() == Some(id) && matches!(s.how, "replaced" | "replace" | "debounce"))
    }

    /// Whether a message sent at `sent` and never delivered before
    /// `claimed` may have died and been requeued (placed as due then)
    /// meanwhile: leased by a claim no handler ran, which needs a fault
    /// (see `FaultRec::risks_lease`), then a requeue of every dead letter.
    fn maybe_requeued(&self, limits: Limits, sent: Instant, claimed: Instant) -> bool {
        self.lease_risk(limits, sent, claimed).is_some()
            && self
                .ops
                .iter()
                .any(|o| o.id == "*" && o.end >= sent && o.start <= claimed)
    }

    fn lease_risk(&self, limits: Limits, from: Instant, to: Instant) -> Option<String> {
        self.faults
            .iter()
            .find(|f| f.risks_lease(from, to, limits))
            .map(|f| self.fault_line(f))
    }

    fn delivery_line(&self, d: &Delivery) -> String {
        let end = match d.end {
            Some((t, o)) => format!("ended {} {o:?} after {:?}", self.ms(t), t - d.start),
            None => "still running".to_string(),
        };
        format!(
            "{} delivery attempt={} of retry_count={} on {} (renews={}, priority={}, claimed at {}) {end}",
            self.ms(d.start),
            d.attempt,
            d.retry_count,
            d.consumer,
            d.renews,
            d.priority,
            self.us(d.leased_us).trim()
        )
    }

    fn fault_line(&self, f: &FaultRec) -> String {
        format!(
            "{} FAULT {} for {:?}: {}",
            self.ms(f.start),
            f.kind,
            f.end - f.start,
            f.detail
        )
    }

    /// Every fault, one line each.
    pub fn fault_summary(&self) -> String {
        let mut by_kind: HashMap<&str, usize> = HashMap::new();
        for f in &self.faults {
            *by_kind.entry(f.kind).or_default() += 1;
        }
        let mut kinds: Vec<_> = by_kind.into_iter().collect();
        kinds.sort();
        kinds.iter().map(|(k, n)| format!("{k}={n} ")).collect()
    }
}

/// What Redis holds once the run has drained: every message acked, cancelled
/// or dead.
#[derive(Debug, Clone, Default)]
pub struct Final {
    /// Dead letters: id -> delivery count Redis has for it.
    pub dead: HashMap<String, u32>,
    pub totals_sent: u64,
    pub totals_acked: u64,
    pub totals_expired: u64,
    /// Messages ended as aborted (`DelayQueue::abort` of a running one).
    pub totals_aborted: u64,
}

/// Settings the rules depend on.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// The visibility timeout (lease).
    pub lease: Duration,
    /// The clients' command time-out: a pause longer than it loses replies.
    pub command_timeout: Duration,
}

/// Splits the deliveries of one id (in start order) into lives: a requeue
/// of a dead letter restarts its delivery count. A life ends when the count
/// goes back, or when a delivery that could have killed the message (a
/// `SkipRetry`, or a failure of its last allowed attempt) is followed by a
/// requeue that may have moved it.
fn lives<'a>(h: &History, limits: Limits, ds: &[&'a Delivery]) -> Vec<Vec<&'a Delivery>> {
    let mut lives: Vec<Vec<&Delivery>> = Vec::new();
    for d in ds {
        let restarted = lives.last().and_then(|l| l.last()).is_some_and(|p| {
            let killed = match p.end {
                Some((_, Outcome::Skip)) => true,
                Some((_, o)) => o.failed() && p.attempt > p.retry_count,
                None => false,
            };
            let end = p.end.map_or(p.start, |e| e.0);
            killed
                && h.ops.iter().any(|o| {
                    o.kind.starts_with("requeue")
                        && (o.id == p.id || o.id == "*")
                        && o.may_have_worked(h, limits)
                        && o.end >= end
                        && o.start <= d.start
                })
        });
        match lives.last_mut() {
            Some(life) if !restarted && life.iter().all(|p| p.attempt < d.attempt) => life.push(d),
            _ => lives.push(vec![d]),
        }
    }
    lives
}

/// Whether stall `f` (Redis took no writes: a pause or a restart) within
/// `from..to` outlasted the least a lease could have had left, so that the
/// lease really ran out. `started`: when the delivery's handler started and
/// whether its consumer renews leases; `None` for a delivery no handler
/// started.
///
/// The least a lease has left: a handler starts only with a quarter of its
/// lease left, else the delivery is handed back unstarted with about that
/// much left; an unrenewed handler that runs to the lease's end is cut off
/// (excused separately), and the others return at once, so their ack or
/// nack has that quarter too. A renewed lease is renewed at a tick (every
/// sixth of a lease) that finds less than two thirds left: until the first
/// tick after the handler started it may be down to a twelfth, after that
/// it keeps half.
fn outlasted(f: &FaultRec, started: Option<(Instant, bool)>, from: Instant, to: Instant, limits: Limits) -> bool {
    let least = match started {
        Some((start, true)) if f.start > start + limits.lease / 6 + SCHED_SLACK => limits.lease / 2,
        Some((_, true)) => limits.lease / 12,
        _ => limits.lease / 4,
    };
    f.stalls() && f.overlaps(from, to) && f.end - f.start + SCHED_SLACK >= least
}

/// One broken rule.
#[derive(Debug, Clone)]
pub struct Violation {
    pub rule: &'static str,
    pub id: String,
    pub detail: String,
}

/// Checks `h` against the model; with `fin`, also the end-state rules (run
/// once the queue has drained). Returns every violation, each rendered with
/// its message's history.
pub fn check(h: &History, limits: Limits, fin: Option<&Final>) -> Vec<Violation> {
    let mut out = Vec::new();
    let mut by_id: HashMap<&str, Vec<&Delivery>> = HashMap::new();
    for d in &h.deliveries {
        by_id.entry(d.id.as_str()).or_default().push(d);
    }
    for ds in by_id.values_mut() {
        ds.sort_by_key(|d| d.start);
    }
    let sends_by_payload: HashMap<&str, &SendRec> = h.sends.iter().map(|s| (s.payload.as_str(), s)).collect();
    // A lease really ran out: a stall outlasted what it had left (see
    // `outlasted`).
    let stalled = |started: Option<(Instant, bool)>, from: Instant, to: Instant| h.stall(limits, started, from, to);
    // A delivery counted that no handler ran needs a fault in the lease
    // window of that claim (see `FaultRec::risks_lease`). The claim is not
    // recorded; it lies after the last event the history has of the
    // message (`from`: its send or the end of its previous delivery), and
    // its lease ran out before the next delivery (`to`), so every window it
    // could have had lies in `from..to`.
    let excused = |from: Instant, to: Instant| h.lease_risk(limits, from, to);
    let mut v = |rule: &'static str, id: &str, detail: String| {
        out.push(Violation {
            rule,
            id: id.to_string(),
            detail,
        })
    };

    for (id, ds) in &by_id {
        let id: &str = id;
        // A schedule's fire has no send: its own rules are in
        // `check_schedules`; the rules of its deliveries below.
        let fire = fire_of(id);
        if let Some((_, at_ms)) = fire {
            let from = h.instant_of_us(at_ms * 1000) - Duration::from_secs(1);
            check_deliveries(h, limits, id, ds, from, &mut v);
            continue;
        }
        // Every delivery belongs to a send.
        let Some(send) = sends_by_payload.get(ds[0].payload.as_str()) else {
            v(
                "delivered-unsent",
                id,
                format!("payload {:?} was never sent", ds[0].payload),
            );
            continue;
        };
        if let Some(sid) = &send.id {
            if sid != id {
                v(
                    "delivered-unsent",
                    id,
                    format!("payload {} was sent as {sid}", send.payload),
                );
            }
        }
        // Priority and headers as sent, by the send of each delivery's
        // payload (a replace changes them between deliveries).
        for d in ds.iter() {
            let send = sends_by_payload.get(d.payload.as_str()).copied().unwrap_or(send);
            if d.priority != send.priority {
                v(
                    "priority-changed",
                    id,
                    format!(
                        "attempt {} has priority {}, sent with {}",
                        d.attempt, d.priority, send.priority
                    ),
                );
            }
            if d.group != send.group {
                v(
                    "group-changed",
                    id,
                    format!(
                        "attempt {} has group {:?}, sent with {:?}",
                        d.attempt, d.group, send.group
                    ),
                );
            }
            if d.headers != send.headers {
                v(
                    "headers",
                    id,
                    format!(
                        "attempt {} has headers {:?}, sent with {:?}",
                        d.attempt, d.headers, send.headers
                    ),
                );
            }
        }
        // A refused send (a live id, a unique_for window, a replace of a
        // message not pending: docs/dedup.md) wrote nothing, unless a fault
        // that loses replies made fred run it twice.
        let refused = send
            .error
            .as_deref()
            .is_some_and(|e| e.contains("already exists") || e.contains("is not pending"));
        if refused && !h.faults.iter().any(|f| f.loses_replies(send.start, send.end, limits)) {
            v(
                "refused-delivered",
                id,
                format!(
                    "payload {} delivered, its send was refused: {:?}",
                    send.payload, send.error
                ),
            );
        }
        // Only the last payload of a debounced or replaced message: a
        // debounce or replace that replaced it after this payload's send
        // returned, and returned before the claim, leaves none of it.
        for d in ds.iter() {
            let send = sends_by_payload.get(d.payload.as_str()).copied().unwrap_or(send);
            let claimed = h.instant_of_us(d.leased_us);
            let later = h.sends.iter().find(|s| {
                s.how == "replaced"
                    && s.error.is_none()
                    && s.id.as_deref() == Some(id)
                    && s.payload != send.payload
                    && s.start > send.end
                    && s.end + CLOCK_SLACK < claimed
            });
            if let Some(s) = later {
                v(
                    "stale-payload",
                    id,
                    format!(
                        "attempt {} claimed at {} with payload {}, replaced by {} at {}",
                        d.attempt,
                        h.ms(claimed),
                        d.payload,
                        s.payload,
                        h.ms(s.end)
                    ),
                );
            }
        }
        // Not before its due time: the send's delay from when it was
        // called; for a retry, the delay its handler asked for from when it
        // returned; or the delay of a reschedule (pending messages and
        // retries waiting for their delay both move) from when it was called.
        for (i, d) in ds.iter().enumerate() {
            let prev = i.checked_sub(1).map(|p| ds[p]);
            let (mut due, why, since) = match prev {
                None => (
                    send.start + send.delay,
                    format!("sent with delay {:?}", send.delay),
                    send.start,
                ),
                Some(p) => match p.end {
                    Some((end, Outcome::RetryAfter(delay))) if d.attempt == p.attempt + 1 => (
                        end + delay,
                        format!("attempt {} asked RetryAfter({delay:?}) at {}", p.attempt, h.ms(end)),
                        end,
                    ),
                    _ => (h.t0, String::new(), p.end.map_or(p.start, |e| e.0)),
                },
            };
            let mut why = why;
            let claimed = h.instant_of_us(d.leased_us);
            for o in h.ops.iter().filter(|o| o.id == id && o.kind == "reschedule") {
                // One called after the claim (by Redis's clock, beyond the
                // clocks' slack) moved the message's next due time, not
                // this delivery.
                if o.start < since || o.start > d.start || o.start > claimed + CLOCK_SLACK {
                    continue;
                }
                let at = o.start + o.delay.unwrap_or_default();
                // An uncertain one (see `IdOp::certain`), or one called
                // about when it was claimed, may have moved it.
                if o.result == Ok(true) && o.start + CLOCK_SLACK <= claimed {
                    due = at;
                    why = format!("rescheduled at {} by {:?}", h.ms(o.start), o.delay.unwrap_or_default());
                } else if o.result == Ok(true) || !o.certain(h, limits) {
                    due = due.min(at);
                }
            }
            // A send that replaced the message (replace, debounce) set a
            // new due time from its call, earlier or later: judged by the
            // earliest, as its outcome and order against the others may
            // be unknown.
            for s in h.sends.iter().filter(|s| {
                s.id.as_deref() == Some(id)
                    && matches!(s.how, "replaced" | "replace" | "debounce")
                    && s.payload != send.payload
            }) {
                if s.start < since || s.start > d.start {
                    continue;
                }
                let at = s.start + s.delay;
                if at < due {
                    due = at;
                    why = format!("sent again ({}) at {} with delay {:?}", s.how, h.ms(s.start), s.delay);
                }
            }
            if d.start + CLOCK_SLACK < due {
                v(
                    "early",
                    id,
                    format!(
                        "attempt {} at {} before its due time {} ({why})",
                        d.attempt,
                        h.ms(d.start),
                        h.ms(due)
                    ),
                );
            }
        }
        // Never after a successful cancel, nor claimed after a successful
        // abort (an aborted message is never delivered again: not
        // retried), unless sent again after it (an id reused by the sends
        // of docs/dedup.md). A delivery that held the message when the
        // abort came may still start its handler, should its consumer have
        // missed the signal (docs/handlers.md); its outcome is judged by
        // aborted-dead and the totals.
        for o in h.ops.iter().filter(|o| o.id == id && ends(o) && o.result == Ok(true)) {
            let sent_before = |d: &Delivery| sends_by_payload.get(d.payload.as_str()).is_none_or(|s| s.start < o.end);
            let aborted = o.kind == "abort";
            let rule = if aborted { "after-abort" } else { "after-cancel" };
            let after = |d: &Delivery| match aborted {
                true => h.instant_of_us(d.leased_us) > o.end,
                false => d.start > o.end,
            };
            for d in ds.iter().filter(|d| after(d) && sent_before(d)) {
                v(
                    rule,
                    id,
                    format!(
                        "delivery attempt {} at {} after {} returned true at {}",
                        d.attempt,
                        h.ms(d.start),
                        o.kind,
                        h.ms(o.end)
                    ),
                );
            }
        }
        check_deliveries(h, limits, id, ds, send.start, &mut v);
    }

    // LeaseLost only after a stall that outlasts the lease left (see
    // `outlasted`), or a handler that ran out its unrenewed lease. A reply
    // lost to a cut or a restart is no excuse: the re-sent ack or nack
    // must recognise its own first run.
    for (consumer, id, at) in &h.lease_lost {
        // The delivery whose lease it was: on this consumer, the one whose
        // ack or nack came last before the event (at most a lease after the
        // handler, the longest an ack or nack is retried), or one still
        // renewing. Without one, a claimed delivery that no handler ran.
        let candidates: Vec<&Delivery> = h
            .deliveries
            .iter()
            .filter(|d| &d.id == id && &d.consumer == consumer && d.start <= *at)
            .filter(|d| d.end.is_none_or(|(end, _)| end <= *at && *at - end <= limits.lease))
            .collect();
        let excused_loss = |d: &Delivery| {
            let timed_out = !d.renews && matches!(d.end, Some((_, Outcome::Cancelled)));
            timed_out || stalled(Some((d.start, d.renews)), d.start, *at).is_some()
        };
        // Two of them settled within a moment (a time-out's nack, then the
        // next attempt's ack): the event may be either's.
        if candidates.iter().any(|d| excused_loss(d)) {
            continue;
        }
        let own = candidates.into_iter().max_by_key(|d| d.end.map_or(*at, |e| e.0));
        let Some(d) = own else {
            // Handed back unstarted: by a nack retried at most until the
            // lease's end, so the claim was within two leases before.
            let from = at.checked_sub(limits.lease * 2).unwrap_or(h.t0);
            if stalled(None, from, *at).is_none() {
                let replayed = h
                    .faults
                    .iter()
                    .rfind(|f| f.loses_replies(from, *at, limits))
                    .map(|f| {
                        format!(
                            "; a reply was lost to {} (a hand-back sent again?)",
                            h.fault_line(f).trim()
                        )
                    })
                    .unwrap_or_default();
                v(
                    "lease-lost-unstarted",
                    id,
                    format!(
                        "LeaseLost on {consumer} at {} for a delivery no handler there ran, with no stall of >= \
                         {:?} (the least an unstarted delivery has left when handed back) in the two leases \
                         before{replayed}",
                        h.ms(*at),
                        limits.lease / 4
                    ),
                );
            }
            continue;
        };
        // Otherwise a reply lost to a cut, a restart or a command time-out
        // makes the ack or nack run again; its first run did the work, the
        // re-run finds no lease. (A renewal re-sends its own target, so a
        // renewal's lost reply loses no lease.)
        let replayed = h.faults.iter().rfind(|f| f.loses_replies(d.start, *at, limits));
        match replayed {
            Some(f) => v(
                "lease-lost-replayed",
                id,
                format!(
                    "LeaseLost on {consumer} at {} for attempt {} (renews={}), whose lease could not run out; \
                     a reply was lost to {} (an ack or nack sent again after its first run did the work?)",
                    h.ms(*at),
                    d.attempt,
                    d.renews,
                    h.fault_line(f).trim()
                ),
            ),
            None => v(
                "lease-lost",
                id,
                format!(
                    "LeaseLost on {consumer} at {} for attempt {} (renews={}), with no stall since it started \
                     longer than its lease could have had left (a lease renewal lost to a shorter pause, or to \
                     nothing)",
                    h.ms(*at),
                    d.attempt,
                    d.renews
                ),
            ),
        }
    }

    check_queue(h, limits, &sends_by_payload, &mut v);
    check_start_order(h, limits, &sends_by_payload, &mut v);
    check_groups(h, limits, &sends_by_payload, &mut v);
    liveness::check_ordered(h, &mut v);
    liveness::check_group_pauses(h, &mut v);
    if fin.is_some() {
        // Judged once everything ran: a claim is recorded as its first
        // handler starts, which may be long after it.
        liveness::check_liveness(h, limits, &sends_by_payload, &mut v);
    }
    check_schedules(h, false, &mut v);
    flows::check_flows(h, limits, h.flow_final.as_ref(), &mut v);
    if let Some(fin) = fin {
        check_final(h, fin, limits, &by_id, &excused, &mut v);
    }
    out
}

/// The rules of the deliveries of one id, a message or a fire (`from`: its
/// send, or a little before its fire time): no second concurrent delivery,
/// none uncounted, none after a `SkipRetry`, none too many.
fn check_deliveries(
    h: &History,
    limits: Limits,
    id: &str,
    ds: &[&Delivery],
    from: Instant,
    v: &mut impl FnMut(&'static str, &str, String),
) {
    let stalled = |started: Option<(Instant, bool)>, from: Instant, to: Instant| h.stall(limits, started, from, to);
    let excused = |from: Instant, to: Instant| h.lease_risk(limits, from, to);
    // No second concurrent delivery unless the lease was really lost.
    for (i, a) in ds.iter().enumerate() {
        for b in &ds[i + 1..] {
            let a_end = a.end.map(|e| e.0);
            if a_end.is_some_and(|e| e <= b.start) {
                continue;
            }
            if stalled(Some((a.start, a.renews)), a.start, b.start).is_none() {
                v(
                    "concurrent",
                    id,
                    format!(
                        "attempt {} started at {} on {} while attempt {} (started {} on {}, renews={}) was still \
                         running, with no stall in between longer than its lease could have had left",
                        b.attempt,
                        h.ms(b.start),
                        b.consumer,
                        a.attempt,
                        h.ms(a.start),
                        a.consumer,
                        a.renews
                    ),
                );
            }
        }
    }
    let lives = lives(h, limits, ds);
    for life in &lives {
        let mut prev: Option<&Delivery> = None;
        for d in life {
            let expected = prev.map_or(1, |p| p.attempt + 1);
            if d.attempt > expected {
                let from = prev.and_then(|p| p.end.map(|e| e.0)).unwrap_or(from);
                if excused(from, d.start).is_none() {
                    v(
                        "uncounted-delivery",
                        id,
                        format!(
                            "attempt {} at {} follows attempt {}: deliveries were counted that no handler ran, \
                             with no crash, lost reply nor long pause in between",
                            d.attempt,
                            h.ms(d.start),
                            expected - 1
                        ),
                    );
                }
            }
            if let Some(p) = prev {
                // Its dead nack may miss the lease only to a stall that
                // outlasts what the lease had left, or a crash before
                // the nack went out.
                let lost_nack = |end: Instant| {
                    stalled(Some((p.start, p.renews)), end, d.start).is_some()
                        || h.faults.iter().any(|f| f.kind == "crash" && f.overlaps(end, d.start))
                };
                if matches!(p.end, Some((end, Outcome::Skip)) if !lost_nack(end)) && d.attempt == p.attempt + 1 {
                    v(
                        "retried-skip",
                        id,
                        format!("attempt {} after SkipRetry at attempt {}", d.attempt, p.attempt),
                    );
                }
            }
            // A replace keeps the deliveries counted so far (`replace`'s
            // docs): the new message gets its next one whatever its
            // retry_count says.
            let replaced = |p: &Delivery| {
                h.sends.iter().any(|s| {
                    s.id.as_deref() == Some(id)
                        && matches!(s.how, "replaced" | "replace" | "debounce")
                        && s.start > p.start
                        && s.start < d.start
                })
            };
            if d.attempt > d.retry_count + 1 && !prev.is_some_and(|p| d.attempt == p.attempt + 1 && replaced(p)) {
                v(
                    "too-many-deliveries",
                    id,
                    format!("attempt {} of a message with retry_count {}", d.attempt, d.retry_count),
                );
            }
            prev = Some(d);
        }
    }
}

/// `{<name>}@<fire ms>`: the schedule and the fire time of a fire's id.
pub fn fire_of(id: &str) -> Option<(&str, i64)> {
    let (name, at) = id.strip_prefix('{')?.split_once("}@")?;
    Some((name, at.parse().ok()?))
}

/// When a delivery handed back unstarted (`History::handbacks`: claimed,
/// handed back, µs) held its slots, with room for its log line's time:
/// from 100 ms before its claim until 200 ms after the hand-back.
fn held_unstarted(claimed: i64, back: i64) -> (i64, i64) {
    (claimed - 100_000, back + 200_000)
}

/// Each delivery's lease once (a claim re-sent after a lost reply hands
/// the same lease out again): (claim time µs, the delivery).
fn leases(h: &History) -> Vec<(i64, &Delivery)> {
    let mut seen = HashSet::new();
    let mut out: Vec<(i64, &Delivery)> = h
        .deliveries
        .iter()
        .filter(|d| seen.insert((d.id.as_str(), d.leased_us)))
        .map(|d| (d.leased_us, d))
        .collect();
    out.sort_by_key(|l| l.0);
    out
}

/// The values of the `kind` limit that may have been in effect at some
/// time in `from..=to` (µs): the one in effect before, and every one set
/// meanwhile. `None` in it: no limit.
fn limit_values(h: &History, kind: &str, from: i64, to: i64) -> Vec<Option<u64>> {
    let ops: Vec<&QueueOp> = h.queue_ops.iter().filter(|o| o.kind == kind).collect();
    let mut values = Vec::new();
    // Before the first change: none. Op i is in effect from when it
    // started until the next change ended.
    for i in 0..=ops.len() {
        let begins = i.checked_sub(1).map_or(i64::MIN, |p| ops[p].start_us);
        let ends = ops.get(i).map_or(i64::MAX, |o| o.end_us);
        if begins <= to && ends > from {
            // A change that never answered: its value is unknown.
            values.push(
                i.checked_sub(1)
                    .and_then(|p| ops[p].value.filter(|_| ops[p].result.is_ok())),
            );
        }
    }
    values
}

/// The largest limit that may have held in `from..=to`; `None` when no
/// limit may have.
fn most_allowed(h: &History, kind: &str, from: i64, to: i64) -> Option<u64> {
    // Nothing was claimed before the first limit was set (at the first
    // consumer's start): no looking back past it.
    let first = h.queue_ops.iter().find(|o| o.kind == kind)?;
    let values = limit_values(h, kind, from.max(first.end_us.min(to)), to);
    if values.iter().any(Option::is_none) {
        return None;
    }
    values.into_iter().flatten().max()
}

/// Each of `leases` as it is claimed, with how many of them are then
/// processing: from its claim until its handler returned (its ack or nack
/// comes after), or until its lease ran out (cut at the claim's deadline: a
/// renewal may be lost after it), so never more than Redis counted.
fn processing<'a>(leases: &[(i64, &'a Delivery)], limits: Limits) -> Vec<(i64, i64, &'a Delivery)> {
    let lease_us = limits.lease.as_micros() as i64;
    let mut edges: Vec<(i64, i32, &Delivery)> = Vec::new();
    for &(at, d) in leases {
        let end = d.end_us.unwrap_or(i64::MAX).min(at + lease_us);
        edges.push((at, 1, d));
        edges.push((end, -1, d));
    }
    // At one instant, ends first: a handler returned before its ack.
    edges.sort_by_key(|e| (e.0, e.1));
    let mut running = 0i64;
    let mut out = Vec::new();
    for (t, step, d) in edges {
        running += i64::from(step);
        if step > 0 {
            out.push((t, running, d));
        }
    }
    out
}

/// How long before a claim a message must have been due, with no fault in
/// between, to be surely in ready when it ran: seven of the consumers'
/// promote intervals (each sweep, every `fetch_interval`, promotes).
const PROMOTE_LAGS: u32 = 7;

/// The queue-wide rules, on lease times by Redis's clock: no lease while
/// paused, no window of the rate limit with more leases than it allows, no
/// more processing than the global concurrency, and no claim of a lower
/// priority while a higher one waited in ready.
fn check_queue(
    h: &History,
    limits: Limits,
    sends: &HashMap<&str, &SendRec>,
    v: &mut impl FnMut(&'static str, &str, String),
) {
    let leases = leases(h);
    // Pause: from when pause returned until resume was called.
    for (i, p) in h.queue_ops.iter().enumerate() {
        if p.kind != "pause" || p.result.is_err() {
            continue;
        }
        let resumed = h.queue_ops[i + 1..]
            .iter()
            .find(|o| o.kind == "resume")
            .map_or(i64::MAX, |o| o.start_us);
        for (at, d) in leases.iter().filter(|l| l.0 > p.end_us && l.0 < resumed) {
            v(
                "leased-while-paused",
                &d.id,
                format!(
                    "attempt {} leased at {}: pause returned at {}, resume called at {}",
                    d.attempt,
                    h.us(*at),
                    h.us(p.end_us),
                    if resumed == i64::MAX {
                        "never".into()
                    } else {
                        h.us(resumed)
                    }
                ),
            );
        }
    }
    // Rate: a window from each lease, within one setting (a change starts
    // the count anew).
    let rate_ops: Vec<&QueueOp> = h.queue_ops.iter().filter(|o| o.kind == "rate").collect();
    for (a, &(from, d)) in leases.iter().enumerate() {
        let Some(set) = rate_ops.iter().rev().find(|o| o.end_us < from) else {
            continue;
        };
        let (Some(n), per) = (set.value.filter(|_| set.result.is_ok()), set.per_ms * 1000) else {
            continue;
        };
        if rate_ops.iter().any(|o| o.end_us >= from && o.start_us < from + per) {
            continue;
        }
        let within = leases[a..].iter().take_while(|l| l.0 < from + per).count() as u64;
        if within > n {
            v(
                "rate-limit",
                &d.id,
                format!(
                    "{within} leases in the {}ms from {} (this one's), the rate allows {n}",
                    set.per_ms,
                    h.us(from)
                ),
            );
        }
    }
    // Global concurrency, counted as `processing` does. A lowered limit
    // evicts nothing, so
    // every limit of the longest a lease may be renewed (handler time-out,
    // four leases here) before counts.
    let lease_us = limits.lease.as_micros() as i64;
    for (t, running, d) in processing(&leases, limits) {
        let Some(n) = most_allowed(h, "concurrency", t - 5 * lease_us, t) else {
            continue;
        };
        if running > n as i64 {
            v(
                "global-concurrency",
                &d.id,
                format!(
                    "{running} handlers running at {} within their leases, the limit is {n}",
                    h.us(t)
                ),
            );
        }
    }
    // Priorities: a claim that took a first delivery of priority p while a
    // message of a higher one was in ready. A delivery handed back
    // unstarted goes back by its priority, but until then another
    // consumer holds it: so the higher one must not have been handed back
    // around the lower one's claim (the debug log's hand-backs), nor
    // unseen (a crash drops them from the log: a lease runs out half a
    // lease after it was due at the earliest). So: the lower one (x)
    // claimed less than half a lease after it was due; the higher one due
    // `PROMOTE_LAGS` sweeps before that claim (promoted for sure), first claimed
    // after it but less than half a lease after it was due, and not handed
    // back from 100 ms before x's claim until 200 ms after it; no fault
    // from the earlier due time on; both sent for sure and touched by no
    // operation.
    let mut firsts: HashMap<&str, (i64, &Delivery)> = HashMap::new();
    for &(at, d) in &leases {
        firsts.entry(d.id.as_str()).or_insert((at, d));
    }
    let unheld = limits.lease / 2 - SCHED_SLACK;
    let promote_lag = h.fetch_interval * PROMOTE_LAGS;
    // (claimed, delivery, due at the earliest, due at the latest)
    let mut candidates: Vec<(i64, &Delivery, Instant, Instant)> = firsts
        .values()
        .filter(|(_, d)| d.attempt == 1 && d.group.is_none() && fire_of(&d.id).is_none() && h.untouched(&d.id))
        .filter_map(|&(at, d)| {
            let s = sends.get(d.payload.as_str())?;
            let sure = s.error.is_none() && s.id.as_deref() == Some(d.id.as_str());
            (sure && h.instant_of_us(at) < s.start + s.delay + unheld).then_some((
                at,
                d,
                s.start + s.delay,
                s.end + s.delay,
            ))
        })
        .collect();
    candidates.sort_by_key(|c| c.0);
    for &(at, x, x_due, _) in &candidates {
        let claimed = h.instant_of_us(at);
        let handed_back = |id: &str| {
            (h.handbacks.iter()).any(|(hid, claimed, back)| {
                let (from, to) = held_unstarted(*claimed, *back);
                hid == id && (from..=to).contains(&at)
            })
        };
        let waited = candidates.iter().find(|&&(h_at, hi, h_due, h_due_late)| {
            hi.priority > x.priority
                && h_at > at
                && !handed_back(&hi.id)
                && h_due_late + promote_lag < claimed
                && !h
                    .faults
                    .iter()
                    .any(|f| f.overlaps(h_due.min(x_due), h.instant_of_us(h_at)))
        });
        if let Some(&(h_at, hi, _, h_due_late)) = waited {
            v(
                "priority-order",
                &x.id,
                format!(
                    "leased at {} with priority {}, while {} of priority {} was due since {} and leased only at {}",
                    h.us(at),
                    x.priority,
                    hi.id,
                    hi.priority,
                    h.ms(h_due_late),
                    h.us(h_at)
                ),
            );
        }
    }
}

/// A first delivery's send, when sure: (its start, earliest and latest due
/// time). Delivered before, it may have died and been requeued (placed as
/// due then, behind messages due earlier).
fn first_send(h: &History, sends: &HashMap<&str, &SendRec>, d: &Delivery) -> Option<(Instant, Instant, Instant)> {
    let before = |e: &Delivery| e.id == d.id && e.leased_us < d.leased_us;
    if d.attempt != 1 || fire_of(&d.id).is_some() || !h.untouched(&d.id) {
        return None;
    }
    if h.deliveries.iter().any(before) {
        return None;
    }
    let s = sends.get(d.payload.as_str())?;
    let sure = s.error.is_none() && s.id.as_deref() == Some(d.id.as_str());
    sure.then_some((s.start, s.start + s.delay, s.end + s.delay))
}

/// The start-order rule: a consumer of `concurrency(1)` starts its
/// handlers in the order of its claim (docs/priorities.md): the retry
/// list, then priority 9 down to 0, each in due order. Judged within one
/// claim (one consumer, one lease: the deliveries of a claim share it),
/// on what that consumer had in hand: a later claim may bring a message
/// ahead of one still waiting from an earlier claim (not yet due, or not
/// yet promoted then), which breaks nothing.
///
/// Judged on messages without a group only: a claim hands the groups'
/// heads after those, group by group, so a grouped message of a higher
/// priority comes after them.
///
/// A started before B of the same claim breaks it when B was surely ahead
/// of A in that claim:
/// - A surely not from the retry list (first whatever the priority): a
///   first delivery (attempt 1, its send sure, no operation on its id, no
///   delivery of it before) never handed back unstarted (to the front of
///   retry, uncounted). A hand-back comes at a stop, or at least half a
///   lease after the claim
///   request was sent (the release rule: a delivery starts only with a
///   quarter lease, or twice the recent handler time up to half a lease,
///   left), and that request ran after A was due. So: claimed less than
///   half a lease after A was due, and no fault from two command
///   time-outs before A was due (a request sent then, EVALSHA and EVAL
///   after a NOSCRIPT, may run after it) until the claim. A slow link
///   (replies late, requests not) delays no claim's run: it is no fault
///   here, and may be in progress, unrecorded, while the run is checked.
/// - and B of a higher priority (from the retry list it is ahead anyway;
///   else in the priority zset, ahead of A's lower score and of the
///   ready list); or of the same priority and surely due before A: in
///   its first life (a first delivery as A, and no requeue of every dead
///   letter between its send and the claim, unless no fault in between
///   can have counted a lease no handler ran: it was never dead; so its
///   place is its send's due time), due by the latest before A's
///   earliest due time, by more than the clock slack. Promote moves
///   due messages in due order, and the zset scores them by due time.
fn check_start_order(
    h: &History,
    limits: Limits,
    sends: &HashMap<&str, &SendRec>,
    v: &mut impl FnMut(&'static str, &str, String),
) {
    // Claims of one-handler consumers: (consumer, lease) -> deliveries in
    // start order (recorded under the history's lock as handlers start).
    // Only messages without a group: a claim hands the groups' heads after
    // them, group by group in ring order, whatever their priorities (their
    // order is `check_groups`'s business).
    let mut claims: HashMap<(&str, i64), Vec<&Delivery>> = HashMap::new();
    let mut seen = HashSet::new();
    for d in h.deliveries.iter().filter(|d| d.concurrency == 1 && d.group.is_none()) {
        if seen.insert((d.consumer.as_str(), d.id.as_str(), d.leased_us)) {
            claims.entry((d.consumer.as_str(), d.leased_us)).or_default().push(d);
        }
    }
    let first = |d: &Delivery| first_send(h, sends, d);
    let unheld = limits.lease / 2 - SCHED_SLACK - CLOCK_SLACK;
    let mut claims: Vec<Vec<&Delivery>> = claims.into_values().filter(|c| c.len() > 1).collect();
    claims.sort_by_key(|c| (c[0].leased_us, c[0].consumer.clone()));
    for claim in claims {
        let claimed = h.instant_of_us(claim[0].leased_us);
        for (i, a) in claim.iter().enumerate() {
            let Some((_, a_due, _)) = first(a) else { continue };
            let since = a_due.checked_sub(limits.command_timeout * 2).unwrap_or(h.t0);
            let faulted = h.faults.iter().any(|f| f.kind != "slow" && f.overlaps(since, claimed));
            if claimed >= a_due + unheld || faulted {
                continue;
            }
            // A hand-back puts a first delivery at the head of its
            // priority's line: handed back one by one, a claimed batch
            // comes back in reverse within one priority.
            let handed_back =
                |d: &Delivery| (h.handbacks.iter()).any(|(id, _, back)| *id == d.id && *back <= a.leased_us + 200_000);
            if handed_back(a) {
                continue;
            }
            let earlier = |b: &Delivery| {
                let Some((sent, _, b_due)) = first(b) else { return false };
                !h.maybe_requeued(limits, sent, claimed) && !handed_back(b) && b_due + CLOCK_SLACK < a_due
            };
            let ahead = claim[i + 1..]
                .iter()
                .find(|b| b.priority > a.priority || (b.priority == a.priority && earlier(b)));
            if let Some(b) = ahead {
                v(
                    "start-order",
                    &a.id,
                    format!(
                        "started at {} on {} (concurrency 1) with priority {}, due at the earliest {}, before {} \
                         (priority {}, started at {}) of the same claim at {}, which was ahead of it in that claim; \
                         the history of {}:\n{}  and of {}:",
                        h.ms(a.start),
                        a.consumer,
                        a.priority,
                        h.ms(a_due),
                        b.id,
                        b.priority,
                        h.ms(b.start),
                        h.us(a.leased_us).trim(),
                        b.id,
                        h.lines_of(&b.id),
                        a.id
                    ),
                );
            }
        }
    }
}

/// The rules of groups (docs/groups.md), for the groups in `h.groups`
/// (their concurrency fixed for the run):
/// - `group-concurrency`: no more deliveries of a group processing at
///   once than its concurrency, counted as `processing` does (from the
///   claim by Redis's clock until the handler returned or the claim's
///   lease deadline, so never more than Redis counted).
/// - `group-rate`: for a group of `h.group_rates` (n starts per `per`), no
///   window of `per` from one of its leases holds more than n of its
///   leases, by Redis's clock (each lease once: a claim re-sent after a
///   lost reply hands the same one out again).
/// - `group-order`: an ordered group (concurrency 1) leases A before B,
///   where B was surely due before A, by more than the clock slack, with
///   the same priority. Judged, as `start-order` does, on first deliveries
///   (attempt 1, sent for sure, no operation on the id, no requeue that
///   may have placed B anew) with no fault other than a slow link from two
///   command time-outs before the earlier due time until A's claim: a
///   message due before A is in the group whenever A is (promote moves in
///   due order; a send due now goes through pending while it has anything
///   due), and one handed back unstarted keeps its place.
fn check_groups(
    h: &History,
    limits: Limits,
    sends: &HashMap<&str, &SendRec>,
    v: &mut impl FnMut(&'static str, &str, String),
) {
    let leases = leases(h);
    let lease_us = limits.lease.as_micros() as i64;
    for (group, _) in &h.groups {
        let of_group: Vec<(i64, &Delivery)> = leases
            .iter()
            .filter(|l| l.1.group.as_deref() == Some(group.as_str()))
            .copied()
            .collect();
        for (t, running, d) in processing(&of_group, limits) {
            // A lowered concurrency evicts nothing: as for the global one,
            // every value of the longest a lease may be renewed before counts.
            let m = liveness::group_limits(h, group, t - 5 * lease_us, t)
                .into_iter()
                .max()
                .unwrap_or(u64::MAX);
            if running > m as i64 {
                v(
                    "group-concurrency",
                    &d.id,
                    format!(
                        "{running} deliveries of group {group} processing at {} (this one claimed then), its \
                         concurrency is {m}",
                        h.us(t)
                    ),
                );
            }
        }
        if let Some(&(_, n, per_ms)) = h.group_rates.iter().find(|r| &r.0 == group) {
            let per = per_ms * 1000;
            for (a, &(from, d)) in of_group.iter().enumerate() {
                let within = of_group[a..].iter().take_while(|l| l.0 < from + per).count() as u64;
                if within > n {
                    v(
                        "group-rate",
                        &d.id,
                        format!(
                            "{within} leases of group {group} in the {per_ms}ms from {} (this one's), its rate \
                             allows {n}",
                            h.us(from)
                        ),
                    );
                }
            }
        }
        if !liveness::always_ordered(h, group) {
            continue;
        }
        // (claimed, delivery, earliest and latest due time, sent at)
        let firsts: Vec<(Instant, &Delivery, Instant, Instant, Instant)> = of_group
            .iter()
            .filter_map(|&(at, d)| {
                let (sent, due, due_late) = first_send(h, sends, d)?;
                Some((h.instant_of_us(at), d, due, due_late, sent))
            })
            .collect();
        for &(a_at, a, a_due, _, _) in &firsts {
            let ahead = firsts.iter().find(|&&(_, b, b_due, b_due_late, b_sent)| {
                let since = b_due.min(a_due).checked_sub(limits.command_timeout * 2).unwrap_or(h.t0);
                b.leased_us > a.leased_us
                    && b.priority == a.priority
                    && b_due_late + CLOCK_SLACK < a_due
                    && !h.maybe_requeued(limits, b_sent, a_at)
                    && !h.faults.iter().any(|f| f.kind != "slow" && f.overlaps(since, a_at))
            });
            if let Some(&(_, b, _, b_due_late, _)) = ahead {
                v(
                    "group-order",
                    &a.id,
                    format!(
                        "leased at {} from ordered group {group}, due at the earliest {}, before {} (same \
                         priority {}, due at the latest {}, leased at {}); the history of {}:\n{}  and of {}:",
                        h.us(a.leased_us).trim(),
                        h.ms(a_due),
                        b.id,
                        b.priority,
                        h.ms(b_due_late),
                        h.us(b.leased_us).trim(),
                        b.id,
                        h.lines_of(&b.id),
                        a.id
                    ),
                );
            }
        }
    }
}

/// One definition of a schedule: from its set until the next set or
/// remove of its name.
struct Def<'a> {
    set: &'a ScheduleOp,
    payload: &'a str,
    grid: &'a Grid,
    /// The end of the change that replaced or removed it.
    gone_ms: i64,
    /// Its pauses: (pause started, pause returned, resume called, resume returned).
    pauses: Vec<(i64, i64, i64, i64)>,
}

impl Def<'_> {
    /// Whether `at` is one of its fire times: on its grid, after its set.
    fn on_grid(&self, at: i64) -> bool {
        let (from, to) = (self.set.start_ms, self.set.end_ms);
        match self.grid {
            // Its anchor is the Redis time of its set, in from..=to.
            Grid::Every(every) => at > from && (at - from).rem_euclid(*every) <= to - from,
            Grid::Times(times) => at > from && times.contains(&at),
        }
    }

    /// Why it cannot have sent a fire at `at`, if it cannot.
    fn not_live(&self, at: i64) -> Option<String> {
        if !self.on_grid(at) {
            return Some(format!(
                "not a fire time of the definition set from {}ms to {}ms",
                self.set.start_ms, self.set.end_ms
            ));
        }
        if at > self.gone_ms {
            return Some(format!(
                "after its definition was replaced or removed (returned at {}ms)",
                self.gone_ms
            ));
        }
        self.pauses
            .iter()
            .find(|p| at > p.1 && at <= p.2)
            .map(|p| format!("in a pause (returned at {}ms, resume called at {}ms)", p.1, p.2))
    }

    /// Whether a pause may have withheld fire time `at`.
    fn maybe_paused(&self, at: i64) -> bool {
        self.pauses.iter().any(|p| at >= p.0 && at <= p.3)
    }
}

/// The definitions of every schedule, and the names whose state is unknown
/// (a change that never answered).
fn definitions(h: &History) -> (Vec<Def<'_>>, HashSet<&str>) {
    let mut defs: Vec<Def> = Vec::new();
    let mut unknown = HashSet::new();
    let mut live: HashMap<&str, usize> = HashMap::new();
    for o in &h.schedule_ops {
        if o.result.is_err() {
            unknown.insert(o.name.as_str());
        }
        let current = live.get(o.name.as_str()).copied();
        match (o.kind, current) {
            ("set" | "remove", _) => {
                let paused = current.is_some_and(|i| defs[i].pauses.last().is_some_and(|p| p.2 == i64::MAX));
                if let Some(i) = current {
                    defs[i].gone_ms = o.end_ms;
                    if let Some(p) = defs[i].pauses.last_mut().filter(|p| p.2 == i64::MAX) {
                        (p.2, p.3) = (o.end_ms, o.end_ms);
                    }
                }
                live.remove(o.name.as_str());
                if let (true, Some((payload, grid))) = (o.kind == "set", &o.def) {
                    // A replacement keeps its schedule's pause.
                    live.insert(&o.name, defs.len());
                    defs.push(Def {
                        set: o,
                        payload,
                        grid,
                        gone_ms: i64::MAX,
                        pauses: if paused {
                            vec![(o.start_ms, o.end_ms, i64::MAX, i64::MAX)]
                        } else {
                            Vec::new()
                        },
                    });
                }
            }
            ("pause", Some(i)) if o.result.is_ok() => defs[i].pauses.push((o.start_ms, o.end_ms, i64::MAX, i64::MAX)),
            ("resume", Some(i)) => {
                if let Some(p) = defs[i].pauses.last_mut().filter(|p| p.2 == i64::MAX) {
                    (p.2, p.3) = (o.start_ms, o.end_ms);
                }
            }
            _ => {}
        }
    }
    (defs, unknown)
}

/// The rules of schedules: a fire is sent at most once (delivered at least
/// once: its deliveries make one life, but for a requeue of a dead
/// letter), none is delivered before its fire time (Redis's clock), each
/// belongs to a definition of its schedule that could send it (on its
/// grid, after its set, before the change that replaced or removed it
/// returned, not in a pause); with `complete` (the run drained, dead
/// letters requeued and handled), none missing between the first and the
/// last delivered fire of a definition but where a pause may have withheld
/// it. Misfires cannot happen: no fault lasts the grace (60 s).
pub fn check_schedules(h: &History, complete: bool, v: &mut impl FnMut(&'static str, &str, String)) {
    let (defs, unknown) = definitions(h);
    let mut fires: HashMap<&str, Vec<&Delivery>> = HashMap::new();
    for d in h.deliveries.iter().filter(|d| fire_of(&d.id).is_some()) {
        fires.entry(d.id.as_str()).or_default().push(d);
    }
    let mut delivered: HashMap<usize, Vec<i64>> = HashMap::new();
    for (id, ds) in &mut fires {
        ds.sort_by_key(|d| d.start);
        let (name, at) = fire_of(id).expect("a fire's id");
        for d in ds
            .iter()
            .filter(|d| d.start_us + (CLOCK_SLACK.as_micros() as i64) < at * 1000)
        {
            v(
                "fire-early",
                id,
                format!("attempt {} at {} before its fire time", d.attempt, h.us(d.start_us)),
            );
        }
        for w in ds.windows(2) {
            let (p, d) = (w[0], w[1]);
            let end = p.end.map_or(p.start, |e| e.0);
            let requeued = h.ops.iter().any(|o| {
                o.kind.starts_with("requeue") && (o.id == *id || o.id == "*") && o.end >= end && o.start <= d.start
            });
            if d.attempt <= p.attempt && !requeued {
                v(
                    "fire-twice",
                    id,
                    format!(
                        "attempt {} at {} after attempt {} at {} with no requeue between: the fire was sent again",
                        d.attempt,
                        h.ms(d.start),
                        p.attempt,
                        h.ms(p.start)
                    ),
                );
            }
        }
        if unknown.contains(name) {
            continue;
        }
        let payload = ds[0].payload.as_str();
        let Some(i) = defs.iter().position(|d| d.set.name == name && d.payload == payload) else {
            v(
                "fire-stale",
                id,
                format!("payload {payload} is of no definition of schedule {name}"),
            );
            continue;
        };
        match defs[i].not_live(at) {
            Some(why) => {
                // The definition whose fire it likely is (planned from it, sent with another's value).
                let of = defs
                    .iter()
                    .rev()
                    .find(|d| d.set.name == name && d.payload != payload && d.on_grid(at))
                    .map(|d| format!("; a fire time of {} set at {}ms", d.payload, d.set.start_ms))
                    .unwrap_or_default();
                v(
                    "fire-stale",
                    id,
                    format!("payload {payload}: fire time {at} is {why}{of}"),
                )
            }
            None => delivered.entry(i).or_default().push(at),
        }
    }
    if !complete {
        return;
    }
    for (i, mut ats) in delivered {
        let def = &defs[i];
        ats.sort_unstable();
        let (Some(&first), Some(&last)) = (ats.first(), ats.last()) else {
            continue;
        };
        let between: Vec<i64> = match def.grid {
            Grid::Every(every) => (1..).map(|k| first + k * every).take_while(|t| *t < last).collect(),
            Grid::Times(times) => times.iter().copied().filter(|t| *t > first && *t < last).collect(),
        };
        for t in between {
            if ats.binary_search(&t).is_err() && !def.maybe_paused(t) {
                v(
                    "fire-missing",
                    &format!("{{{}}}@{t}", def.set.name),
                    format!(
                        "fire of payload {} missing between its delivered fires at {first} and {last}",
                        def.payload
                    ),
                );
            }
        }
    }
}

/// The end-state rules: nothing lost, dead letters died by the rules, totals
/// agree with the history.
fn check_final(
    h: &History,
    fin: &Final,
    limits: Limits,
    by_id: &HashMap<&str, Vec<&Delivery>>,
    excused: &dyn Fn(Instant, Instant) -> Option<String>,
    v: &mut impl FnMut(&'static str, &str, String),
) {
    let now = Instant::now();
    let cancelled = |id: &str| h.ops.iter().any(|o| o.id == id && ends(o) && o.result == Ok(true));
    // A cancel (or abort) that returned false across a lost reply may have
    // removed the message (see `IdOp::certain`): delivered or not, either is right.
    let uncertain_cancel = |o: &IdOp| ends(o) && !o.certain(h, limits);
    let maybe_cancelled = |id: &str| h.ops.iter().any(|o| o.id == id && uncertain_cancel(o));
    let acked = |id: &str| {
        by_id
            .get(id)
            .is_some_and(|ds| ds.iter().any(|d| matches!(d.end, Some((_, Outcome::Ok)))))
    };
    for s in h.sends.iter().filter(|s| s.error.is_none()) {
        let id = s.id.as_deref().unwrap_or_default();
        if !acked(id) && !fin.dead.contains_key(id) && !cancelled(id) && !maybe_cancelled(id) {
            v(
                "lost",
                id,
                "sent Ok, not cancelled, never handled with Ok and not a dead letter".to_string(),
            );
        }
    }
    for (id, &attempts) in &fin.dead {
        let Some(ds) = by_id.get(id.as_str()) else {
            let sent = h
                .sends
                .iter()
                .filter(|s| s.id.as_deref() == Some(id.as_str()))
                .map(|s| s.start)
                .min()
                .unwrap_or(h.t0);
            if excused(sent, now).is_some() {
                continue;
            }
            v(
                "dead-unhandled",
                id,
                format!("dead letter with {attempts} counted deliveries, none of which a handler ran"),
            );
            continue;
        };
        let lives = lives(h, limits, ds);
        let life = lives.last().expect("an id with deliveries has a life");
        let last = life.iter().max_by_key(|d| d.attempt).expect("a life has a delivery");
        let after_last = last.end.map_or(last.start, |e| e.0);
        if last.attempt != attempts && (attempts < last.attempt || excused(after_last, now).is_none()) {
            v(
                "dead-count",
                id,
                format!(
                    "dead with {attempts} counted deliveries, but the last delivery a handler ran was attempt {}",
                    last.attempt
                ),
            );
        }
        match last.end {
            Some((_, Outcome::Skip)) => {}
            Some((_, o)) if o.failed() => {
                if attempts != last.retry_count + 1 {
                    v(
                        "dead-early",
                        id,
                        format!(
                            "dead after {attempts} deliveries, retry_count {} allows {}; the last ended {o:?}",
                            last.retry_count,
                            last.retry_count + 1
                        ),
                    );
                }
            }
            _ if excused(last.start, now).is_some() => {}
            other => {
                let ended = other.map_or("never ended".to_string(), |(_, o)| format!("ended {o:?}"));
                let lost = h.lease_lost.iter().any(|l| &l.1 == id && l.2 >= last.start);
                let why = if lost {
                    "; its lease was lost meanwhile (LeaseLost)"
                } else {
                    ""
                };
                v(
                    "dead-after-ok",
                    id,
                    format!("dead, but its last delivery (attempt {}) {ended}{why}", last.attempt),
                )
            }
        }
    }
    // An aborted message ends as aborted: never a dead letter (unless sent
    // again after the abort), and counted in the totals' `aborted`.
    for o in h.ops.iter().filter(|o| o.kind == "abort" && o.result == Ok(true)) {
        let sent_after = h
            .sends
            .iter()
            .any(|s| s.id.as_deref() == Some(o.id.as_str()) && s.start > o.start);
        if fin.dead.contains_key(&o.id) && !sent_after {
            v(
                "aborted-dead",
                &o.id,
                format!("a dead letter at the end, though aborted at {}", h.ms(o.end)),
            );
        }
    }
    let aborts = h
        .ops
        .iter()
        .filter(|o| o.kind == "abort" && o.may_have_worked(h, limits))
        .count() as u64;
    if fin.totals_aborted > aborts {
        v(
            "totals-aborted",
            "*",
            format!(
                "totals: aborted {} but only {aborts} aborts may have marked a message",
                fin.totals_aborted
            ),
        );
    }
    // Totals: each stored message ends acked, cancelled (or aborted: cancelled
    // or ended as aborted, counted neither acked nor dead) or dead, once.
    let cancels = h.ops.iter().filter(|o| ends(o) && o.result == Ok(true)).count() as u64;
    let unknown_cancels = h.ops.iter().filter(|o| uncertain_cancel(o)).count() as u64;
    let dead = fin.dead.len() as u64;
    let accounted = fin.totals_acked + cancels + dead;
    // A fire withdrawn by a change of its schedule was counted sent and is
    // counted nowhere else: how many were is not known.
    let withdrawn = if h.schedule_ops.is_empty() { 0 } else { u64::MAX / 4 };
    // A send of docs/dedup.md may reuse the id of a dead letter, which it
    // replaces: that letter was counted sent and is no longer anywhere;
    // or of a message acked (or cancelled) before: one id, two acks.
    let reused = h
        .sends
        .iter()
        .enumerate()
        .filter(|(i, s)| {
            s.error.is_none()
                && matches!(s.how, "unique" | "debounce")
                && h.sends[..*i].iter().any(|e| e.id == s.id && e.error.is_none())
        })
        .count() as u64;
    if fin.totals_sent < accounted || fin.totals_sent > accounted + unknown_cancels + withdrawn + reused {
        v(
            "totals-balance",
            "*",
            format!(
                "totals: sent {} but acked {} + cancelled {cancels} (+ up to {unknown_cancels} uncertain) + dead {dead}",
                fin.totals_sent, fin.totals_acked
            ),
        );
    }
    // A send is stored once if it returned Ok, at most once if it failed,
    // and once more if fred re-sent it after a lost reply when its first
    // run's message was already handled and acked (docs/design.md, the
    // duplicates at-least-once allows): only a send across a fault that
    // loses replies.
    let fires = by_id.keys().filter(|id| fire_of(id).is_some()).count() as u64;
    let ok_sends = h
        .sends
        .iter()
        .filter(|s| s.error.is_none() && s.how != "replaced")
        .count() as u64
        + fires;
    let all_sends = h.sends.len() as u64 + fires + withdrawn;
    let resent = h
        .sends
        .iter()
        .filter(|s| h.faults.iter().any(|f| f.loses_replies(s.start, s.end, limits)))
        .count() as u64;
    if fin.totals_sent < ok_sends || fin.totals_sent > all_sends + resent {
        v(
            "totals-sent",
            "*",
            format!(
                "totals: sent {} but {ok_sends} sends returned Ok of {all_sends} tried, {resent} of them across a \
                 fault that loses replies (may be stored twice)",
                fin.totals_sent
            ),
        );
    }
    let handled_ok: HashSet<&str> = by_id
        .iter()
        .filter(|(id, _)| acked(id) && !fin.dead.contains_key(**id) && !cancelled(id))
        .map(|(id, _)| *id)
        .collect();
    let n = handled_ok.len() as u64;
    if fin.totals_acked > n + resent + reused || fin.totals_acked + unknown_cancels < n {
        v(
            "totals-acked",
            "*",
            format!(
                "totals: acked {} but {n} messages were handled with Ok and are neither dead nor cancelled \
                 ({resent} sends may have been stored twice, {unknown_cancels} cancels are uncertain)",
                fin.totals_acked
            ),
        );
    }
    if fin.totals_expired != 0 {
        v(
            "totals-expired",
            "*",
            format!("totals: {} messages expired unhandled", fin.totals_expired),
        );
    }
}

/// Renders violations for a panic message: how often each rule broke, then
/// up to `per_rule` of each with its message's history.
pub fn render(h: &History, violations: &[Violation], per_rule: usize) -> String {
    let mut rules: Vec<&str> = Vec::new();
    for x in violations {
        if !rules.contains(&x.rule) {
            rules.push(x.rule);
        }
    }
    let mut s = String::new();
    for rule in &rules {
        let of_rule: Vec<&Violation> = violations.iter().filter(|x| x.rule == *rule).collect();
        let _ = writeln!(s, "RULE {rule}: broken {} time(s)", of_rule.len());
    }
    for rule in rules {
        for x in violations.iter().filter(|x| x.rule == rule).take(per_rule) {
            let _ = writeln!(s, "RULE {} broken by {}: {}", x.rule, x.id, x.detail);
            if x.id != "*" {
                s.push_str(&h.lines_of(&x.id));
            }
        }
    }
    s
}

/// The rules on small hand-made histories: what a fault excuses and what
/// it does not.
#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits {
        lease: Duration::from_secs(2),
        command_timeout: Duration::from_millis(500),
    };

    fn at(h: &History, ms: u64) -> Instant {
        h.t0 + Duration::from_millis(ms)
    }

    /// A history with message `m` sent Ok at 0 ms, due at once, retry count 3.
    fn sent() -> History {
        let mut h = History::new();
        h.sends.push(SendRec {
            payload: "p".into(),
            id: Some("m".into()),
            caller_id: true,
            delay: Duration::ZERO,
            retry_count: 3,
            start: h.t0,
            end: at(&h, 1),
            error: None,
            how: "delay",
            priority: 0,
            headers: Vec::new(),
            group: None,
        });
        h
    }

    fn fault(h: &mut History, kind: &'static str, from: u64, to: u64) {
        let (start, end) = (at(h, from), at(h, to));
        h.faults.push(FaultRec {
            kind,
            start,
            end,
            detail: String::new(),
        });
    }

    /// An operation `kind` on `id` from `from` to `to` ms.
    fn id_op(h: &mut History, kind: &'static str, id: &str, from: u64, to: u64, result: Result<bool, String>) {
        let (start, end) = (at(h, from), at(h, to));
        h.ops.push(IdOp {
            kind,
            id: id.into(),
            delay: None,
            start,
            end,
            result,
        });
    }

    fn cancel(h: &mut History, from: u64, to: u64, result: Result<bool, String>) {
        id_op(h, "cancel", "m", from, to, result);
    }

    /// A requeue of every dead letter from `from` to `to` ms that requeued some.
    fn requeue_all(h: &mut History, from: u64, to: u64) {
        id_op(h, "requeue_all_dead", "*", from, to, Ok(true));
    }

    fn deliver(h: &mut History, attempt: u32, from: u64, outcome: Outcome) {
        delivery(h, "m", "p", attempt, from, from, from, outcome);
    }

    /// A delivery of `id` claimed at `claimed` ms, run from `from` to `to` ms.
    #[allow(clippy::too_many_arguments)]
    fn delivery(
        h: &mut History,
        id: &str,
        payload: &str,
        attempt: u32,
        claimed: u64,
        from: u64,
        to: u64,
        outcome: Outcome,
    ) {
        let us = |ms: u64| h.t0_us + ms as i64 * 1000;
        let (leased_us, start_us, end_us) = (us(claimed), us(from), us(to));
        let (start, end) = (at(h, from), at(h, to));
        h.deliveries.push(Delivery {
            id: id.into(),
            payload: payload.into(),
            attempt,
            retry_count: 3,
            consumer: "c0".into(),
            renews: false,
            concurrency: 1,
            start,
            end: Some((end, outcome)),
            priority: 0,
            headers: Vec::new(),
            group: None,
            leased_us,
            start_us,
            end_us: Some(end_us),
        });
    }

    /// A queue-wide change from `from` to `to` ms.
    fn queue_op(h: &mut History, kind: &'static str, value: Option<u64>, from: u64, to: u64) {
        let us = |ms: u64| h.t0_us + ms as i64 * 1000;
        let (start_us, end_us) = (us(from), us(to));
        h.queue_ops.push(QueueOp {
            kind,
            value,
            per_ms: 1000,
            start_us,
            end_us,
            result: Ok(true),
        });
    }

    /// A schedule change of `s` from `from` to `to` ms after t0 (wall clock).
    fn schedule_op(h: &mut History, kind: &'static str, def: Option<(&str, Grid)>, from: u64, to: u64) {
        let ms = |t: u64| h.t0_us / 1000 + t as i64;
        let (start_ms, end_ms) = (ms(from), ms(to));
        let (start, end) = (at(h, from), at(h, to));
        h.schedule_ops.push(ScheduleOp {
            kind,
            name: "s".into(),
            def: def.map(|(p, g)| (p.to_string(), g)),
            start_ms,
            end_ms,
            start,
            end,
            result: Ok(true),
        });
    }

    /// A delivery of the fire of `s` at `fire` ms after t0, with `payload`.
    fn fire(h: &mut History, payload: &str, fire: u64, attempt: u32) -> String {
        let id = format!("{{s}}@{}", h.t0_us / 1000 + fire as i64);
        delivery(h, &id, payload, attempt, fire + 5, fire + 10, fire + 20, Outcome::Ok);
        id
    }

    fn schedule_rules(h: &History, complete: bool) -> Vec<&'static str> {
        let mut out = Vec::new();
        check_schedules(h, complete, &mut |rule, _, _| out.push(rule));
        out
    }

    fn check_queue_rules(h: &History) -> Vec<&'static str> {
        let mut out = Vec::new();
        check_queue(h, LIMITS, &HashMap::new(), &mut |rule, _, _| out.push(rule));
        out
    }

    fn rules(h: &History, fin: Option<&Final>) -> Vec<&'static str> {
        check(h, LIMITS, fin).into_iter().map(|v| v.rule).collect()
    }

    fn drained(sent: u64) -> Final {
        Final {
            totals_sent: sent,
            ..Final::default()
        }
    }

    /// A send of `payload` to id "m" from `from` to `to` ms, `how` as
    /// [`SendRec::how`] says, refused with `error`.
    fn send_m(h: &mut History, payload: &str, how: &'static str, from: u64, to: u64, error: Option<&str>) {
        let (start, end) = (at(h, from), at(h, to));
        h.sends.push(SendRec {
            payload: payload.into(),
            id: Some("m".into()),
            caller_id: true,
            delay: Duration::ZERO,
            retry_count: 3,
            start,
            end,
            error: error.map(String::from),
            how,
            priority: 0,
            headers: Vec::new(),
            group: None,
        });
    }

    #[test]
    fn a_refused_send_is_never_delivered() {
        let mut h = sent();
        send_m(&mut h, "q", "unique", 10, 11, Some("message m refused: already exists"));
        delivery(&mut h, "m", "q", 1, 20, 20, 21, Outcome::Ok);
        assert_eq!(rules(&h, None), ["refused-delivered"]);
        // Unless a lost reply may have made fred run it twice.
        fault(&mut h, "cut", 10, 10);
        assert_eq!(rules(&h, None), Vec::<&str>::new());
    }

    #[test]
    fn a_replaced_payload_is_not_delivered_once_replaced() {
        let mut h = sent();
        send_m(&mut h, "q", "replaced", 10, 11, None);
        // Claimed after the replace returned: only the new payload.
        delivery(&mut h, "m", "p", 1, 50, 50, 51, Outcome::Ok);
        assert_eq!(rules(&h, None), ["stale-payload"]);
        let mut h = sent();
        send_m(&mut h, "q", "replaced", 10, 11, None);
        delivery(&mut h, "m", "q", 1, 50, 50, 51, Outcome::Ok);
        assert_eq!(rules(&h, None), Vec::<&str>::new());
        // A replace that returned after the claim may have come too late.
        let mut h = sent();
        send_m(&mut h, "q", "replaced", 10, 60, None);
        delivery(&mut h, "m", "p", 1, 50, 50, 51, Outcome::Ok);
        assert_eq!(rules(&h, None), Vec::<&str>::new());
    }

    #[test]
    fn an_excerpt_shows_a_cut_armed_before_its_first_line() {
        // History seed 1795683408547085468: a send's reply swallowed by a cut
        // armed before it, so fred ran it twice, with no fault in the excerpt.
        let mut h = History::new();
        send_m(&mut h, "p", "delay", 1500, 1600, None);
        fault(&mut h, "cut", 800, 800);
        assert!(h.lines_of("m").contains("FAULT cut"), "{}", h.lines_of("m"));
        let mut h = History::new();
        send_m(&mut h, "p", "delay", 1900, 2000, None);
        fault(&mut h, "cut", 800, 800);
        assert!(!h.lines_of("m").contains("FAULT cut"), "{}", h.lines_of("m"));
    }

    #[test]
    fn a_false_cancel_across_a_lost_reply_may_have_cancelled() {
        let mut h = sent();
        cancel(&mut h, 100, 150, Ok(false));
        assert_eq!(rules(&h, Some(&drained(1))), ["lost", "totals-balance"]);
        fault(&mut h, "cut", 90, 90);
        assert_eq!(rules(&h, Some(&drained(1))), Vec::<&str>::new());
    }

    #[test]
    fn an_aborted_message_is_never_delivered_again_nor_dead_and_counted_at_most_once() {
        // Aborted while its handler ran; the handler failed; it ended as aborted.
        let mut h = sent();
        deliver(&mut h, 1, 10, Outcome::Error);
        id_op(&mut h, "abort", "m", 10, 15, Ok(true));
        let fin = Final {
            totals_aborted: 1,
            ..drained(1)
        };
        assert_eq!(rules(&h, Some(&fin)), Vec::<&str>::new());
        // Held when the abort came (claimed before), started after it: its
        // consumer may have missed the signal; not a delivery after it.
        let mut held = sent();
        id_op(&mut held, "abort", "m", 10, 15, Ok(true));
        delivery(&mut held, "m", "p", 1, 5, 40, 41, Outcome::Ok);
        assert_eq!(rules(&held, Some(&fin)), Vec::<&str>::new());
        // Delivered again after the abort returned: retried.
        deliver(&mut h, 2, 2000, Outcome::Ok);
        assert_eq!(rules(&h, Some(&fin)), ["after-abort"]);
        // A dead letter at the end, and counted more often than aborted.
        let mut h = sent();
        deliver(&mut h, 1, 10, Outcome::Error);
        id_op(&mut h, "abort", "m", 10, 15, Ok(true));
        let mut fin = Final {
            totals_aborted: 2,
            ..drained(1)
        };
        fin.dead.insert("m".into(), 1);
        assert_eq!(
            rules(&h, Some(&fin)),
            ["dead-early", "aborted-dead", "totals-aborted", "totals-balance"]
        );
    }

    #[test]
    fn a_send_across_a_lost_reply_may_be_stored_twice() {
        let mut h = sent();
        deliver(&mut h, 1, 10, Outcome::Ok);
        deliver(&mut h, 1, 20, Outcome::Ok);
        let fin = Final {
            totals_sent: 2,
            totals_acked: 2,
            ..Final::default()
        };
        assert_eq!(rules(&h, Some(&fin)), ["totals-sent", "totals-acked"]);
        fault(&mut h, "restart", 0, 1);
        assert_eq!(rules(&h, Some(&fin)), Vec::<&str>::new());
    }

    #[test]
    fn a_replace_of_a_message_out_of_deliveries_gets_it_one_more() {
        let mut h = sent();
        for (attempt, t) in [(1, 10), (2, 20), (3, 30), (4, 40)] {
            deliver(&mut h, attempt, t, Outcome::Error);
        }
        delivery(&mut h, "m", "p", 5, 60, 60, 60, Outcome::Ok);
        assert_eq!(rules(&h, None), ["too-many-deliveries"]);
        h.deliveries.pop();
        send_m(&mut h, "q", "replaced", 50, 51, None);
        delivery(&mut h, "m", "q", 5, 60, 60, 60, Outcome::Error);
        assert_eq!(rules(&h, None), Vec::<&str>::new(), "the count is kept");
        delivery(&mut h, "m", "q", 6, 70, 70, 70, Outcome::Ok);
        assert_eq!(rules(&h, None), ["too-many-deliveries"], "one more only");
    }

    #[test]
    fn an_uncounted_delivery_needs_a_fault_in_its_lease_window() {
        let mut h = sent();
        deliver(&mut h, 1, 10, Outcome::Error);
        deliver(&mut h, 3, 4000, Outcome::Ok);
        assert_eq!(rules(&h, None), ["uncounted-delivery"]);
        // Shorter than both the command time-out and a quarter lease.
        fault(&mut h, "pause", 1000, 1300);
        assert_eq!(rules(&h, None), ["uncounted-delivery"]);
        // After the redelivery: not in the window.
        fault(&mut h, "crash", 4100, 4100);
        assert_eq!(rules(&h, None), ["uncounted-delivery"]);
        fault(&mut h, "pause", 1000, 1593);
        assert_eq!(rules(&h, None), Vec::<&str>::new());
    }

    #[test]
    fn a_lease_lost_to_a_lost_reply_is_reported_a_stall_excuses_it() {
        let mut h = sent();
        deliver(&mut h, 1, 10, Outcome::Ok);
        let lost_at = at(&h, 400);
        h.lease_lost.push(("c0".into(), "m".into(), lost_at));
        assert_eq!(rules(&h, None), ["lease-lost"]);
        fault(&mut h, "cut", 5, 5);
        assert_eq!(rules(&h, None), ["lease-lost-replayed"]);
        // An unrenewed delivery has at least a quarter lease left.
        fault(&mut h, "pause", 20, 420);
        assert_eq!(rules(&h, None), ["lease-lost-replayed"]);
        fault(&mut h, "pause", 20, 560);
        assert_eq!(rules(&h, None), Vec::<&str>::new());
    }

    #[test]
    fn a_lease_lost_next_to_a_timed_out_delivery_may_be_its() {
        let mut h = sent();
        delivery(&mut h, "m", "p", 1, 0, 10, 1300, Outcome::Cancelled);
        delivery(&mut h, "m", "p", 2, 1300, 1301, 1301, Outcome::Ok);
        let lost_at = at(&h, 1302);
        h.lease_lost.push(("c0".into(), "m".into(), lost_at));
        assert_eq!(rules(&h, None), Vec::<&str>::new());
        h.deliveries[0].end = Some((at(&h, 1300), Outcome::Ok));
        assert_eq!(rules(&h, None), ["lease-lost"]);
    }

    #[test]
    fn headers_and_priority_are_delivered_as_sent() {
        let mut h = sent();
        h.sends[0].headers = vec![("k".into(), "v".into())];
        h.sends[0].priority = 3;
        deliver(&mut h, 1, 10, Outcome::Ok);
        assert_eq!(rules(&h, None), ["priority-changed", "headers"]);
        h.deliveries[0].headers = vec![("k".into(), "v".into())];
        h.deliveries[0].priority = 3;
        assert_eq!(rules(&h, None), Vec::<&str>::new());
    }

    #[test]
    fn no_lease_between_pause_returned_and_resume_called() {
        let mut h = sent();
        queue_op(&mut h, "pause", None, 100, 110);
        queue_op(&mut h, "resume", None, 900, 910);
        // Claimed before the pause returned (in flight), and as resume ran.
        delivery(&mut h, "m", "p", 1, 105, 120, 130, Outcome::Error);
        delivery(&mut h, "m", "p", 2, 905, 920, 930, Outcome::Ok);
        assert_eq!(rules(&h, None), Vec::<&str>::new());
        delivery(&mut h, "m", "p", 3, 500, 940, 950, Outcome::Ok);
        assert_eq!(rules(&h, None), ["leased-while-paused"]);
    }

    #[test]
    fn no_window_of_the_rate_holds_more_leases_than_it_allows() {
        let mut h = History::new();
        queue_op(&mut h, "rate", Some(2), 0, 10);
        for (i, claimed) in [100, 600, 1600, 2100].into_iter().enumerate() {
            delivery(
                &mut h,
                &format!("m{i}"),
                "p",
                1,
                claimed,
                claimed,
                claimed + 1,
                Outcome::Ok,
            );
        }
        assert!(check_queue_rules(&h).is_empty());
        delivery(&mut h, "m9", "p", 1, 1000, 1000, 1001, Outcome::Ok);
        assert_eq!(check_queue_rules(&h), ["rate-limit"]);
        // A change within the window starts the count anew.
        queue_op(&mut h, "rate", Some(2), 1050, 1060);
        assert!(check_queue_rules(&h).is_empty());
    }

    #[test]
    fn no_more_deliveries_claimed_than_the_global_concurrency() {
        let mut h = History::new();
        queue_op(&mut h, "concurrency", Some(1), 0, 10);
        delivery(&mut h, "a", "p", 1, 100, 100, 300, Outcome::Ok);
        delivery(&mut h, "b", "p", 1, 300, 300, 500, Outcome::Ok);
        assert!(check_queue_rules(&h).is_empty());
        delivery(&mut h, "c", "p", 1, 200, 200, 250, Outcome::Ok);
        assert_eq!(check_queue_rules(&h), ["global-concurrency"]);
        // A limit that may still hold for the deliveries claimed under it.
        queue_op(&mut h, "concurrency", Some(2), 20, 30);
        assert!(check_queue_rules(&h).is_empty());
    }

    /// Messages sent at 0 ms for sure, each (id, priority, delay ms).
    fn sent_with(msgs: &[(&str, u8, u64)]) -> History {
        let mut h = History::new();
        for &(id, priority, delay) in msgs {
            h.sends.push(SendRec {
                payload: id.into(),
                id: Some(id.into()),
                caller_id: true,
                delay: Duration::from_millis(delay),
                retry_count: 0,
                start: h.t0,
                end: at(&h, 1),
                error: None,
                how: "delay",
                priority,
                headers: Vec::new(),
                group: None,
            });
        }
        h
    }

    #[test]
    fn a_claim_takes_the_higher_priority_first() {
        let mut h = sent_with(&[("hi", 5, 0), ("lo", 1, 0)]);
        // Claimed within half a lease of due: neither was held before.
        delivery(&mut h, "lo", "lo", 1, 800, 800, 810, Outcome::Ok);
        delivery(&mut h, "hi", "hi", 1, 900, 900, 910, Outcome::Ok);
        for d in &mut h.deliveries {
            d.priority = if d.id == "hi" { 5 } else { 1 };
        }
        assert_eq!(rules(&h, None), ["priority-order"]);
        // Not promoted for sure: the claim came too soon after it was due.
        h.deliveries[0].leased_us = h.t0_us + 600_000;
        assert_eq!(rules(&h, None), Vec::<&str>::new());
        h.deliveries[0].leased_us = h.t0_us + 800_000;
        fault(&mut h, "cut", 300, 300);
        assert_eq!(rules(&h, None), Vec::<&str>::new());
    }

    /// Deliveries of one claim at `claimed` ms, started in this order.
    fn claim_started(h: &mut History, claimed: u64, ids: &[&str]) {
        for (n, id) in ids.iter().enumerate() {
            let from = claimed + 10 * (n as u64 + 1);
            delivery(h, id, id, 1, claimed, from, from + 5, Outcome::Ok);
            let priority = h.sends.iter().find(|s| s.payload == *id).unwrap().priority;
            h.deliveries.last_mut().unwrap().priority = priority;
        }
    }

    #[test]
    fn one_handler_starts_a_claim_in_its_order() {
        // Claim order: hi (priority 5), then early and late (priority 1, due order).
        let msgs = [("hi", 5, 0), ("early", 1, 0), ("late", 1, 100)];
        let run = |claimed: u64, order: &[&str], tweak: &dyn Fn(&mut History)| {
            let mut h = sent_with(&msgs);
            claim_started(&mut h, claimed, order);
            tweak(&mut h);
            // Attempts 2 without a first: other rules' business.
            let mut out = rules(&h, None);
            out.retain(|r| *r != "uncounted-delivery");
            out
        };
        let none = Vec::<&str>::new();
        assert_eq!(run(300, &["hi", "early", "late"], &|_| {}), none);
        assert_eq!(run(300, &["early", "hi", "late"], &|_| {}), ["start-order"]);
        assert_eq!(run(300, &["hi", "late", "early"], &|_| {}), ["start-order"]);
        // Both out of turn.
        assert_eq!(
            run(300, &["late", "early", "hi"], &|_| {}),
            ["start-order", "start-order"]
        );
        // Several handlers: any order.
        let two = |h: &mut History| h.deliveries.iter_mut().for_each(|d| d.concurrency = 2);
        assert_eq!(run(300, &["late", "early", "hi"], &two), none);
        // Due within the clock slack of each other: either may be first.
        let close = |h: &mut History| h.sends[2].delay = Duration::from_millis(10);
        assert_eq!(run(300, &["hi", "late", "early"], &close), none);
        // Separate claims: the later one may bring a higher priority.
        let apart = |h: &mut History| h.deliveries[1].leased_us += 50_000;
        assert_eq!(run(300, &["early", "hi", "late"], &apart), none);
        // The one that went first may have been handed back unstarted
        // before (then from the retry list, ahead of any priority): claimed
        // half a lease after it was due, or after a fault since it was due
        // (a stop hands back), or a retry (attempt 2).
        assert_eq!(run(1000, &["early", "hi"], &|_| {}), none);
        assert_eq!(run(900, &["early", "hi"], &|_| {}), ["start-order"]);
        let stopped = |h: &mut History| fault(h, "stop", 150, 200);
        assert_eq!(run(300, &["early", "hi"], &stopped), none);
        let slow = |h: &mut History| fault(h, "slow", 150, 200);
        assert_eq!(run(300, &["early", "hi"], &slow), ["start-order"]);
        let retry = |h: &mut History| h.deliveries[0].attempt = 2;
        assert_eq!(run(300, &["early", "hi"], &retry), none);
        // A higher priority is ahead whatever its own history (a retry,
        // requeued, rescheduled); an equal one only in its first life.
        let hi_retried = |h: &mut History| h.deliveries[1].attempt = 2;
        assert_eq!(run(300, &["early", "hi"], &hi_retried), ["start-order"]);
        let early_retried = |h: &mut History| h.deliveries[1].attempt = 2;
        assert_eq!(run(300, &["late", "early"], &early_retried), none);
        // A replace keeps a due time no send recorded: an id replaced (or
        // maybe replaced) is left out.
        assert_eq!(run(300, &["late", "early"], &|_| {}), ["start-order"]);
        let early_replaced = |h: &mut History| {
            let mut replace = h.sends[1].clone();
            replace.how = "replaced";
            h.sends.push(replace);
        };
        assert_eq!(run(300, &["late", "early"], &early_replaced), none);
        // Handed back (to the head of its priority's line) before the claim.
        let late_handed_back = |h: &mut History| {
            let at = h.t0_us + 250_000;
            h.handbacks.push(("late".into(), at - 100_000, at));
        };
        assert_eq!(run(300, &["late", "early"], &late_handed_back), none);
        let requeued = |h: &mut History| requeue_all(h, 50, 60);
        // A requeue of every dead letter moves only the dead: one never
        // delivered before was dead only if a fault counted a lease.
        assert_eq!(run(300, &["late", "early"], &requeued), ["start-order"]);
        let crashed = |h: &mut History| {
            requeued(h);
            fault(h, "crash", 20, 20);
            // Not in A's window (from due at 100 ms less two command time-outs).
            h.sends[2].delay = Duration::from_millis(1100);
        };
        assert_eq!(run(1300, &["late", "early"], &crashed), none);
        // A higher priority is ahead all the same.
        assert_eq!(run(1300, &["late", "hi"], &crashed), ["start-order"]);
        // Delivered before, it may have died and been requeued (pushed to
        // ready as due then, behind one due before it but promoted later).
        let redelivered = |h: &mut History| {
            requeue_all(h, 250, 260);
            delivery(h, "late", "late", 1, 200, 210, 220, Outcome::Skip);
            h.deliveries.last_mut().unwrap().priority = 1;
        };
        assert_eq!(run(300, &["late", "early"], &redelivered), none);
        assert_eq!(run(300, &["late", "hi"], &redelivered), none);
        assert_eq!(run(300, &["late", "hi"], &requeued), ["start-order"]);
    }

    #[test]
    fn one_handler_starts_a_claims_ungrouped_messages_first_whatever_the_groups_priorities() {
        // The batch of seed 1795673585584449033: due at once, "hi" of
        // priority 2 in group g, "lo" and "lo2" of priority 0 without one.
        let run = |order: &[&str], hi_group: Option<&str>| {
            let mut h = sent_with(&[("hi", 2, 0), ("lo", 0, 0), ("lo2", 0, 0)]);
            h.groups.push(("g".into(), 3));
            h.sends[0].group = hi_group.map(String::from);
            claim_started(&mut h, 300, order);
            let hi = h.deliveries.iter_mut().find(|d| d.id == "hi").unwrap();
            hi.group = hi_group.map(String::from);
            rules(&h, None)
        };
        let none = Vec::<&str>::new();
        // A claim hands the ungrouped messages first, then the groups'.
        assert_eq!(run(&["lo", "lo2", "hi"], Some("g")), none);
        assert_eq!(run(&["lo", "hi", "lo2"], Some("g")), none);
        // Among the ungrouped ones the order still holds in a run with groups.
        assert_eq!(run(&["hi", "lo", "lo2"], None), none);
        assert_eq!(run(&["lo", "lo2", "hi"], None), ["start-order", "start-order"]);
    }

    /// `sent_with` messages, all of group `g` (concurrency `m`).
    fn grouped(msgs: &[(&str, u8, u64)], m: u64) -> History {
        let mut h = sent_with(msgs);
        h.groups.push(("g".into(), m));
        h.sends.iter_mut().for_each(|s| s.group = Some("g".into()));
        h
    }

    /// A delivery of grouped message `id`, claimed at `claimed` ms, run
    /// from then until `to` ms.
    fn deliver_grouped(h: &mut History, id: &str, claimed: u64, to: u64) {
        delivery(h, id, id, 1, claimed, claimed, to, Outcome::Ok);
        h.deliveries.last_mut().unwrap().group = Some("g".into());
    }

    #[test]
    fn no_more_deliveries_of_a_group_processing_than_its_concurrency() {
        let mut h = grouped(&[("a", 0, 0), ("b", 0, 0), ("c", 0, 0)], 2);
        deliver_grouped(&mut h, "a", 100, 300);
        deliver_grouped(&mut h, "b", 200, 400);
        deliver_grouped(&mut h, "c", 300, 500);
        assert_eq!(rules(&h, None), Vec::<&str>::new());
        h.groups[0].1 = 1;
        assert_eq!(rules(&h, None), ["group-concurrency", "group-concurrency"]);
        // A handler past its lease (renewed, or its lease lost) counts
        // only until the claim's deadline.
        h.deliveries[0].end_us = Some(h.t0_us + 5_000_000);
        h.deliveries[1].leased_us = h.t0_us + 2_100_000;
        h.deliveries[2].leased_us = h.t0_us + 2_500_000;
        assert_eq!(rules(&h, None), Vec::<&str>::new());
        // Another group's deliveries are not counted.
        h.deliveries[1].leased_us = h.t0_us + 250_000;
        assert_eq!(rules(&h, None), ["group-concurrency"]);
        h.deliveries[1].group = None;
        h.sends[1].group = None;
        assert_eq!(rules(&h, None), Vec::<&str>::new());
        // Delivered in another group than it was sent to.
        h.sends[1].group = Some("g".into());
        assert_eq!(rules(&h, None), ["group-changed"]);
    }

    #[test]
    fn no_window_of_a_groups_rate_holds_more_of_its_leases_than_it_allows() {
        let mut h = grouped(&[("a", 0, 0), ("b", 0, 0), ("c", 0, 0), ("d", 0, 0)], 5);
        h.group_rates.push(("g".into(), 2, 1000));
        deliver_grouped(&mut h, "a", 100, 110);
        deliver_grouped(&mut h, "b", 600, 610);
        deliver_grouped(&mut h, "c", 1100, 1110);
        deliver_grouped(&mut h, "d", 1700, 1710);
        assert_eq!(rules(&h, None), Vec::<&str>::new());
        // A third start within 1 s of the first.
        h.deliveries[2].leased_us = h.t0_us + 1_050_000;
        assert_eq!(rules(&h, None), ["group-rate"]);
        // A claim re-sent after a lost reply hands the same lease again: counted once.
        h.deliveries[2].leased_us = h.t0_us + 1_100_000;
        let mut again = h.deliveries[1].clone();
        again.start = again.end.unwrap().0;
        h.deliveries.push(again);
        assert_eq!(rules(&h, None), Vec::<&str>::new());
        // Another group's leases, or a group without a rate, are not counted.
        h.deliveries[2].leased_us = h.t0_us + 1_050_000;
        h.deliveries[2].group = None;
        h.sends[2].group = None;
        assert_eq!(rules(&h, None), Vec::<&str>::new());
        h.deliveries[2].group = Some("g".into());
        h.sends[2].group = Some("g".into());
        h.group_rates.clear();
        assert_eq!(rules(&h, None), Vec::<&str>::new());
    }

    #[test]
    fn early_takes_the_due_time_of_a_replace_after_the_last_delivery() {
        // Delivered, failed, rescheduled by 1.2 s at 100 ms, then replaced
        // with a delay of 1 ms at 300 ms: due then, not at 1300 ms.
        let run = |replaced: bool| {
            let mut h = sent();
            deliver(&mut h, 1, 10, Outcome::Error);
            h.ops.push(IdOp {
                kind: "reschedule",
                id: "m".into(),
                delay: Some(Duration::from_millis(1200)),
                start: at(&h, 100),
                end: at(&h, 101),
                result: Ok(true),
            });
            if replaced {
                send_m(&mut h, "q", "replaced", 300, 301, None);
                h.sends.last_mut().unwrap().delay = Duration::from_millis(1);
            }
            delivery(
                &mut h,
                "m",
                if replaced { "q" } else { "p" },
                2,
                400,
                400,
                401,
                Outcome::Ok,
            );
            rules(&h, None)
        };
        assert_eq!(run(true), Vec::<&str>::new());
        assert_eq!(run(false), ["early"]);
    }

    #[test]
    fn early_ignores_a_reschedule_called_after_the_claim() {
        // Failed at 10 ms asking RetryAfter(50 ms), claimed again at 62 ms;
        // rescheduled by 700 ms at `moved` ms; its handler starts at 65 ms.
        let run = |moved: u64| {
            let mut h = sent();
            deliver(&mut h, 1, 10, Outcome::RetryAfter(Duration::from_millis(50)));
            h.ops.push(IdOp {
                kind: "reschedule",
                id: "m".into(),
                delay: Some(Duration::from_millis(700)),
                start: at(&h, moved),
                end: at(&h, moved + 4),
                result: Ok(true),
            });
            delivery(&mut h, "m", "p", 2, 62, 65, 66, Outcome::Ok);
            rules(&h, None)
        };
        assert_eq!(run(65), Vec::<&str>::new(), "after the claim: the next due time");
        assert_eq!(run(60), Vec::<&str>::new(), "about the claim: it may have come after");
        assert_eq!(run(30), ["early"], "well before the claim: moved it");
    }

    #[test]
    fn early_lets_a_reschedule_called_about_the_claim_move_it_sooner() {
        // Sent at 0 ms with a delay of 1 s, rescheduled to `moved` + 7 ms,
        // claimed at 62 ms; its handler starts at 65 ms.
        let run = |moved: u64| {
            let mut h = sent();
            h.sends[0].delay = Duration::from_secs(1);
            h.ops.push(IdOp {
                kind: "reschedule",
                id: "m".into(),
                delay: Some(Duration::from_millis(7)),
                start: at(&h, moved),
                end: at(&h, moved + 3),
                result: Ok(true),
            });
            delivery(&mut h, "m", "p", 1, 62, 65, 66, Outcome::Ok);
            rules(&h, None)
        };
        assert_eq!(run(20), Vec::<&str>::new(), "well before the claim: moved it");
        // CI: seed 1796018299874751022, a reschedule 15 ms before the claim.
        assert_eq!(run(50), Vec::<&str>::new(), "about the claim: it may have come before");
        assert_eq!(run(70), ["early"], "after the claim: the next due time");
    }

    /// Parent `id` of `role` waiting for `children` under `policy`, sent
    /// for sure at 0 ms.
    fn flow_msg(h: &mut History, id: &str, role: &'static str, children: &[&str], policy: &'static str) {
        h.flow_msgs.push(FlowMsg {
            id: id.into(),
            queue: "flow_a".into(),
            role,
            children: children.iter().map(|c| c.to_string()).collect(),
            policy,
            closed_us: None,
            start: h.t0,
            end: at(h, 1),
            result: Ok(()),
        });
    }

    /// A delivery of flow message `id` claimed at `claimed` ms, run until `to` ms.
    fn flow_delivery(h: &mut History, id: &str, attempt: u32, claimed: u64, to: u64, outcome: Outcome) {
        delivery(h, id, id, attempt, claimed, claimed, to, outcome);
        let d = h.deliveries.pop().unwrap();
        h.flow_deliveries.push(d);
    }

    fn flow_rules(h: &History) -> Vec<&'static str> {
        rules(h, None)
            .into_iter()
            .filter(|r| ["flow", "note", "children", "results"].iter().any(|f| r.starts_with(f)))
            .collect()
    }

    #[test]
    fn no_parent_is_leased_before_its_children_finished() {
        let run = |policy: &'static str, b_ends: Outcome, p_leased: u64, tweak: &dyn Fn(&mut History)| {
            let mut h = History::new();
            flow_msg(&mut h, "p", "flow", &["a", "b"], policy);
            flow_delivery(&mut h, "a", 1, 100, 150, Outcome::Ok);
            flow_delivery(&mut h, "b", 1, 200, 300, b_ends);
            flow_delivery(&mut h, "p", 1, p_leased, p_leased + 10, Outcome::Ok);
            tweak(&mut h);
            flow_rules(&h)
        };
        let none = Vec::<&str>::new();
        assert_eq!(run("fail", Outcome::Ok, 400, &|_| {}), none);
        // While b ran (its ack comes after its handler returned), or before it was claimed.
        assert_eq!(run("fail", Outcome::Ok, 250, &|_| {}), ["flow-early"]);
        assert_eq!(run("ignore", Outcome::Ok, 150, &|_| {}), ["flow-early"]);
        // A SkipRetry finishes b for `ignore`, not for `wait` (only an ack releases it)...
        assert_eq!(run("ignore", Outcome::Skip, 400, &|_| {}), none);
        assert_eq!(run("ignore", Outcome::Skip, 250, &|_| {}), ["flow-early"]);
        // ...whose bound is then b's last lease.
        assert_eq!(run("wait", Outcome::Skip, 250, &|_| {}), none);
        assert_eq!(run("wait", Outcome::Skip, 150, &|_| {}), ["flow-early"]);
        // A fault that may have counted a lease no handler ran: b may have
        // died unseen while its handler ran; only its lease bounds.
        let crashed = |h: &mut History| fault(h, "crash", 210, 210);
        assert_eq!(run("fail", Outcome::Ok, 250, &crashed), none);
        assert_eq!(run("wait", Outcome::Ok, 250, &crashed), ["flow-early"]);
        // A cohort's callback waits for the close too.
        let callback = |h: &mut History| {
            h.flow_msgs[0].role = "complete";
            h.flow_msgs[0].closed_us = Some(h.t0_us + 500_000);
        };
        assert_eq!(run("ignore", Outcome::Ok, 400, &callback), ["flow-early"]);
        assert_eq!(run("ignore", Outcome::Ok, 600, &callback), none);
    }

    #[test]
    fn a_parent_runs_once_its_children_finished_or_follows_its_policy() {
        let judge = |policy: &'static str, role: &'static str, b_dead: bool, p: &str| {
            let mut h = History::new();
            flow_msg(&mut h, "p", role, &["a", "b"], policy);
            flow_delivery(&mut h, "a", 1, 100, 150, Outcome::Ok);
            flow_delivery(
                &mut h,
                "b",
                1,
                200,
                300,
                if b_dead { Outcome::Skip } else { Outcome::Ok },
            );
            let mut fin = FlowFinal {
                at_us: h.t0_us + 10_000_000,
                ..FlowFinal::default()
            };
            if b_dead {
                fin.dead.insert("b".into(), "injected skip".into());
            }
            match p {
                "ran" => flow_delivery(&mut h, "p", 1, 400, 410, Outcome::Ok),
                "waiting" => {
                    fin.waiting.insert("p".into());
                }
                "dead" => {
                    fin.dead.insert("p".into(), "child flow_a/b dead".into());
                }
                "dead-other" => {
                    fin.dead.insert("p".into(), "child flow_a/x dead".into());
                }
                // The reason names the child's shard, not its queue.
                "dead-shard" => {
                    flow_msg(&mut h, "b", "child", &[], policy);
                    fin.dead.insert("p".into(), "child flow_a#1/b dead".into());
                }
                // Claimed, no handler ran, its last lease timed out.
                "timed-out" => {
                    fin.dead.insert("p".into(), "timeout".into());
                }
                _ => {}
            }
            check_flow_final(&h, LIMITS, &fin)
                .into_iter()
                .map(|v| v.rule)
                .collect::<Vec<_>>()
        };
        let none = Vec::<&str>::new();
        assert_eq!(judge("fail", "flow", false, "ran"), none);
        assert_eq!(judge("fail", "flow", false, "waiting"), ["flow-stuck"]);
        assert_eq!(judge("fail", "after", false, "gone"), ["flow-stuck"]);
        assert_eq!(judge("fail", "flow", true, "dead"), none);
        assert_eq!(judge("fail", "flow", true, "dead-other"), ["flow-policy"]);
        assert_eq!(judge("fail", "flow", true, "dead-shard"), ["flow-policy"]);
        assert_eq!(judge("fail", "flow", true, "ran"), ["flow-policy"]);
        assert_eq!(judge("wait", "flow", false, "timed-out"), none);
        assert_eq!(judge("fail", "flow", true, "timed-out"), ["flow-policy"]);
        assert_eq!(judge("ignore", "complete", true, "ran"), none);
        assert_eq!(judge("ignore", "complete", true, "waiting"), ["flow-stuck"]);
        assert_eq!(judge("wait", "flow", true, "waiting"), none);
        assert_eq!(judge("wait", "flow", true, "ran"), ["flow-policy"]);
        assert_eq!(judge("remove", "success", true, "gone"), none);
        assert_eq!(judge("remove", "success", true, "ran"), ["cohort-success"]);
        assert_eq!(judge("remove", "success", false, "ran"), none);
        // A child parent removed by its own dead child counts as deleted.
        let nested = |policy: &'static str, p: &str| {
            let mut h = History::new();
            flow_msg(&mut h, "p", "flow", &["q"], policy);
            flow_msg(&mut h, "q", "flow", &["c"], "remove");
            flow_delivery(&mut h, "c", 1, 100, 150, Outcome::Skip);
            let mut fin = FlowFinal {
                at_us: h.t0_us + 10_000_000,
                ..FlowFinal::default()
            };
            fin.dead.insert("c".into(), "injected skip".into());
            match p {
                "dead" => {
                    fin.dead.insert("p".into(), "child flow_a/q cancelled".into());
                }
                "waiting" => {
                    fin.waiting.insert("p".into());
                }
                _ => {}
            }
            check_flow_final(&h, LIMITS, &fin)
                .into_iter()
                .map(|v| v.rule)
                .collect::<Vec<_>>()
        };
        assert_eq!(nested("remove", "gone"), none);
        assert_eq!(nested("fail", "dead"), none);
        assert_eq!(nested("wait", "dead"), none);
        assert_eq!(nested("wait", "waiting"), ["flow-policy"]);
        assert_eq!(nested("fail", "gone"), ["flow-policy"]);
    }

    #[test]
    fn a_result_read_back_is_one_an_ok_delivery_returned() {
        let mut h = History::new();
        flow_delivery(&mut h, "a", 1, 100, 150, Outcome::Error);
        flow_delivery(&mut h, "a", 2, 200, 250, Outcome::Ok);
        let returned = flow_result(&h.flow_deliveries[1]);
        let read = |r: Option<&str>| {
            let results = HashMap::from([("a".to_string(), r.map(|r| r.as_bytes().to_vec()))]);
            check_results(&h, &results)
                .into_iter()
                .map(|v| v.rule)
                .collect::<Vec<_>>()
        };
        assert_eq!(read(Some(&returned)), Vec::<&str>::new());
        assert_eq!(read(Some(&flow_result(&h.flow_deliveries[0]))), ["results-kept"]);
        assert_eq!(read(None), ["results-kept"]);
    }

    #[test]
    fn a_parent_reads_its_childrens_results_as_returned() {
        let read = |child: &str, outcome: &str, result: Option<String>| {
            let mut h = History::new();
            flow_msg(&mut h, "p", "flow", &["a", "b"], "ignore");
            flow_delivery(&mut h, "a", 1, 100, 150, Outcome::Ok);
            flow_delivery(&mut h, "b", 1, 100, 150, Outcome::Skip);
            let result = result.map(|r| {
                if r == "returned" {
                    flow_result(&h.flow_deliveries[0])
                } else {
                    r
                }
            });
            h.children_reads.push(ChildrenRead {
                parent: "p".into(),
                attempt: 1,
                children: vec![(child.into(), outcome.into(), result.map(String::into_bytes))],
            });
            flow_rules(&h)
        };
        let none = Vec::<&str>::new();
        assert_eq!(read("a", "Acked", Some("returned".into())), none);
        // Every Ok delivery sets a result: one read without it was lost.
        assert_eq!(read("a", "Acked", None), ["results-kept"]);
        assert_eq!(read("b", "Dead", None), none);
        assert_eq!(read("a", "Acked", Some("r a 2 c9".into())), ["children-results"]);
        assert_eq!(read("b", "Acked", None), ["children-results"]);
        assert_eq!(read("x", "Acked", None), ["children-results"]);
    }

    #[test]
    fn a_note_written_after_the_ack_is_rejected() {
        let note = |h: &mut History, result: Result<(), (bool, String)>| {
            h.late_notes = vec![LateNote {
                id: "a".into(),
                attempt: 1,
                consumer: "c0".into(),
                start: at(h, 300),
                end: at(h, 301),
                result,
            }];
            flow_rules(h)
        };
        let mut h = History::new();
        flow_delivery(&mut h, "a", 1, 100, 150, Outcome::Ok);
        assert_eq!(note(&mut h, Err((true, "lease lost".into()))), Vec::<&str>::new());
        assert_eq!(note(&mut h, Ok(())), ["note-unfenced"]);
        assert_eq!(note(&mut h, Err((false, "timed out".into()))), ["note-unfenced"]);
        // A reply lost meanwhile may have turned a rejection into another error.
        fault(&mut h, "cut", 300, 300);
        assert_eq!(note(&mut h, Err((false, "timed out".into()))), Vec::<&str>::new());
    }

    #[test]
    fn an_ordered_group_leases_in_due_order() {
        let mut h = grouped(&[("early", 0, 0), ("late", 0, 100)], 1);
        deliver_grouped(&mut h, "late", 300, 310);
        deliver_grouped(&mut h, "early", 400, 410);
        assert_eq!(rules(&h, None), ["group-order"]);
        // Due within the clock slack of each other: either may be first.
        h.sends[1].delay = Duration::from_millis(10);
        assert_eq!(rules(&h, None), Vec::<&str>::new());
        h.sends[1].delay = Duration::from_millis(100);
        // Not judged: a group that is not ordered, or different priorities
        // (a higher priority goes first), or a fault before the claim, or a
        // message touched by an operation.
        h.groups[0].1 = 2;
        assert_eq!(rules(&h, None), Vec::<&str>::new());
        h.groups[0].1 = 1;
        let judged = |tweak: &dyn Fn(&mut History)| {
            let mut h = h.clone();
            tweak(&mut h);
            rules(&h, None)
        };
        assert_eq!(judged(&|_| {}), ["group-order"]);
        let none = Vec::<&str>::new();
        assert_eq!(
            judged(&|h| {
                h.sends[1].priority = 5;
                h.deliveries[0].priority = 5;
            }),
            none
        );
        assert_eq!(judged(&|h| fault(h, "crash", 200, 200)), none);
        assert_eq!(judged(&|h| fault(h, "slow", 200, 200)), ["group-order"]);
        assert_eq!(judged(&|h| id_op(h, "reschedule", "early", 50, 60, Ok(true))), none);
        // Both at once: the ordered group's concurrency is 1.
        assert_eq!(
            judged(&|h| h.deliveries[0].end_us = Some(h.t0_us + 450_000)),
            ["group-concurrency", "group-order"]
        );
    }

    #[test]
    fn a_fire_belongs_to_a_live_definition_on_its_grid() {
        let mut h = History::new();
        schedule_op(&mut h, "set", Some(("a", Grid::Every(1000))), 0, 2);
        fire(&mut h, "a", 1001, 1);
        fire(&mut h, "a", 2001, 1);
        assert!(schedule_rules(&h, true).is_empty());
        // Off its grid: a plan of another definition sent with this one's value.
        fire(&mut h, "a", 2500, 1);
        assert_eq!(schedule_rules(&h, false), ["fire-stale"]);
        h.deliveries.pop();
        // Removed and re-created: the old definition never fires again.
        schedule_op(&mut h, "remove", None, 2100, 2110);
        schedule_op(&mut h, "set", Some(("b", Grid::Every(1300))), 2120, 2121);
        fire(&mut h, "a", 3001, 1);
        fire(&mut h, "b", 3420, 1);
        assert_eq!(schedule_rules(&h, false), ["fire-stale"]);
        h.deliveries.remove(h.deliveries.len() - 2);
        assert!(schedule_rules(&h, true).is_empty());
        // Paused: no fire between the pause's return and the resume's call.
        schedule_op(&mut h, "pause", None, 3500, 3510);
        schedule_op(&mut h, "resume", None, 6000, 6010);
        fire(&mut h, "b", 4720, 1);
        assert_eq!(schedule_rules(&h, false), ["fire-stale"]);
        h.deliveries.pop();
        fire(&mut h, "b", 7320, 1);
        assert_eq!(schedule_rules(&h, true), ["fire-missing"]);
        fire(&mut h, "b", 6020, 1);
        assert!(schedule_rules(&h, true).is_empty());
    }

    #[test]
    fn a_fire_is_sent_once_in_time_and_none_is_missing() {
        let mut h = History::new();
        let times = [1000, 3000, 5000].iter().map(|t| h.t0_us / 1000 + t).collect();
        schedule_op(&mut h, "set", Some(("a", Grid::Times(times))), 0, 2);
        fire(&mut h, "a", 1000, 1);
        fire(&mut h, "a", 5000, 1);
        assert!(schedule_rules(&h, false).is_empty());
        assert_eq!(schedule_rules(&h, true), ["fire-missing"]);
        let id = fire(&mut h, "a", 3000, 1);
        assert!(schedule_rules(&h, true).is_empty());
        // A second attempt 1: sent twice, unless a requeue came between.
        fire(&mut h, "a", 3000, 1);
        h.deliveries.last_mut().unwrap().start += Duration::from_millis(100);
        assert_eq!(schedule_rules(&h, true), ["fire-twice"]);
        requeue_all(&mut h, 3050, 3060);
        assert!(schedule_rules(&h, true).is_empty());
        // Before its fire time by Redis's clock.
        h.deliveries.iter_mut().find(|d| d.id == id).unwrap().start_us -= 200_000;
        assert_eq!(schedule_rules(&h, true), ["fire-early"]);
    }

    fn liveness_rules(h: &History) -> Vec<&'static str> {
        let sends = h.sends.iter().map(|s| (s.payload.as_str(), s)).collect();
        let mut out = Vec::new();
        liveness::check_liveness(h, LIMITS, &sends, &mut |rule, _, _| out.push(rule));
        out
    }

    /// `grouped` messages of group `g` (concurrency `m`), due at 0 ms, and
    /// consumer c0 with `handlers` handlers all run long.
    fn consumed(msgs: &[&str], m: u64, handlers: usize) -> History {
        let msgs: Vec<(&str, u8, u64)> = msgs.iter().map(|id| (*id, 0, 0)).collect();
        let mut h = grouped(&msgs, m);
        h.consumers.push(ConsumerRec {
            name: "c0".into(),
            concurrency: handlers,
            start_us: h.t0_us,
            end_us: None,
        });
        h
    }

    #[test]
    fn a_group_freed_by_an_ack_starts_its_next_message_within_the_bound() {
        // Group g of concurrency 2 with a backlog of four: a and b run from
        // 10 to 20 ms; c and d, next, start at `next` ms.
        let run = |next: u64, tweak: &dyn Fn(&mut History)| {
            let mut h = consumed(&["a", "b", "c", "d"], 2, 4);
            deliver_grouped(&mut h, "a", 10, 20);
            deliver_grouped(&mut h, "b", 10, 20);
            deliver_grouped(&mut h, "c", next, next + 10);
            deliver_grouped(&mut h, "d", next, next + 10);
            tweak(&mut h);
            liveness_rules(&h)
        };
        let none = Vec::<&str>::new();
        // At the next tick of a 1 s fetch_interval: a defect.
        assert_eq!(run(1000, &|_| {}), ["liveness"]);
        // Within the bound of the ack (20 ms, its settling 100 ms more).
        assert_eq!(run(150, &|_| {}), none);
        // Not if every handler was busy: three long ungrouped runs on c0,
        // of concurrency 3 (the others sent and started at once).
        assert_eq!(
            run(1000, &|h| {
                h.consumers[0].concurrency = 3;
                for x in ["x", "y", "z"] {
                    delivery(h, x, x, 1, 0, 0, 990, Outcome::Ok);
                }
            }),
            none
        );
        // Nor while the group was paused, nor near a fault.
        let group_op = |h: &mut History, kind: &'static str, from: u64, to: u64| {
            let us = |ms: u64| h.t0_us + ms as i64 * 1000;
            let (start_us, end_us) = (us(from), us(to));
            h.group_ops.push(GroupOp {
                group: "g".into(),
                kind,
                value: 1,
                start_us,
                end_us,
                result: Ok(true),
            });
        };
        assert_eq!(
            run(1000, &|h| {
                group_op(h, "pause", 15, 18);
                group_op(h, "resume", 900, 905);
            }),
            none
        );
        assert_eq!(run(1000, &|h| fault(h, "cut", 30, 31)), none);
        // A pause's effects end within a time-out, a probe and 300 ms; a
        // crashed consumer's claims no handler started hold their slots
        // unseen until their leases run out, a lease more.
        assert_eq!(run(1500, &|h| fault(h, "pause", 30, 31)), ["liveness"]);
        assert_eq!(run(1500, &|h| fault(h, "crash", 30, 31)), none);
        // Nor below a concurrency lowered to 1 meanwhile (b still holds it),
        // but the group at 1 must then start c at once after b's ack.
        assert_eq!(run(1000, &|h| group_op(h, "concurrency", 5, 6)), ["liveness"]);
        assert_eq!(
            run(1000, &|h| {
                group_op(h, "concurrency", 5, 6);
                h.deliveries[1].end_us = Some(h.t0_us + 950_000);
            }),
            none
        );
        // A group at its rate waits until its window lets one more start,
        // and starts then.
        let rate = |h: &mut History| h.group_rates.push(("g".into(), 2, 1000));
        assert_eq!(run(1060, &rate), none);
        assert_eq!(run(1900, &rate), ["liveness"]);
        // A delivery handed back unstarted held a slot unseen.
        assert_eq!(
            run(1000, &|h| {
                let at = h.t0_us + 400_000;
                h.handbacks.push(("c".into(), at - 350_000, at));
            }),
            none
        );
        // Only while it was held: one handed back long before does not
        // excuse the wait.
        assert_eq!(
            run(1000, &|h| {
                let at = h.t0_us - 1_000_000;
                h.handbacks.push(("c".into(), at - 350_000, at));
            }),
            ["liveness"]
        );
    }

    #[test]
    fn an_ordered_group_retries_a_failed_head_before_any_other_message() {
        // a (priority 0) fails at 20 ms; b (priority 9) is leased at `b_at`;
        // a's retry at 300 ms.
        let run = |b_at: u64, failed: Outcome, attempt: u32, m: u64| {
            let mut h = grouped(&[("a", 0, 0), ("b", 9, 0)], m);
            delivery(&mut h, "a", "a", attempt, 10, 10, 20, failed);
            delivery(&mut h, "b", "b", 1, b_at, b_at, b_at + 10, Outcome::Ok);
            delivery(&mut h, "a", "a", attempt + 1, 300, 300, 310, Outcome::Ok);
            for d in &mut h.deliveries {
                d.group = Some("g".into());
                d.priority = if d.id == "b" { 9 } else { 0 };
            }
            // (An attempt 2 alone is uncounted-delivery's business.)
            rules(&h, None)
                .into_iter()
                .filter(|r| *r == "ordered")
                .collect::<Vec<_>>()
        };
        let none = Vec::<&str>::new();
        assert_eq!(run(100, Outcome::Error, 1, 1), ["ordered"]);
        assert_eq!(
            run(100, Outcome::RetryAfter(Duration::from_millis(50)), 2, 1),
            ["ordered"]
        );
        assert_eq!(run(400, Outcome::Error, 1, 1), none);
        // Dead (a SkipRetry, or out of deliveries: retry count 3): the group goes on.
        assert_eq!(run(100, Outcome::Skip, 1, 1), none);
        assert_eq!(run(100, Outcome::Error, 4, 1), none);
        // Not an ordered group.
        assert_eq!(run(100, Outcome::Error, 1, 2), none);
    }

    #[test]
    fn no_lease_of_a_paused_group() {
        let run = |leased: u64| {
            let mut h = grouped(&[("a", 0, 0)], 2);
            deliver_grouped(&mut h, "a", leased, leased + 10);
            let us = |ms: i64| h.t0_us + ms * 1000;
            for (kind, from, to) in [("pause", 100, 110), ("resume", 500, 510)] {
                h.group_ops.push(GroupOp {
                    group: "g".into(),
                    kind,
                    value: 0,
                    start_us: us(from),
                    end_us: us(to),
                    result: Ok(true),
                });
            }
            rules(&h, None)
        };
        assert_eq!(run(300), ["leased-while-group-paused"]);
        assert_eq!(run(105), Vec::<&str>::new());
        assert_eq!(run(505), Vec::<&str>::new());
    }

    #[test]
    fn a_parent_dead_of_a_child_keeps_its_other_childrens_results() {
        // a acked at 150 ms; b dies on its last attempt, claimed at 1000 ms;
        // p fails.
        let run = |kept: Option<&str>| {
            let mut h = History::new();
            flow_msg(&mut h, "p", "flow", &["a", "b"], "fail");
            flow_delivery(&mut h, "a", 1, 100, 150, Outcome::Ok);
            flow_delivery(&mut h, "b", 1, 1000, 1010, Outcome::Skip);
            let mut fin = FlowFinal {
                at_us: h.t0_us + 10_000_000,
                ..FlowFinal::default()
            };
            fin.dead.insert("b".into(), "injected skip".into());
            fin.dead.insert("p".into(), "child flow_a/b dead".into());
            let returned = flow_result(&h.flow_deliveries[0]);
            let read = kept.map(|r| {
                if r == "returned" {
                    returned.clone()
                } else {
                    r.to_string()
                }
            });
            let children = read
                .map(|r| vec![("a".to_string(), "Acked".to_string(), Some(r.into_bytes()))])
                .unwrap_or_default();
            fin.dead_children.insert("p".into(), children);
            check_flow_final(&h, LIMITS, &fin)
                .into_iter()
                .map(|v| v.rule)
                .collect::<Vec<_>>()
        };
        assert_eq!(run(Some("returned")), Vec::<&str>::new());
        assert_eq!(run(None), ["results-kept"]);
        assert_eq!(run(Some("r a 9 c9")), ["results-kept"]);
    }
}
