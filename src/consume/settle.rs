//! Settling a delivery that has ended: a success goes to the shard's
//! acker, a failure is nacked (retried after its backoff, or moved to the
//! dead letters), an unstarted one handed back; each with its log line,
//! metrics and events.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::acker::{self, AckGuard, AckItem, Write};
use super::outcome::{Cause, Ended, Failure, Mode, Outcome};
use super::state::Shared;
use crate::events::{self, Event};
use crate::message::Receipt;
use crate::store::ops::nack::{Nack, NackMode, NackOutcome};
use crate::Backoff;

/// Acks, nacks or hands back the delivery that `ended`.
pub(crate) async fn settle(shared: &Arc<Shared>, ended: Ended) {
    let Ended {
        receipt,
        backoff,
        outcome,
    } = ended;
    match outcome {
        Outcome::Done(kept) => {
            let _ = shared.acks().tx.send(Box::new(Write::Ack(AckItem {
                receipt,
                kept,
                _acking: Some(Box::new(Acking::new(shared))),
            })));
        }
        Outcome::Failed(mut failure) => {
            shared.ctx.meters.nacked.increment(1);
            let queue = &shared.ctx.settings.backoff;
            with_backoff(&mut failure, backoff.as_ref(), queue, receipt.attempt);
            nack(shared, &receipt, failure).await;
        }
        Outcome::Unstarted => nack(shared, &receipt, Failure::release()).await,
        Outcome::Unreadable => nack(shared, &receipt, Failure::unreadable()).await,
    }
}

/// Gives a failure that names no delay the backoff's: the message's own
/// when its send set one, else the queue's.
fn with_backoff(failure: &mut Failure, own: Option<&Backoff>, queue: &Backoff, attempt: u32) {
    if let Mode::Fail(delay @ None) = &mut failure.mode {
        *delay = Some(own.unwrap_or(queue).delay(attempt));
    }
}

/// A finished delivery counted in its shard's `acking` line until its
/// ack is sent (or given up), and the completion it recorded relayed.
struct Acking {
    shared: Arc<Shared>,
    since: Instant,
    relayed: bool,
}

impl Acking {
    fn new(shared: &Arc<Shared>) -> Self {
        shared.acking.finished();
        Acking {
            shared: shared.clone(),
            since: Instant::now(),
            relayed: false,
        }
    }
}

impl AckGuard for Acking {
    fn relayed(&mut self) {
        self.relayed = true;
    }
}

impl Drop for Acking {
    fn drop(&mut self) {
        let waited = self.relayed.then(|| self.since.elapsed());
        self.shared.acking.done(waited);
        self.shared.pool.done[self.shared.index].notify_one();
    }
}

