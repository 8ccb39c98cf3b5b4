//! One delivery: the task a claim starts per message. It waits for a
//! handler slot, hands the message back unstarted when too little of its
//! lease is left, else runs the handler within its time limit (the lease
//! renewed meanwhile when that limit is longer than a lease), and settles
//! the [`Outcome`].

use std::panic::AssertUnwindSafe;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use tokio::time::Instant;
use tracing::Instrument;

use super::aborts;
use super::lease::Lease;
use super::notary::Current;
use super::outcome::{Ended, Outcome};
use super::scribe::ShardDesk;
use super::settings::Settings;
use super::settle;
use super::state::{Permit, Pool, Shared, Slot};
use crate::events::{self, Event};
use crate::Message;

/// Runs one delivery: waits for its handler slot (`slot`, taken in line
/// at the claim), runs the handler, then settles it. A delivery that cannot
/// start with enough of its lease left, or waits while the handlers stall,
/// is handed back uncounted while the lease still holds, so a wait for a
/// slot never turns into a failed delivery, nor holds back a message
/// another consumer could run.
pub(crate) async fn run(shared: Arc<Shared>, msg: Message, slot: Slot) {
    // From before the handler starts to its settling, an abort reaches it.
    let _watching = aborts::watch(&shared.keys().wake, msg.id().as_str(), msg.abort.clone());
    let pool = &shared.pool;
    let deadline = msg.receipt.deadline;
    let least = || least_lease_to_start(&shared.ctx.settings, pool.avg_handler_us());
    let give_up = deadline.checked_sub(least()).unwrap_or(deadline);
    let permit = in_time(pool, slot, give_up).await;
    let left = deadline.saturating_duration_since(Instant::now());
    let ended = if *pool.stop.borrow() || permit.is_none() || left < least() {
        let waited = shared.ctx.settings.max_consume_duration.saturating_sub(left);
        tracing::debug!(
            queue = %shared.name(),
            id = %msg.id(),
            waited_ms = waited.as_millis() as u64,
            "handing back an unstarted delivery"
        );
        Ended {
            receipt: msg.receipt,
            backoff: None,
            outcome: Outcome::Unstarted,
        }
    } else {
        handle(&shared, msg, left).await
    };
    settle::settle(&shared, ended).await;
    drop(permit);
    count_out(&shared);
}

/// The handler slot once `slot`'s turn comes; `None` at `give_up`, or
/// once the handlers stall (`Pool::stalled`) while it waits: a message
/// claimed ahead of the handlers goes back, for a consumer with a free
/// handler to start, rather than wait out a slow run.
async fn in_time(pool: &Pool, slot: Slot, give_up: Instant) -> Option<Permit> {
    let acquired = slot.acquired();
    tokio::pin!(acquired);
    loop {
        let until = (Instant::now() + pool.stall_bound()).min(give_up);
        match tokio::time::timeout_at(until, &mut acquired).await {
            Ok(permit) => return permit,
            Err(_) if until >= give_up || pool.stalled() => return None,
            Err(_) => {}
        }
    }
}

/// Counts `n` deliveries of `shared`'s shard in flight as its claim
/// returns, before they are handed to their tasks, so the next claim's
/// capacity sees them.
pub(crate) fn count_in(shared: &Shared, n: usize) {
    shared.in_flight.fetch_add(n, Ordering::AcqRel);
    shared.pool.in_flight.fetch_add(n, Ordering::AcqRel);
    shared.pool.lanes[shared.lane].in_flight.fetch_add(n, Ordering::AcqRel);
}

/// Counts one settled delivery out of flight.
pub(crate) fn count_out(shared: &Shared) {
    let pool = &shared.pool;
    shared.in_flight.fetch_sub(1, Ordering::AcqRel);
    pool.in_flight.fetch_sub(1, Ordering::AcqRel);
    pool.lanes[shared.lane].in_flight.fetch_sub(1, Ordering::AcqRel);
    // Any loop may be waiting for a slot.
    pool.wake_all();
}

