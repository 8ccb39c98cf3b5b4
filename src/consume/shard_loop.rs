//! The loop of one shard: probes (one read-only call) every
//! `fetch_interval` while the shard has work about, and sweeps when that
//! finds leases run out or dead letters to delete, promotes when something
//! is due, claims what fits, and in between sleeps until the earliest due
//! time it knows of, a wake-up, or a free handler slot. An idle shard is
//! probed only when its first lease runs out or dead letter expires, or
//! after `Settings::idle_probe` should a wake-up have been lost. On stop it
//! deletes its claim receipt, waits for its deliveries to settle and for
//! its ack and notes tasks to send what they were given.

use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::claim::{claim, claim_capacity, Load};
use super::promote::promote;
use super::state::Shared;
use super::sweep::sweep;
use super::wake::Rung;
use crate::store::ops::claim::Held;
use crate::store::ops::probe::Probe;
use crate::Error;

/// When the loop next has something to do.
struct Schedule {
    /// Next probe, which says whether to sweep (timed-out deliveries,
    /// expired dead letters), promote and claim.
    probe: Instant,
    /// When the earliest pending message is due, as far as this consumer knows.
    promote: Instant,
    /// Whether ready or retry may hold messages this consumer could claim.
    claim: bool,
    /// Not before then: a queue limit held the last claim back.
    claim_after: Instant,
    /// Whether the claim waits for a free handler slot (or a slot of the
    /// global concurrency limit), so a finished delivery brings it forward:
    /// a wake-up meanwhile must not turn that into a sleep until `claim_after`.
    slot_wait: bool,
    /// Whether the loop has slept until an idle probe yet: the first such
    /// sleep is anywhere in the idle probe period, so that queues started
    /// together probe evenly spread from the start.
    idled: bool,
    /// Whether a wake-up for now came while the loop had nothing to
    /// claim and its last step succeeded: the next step's claim goes out
    /// with its promote. A busy loop claims at its own pace, which the
    /// queues' weights shape; after a failed step calls go one at a time,
    /// so a failing step (an outage, a wire format it does not speak)
    /// costs one failed call per backoff.
    woken: bool,
}

/// How soon a loop held back by the global concurrency limit claims again,
/// unless one of its own deliveries finishes first: another consumer's
/// finished delivery frees a slot that no wake-up announces.
const CONCURRENCY_POLL: Duration = Duration::from_millis(20);

/// Runs the loop of `shared`'s shard until the consumer stops, then its
/// shutdown: `renewer` is its lease renewal task when leases are renewed.
pub(crate) async fn run(shared: Arc<Shared>, renewer: Option<JoinHandle<()>>) {
    let interval = shared.ctx.settings.fetch_interval;
    let mut stop = shared.pool.stop.clone();
    let now = Instant::now();
    let mut at = Schedule {
        probe: now,
        promote: now,
        claim: true,
        claim_after: now,
        slot_wait: false,
        idled: false,
        woken: false,
    };
    let mut failures = 0u32;
    // The pool counts this loop as waiting for work until told otherwise.
    let mut waiting = true;
    tracing::debug!(queue = %shared.name(), shard = shared.index, "shard loop started");
    while !*stop.borrow() {
        // Boxed, so that the sleeping loop does not hold a step's state.
        let stepped = Box::pin(step(&shared, &mut at)).await;
        at.woken = false;
        let (until, on_slot) = match stepped {
            Ok(()) => {
                if failures > 0 {
                    tracing::info!(queue = %shared.name(), failed_steps = failures, "consumer step succeeded again");
                }
                failures = 0;
                let next = at.probe.min(at.promote);
                (
                    if at.claim { next.min(at.claim_after) } else { next },
                    at.claim && at.slot_wait,
                )
            }
            Err(e) => {
                failures += 1;
                (Instant::now() + backed_off(&shared, &e, failures, interval), false)
            }
        };
        waiting = shared.publish_waiting(waiting, at.claim);
        if at.claim && at.claim_after <= Instant::now() && !on_slot && failures == 0 {
            // Busy claiming: wake-ups that came meanwhile still bring the
            // next promote forward (a message due now behind a backlog).
            if let Some(rung) = shared.bell.take() {
                note_wakes(&mut at, interval, rung);
            }
            continue;
        }
        tokio::select! {
            _ = stop.changed() => {}
            _ = tokio::time::sleep_until(until) => {}
            // A finished delivery frees a slot of the global concurrency limit too.
            _ = shared.pool.done[shared.index].notified(), if on_slot => at.claim_after = Instant::now(),
            rung = shared.bell.rung() => {
                let idle = !at.claim;
                note_wakes(&mut at, interval, rung);
                at.woken = idle && at.claim && failures == 0;
            }
        }
    }
    shared.publish_waiting(waiting, false);
    Box::pin(shut_down(shared, renewer)).await;
}

