//! The history of a randomized run (`tests/history.rs`) and the model it is
//! checked against: the at-least-once promise, rule by rule.
//!
//! The driver records every send, cancel, reschedule and requeue with its
//! result and the instants it started and ended, every delivery a handler
//! saw (id, attempt, start, end, outcome), every `LeaseLost` event and every
//! fault it injected. [`check`] replays that history and returns each broken
//! rule with the history lines of the message it is about.
//!
//! Std and `delayqueue`-free on purpose (ids and payloads are strings), so
//! the rules read without the machinery that produced the history.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::time::{Duration, Instant};

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
    /// "delay", "at" or "batch".
    pub how: &'static str,
}

/// A cancel, reschedule or requeue of one id (`*`: every dead letter).
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
    pub start: Instant,
    pub end: Option<(Instant, Outcome)>,
}

/// One injected fault, from when it began until it was over.
#[derive(Debug, Clone)]
pub struct FaultRec {
    pub kind: &'static str,
    pub start: Instant,
    pub end: Instant,
    pub detail: String,
}

impl FaultRec {
    /// Redis stopped answering writes for the whole fault (a pause or a restart).
    pub fn stalls(&self) -> bool {
        matches!(self.kind, "pause" | "restart")
    }

    fn overlaps(&self, from: Instant, to: Instant) -> bool {
        self.start <= to && self.end >= from
    }

    /// Whether a request made from `from` to `to` may have lost its reply to
    /// this fault, so that fred sent it again: a cut (armed up to a second
    /// before the request it swallows), a restart, or a pause longer than
    /// the command time-out.
    pub fn loses_replies(&self, from: Instant, to: Instant, limits: Limits) -> bool {
        let armed = from.checked_sub(Duration::from_secs(1)).unwrap_or(from);
        match self.kind {
            "cut" => self.overlaps(armed, to),
            "restart" => self.overlaps(from, to),
            "pause" => self.overlaps(from, to) && self.end - self.start >= limits.command_timeout,
            _ => false,
        }
    }

    /// Whether this fault can leave a delivery claimed from `from` to `to`
    /// (its lease window) counted without a handler run, that is, with its
    /// lease run out before its consumer handed it back: the consumer
    /// crashed; a reply was lost (a cut or a restart), the claim's, so its
    /// deliveries were never seen, or the hand-back's; or Redis was paused
    /// longer than the command time-out (the claim's reply is lost) or than
    /// the least an unstarted delivery has left when it is handed back (a
    /// quarter of a lease).
    pub fn risks_lease(&self, from: Instant, to: Instant, limits: Limits) -> bool {
        match self.kind {
            "crash" => self.overlaps(from, to),
            "cut" | "restart" => self.loses_replies(from, to, limits),
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
        }
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
                        "{} send[{}] payload={} delay={:?} retry_count={} caller_id={} -> {result} (returned at {})",
                        self.ms(s.start),
                        s.how,
                        s.payload,
                        s.delay,
                        s.retry_count,
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
        for (consumer, _, at) in self.lease_lost.iter().filter(|l| l.1 == id) {
            lines.push((*at, format!("{} LeaseLost event on {consumer}", self.ms(*at))));
        }
        if let (Some(first), Some(last)) = (lines.iter().map(|l| l.0).min(), lines.iter().map(|l| l.0).max()) {
            let last = last + Duration::from_secs(10);
            for f in self.faults.iter().filter(|f| f.overlaps(first, last)) {
                lines.push((f.start, self.fault_line(f)));
            }
        }
        lines.sort_by_key(|l| l.0);
        lines.into_iter().map(|l| format!("    {}\n", l.1)).collect()
    }

