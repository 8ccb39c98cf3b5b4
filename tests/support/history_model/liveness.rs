//! The rules that say a message starts when it may, and in the order an
//! ordered group owes it (docs/groups.md): `liveness`, `ordered` and
//! `leased-while-group-paused`, with what the driver records for them (the
//! consumers' spans, live changes of the groups, unstarted hand-backs).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::{first_send, leases, Delivery, History, Limits, Outcome, SendRec, CLOCK_SLACK};

/// The longest a message that may start waits for its claim (see
/// `check_liveness`): a claim round trip and a wake-up take milliseconds;
/// this leaves room for a loaded 2-core machine, and is half the 1 s
/// `fetch_interval` of the run that judges it, so a message that waits
/// for the next tick breaks it as often as not.
pub const LIVENESS_BOUND: Duration = Duration::from_millis(500);

/// How long after a handler returned its ack or nack (sent by the acker,
/// in batches) may take to free its slots in Redis.
const SETTLE: Duration = Duration::from_millis(100);

/// How long after a fault ends its effects may last beyond the consumers'
/// next probe: reconnections, a re-subscription to wake-ups.
const FAULT_TAIL: Duration = Duration::from_millis(300);

/// A consumer of the main queue: from when its `start_consume` returned
/// until its stop or crash began (`None`: still running at the end).
#[derive(Debug, Clone)]
pub struct ConsumerRec {
    pub name: String,
    pub concurrency: usize,
    pub start_us: i64,
    pub end_us: Option<i64>,
}

/// A change of one group, repeated until it answered: `concurrency` (its
/// limit from then on, `value`; the default's when its own was cleared),
/// `pause` or `resume`. Took effect within `start_us..=end_us`.
#[derive(Debug, Clone)]
pub struct GroupOp {
    pub group: String,
    pub kind: &'static str,
    pub value: u64,
    pub start_us: i64,
    pub end_us: i64,
    /// `Err`: no try answered; whether it took effect is unknown.
    pub result: Result<bool, String>,
}

/// Spans of time, in µs, each `[from, to)`.
type Spans = Vec<(i64, i64)>;

