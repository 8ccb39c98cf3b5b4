//! The rules of flows and cohorts (docs/workflows.md), on the messages
//! the run sent to its two flow queues and their deliveries, which the
//! queue-wide rules of the main queue leave alone.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use super::{check_deliveries, Delivery, History, Limits, Outcome, Violation, CLOCK_SLACK};

/// Longer than any run: "from then on".
const FOREVER: Duration = Duration::from_secs(24 * 3600);

/// One message of a flow or a cohort, in one of the flow queues.
#[derive(Debug, Clone)]
pub struct FlowMsg {
    pub id: String,
    pub queue: String,
    /// `flow` (a node of a `Flow`), `child` (sent alone, then waited for
    /// by an `after`), `after` (a parent sent with `after`), `member` (of
    /// a cohort), `complete` or `success` (a cohort's callbacks).
    pub role: &'static str,
    /// The ids it waits for; empty for a leaf.
    pub children: Vec<String>,
    /// What a dead child does to it: `fail`, `ignore`, `wait` or `remove`.
    pub policy: &'static str,
    /// A callback's cohort: when its `close` was called (wall µs), once it
    /// answered; `None` while open.
    pub closed_us: Option<i64>,
    /// The call that sent it (the whole flow, the member's send), repeated
    /// until it answered: `Err` when it never did.
    pub start: Instant,
    pub end: Instant,
    pub result: Result<(), String>,
}

impl FlowMsg {
    /// Whether it waits for others.
    pub fn is_parent(&self) -> bool {
        !self.children.is_empty() || matches!(self.role, "complete" | "success")
    }
}

/// A progress or log write a delivery made after the message was acked
/// (its result readable): it must be rejected with `LeaseLost`.
#[derive(Debug, Clone)]
pub struct LateNote {
    pub id: String,
    pub attempt: u32,
    pub consumer: String,
    pub start: Instant,
    pub end: Instant,
    /// `Ok`: written; `Err((lease_lost, text))`.
    pub result: Result<(), (bool, String)>,
}

/// One child as a parent read it: (child id, outcome as `Acked`, `Dead`
/// or `Cancelled`, result).
pub type ChildRead = (String, String, Option<Vec<u8>>);

/// What a delivery of a parent read of its finished children
/// (`Message::children_results`, every page): (child id, outcome as
/// `Acked`, `Dead` or `Cancelled`, result).
#[derive(Debug, Clone)]
pub struct ChildrenRead {
    pub parent: String,
    pub attempt: u32,
    pub children: Vec<(String, String, Option<Vec<u8>>)>,
}

/// The result the run's handlers return for a delivery of a flow message:
/// unique to the delivery, so a result read back names the one acked.
pub fn flow_result(d: &Delivery) -> String {
    format!("r {} {} {}", d.id, d.attempt, d.consumer)
}

/// The flow queues once drained (no message ready, retried or
/// processing), before their dead letters are requeued.
#[derive(Debug, Clone, Default)]
pub struct FlowFinal {
    /// When it was read, wall µs.
    pub at_us: i64,
    /// Dead letters: id -> their `last_error`.
    pub dead: HashMap<String, String>,
    /// The parents still waiting for children.
    pub waiting: HashSet<String>,
    /// The final requeue of the dead letters started then (wall µs); after
    /// it, a parent failed by a child runs without waiting.
    pub requeued_us: Option<i64>,
    /// What each parent dead of a child's death read of its finished
    /// children (`children_results`, every page): (child id, outcome,
    /// result).
    pub dead_children: HashMap<String, Vec<ChildRead>>,
}