    fn delivery_line(&self, d: &Delivery) -> String {
        let end = match d.end {
            Some((t, o)) => format!("ended {} {o:?} after {:?}", self.ms(t), t - d.start),
            None => "still running".to_string(),
        };
        format!(
            "{} delivery attempt={} of retry_count={} on {} (renews={}) {end}",
            self.ms(d.start),
            d.attempt,
            d.retry_count,
            d.consumer,
            d.renews
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
    let stalled = |started: Option<(Instant, bool)>, from: Instant, to: Instant| {
        h.faults
            .iter()
            .find(|f| outlasted(f, started, from, to, limits))
            .map(|f| h.fault_line(f))
    };
    // A delivery counted that no handler ran needs a fault in the lease
    // window of that claim (see `FaultRec::risks_lease`). The claim is not
    // recorded; it lies after the last event the history has of the
    // message (`from`: its send or the end of its previous delivery), and
    // its lease ran out before the next delivery (`to`), so every window it
    // could have had lies in `from..to`.
    let excused = |from: Instant, to: Instant| {
        h.faults
            .iter()
            .find(|f| f.risks_lease(from, to, limits))
            .map(|f| h.fault_line(f))
    };
    let mut v = |rule: &'static str, id: &str, detail: String| {
        out.push(Violation {
            rule,
            id: id.to_string(),
            detail,
        })
    };

    for (id, ds) in &by_id {
        let id: &str = id;
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
            for o in h.ops.iter().filter(|o| o.id == id && o.kind == "reschedule") {
                if o.start < since || o.start > d.start {
                    continue;
                }
                let at = o.start + o.delay.unwrap_or_default();
                // An uncertain one (see `IdOp::certain`) may have moved it.
                if o.result == Ok(true) {
                    due = at;
                    why = format!("rescheduled at {} by {:?}", h.ms(o.start), o.delay.unwrap_or_default());
                } else if !o.certain(h, limits) {
                    due = due.min(at);
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
        // Never after a successful cancel.
        for o in h
            .ops
            .iter()
            .filter(|o| o.id == id && o.kind == "cancel" && o.result == Ok(true))
        {
            for d in ds.iter().filter(|d| d.start > o.end) {
                v(
                    "after-cancel",
                    id,
                    format!(
                        "delivery attempt {} at {} after cancel returned true at {}",
                        d.attempt,
                        h.ms(d.start),
                        h.ms(o.end)
                    ),
                );
            }
        }
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
                    let from = prev.and_then(|p| p.end.map(|e| e.0)).unwrap_or(send.start);
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
                if d.attempt > d.retry_count + 1 {
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

    // LeaseLost only after a stall that outlasts the lease left (see
    // `outlasted`), or a handler that ran out its unrenewed lease. A reply
    // lost to a cut or a restart is no excuse: the re-sent ack or nack
    // must recognise its own first run.
    for (consumer, id, at) in &h.lease_lost {
        // The delivery whose lease it was: on this consumer, the one whose
        // ack or nack came last before the event (at most a lease after the
        // handler, the longest an ack or nack is retried), or one still
        // renewing. Without one, a claimed delivery that no handler ran.
        let own = h
            .deliveries
            .iter()
            .filter(|d| &d.id == id && &d.consumer == consumer && d.start <= *at)
            .filter(|d| d.end.is_none_or(|(end, _)| end <= *at && *at - end <= limits.lease))
            .max_by_key(|d| d.end.map_or(*at, |e| e.0));
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
        let timed_out = !d.renews && matches!(d.end, Some((_, Outcome::Cancelled)));
        if timed_out || stalled(Some((d.start, d.renews)), d.start, *at).is_some() {
            continue;
        }
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

    if let Some(fin) = fin {
        check_final(h, fin, limits, &by_id, &excused, &mut v);
    }
    out
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
    let cancelled = |id: &str| {
        h.ops
            .iter()
            .any(|o| o.id == id && o.kind == "cancel" && o.result == Ok(true))
    };
    // A cancel that returned false across a lost reply may have removed
    // the message (see `IdOp::certain`): delivered or not, either is right.
    let uncertain_cancel = |o: &IdOp| o.kind == "cancel" && !o.certain(h, limits);
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
    // Totals: each stored message ends acked, cancelled or dead, once.
    let cancels = h
        .ops
        .iter()
        .filter(|o| o.kind == "cancel" && o.result == Ok(true))
        .count() as u64;
    let unknown_cancels = h.ops.iter().filter(|o| uncertain_cancel(o)).count() as u64;
    let dead = fin.dead.len() as u64;
    let accounted = fin.totals_acked + cancels + dead;
    if fin.totals_sent < accounted || fin.totals_sent > accounted + unknown_cancels {
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
    let ok_sends = h.sends.iter().filter(|s| s.error.is_none()).count() as u64;
    let all_sends = h.sends.len() as u64;
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
    if fin.totals_acked > n + resent || fin.totals_acked + unknown_cancels < n {
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

    fn cancel(h: &mut History, from: u64, to: u64, result: Result<bool, String>) {
        let (start, end) = (at(h, from), at(h, to));
        h.ops.push(IdOp {
            kind: "cancel",
            id: "m".into(),
            delay: None,
            start,
            end,
            result,
        });
    }

    fn deliver(h: &mut History, attempt: u32, from: u64, outcome: Outcome) {
        let start = at(h, from);
        h.deliveries.push(Delivery {
            id: "m".into(),
            payload: "p".into(),
            attempt,
            retry_count: 3,
            consumer: "c0".into(),
            renews: false,
            start,
            end: Some((start, outcome)),
        });
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

    #[test]
    fn a_false_cancel_across_a_lost_reply_may_have_cancelled() {
        let mut h = sent();
        cancel(&mut h, 100, 150, Ok(false));
        assert_eq!(rules(&h, Some(&drained(1))), ["lost", "totals-balance"]);
        fault(&mut h, "cut", 90, 90);
        assert_eq!(rules(&h, Some(&drained(1))), Vec::<&str>::new());
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
}