/// How much of its lease a delivery needs left to start its handler: a
/// quarter (a renewed lease reaches its first renewal with that), and
/// without renewals at least twice the recent handler time (up to half the
/// lease), so a handler is not started only to be cut at the lease's end.
fn least_lease_to_start(settings: &Settings, avg_handler_us: u64) -> Duration {
    let vis = settings.max_consume_duration;
    let recent = Duration::from_micros(avg_handler_us) * 2;
    match settings.renews_leases() {
        true => vis / 4,
        false => (vis / 4).max(recent.min(vis / 2)),
    }
}

/// Runs the handler on `msg`, `left` of its lease left: within its time
/// limit, renewing the lease meanwhile when the limit is longer than a
/// lease. Returns how it ended, with the lease that fences its ack or nack.
async fn handle(shared: &Arc<Shared>, msg: Message, left: Duration) -> Ended {
    let (ctx, settings) = (&shared.ctx, &shared.ctx.settings);
    // The handler takes the message; the receipt goes on to the settling.
    let mut receipt = msg.receipt.clone();
    let (id, attempt) = (&receipt.id, receipt.attempt);
    // Only a renewed lease can change while the handler runs.
    let renewed = settings.renews_leases().then(|| Lease::new(&receipt));
    let renewing = renewed.as_ref().map(|l| shared.leases.renew(l));
    let scribe = msg.scribe.clone();
    scribe.open(Box::new(ShardDesk {
        shared: Arc::downgrade(shared),
        lease: match &renewed {
            Some(l) => Current::Renewed(l.clone()),
            None => Current::Claimed(receipt.lease),
        },
    }));
    let limit = match renewed {
        Some(_) => settings.handler_timeout,
        None => left.min(settings.handler_timeout),
    };
    let backoff = msg.backoff.clone();
    tracing::trace!(queue = %ctx.name, %id, attempt, "delivering");
    ctx.meters.delivered.increment(1);
    events::emit(&ctx.events, || Event::Delivered {
        id: id.clone(),
        attempt,
    });
    // The handler's own logs carry the message they are about.
    let span = tracing::info_span!("delayqueue.handle", queue = %ctx.name, id = %id, attempt);
    let running = shared.pool.running.enter(shared.lane, id, attempt);
    // The producer's span is the parent, not a link: a delivery handles
    // one message, so its span belongs to that message's trace.
    #[cfg(feature = "otel")]
    crate::otel::continue_trace(&span, msg.headers());
    let handled = AssertUnwindSafe(shared.handler.handle(msg))
        .catch_unwind()
        .instrument(span);
    let started = Instant::now();
    let ran = tokio::time::timeout(limit, handled).await.ok();
    let took = started.elapsed();
    scribe.end();
    // A note after the lease ends finds none: a renewed lease ends here,
    // a nack ends it next. (An ack follows them on its shard's ack
    // queue, which writes them first, so the handler's slot is free.)
    if renewed.is_some() || !matches!(ran, Some(Ok(Ok(())))) {
        let _ = scribe.written().await;
    }
    drop(running);
    ctx.meters.handler_duration.record(took.as_secs_f64());
    shared.pool.record_handler_time(took);
    drop(renewing);
    if let Some(l) = renewed {
        let held = l.finish(ctx, shared.keys()).await;
        (receipt.lease, receipt.deadline) = (held.lease, held.deadline);
    }
    Ended {
        receipt,
        backoff,
        outcome: Outcome::of(ran, settings.handler_timeout, &scribe),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consume::settings;

    #[test]
    fn a_delivery_starts_with_a_quarter_of_its_lease_or_twice_the_recent_handler_time() {
        let ms = Duration::from_millis;
        // A 5 s lease that is not renewed.
        let s = settings::for_tests(1, 256);
        assert_eq!(least_lease_to_start(&s, 0), ms(1250), "a quarter");
        assert_eq!(least_lease_to_start(&s, 1_000_000), ms(2000), "twice 1 s");
        assert_eq!(least_lease_to_start(&s, 10_000_000), ms(2500), "at most half the lease");
        // Renewed: a quarter reaches the first renewal, however slow the handlers.
        let renewed = Settings {
            handler_timeout: Duration::from_secs(60),
            ..settings::for_tests(1, 256)
        };
        assert!(renewed.renews_leases());
        assert_eq!(least_lease_to_start(&renewed, 10_000_000), ms(1250));
    }
}