/// The flow rules checked all along; with `fin`, the deliveries after its
/// requeue of parents dead then are left out (they run without waiting):
/// - `flow-early`: no delivery of a parent is leased, by Redis's clock,
///   before each of its children finished, at the earliest: a child was
///   live at each of its leases; it finishes at the earliest when the
///   first of its deliveries that ended `Ok` (or, for a policy that a dead
///   child releases, that ended its last attempt or with `SkipRetry`)
///   returned, since its ack or nack comes after. That bound is taken
///   only where no fault could have counted a lease no handler ran (the
///   child may have died unseen), or for `wait`, which only an ack
///   releases. A callback, moreover, not before its cohort's close was
///   called.
/// - `note-unfenced`: a progress or log write after the message was acked
///   is rejected with `LeaseLost` (another error only across a fault
///   that loses replies).
/// - `children-results`: what a parent's handler reads of its children
///   names only its children; an acked one's result, when kept, is one
///   its `Ok` deliveries returned, and it has one.
/// - the rules of each message's deliveries (`concurrent`,
///   `uncounted-delivery`, `retried-skip`, `too-many-deliveries`).
pub fn check_flows(
    h: &History,
    limits: Limits,
    fin: Option<&FlowFinal>,
    v: &mut impl FnMut(&'static str, &str, String),
) {
    let mut by_id: HashMap<&str, Vec<&Delivery>> = HashMap::new();
    for d in &h.flow_deliveries {
        by_id.entry(d.id.as_str()).or_default().push(d);
    }
    for ds in by_id.values_mut() {
        ds.sort_by_key(|d| d.start);
    }
    let msgs: HashMap<&str, &FlowMsg> = h.flow_msgs.iter().map(|m| (m.id.as_str(), m)).collect();
    for (id, ds) in &by_id {
        let from = msgs.get(id).map_or(h.t0, |m| m.start);
        check_deliveries(h, limits, id, ds, from, v);
    }
    let slack = CLOCK_SLACK.as_micros() as i64;
    let requeued = fin.and_then(|f| f.requeued_us).unwrap_or(i64::MAX);
    for p in h.flow_msgs.iter().filter(|m| m.is_parent()) {
        let Some(ds) = by_id.get(p.id.as_str()) else { continue };
        let failed_by_child = fin.is_some_and(|f| f.dead.contains_key(&p.id));
        let mut bounds: Vec<(i64, String)> = p
            .children
            .iter()
            .filter_map(|c| finished_at_least(h, limits, by_id.get(c.as_str())?, p.policy, requeued).map(|b| (b, c)))
            .map(|(b, c)| (b, format!("child {c}")))
            .collect();
        if let Some(closed) = p.closed_us {
            bounds.push((closed, "the cohort's close".into()));
        }
        for d in ds.iter().filter(|d| !(failed_by_child && d.leased_us >= requeued)) {
            if let Some((at, what)) = bounds.iter().find(|b| d.leased_us + slack < b.0) {
                v(
                    "flow-early",
                    &p.id,
                    format!(
                        "{} {} (policy {}) leased at {} (attempt {}), before {what} finished at the earliest {}",
                        p.role,
                        p.id,
                        p.policy,
                        h.us(d.leased_us),
                        d.attempt,
                        h.us(*at)
                    ),
                );
            }
        }
    }
    for r in &h.children_reads {
        let Some(p) = msgs.get(r.parent.as_str()) else { continue };
        for (child, outcome, result) in &r.children {
            let returned: Vec<String> = by_id
                .get(child.as_str())
                .into_iter()
                .flatten()
                .filter(|d| matches!(d.end, Some((_, Outcome::Ok))))
                .map(|d| flow_result(d))
                .collect();
            let result = result.as_deref().map(String::from_utf8_lossy);
            // Every `Ok` delivery sets a result: an acked child has one.
            if p.children.contains(child) && outcome == "Acked" && result.is_none() && !returned.is_empty() {
                v(
                    "results-kept",
                    &p.id,
                    format!(
                        "attempt {} read child {child} acked without its result (its Ok deliveries returned \
                         {returned:?})",
                        r.attempt
                    ),
                );
            }
            let wrong = if !p.children.contains(child) {
                Some("is none of its children".to_string())
            } else if outcome == "Acked" && returned.is_empty() {
                Some("acked, but none of its deliveries returned Ok".to_string())
            } else {
                result
                    .filter(|r| outcome == "Acked" && !returned.iter().any(|x| x == r))
                    .map(|r| format!("acked with result {r:?}, its Ok deliveries returned {returned:?}"))
            };
            if let Some(wrong) = wrong {
                v(
                    "children-results",
                    &p.id,
                    format!("attempt {} read child {child} ({outcome}): it {wrong}", r.attempt),
                );
            }
        }
    }
    for n in &h.late_notes {
        let excused = h.faults.iter().any(|f| f.loses_replies(n.start, n.end, limits));
        match &n.result {
            Ok(()) => v(
                "note-unfenced",
                &n.id,
                format!(
                    "attempt {} on {} wrote progress or a log line at {} after the message was acked",
                    n.attempt,
                    n.consumer,
                    h.ms(n.start)
                ),
            ),
            Err((false, text)) if !excused => v(
                "note-unfenced",
                &n.id,
                format!(
                    "attempt {} on {}: a write after the ack failed with {text}, not LeaseLost",
                    n.attempt, n.consumer
                ),
            ),
            Err(_) => {}
        }
    }
}

/// The earliest a child of deliveries `ds` can have finished for a parent
/// of `policy` (µs, Redis's clock): see `check_flows`. Deliveries leased
/// from `requeued` on (the final requeue) are left out.
fn finished_at_least(h: &History, limits: Limits, ds: &[&Delivery], policy: &str, requeued: i64) -> Option<i64> {
    let ds: Vec<&&Delivery> = ds.iter().filter(|d| d.leased_us < requeued).collect();
    let live = ds.iter().map(|d| d.leased_us).max()?;
    let first = ds.iter().map(|d| d.start).min()?;
    let unseen_death = policy != "wait" && h.lease_risk(limits, first, first + FOREVER).is_some();
    let ended = ds
        .iter()
        .filter(|d| match d.end {
            Some((_, Outcome::Ok)) => true,
            Some((_, Outcome::Skip)) => policy != "wait",
            Some((_, o)) => policy != "wait" && o.failed() && d.attempt > d.retry_count,
            None => false,
        })
        .filter_map(|d| d.end_us)
        .min();
    match ended {
        Some(e) if !unseen_death => Some(live.max(e)),
        _ => Some(live),
    }
}

/// The end-state rules of flows, on `fin` (the flow queues drained, their
/// dead letters not yet requeued), for each parent sent for sure:
/// - `flow-stuck`: a parent whose children all finished (acked, or dead
///   under a policy that lets it run) was released: delivered, or dead
///   of its own (claimed by a consumer that crashed, its last lease timed
///   out); one still waiting must have a child dead (policy `wait`) or
///   waiting itself.
/// - `flow-policy`: a dead child does what the parent's policy says:
///   `fail` makes it a dead letter it never ran as, whose reason names a
///   dead child; `ignore` lets it run; `wait` keeps it waiting; `remove`
///   deletes it (never run, not dead). A child parent removed (never run,
///   neither dead nor waiting) counts as a child deleted: as a dead one,
///   but a `wait` parent fails too.
/// - `cohort-success`: a cohort's `on_success` (policy `remove`) never
///   runs when a member died.
///
/// With them the rules of `check_flows`, judged with `fin`.
pub fn check_flow_final(h: &History, limits: Limits, fin: &FlowFinal) -> Vec<Violation> {
    let mut out = Vec::new();
    let mut v = |rule: &'static str, id: &str, detail: String| {
        out.push(Violation {
            rule,
            id: id.to_string(),
            detail,
        })
    };
    check_flows(h, limits, Some(fin), &mut v);
    let ran = |id: &str| h.flow_deliveries.iter().any(|d| d.id == id && d.leased_us < fin.at_us);
    // A parent neither run, dead nor waiting was removed (its own rules
    // say whether rightly): for its parents, a child deleted.
    let parents: HashSet<&str> = h
        .flow_msgs
        .iter()
        .filter(|m| m.is_parent())
        .map(|m| m.id.as_str())
        .collect();
    let removed = |c: &str| parents.contains(c) && !ran(c) && !fin.dead.contains_key(c) && !fin.waiting.contains(c);
    for p in h.flow_msgs.iter().filter(|m| m.is_parent() && m.result.is_ok()) {
        let dead: Vec<&String> = p
            .children
            .iter()
            .filter(|c| fin.dead.contains_key(*c) || removed(c))
            .collect();
        let deleted = p.children.iter().any(|c| removed(c));
        let waiting: Vec<&String> = p.children.iter().filter(|c| fin.waiting.contains(*c)).collect();
        let (p_dead, p_waits) = (fin.dead.get(&p.id), fin.waiting.contains(&p.id));
        // Released: delivered, or dead of its own (a lease no handler ran
        // that timed out on its last attempt), not of a child's.
        let p_ran = ran(&p.id) || p_dead.is_some_and(|reason| !reason.starts_with("child "));
        let what = format!("{} {} (policy {})", p.role, p.id, p.policy);
        if dead.is_empty() {
            if waiting.is_empty() && !p_ran {
                let state = if p_waits { "still waiting" } else { "never delivered" };
                v("flow-stuck", &p.id, format!("{what}: every child acked, {state}"));
            }
            continue;
        }
        match p.policy {
            // A deleted child fails a parent that waits: nothing can finish it.
            "fail" | "wait" if p.policy == "fail" || deleted => {
                // The reason reads `child <queue>/<id> dead`.
                let named = p_dead.is_some_and(|reason| dead.iter().any(|c| names_child(h, reason, c)));
                if p_ran || !named {
                    v(
                        "flow-policy",
                        &p.id,
                        format!(
                            "{what}: children {dead:?} dead or deleted, yet it ran={p_ran}, its dead letter's \
                             reason {p_dead:?} names none of them"
                        ),
                    );
                }
            }
            "ignore" if waiting.is_empty() && !p_ran => v(
                "flow-stuck",
                &p.id,
                format!(
                    "{what}: every child finished ({dead:?} dead), {}",
                    if p_waits { "still waiting" } else { "never delivered" }
                ),
            ),
            "wait" if p_ran || !p_waits => v(
                "flow-policy",
                &p.id,
                format!("{what}: children {dead:?} dead, yet it ran={p_ran}, waiting={p_waits}"),
            ),
            "remove" if p_ran || p_waits || p_dead.is_some() => v(
                if p.role == "success" {
                    "cohort-success"
                } else {
                    "flow-policy"
                },
                &p.id,
                format!(
                    "{what}: children {dead:?} dead, yet it ran={p_ran}, waiting={p_waits}, dead={}",
                    p_dead.is_some()
                ),
            ),
            _ => {}
        }
    }
    check_dead_parents(h, fin, &mut v);
    out
}