/// How long the loop backs off after its `failures`-th failed step in a
/// row, `e`; logged: an outage is one event, one warning, then one line
/// when it ends.
fn backed_off(shared: &Shared, e: &Error, failures: u32, interval: Duration) -> Duration {
    let backoff = (Duration::from_millis(50) * 2u32.pow(failures.min(10))).min(interval.max(Duration::from_secs(1)));
    if failures == 1 && matches!(e, Error::FormatVersion { .. }) {
        // Not an outage: it lasts until this client is upgraded.
        tracing::error!(queue = %shared.name(), error = %e, retry_in = ?backoff, "queue written in a wire format this consumer does not speak; consuming nothing, backing off");
    } else if failures == 1 {
        tracing::warn!(queue = %shared.name(), error = %e, retry_in = ?backoff, "consumer step failed; backing off");
    } else {
        tracing::debug!(queue = %shared.name(), error = %e, retry_in = ?backoff, failures, "consumer step failed again");
    }
    backoff
}

/// The loop's shutdown: the claim receipt deleted, the deliveries in
/// flight waited for, then the lease renewal and the acker stopped.
async fn shut_down(shared: Arc<Shared>, renewer: Option<JoinHandle<()>>) {
    // Claiming nothing deletes the receipt. Should it replay a request that
    // failed, the replayed deliveries see the stop and are handed back. It
    // expires on its own, so a Redis that does not answer only gets a moment.
    match tokio::time::timeout(Duration::from_secs(2), claim(&shared, 0)).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => tracing::debug!(error = %e, "could not delete the claim receipt; it expires on its own"),
        Err(_) => tracing::debug!("claim receipt not deleted in time; it expires on its own"),
    }
    while shared.in_flight.load(Ordering::Acquire) > 0 {
        shared.pool.done[shared.index].notified().await;
    }
    if let Some(renewer) = renewer {
        renewer.abort();
    }
    let (name, shard) = (shared.name().to_string(), shared.index);
    let writers = shared.writers.started();
    drop(shared);
    for task in writers {
        let _ = task.await;
    }
    tracing::debug!(queue = %name, shard, "shard loop stopped");
}

/// Brings the next promote forward to the wake-ups' earliest due time;
/// one due now (a retry or a due message) means a claim, either way. The
/// shard is busy again, so the next probe comes within `interval`, or now
/// when wake-ups may have been lost.
fn note_wakes(at: &mut Schedule, interval: Duration, rung: Rung) {
    let now = Instant::now();
    at.promote = at.promote.min(rung.at);
    at.claim |= rung.at <= now;
    at.stirred(now, if rung.probe { Duration::ZERO } else { interval });
}

impl Schedule {
    /// Something happened on the shard (a wake-up, a due time): the next
    /// probe comes within `interval`, so this loop learns of the leases of
    /// the claims that follow, its own or another consumer's, and sweeps
    /// them should they run out. (Every claim follows one of these, or a
    /// probe that found messages to claim, which probes again as soon.)
    fn stirred(&mut self, now: Instant, interval: Duration) {
        self.probe = self.probe.min(now + interval);
    }
}

/// Where the beats of [`on_beat`] count from: the first idle sleep of the process.
static BEATS_FROM: OnceLock<Instant> = OnceLock::new();