/// `spans` sorted, overlapping and touching ones joined.
fn merged(mut spans: Spans) -> Spans {
    spans.retain(|s| s.0 < s.1);
    spans.sort_unstable();
    let mut out: Spans = Vec::with_capacity(spans.len());
    for (a, b) in spans {
        match out.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

/// What of `a` is not in `b` (both merged).
fn minus(a: &[(i64, i64)], b: &[(i64, i64)]) -> Spans {
    let mut out = Vec::new();
    let mut j = 0;
    for &(mut from, to) in a {
        while j < b.len() && b[j].1 <= from {
            j += 1;
        }
        let mut k = j;
        while k < b.len() && b[k].0 < to {
            if b[k].0 > from {
                out.push((from, b[k].0));
            }
            from = from.max(b[k].1);
            k += 1;
        }
        if from < to {
            out.push((from, to));
        }
    }
    out
}

/// Where `busy` (spans, one per unit of use) holds at least `limit(t)`
/// at once; `cuts`: where `limit` may change.
fn full(busy: &[(i64, i64)], limit: impl Fn(i64) -> u64, cuts: &[i64]) -> Spans {
    let mut edges: Vec<(i64, i64)> = busy.iter().flat_map(|&(a, b)| [(a, 1), (b, -1)]).collect();
    edges.sort_unstable();
    let mut times: Vec<i64> = edges.iter().map(|e| e.0).chain(cuts.iter().copied()).collect();
    times.sort_unstable();
    times.dedup();
    let (mut count, mut e, mut out) = (0i64, 0, Vec::new());
    for (i, &t) in times.iter().enumerate() {
        while e < edges.len() && edges[e].0 <= t {
            count += edges[e].1;
            e += 1;
        }
        let next = times.get(i + 1).copied().unwrap_or(i64::MAX);
        if count >= limit(t) as i64 {
            out.push((t, next));
        }
    }
    merged(out)
}

/// Where a window of `per_us` holds `n` of the sorted `leases` already:
/// closed to one more start (with `slack` for the rate's buckets, a
/// fiftieth of `per` each: the window lets the next through within two).
fn closed(leases: &[i64], n: u64, per_us: i64) -> Spans {
    let n = n.max(1) as usize;
    let slack = per_us / 25 + CLOCK_SLACK.as_micros() as i64;
    let out = (n - 1..leases.len())
        .filter(|&i| leases[i] - leases[i + 1 - n] < per_us)
        .map(|i| (leases[i], leases[i + 1 - n] + per_us + slack))
        .collect();
    merged(out)
}

/// The concurrencies group `group` may have had at some time in
/// `from..=to` (µs): its first (`History::groups`) and each set since, a
/// set in effect from when it started until the next one ended.
pub(super) fn group_limits(h: &History, group: &str, from: i64, to: i64) -> Vec<u64> {
    let ops: Vec<&GroupOp> = h
        .group_ops
        .iter()
        .filter(|o| o.group == group && o.kind == "concurrency")
        .collect();
    let first = h.groups.iter().find(|g| g.0 == group).map(|g| g.1);
    let mut values = Vec::new();
    for i in 0..=ops.len() {
        let begins = i.checked_sub(1).map_or(i64::MIN, |p| ops[p].start_us);
        // A set that never answered may not have taken effect: the value
        // before it may hold until the next one ended.
        let next_answered = ops[i..].iter().find(|o| o.result.is_ok());
        let ends = next_answered.map_or(i64::MAX, |o| o.end_us);
        if begins <= to && ends > from {
            values.extend(i.checked_sub(1).map_or(first, |p| Some(ops[p].value)));
        }
    }
    values
}

/// Whether group `group` is ordered (concurrency 1) all run long.
pub(super) fn always_ordered(h: &History, group: &str) -> bool {
    group_limits(h, group, i64::MIN, i64::MAX).iter().all(|m| *m == 1)
}

/// The wall µs of process instant `t` (Redis's clock).
fn us_of(h: &History, t: Instant) -> i64 {
    match t.checked_duration_since(h.t0) {
        Some(d) => h.t0_us + d.as_micros() as i64,
        None => h.t0_us - (h.t0 - t).as_micros() as i64,
    }
}

/// How long a delivery holds its slots (its group's, the queue's): from
/// its claim until its ack or nack reached Redis after the handler
/// returned; a delivery whose handler never returned (a crash, a time
/// limit) until its lease ran out and a sweep found it.
fn held(h: &History, limits: Limits, settle: i64, d: &Delivery) -> (i64, i64) {
    let lease = limits.lease.as_micros() as i64;
    let end = match (d.end, d.end_us) {
        (Some((_, o)), Some(end)) if o != Outcome::Cancelled => end + settle,
        (_, end) => {
            let sweep = (h.fetch_interval + FAULT_TAIL).as_micros() as i64;
            end.unwrap_or(i64::MAX / 4).max(d.leased_us + lease) + lease + sweep
        }
    };
    (d.leased_us, end)
}

/// `liveness`: a message that may start starts within [`LIVENESS_BOUND`],
/// never "at the next tick". Judged per group (docs/groups.md), and for
/// the messages without one as one more member, on the main queue once it
/// drained. A member may start a message from instant t while all of
/// these hold:
/// - one of its messages waits: a first delivery sent for sure and
///   touched by no operation (`first_send`) is due at the latest by t (plus
///   a clock slack) and claimed only after t;
/// - no consumer's claim can be unseen: none handed a delivery of the
///   member back unstarted from a lease before until just after (the
///   history records only deliveries a handler started; with a global
///   concurrency, a hand-back of any member counts);
/// - the queue is not paused (from its pause's call until its resume
///   returned), nor the group;
/// - the group has room: fewer of its deliveries hold a slot than the
///   least concurrency it may have had then (a delivery holds one from its
///   claim until `SETTLE` after its handler returned; one whose handler
///   never returned, until its lease ran out and a sweep came); an ordered
///   group (or one that may be at concurrency 1) waits from a failed
///   delivery until that message's next claim;
/// - its rate window (`History::group_rates`) is open: fewer leases of the
///   group than its rate allows in the last `per` (with the buckets'
///   slack); with a queue rate limit ever set, the same of the queue's
///   leases and its least value; with a global concurrency ever set, fewer
///   deliveries holding a slot than its least value;
/// - some consumer runs with a free handler: fewer of its deliveries
///   claimed and not returned than its `concurrency` (a consumer claims
///   while it has one, so a claim of other members fills it);
/// - no fault of any kind from 200 ms before until a `fetch_interval` and
///   `FAULT_TAIL` after it (lost replies, lost wake-ups, stalls), a lease
///   more after a crash (its unstarted claims hold their slots unseen).
///
/// A stretch of such instants longer than the bound without a lease of the
/// member breaks the rule (a lease changes its room, so each starts a new
/// stretch).
pub(super) fn check_liveness(
    h: &History,
    limits: Limits,
    sends: &HashMap<&str, &SendRec>,
    v: &mut impl FnMut(&'static str, &str, String),
) {
    let bound = LIVENESS_BOUND.as_micros() as i64;
    for (member, may_start, times) in may_start(h, limits, sends, SETTLE.as_micros() as i64) {
        let name = member.unwrap_or("(none)");
        let of_member: Vec<&Delivery> = h.deliveries.iter().filter(|d| d.group.as_deref() == member).collect();
        for (since, t) in waits(&may_start, &times).into_iter().filter(|w| w.1 - w.0 > bound) {
            let waiter = of_member
                .iter()
                .filter(|d| d.leased_us >= t)
                .find(|d| first_send(h, sends, d).is_some_and(|f| us_of(h, f.2) <= since))
                .map_or("*", |d| d.id.as_str());
            v(
                "liveness",
                waiter,
                format!(
                    "group {name} could start a message from {} (a message of it due, the queue and the group not \
                     paused, below its concurrency and rate, a consumer's handler free, no fault near) and started \
                     none until {}: {}ms, the bound is {:?}",
                    h.us(since).trim(),
                    h.us(t).trim(),
                    (t - since) / 1000,
                    LIVENESS_BOUND
                ),
            );
        }
    }
}

/// The waits within `may_start` (from, to): each lease of `times` in a
/// span starts the count anew (it changes the member's room).
fn waits(may_start: &[(i64, i64)], times: &[i64]) -> Spans {
    let mut out = Vec::new();
    for &(from, to) in may_start {
        let mut since = from;
        for t in times.iter().copied().filter(|t| *t > from && *t < to).chain([to]) {
            out.push((since, t));
            since = t;
        }
    }
    out
}

/// What `liveness` judged: per member (`-` for the messages without a
/// group), how often one of its messages waited while it could start
/// (each hand-over of a freed slot among them, timed from the handler's
/// return rather than `SETTLE` after), the median and the longest wait.
pub fn liveness_judged(h: &History, limits: Limits) -> String {
    let sends: HashMap<&str, &SendRec> = h.sends.iter().map(|s| (s.payload.as_str(), s)).collect();
    may_start(h, limits, &sends, 0)
        .into_iter()
        .map(|(member, spans, times)| {
            let mut waits: Vec<i64> = waits(&spans, &times).iter().map(|w| (w.1 - w.0) / 1000).collect();
            waits.sort_unstable();
            let median = waits.get(waits.len() / 2).copied().unwrap_or(0);
            let longest = waits.last().copied().unwrap_or(0);
            format!(
                "{}: {} waits, median {median}ms, longest {longest}ms; ",
                member.unwrap_or("-"),
                waits.len()
            )
        })
        .collect()
}

/// Per member (`None`: the messages without a group), when it could
/// start a message (see `check_liveness`), and its leases' times.
fn may_start<'a>(
    h: &'a History,
    limits: Limits,
    sends: &HashMap<&str, &SendRec>,
    settle: i64,
) -> Vec<(Option<&'a str>, Spans, Vec<i64>)> {
    let mut out = Vec::new();
    let leases = leases(h);
    let Some(end) = leases.iter().map(|l| held(h, limits, settle, l.1).1).max() else {
        return out;
    };
    let begin = h.t0_us;
    let group_of = |id: &str| -> Option<Option<&str>> {
        let s = h.sends.iter().rfind(|s| s.id.as_deref() == Some(id))?;
        Some(s.group.as_deref())
    };

    // What holds back every member.
    let mut blocked: Spans = Vec::new();
    let after = (h.fetch_interval + FAULT_TAIL).as_micros() as i64;
    for f in &h.faults {
        // A fault's lost replies are sent again after the command
        // time-out; a lost wake-up waits for the next probe; a cut swallows
        // the next reply of a connection armed up to a second before.
        let armed = match f.kind {
            "cut" => super::REPLY_ARMED,
            // A crashed consumer's claims that no handler started yet are
            // in no record, and hold their slots until their leases run out
            // and a sweep comes.
            "crash" => limits.lease,
            _ => Duration::ZERO,
        };
        let tail = (armed + limits.command_timeout).as_micros() as i64 + after;
        blocked.push((us_of(h, f.start) - 200_000, us_of(h, f.end) + tail));
    }
    for (i, p) in h.queue_ops.iter().enumerate().filter(|(_, o)| o.kind == "pause") {
        let resumed = h.queue_ops[i + 1..].iter().find(|o| o.kind == "resume");
        blocked.push((p.start_us, resumed.map_or(i64::MAX, |r| r.end_us) + after));
    }
    let global_busy: Vec<(i64, i64)> = leases.iter().map(|l| held(h, limits, settle, l.1)).collect();
    let least = |kind: &str| {
        h.queue_ops
            .iter()
            .filter(|o| o.kind == kind)
            .filter_map(|o| o.value)
            .min()
    };
    if let Some(n) = least("rate") {
        let per = h
            .queue_ops
            .iter()
            .filter(|o| o.kind == "rate")
            .map(|o| o.per_ms * 1000)
            .max()
            .unwrap_or(0);
        let times: Vec<i64> = leases.iter().map(|l| l.0).collect();
        blocked.extend(closed(&times, n, per));
        // A change starts a new window.
        for o in h.queue_ops.iter().filter(|o| o.kind == "rate") {
            blocked.push((o.start_us, o.end_us + per));
        }
    }
    let global = least("concurrency");
    if let Some(n) = global {
        blocked.extend(full(&global_busy, |_| n, &[]));
    }
    // No consumer with a free handler.
    let mut free: Spans = Vec::new();
    for c in &h.consumers {
        let busy: Vec<(i64, i64)> = h
            .deliveries
            .iter()
            .filter(|d| d.consumer == c.name)
            .map(|d| (d.start_us, d.end_us.map_or(i64::MAX, |e| e + settle)))
            .collect();
        free.extend(minus(
            &[(c.start_us, c.end_us.unwrap_or(i64::MAX))],
            &full(&busy, |_| c.concurrency as u64, &[]),
        ));
    }
    let free = merged(free);
    blocked.extend(minus(&[(i64::MIN, i64::MAX)], &free));
    // Hand-backs: a claim the history has no trace of held its slots.
    let mut handed: HashMap<Option<&str>, Spans> = HashMap::new();
    for (id, claimed, at) in &h.handbacks {
        let span = super::held_unstarted(*claimed, *at);
        match group_of(id) {
            Some(g) if global.is_none() => handed.entry(g).or_default().push(span),
            _ => blocked.push(span),
        }
    }
    let blocked = merged(blocked);

    let mut members: Vec<Option<&str>> = vec![None];
    members.extend(h.groups.iter().map(|g| Some(g.0.as_str())));
    for member in members {
        let of_member: Vec<&(i64, &Delivery)> = leases.iter().filter(|l| l.1.group.as_deref() == member).collect();
        let times: Vec<i64> = of_member.iter().map(|l| l.0).collect();
        let mut waiting: Spans = Vec::new();
        for &&(at, d) in &of_member {
            if super::fire_of(&d.id).is_some() {
                continue;
            }
            if let Some((_, _, due_late)) = first_send(h, sends, d) {
                waiting.push((us_of(h, due_late) + CLOCK_SLACK.as_micros() as i64, at));
            }
        }
        let mut held_back = handed.remove(&member).unwrap_or_default();
        if let Some(g) = member {
            let busy: Vec<(i64, i64)> = of_member.iter().map(|l| held(h, limits, settle, l.1)).collect();
            let ops: Vec<&GroupOp> = h.group_ops.iter().filter(|o| o.group == g).collect();
            let cuts: Vec<i64> = ops.iter().flat_map(|o| [o.start_us, o.end_us]).collect();
            let room = |t: i64| group_limits(h, g, t, t).into_iter().min().unwrap_or(u64::MAX);
            held_back.extend(full(&busy, room, &cuts));
            for (i, p) in ops.iter().enumerate().filter(|(_, o)| o.kind == "pause") {
                let resumed = ops[i + 1..].iter().find(|o| o.kind == "resume");
                held_back.push((p.start_us, resumed.map_or(i64::MAX, |r| r.end_us) + after));
            }
            if let Some(&(_, n, per_ms)) = h.group_rates.iter().find(|r| r.0 == g) {
                held_back.extend(closed(&times, n, per_ms * 1000));
            }
            if group_limits(h, g, i64::MIN, i64::MAX).contains(&1) {
                // An ordered group waits for a failed message's retry.
                for (i, &&(at, d)) in of_member.iter().enumerate() {
                    let retried = match d.end {
                        Some((_, Outcome::Ok | Outcome::Skip)) => false,
                        Some((_, Outcome::Cancelled)) | None => true,
                        Some(_) => d.attempt <= d.retry_count,
                    };
                    if retried {
                        // Until its next claim; a time-out may have been
                        // its last attempt: until its sweep at least.
                        let next = of_member[i + 1..].iter().find(|l| l.1.id == d.id);
                        held_back.push((at, next.map_or(held(h, limits, settle, d).1, |l| l.0)));
                    }
                }
            }
        }
        let may_start = minus(&minus(&merged(waiting), &blocked), &merged(held_back))
            .into_iter()
            .map(|(from, to)| (from.max(begin), to.min(end)))
            .filter(|s| s.0 < s.1)
            .collect();
        out.push((member, may_start, times));
    }
    out
}

/// `ordered`: an ordered group (concurrency 1 all run long) runs one
/// message at a time (`group-concurrency` counts that) and, after a
/// delivery that failed with deliveries left (an error, a panic, a
/// `RetryAfter`: not a time-out or a crash, whose lease may have run out
/// unseen), leases that message again before any other of the group,
/// whatever their priorities and due times (docs/groups.md: "nothing else
/// of the group starts until that message is retried"). Judged on
/// messages touched by no operation, with no fault from the failed
/// delivery's claim until the next lease of the group.
pub(super) fn check_ordered(h: &History, v: &mut impl FnMut(&'static str, &str, String)) {
    let leases = leases(h);
    for (group, _) in h.groups.iter().filter(|g| always_ordered(h, &g.0)) {
        let of_group: Vec<&(i64, &Delivery)> = leases
            .iter()
            .filter(|l| l.1.group.as_deref() == Some(group.as_str()))
            .collect();
        for (i, &&(at, a)) in of_group.iter().enumerate() {
            let failed = matches!(
                a.end,
                Some((_, Outcome::Error | Outcome::Panic | Outcome::RetryAfter(_)))
            );
            if !failed || a.attempt > a.retry_count || !h.untouched(&a.id) {
                continue;
            }
            let Some(&&(b_at, b)) = of_group.get(i + 1) else {
                continue;
            };
            let (from, to) = (h.instant_of_us(at), h.instant_of_us(b_at));
            if b.id == a.id || h.faults.iter().any(|f| f.overlaps(from, to)) {
                continue;
            }
            v(
                "ordered",
                &b.id,
                format!(
                    "leased at {} from ordered group {group} (priority {}, attempt {}) while {} (priority {}), \
                     whose attempt {} of {} failed at {}, waited for its retry; the history of {}:\n{}  and of {}:",
                    h.us(b_at).trim(),
                    b.priority,
                    b.attempt,
                    a.id,
                    a.priority,
                    a.attempt,
                    a.retry_count + 1,
                    h.us(a.end_us.unwrap_or(at)).trim(),
                    a.id,
                    h.lines_of(&a.id),
                    b.id
                ),
            );
        }
    }
}

/// `leased-while-group-paused`: no lease of a group after its
/// `pause_group` returned and before its `resume_group` was called.
pub(super) fn check_group_pauses(h: &History, v: &mut impl FnMut(&'static str, &str, String)) {
    for (i, p) in h.group_ops.iter().enumerate() {
        if p.kind != "pause" || p.result.is_err() {
            continue;
        }
        let resumed = h.group_ops[i + 1..]
            .iter()
            .find(|o| o.group == p.group && o.kind == "resume")
            .map_or(i64::MAX, |o| o.start_us);
        for d in h
            .deliveries
            .iter()
            .filter(|d| d.group.as_deref() == Some(p.group.as_str()) && d.leased_us > p.end_us && d.leased_us < resumed)
        {
            v(
                "leased-while-group-paused",
                &d.id,
                format!(
                    "attempt {} leased at {}: pause_group({}) returned at {}, resume_group called at {}",
                    d.attempt,
                    h.us(d.leased_us).trim(),
                    p.group,
                    h.us(p.end_us).trim(),
                    if resumed == i64::MAX {
                        "never".into()
                    } else {
                        h.us(resumed).trim().to_string()
                    }
                ),
            );
        }
    }
}