/// Nacks one delivery, retrying on Redis errors while the lease lasts;
/// after that the max consume duration takes the message back anyway.
async fn nack(shared: &Shared, receipt: &Receipt, failure: Failure) {
    let ctx = &shared.ctx;
    let (id, attempt) = (&receipt.id, receipt.attempt);
    let op = Nack {
        id: id.as_str(),
        lease: receipt.lease,
        mode: match failure.mode {
            Mode::Fail(delay) => NackMode::Fail {
                delay: delay.unwrap_or_default(),
            },
            Mode::Dead => NackMode::Dead,
            Mode::Release => NackMode::Release,
            Mode::Defer(delay) => NackMode::Defer { delay },
        },
        reason: &failure.reason,
        attempt,
        default_retry_count: ctx.settings.default_retry_count,
        dead_letter_retention: ctx.settings.dead_letter_retention,
    };
    let mut backoff = Duration::from_millis(20);
    let sent = Instant::now();
    loop {
        // Finished since (delivered again and acked), and the nack first
        // left after the lease's end (by this host's clock, never later
        // than Redis's): this nack is a late one. First sent within the
        // lease, a run of this call whose reply was lost did the work.
        let outcome = shared.store().run(&op).await.map(|outcome| match outcome {
            NackOutcome::Finished if sent >= receipt.deadline => NackOutcome::LeaseLost,
            outcome => outcome,
        });
        match outcome {
            Ok(outcome) => return report(shared, receipt, &failure, &op.mode, outcome),
            // Only giving up is worth a warning: a retry that works changes nothing.
            Err(e) if Instant::now() + backoff < receipt.deadline => {
                tracing::debug!(queue = %ctx.name, %id, error = %e, "nack failed; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
            }
            Err(e) => {
                tracing::warn!(
                    queue = %ctx.name, %id, attempt, reason = %failure.reason, error = %e,
                    "{}; the nack failed until its lease ran out, so the max consume duration will redeliver it",
                    failure.cause.describe()
                );
                return;
            }
        }
    }
}

/// Logs, counts and emits what a nack of `receipt` did with it.
fn report(shared: &Shared, receipt: &Receipt, failure: &Failure, mode: &NackMode, outcome: NackOutcome) {
    let ctx = &shared.ctx;
    let (id, attempt) = (&receipt.id, receipt.attempt);
    match outcome {
        NackOutcome::Aborted => acker::aborted(ctx, id),
        NackOutcome::LeaseLost => {
            tracing::warn!(
                queue = %ctx.name, %id, attempt, reason = %failure.reason,
                "{}, but its lease ran out before the nack; the message was already taken back",
                failure.cause.describe()
            );
            ctx.meters.lease_lost.increment(1);
            events::emit(&ctx.events, || Event::LeaseLost { id: id.clone() });
        }
        // A re-sent nack whose first run did the work, or a late one.
        NackOutcome::Finished => {
            tracing::debug!(
                queue = %ctx.name, %id, attempt, reason = %failure.reason,
                "{}; the message has finished since (delivered again and acked)",
                failure.cause.describe()
            );
        }
        NackOutcome::Dead => {
            let outcome = match (failure.cause, mode) {
                (Cause::Unreadable, _) => "moved to the dead letters",
                (_, NackMode::Dead) => "retrying cannot help; moved to the dead letters",
                _ => "it used up its deliveries; moved to the dead letters",
            };
            failure.log(&ctx.name, id, attempt, outcome, None);
            ctx.meters.dead.increment(1);
            events::emit(&ctx.events, || Event::Dead {
                id: id.clone(),
                attempt,
                reason: failure.reason.clone(),
            });
        }
        NackOutcome::Retried => {
            if let NackMode::Defer { delay } = *mode {
                failure.log(
                    &ctx.name,
                    id,
                    attempt,
                    "deferred, not counted as a failure",
                    Some(delay),
                );
                events::emit(&ctx.events, || Event::Deferred {
                    id: id.clone(),
                    attempt,
                    reason: failure.reason.clone(),
                    retry_in: delay,
                });
            }
            if let NackMode::Fail { delay } = *mode {
                failure.log(&ctx.name, id, attempt, "retrying", Some(delay));
                ctx.meters.retried.increment(1);
                events::emit(&ctx.events, || Event::Failed {
                    id: id.clone(),
                    attempt,
                    reason: failure.reason.clone(),
                    retry_in: delay,
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(mode: Mode) -> Failure {
        Failure::new(mode, Cause::Error, "boom".into())
    }

    #[test]
    fn a_failure_without_a_delay_gets_the_backoffs() {
        let s = Duration::from_secs;
        let (own, queue) = (Backoff::fixed(s(7)), Backoff::fixed(s(60)));

        let mut f = failure(Mode::Fail(None));
        with_backoff(&mut f, Some(&own), &queue, 3);
        assert_eq!(f.mode, Mode::Fail(Some(s(7))), "the message's own backoff first");

        let mut f = failure(Mode::Fail(None));
        with_backoff(&mut f, None, &Backoff::exponential(s(1), s(600)).jitter(0.0), 3);
        assert_eq!(f.mode, Mode::Fail(Some(s(4))), "else the queue's, by attempt");

        let mut f = failure(Mode::Fail(Some(s(42))));
        with_backoff(&mut f, Some(&own), &queue, 1);
        assert_eq!(f.mode, Mode::Fail(Some(s(42))), "a RetryAfter's delay stays");

        for mode in [Mode::Dead, Mode::Release] {
            let mut f = failure(mode);
            with_backoff(&mut f, Some(&own), &queue, 1);
            assert!(matches!(f.mode, Mode::Dead | Mode::Release), "no delay: {:?}", f.mode);
        }
        let mut f = failure(Mode::Defer(s(5)));
        with_backoff(&mut f, Some(&own), &queue, 1);
        assert_eq!(f.mode, Mode::Defer(s(5)), "a deferral keeps its delay");
    }
}