/// How long from `now` until the first beat of `interval` at least `d`
/// from now: the idle probes of every queue with that interval due within
/// one interval go out together, so Redis wakes once for them rather
/// than once each: a lone call costs an idle Redis several times what
/// one among others does (docs/performance.md, "Idle queues").
fn on_beat(now: Instant, d: Duration, interval: Duration) -> Duration {
    let from = *BEATS_FROM.get_or_init(|| now);
    let since = (now + d).saturating_duration_since(from).as_nanos();
    let step = interval.as_nanos().max(1);
    u64::try_from(since.div_ceil(step) * step)
        .ok()
        .and_then(|beat| from.checked_add(Duration::from_nanos(beat)))
        .and_then(|at| at.checked_duration_since(now))
        .unwrap_or(d)
}

/// The probe of [`step`]: one read-only call says which steps have work,
/// then the sweep when leases ran out or dead letters expired, and when
/// to probe, promote and claim next.
async fn probe(shared: &Arc<Shared>, at: &mut Schedule, now: Instant) -> Result<(), Error> {
    let (ctx, k) = (&*shared.ctx, shared.keys());
    let interval = ctx.settings.fetch_interval;
    // An idle shard costs nothing more than this call.
    let probed = shared
        .store()
        .run(&Probe {
            dead_letter_retention: ctx.settings.dead_letter_retention,
            dead_limit: ctx.settings.dead_limit,
        })
        .await?;
    let swept = probed.sweep == Some(Duration::ZERO);
    // The calls beyond the probe are boxed, so that a step that only
    // probes (many idle queues at once, say) allocates little.
    if swept {
        Box::pin(sweep(ctx, k)).await?;
        at.claim = true;
    }
    // With work about (or schedules to feed) the next probe comes within
    // an interval. Idle, the loop sleeps until its first lease or dead
    // letter runs out, a due time or a wake-up: what the probe would
    // find otherwise is announced by a wake-up, and the idle probe
    // (spread out, so that many idle queues do not probe at once) only
    // bounds what a lost one costs.
    let busy = swept || probed.claim || probed.schedules || probed.relay;
    let poll = if busy {
        interval
    } else if !shared.bell.subscribed() {
        // Without wake-ups, polling is all a loop has.
        interval
    } else {
        let spread = if at.idled {
            1.0 - 0.2 * fastrand::f64()
        } else {
            at.idled = true;
            fastrand::f64()
        };
        on_beat(now, ctx.settings.idle_probe().mul_f64(spread), interval)
    };
    at.probe = now + probed.sweep.filter(|d| !d.is_zero()).map_or(poll, |d| d.min(poll));
    at.promote = probed.next_due.map_or(at.probe, |d| now + d);
    at.claim |= probed.claim;
    if probed.schedules {
        shared.schedules.kick(shared.shard);
    }
    if probed.relay {
        // Completions an acker left behind (it crashed, or its relay
        // failed), and cancelled parents' children (docs/workflows.md):
        // the relay task runs it, beside the loop.
        let _ = shared.acks().relay.try_send(());
    }
    Ok(())
}

