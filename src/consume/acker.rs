//! Coalesced acks: handlers hand their acks to one task, which sends
//! whatever has piled up as a single `ack` script call.
//!
//! Batching adds no timer: while one call is in flight the next batch
//! gathers, so under load many acks share a round trip and when idle each
//! ack goes out at once. Fencing is per id inside the script.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::context::Context;
use super::outcome::Kept;
use crate::events::{self, Event};
use crate::message::Receipt;
use crate::store::ops::ack::{Ack, AckOutcome, Keep};
use crate::store::Keys;

/// Most acks in one script call.
const ACK_BATCH: usize = 128;

/// Acks waiting to be sent that are normal under load: a batch in flight
/// and more gathering while it waits behind claims on the connection.
/// More means acks fall behind the handlers.
pub(crate) const ACK_SLACK: usize = 4 * ACK_BATCH;

/// One successful delivery to acknowledge.
pub(crate) struct AckItem {
    /// Its lease fences the ack; after its deadline a retry is pointless.
    pub receipt: Receipt,
    /// Its result, and whether it wrote progress or log lines.
    pub kept: Kept,
    /// Dropped once the ack is sent or given up: the consumer counts acks
    /// not yet sent, and claims less while more than `ACK_SLACK` wait.
    pub _acking: Box<dyn Send>,
}

/// Starts the ack task of the queue's shard number `shard`; it ends once
/// every sender is dropped and all acks are sent.
pub(crate) fn spawn(ctx: Arc<Context>, shard: usize) -> (mpsc::UnboundedSender<Box<AckItem>>, JoinHandle<()>) {
    // Boxed items: the channel allocates its first block of 32 up front,
    // and an idle queue's acker holds it all along.
    let (tx, rx) = mpsc::unbounded_channel();
    (tx, tokio::spawn(run(ctx, shard, rx)))
}

async fn run(ctx: Arc<Context>, shard: usize, mut rx: mpsc::UnboundedReceiver<Box<AckItem>>) {
    // Grown on the first ack, not before: an idle queue's acker holds it.
    let mut batch = Vec::new();
    while let Some(item) = rx.recv().await {
        batch.push(*item);
        while batch.len() < ACK_BATCH {
            match rx.try_recv() {
                Ok(item) => batch.push(*item),
                Err(_) => break,
            }
        }
        // Boxed, so that the waiting task does not hold the sending's state.
        Box::pin(flush(&ctx, &ctx.shards[shard], &mut batch)).await;
    }
}

/// Sends one batch, retrying on Redis errors while any lease is still valid
/// (the script is idempotent, so a retry after a lost reply is harmless).
async fn flush(ctx: &Context, k: &Keys, batch: &mut Vec<AckItem>) {
    let mut backoff = Duration::from_millis(20);
    let sent = Instant::now();
    loop {
        let leases = batch
            .iter()
            .map(|item| {
                let keep = Keep {
                    result: item.kept.result.as_deref(),
                    noted: item.kept.noted,
                };
                (item.receipt.id.as_str(), item.receipt.lease, keep)
            })
            .collect();
        let ack = Ack {
            leases,
            result_retention: ctx.settings.result_retention,
        };
        match ctx.store(k).run(&ack).await {
            Ok(acked) => {
                let relay = acked.contains(&AckOutcome::AckedChild);
                for (item, outcome) in batch.iter().zip(acked) {
                    report(ctx, item, outcome, sent);
                }
                batch.clear();
                if relay {
                    // The children's completions to their parents now; a
                    // failure leaves them for the loop's next tick.
                    if let Err(e) =
                        crate::store::flows::relay::relay(&ctx.client, k, ctx.settings.dead_letter_retention).await
                    {
                        tracing::debug!(queue = %ctx.name, error = %e, "relay failed; the next tick retries");
                    }
                }
                return;
            }
            Err(e) => {
                // Only giving up is worth a warning: a retry that works changes nothing.
                tracing::debug!(queue = %ctx.name, error = %e, acks = batch.len(), "ack failed; retrying");
                let now = Instant::now();
                let before = batch.len();
                batch.retain(|item| item.receipt.deadline > now);
                if batch.len() < before {
                    tracing::warn!(
                        queue = %ctx.name, error = %e, acks = before - batch.len(),
                        "acks failed until their leases ran out; those messages will be delivered again"
                    );
                }
                if batch.is_empty() {
                    return;
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
            }
        }
    }
}

/// Logs, counts and emits what the ack of `item`, first sent at `sent`, did.
fn report(ctx: &Context, item: &AckItem, outcome: AckOutcome, sent: Instant) {
    let id = &item.receipt.id;
    let outcome = match outcome {
        // Nothing left to ack, and the ack first left after
        // the lease's end (by this host's clock, never later
        // than Redis's): a redelivery was acked, so this
        // ack is a late one.
        AckOutcome::Finished if sent >= item.receipt.deadline => AckOutcome::LeaseLost,
        // First sent within the lease, no sweep could take
        // the message back before it ran: a run of this call
        // whose reply was lost (re-sent by this loop or by
        // the client) acked it, however late this reply.
        outcome => outcome,
    };
    if outcome != AckOutcome::LeaseLost {
        match outcome {
            AckOutcome::Acked | AckOutcome::AckedChild => {
                tracing::trace!(queue = %ctx.name, %id, "acked")
            }
            _ => tracing::debug!(queue = %ctx.name, %id, "acked by the run whose reply was lost"),
        }
        ctx.meters.acked.increment(1);
        events::emit(&ctx.events, || Event::Acked { id: id.clone() });
    } else {
        tracing::warn!(
            queue = %ctx.name, %id,
            "ack came after the lease ran out; the message was or will be delivered again"
        );
        ctx.meters.lease_lost.increment(1);
        events::emit(&ctx.events, || Event::LeaseLost { id: id.clone() });
    }
}