/// Whether a parent's dead-letter `reason` names child `c` as
/// docs/workflows.md says: `child <queue>/<id> <dead|deleted>`, the queue by
/// its name (never one of its shards) when the history has the child.
fn names_child(h: &History, reason: &str, c: &str) -> bool {
    match h.flow_msgs.iter().find(|m| m.id == c) {
        Some(m) => reason.contains(&format!("child {}/{c} ", m.queue)),
        None => reason.contains(&format!("/{c} ")),
    }
}

/// `results-kept`, of a parent dead of a child's death (docs/workflows.md:
/// results are readable until the parent is acked, cancelled or deleted,
/// and a dead parent can be requeued): what it reads of its children,
/// once dead, holds each child acked before the death with its result,
/// one the child's `Ok` deliveries returned. "Before": the child's first
/// `Ok` delivery returned half a second before the dead child's last
/// delivery was claimed, with no fault in between (a crash between an
/// ack and its relay may leave a completion to a later relay).
fn check_dead_parents(h: &History, fin: &FlowFinal, v: &mut impl FnMut(&'static str, &str, String)) {
    let of = |id: &str| -> Vec<&Delivery> { h.flow_deliveries.iter().filter(|d| d.id == id).collect() };
    for p in h.flow_msgs.iter().filter(|m| m.is_parent()) {
        let (Some(reason), Some(read)) = (fin.dead.get(&p.id), fin.dead_children.get(&p.id)) else {
            continue;
        };
        // The reason names the dead child: `child <queue>/<id> dead`.
        let Some(dead) = p.children.iter().find(|c| names_child(h, reason, c)) else {
            continue;
        };
        let Some(death) = of(dead).iter().map(|d| d.leased_us).max() else {
            continue;
        };
        for c in p.children.iter().filter(|c| *c != dead && !fin.dead.contains_key(*c)) {
            let oks: Vec<&Delivery> = of(c)
                .into_iter()
                .filter(|d| matches!(d.end, Some((_, Outcome::Ok))))
                .collect();
            let Some(first) = oks.iter().filter_map(|d| d.end_us).min() else {
                continue;
            };
            let quiet = !h
                .faults
                .iter()
                .any(|f| f.overlaps(h.instant_of_us(first), h.instant_of_us(death)));
            if !quiet || first + 500_000 > death {
                continue;
            }
            let returned: Vec<String> = oks.iter().map(|d| flow_result(d)).collect();
            let kept = read.iter().find(|r| &r.0 == c);
            let ok = kept.is_some_and(|(_, outcome, result)| {
                let result = result.as_deref().map(String::from_utf8_lossy);
                outcome == "Acked" && result.is_some_and(|r| returned.iter().any(|x| *x == r))
            });
            if !ok {
                v(
                    "results-kept",
                    &p.id,
                    format!(
                        "{} {} (policy {}) dead of child {dead}'s death, reads child {c} (acked at {} with one of \
                         {returned:?}, before {dead}'s last claim at {}) as {kept:?}",
                        p.role,
                        p.id,
                        p.policy,
                        h.us(first).trim(),
                        h.us(death).trim()
                    ),
                );
            }
        }
    }
}

/// `results-kept`: the result read back at the very end of each flow
/// message handled with `Ok` is one its `Ok` deliveries returned
/// ([`flow_result`]); `results`: id -> what `result(id)` read.
pub fn check_results(h: &History, results: &HashMap<String, Option<Vec<u8>>>) -> Vec<Violation> {
    let mut out = Vec::new();
    for (id, read) in results {
        let returned: Vec<String> = h
            .flow_deliveries
            .iter()
            .filter(|d| &d.id == id && matches!(d.end, Some((_, Outcome::Ok))))
            .map(flow_result)
            .collect();
        if returned.is_empty() {
            continue;
        }
        let read = read.as_deref().map(String::from_utf8_lossy);
        if !read.as_deref().is_some_and(|r| returned.iter().any(|x| x == r)) {
            out.push(Violation {
                rule: "results-kept",
                id: id.clone(),
                detail: format!("result read {read:?}, its Ok deliveries returned {returned:?}"),
            });
        }
    }
    out
}