/// One round: sweep when due, promote when something is due, claim what
/// fits; `at.slot_wait` says whether claimable work waits for a free slot.
async fn step(shared: &Arc<Shared>, at: &mut Schedule) -> Result<(), Error> {
    let (ctx, k) = (&*shared.ctx, shared.keys());
    let now = Instant::now();
    let interval = ctx.settings.fetch_interval;
    if now >= at.probe {
        probe(shared, at, now).await?;
    }
    if now >= at.promote {
        let room = claim_capacity(&ctx.settings, &Load::of(shared));
        if at.woken && now >= at.claim_after && room > 0 {
            // Woken from idle for a message due now: the claim goes out
            // right behind the promote, in the same round trip, so the
            // message starts one round trip sooner. Should the claim run
            // first (a script reloaded), it finds less, and what the
            // promote moved is claimed next.
            let (promoted, claimed) = futures::join!(Box::pin(promote(ctx, k, room)), Box::pin(claim(shared, room)));
            // The promote's next due time first: a group wait the claim
            // found may bring it forward.
            if let Ok((_, next_due)) = promoted {
                promoted_so(at, now, interval, false, next_due);
            }
            let popped = claimed.as_ref().map_or(0, |c| c.0);
            let claimed =
                claimed.map(|(popped, held, group_wait)| claimed_so(at, room, popped, held, group_wait, interval));
            let (moved, _) = promoted?;
            // The claim took what the promote moved, up to its room: more
            // is left only when it moved more than the claim leased.
            at.claim |= moved > popped;
            return claimed;
        }
        let (moved, next_due) = Box::pin(promote(ctx, k, room)).await?;
        promoted_so(at, now, interval, moved > 0, next_due);
    }
    if !at.claim || now < at.claim_after {
        return Ok(());
    }
    let want = claim_capacity(&ctx.settings, &Load::of(shared));
    if want == 0 {
        // Full, or another queue's turn: a finished delivery or a change
        // of turns wakes the loop, and this bounds the wait regardless.
        at.claim_after = Instant::now() + CONCURRENCY_POLL.min(interval);
        at.slot_wait = true;
        return Ok(());
    }
    let (popped, held, group_wait) = Box::pin(claim(shared, want)).await?;
    claimed_so(at, want, popped, held, group_wait, interval);
    Ok(())
}

/// What a promote that ran at `now` tells the schedule: whether it left
/// messages (or groups) to claim, and when the next pending one is due.
fn promoted_so(at: &mut Schedule, now: Instant, interval: Duration, to_claim: bool, next_due: Option<Duration>) {
    // Nothing pending: the next probe looks again, or a wake-up comes first.
    at.promote = next_due.map_or(at.probe, |d| now + d);
    at.claim |= to_claim;
    // Something came due, whoever moved it.
    at.stirred(now, interval);
}

/// What a claim of `want` that leased `popped` tells the schedule: claim
/// again at once, later (a limit held it back), or once a slot is free.
fn claimed_so(
    at: &mut Schedule,
    want: usize,
    popped: usize,
    held: Option<Held>,
    group_wait: Option<Duration>,
    interval: Duration,
) {
    at.slot_wait = false;
    if let Some(wait) = group_wait {
        // A group waits out its rate (or an ordered group its failed
        // message's delay): promote moves it back to the ring then, and a
        // claim follows. A group at its concurrency needs no timer: the
        // ack, nack or timeout that frees a slot publishes a wake-up.
        at.promote = at.promote.min(Instant::now() + wait);
    }
    match held {
        // A full batch means more may wait.
        None => at.claim = popped >= want,
        // Cut short (bytes, groups, a skipped entry): the rest waits for the next.
        Some(Held::Cut) => at.claim = true,
        // The lists may hold more than the limit let through: claim again
        // when it may allow more, without spinning until then.
        Some(Held::Rate { wait }) => {
            at.claim = true;
            at.claim_after = Instant::now() + wait;
        }
        Some(Held::Concurrency) => {
            at.claim = true;
            at.claim_after = Instant::now() + CONCURRENCY_POLL.min(interval);
            // One of this consumer's own deliveries finishing frees a slot too.
            at.slot_wait = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_probes_due_within_one_interval_fall_on_the_same_beat() {
        let interval = Duration::from_millis(100);
        let now = Instant::now();
        let beat = on_beat(now, Duration::from_secs(1), interval);
        assert!(beat >= Duration::from_secs(1) && beat < Duration::from_secs(1) + interval);
        for d in [beat - Duration::from_millis(99), beat - Duration::from_millis(50), beat] {
            assert_eq!(on_beat(now, d, interval), beat, "{d:?} falls on the same beat");
        }
        let later = now + Duration::from_millis(37);
        assert_eq!(
            later + on_beat(later, beat - Duration::from_millis(37), interval),
            now + beat
        );
        assert_eq!(on_beat(now, beat + Duration::from_millis(1), interval), beat + interval);
    }
}
