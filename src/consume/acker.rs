//! Coalesced acks: handlers hand their acks, and their progress and log
//! lines (`notary.rs`), to one task per shard, which sends whatever has
//! piled up as a single `ack` script call, the notes first (or a `note`
//! call when only notes piled up; see `batcher.rs`). Fencing is per id
//! inside the script. One queue for both keeps each delivery's notes
//! ahead of its ack, so the ack waits for none, and a delivery's notes
//! sent with its ack get the result retention in that call.
//!
//! The relay of flow completions runs beside the acks, in a task of its
//! own, rather than between two ack calls: an ack never waits for a relay.
//! The completions an ack call recorded for parents in other slots come
//! back in its reply, and that task delivers them at once, without reading
//! the outbox; those of parents in this slot are applied by its next read
//! (`relay.lua`, one call).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::batcher::{self, Batcher};
use super::context::Context;
use super::notary::{Held, NoteItem};
use super::outcome::Kept;
use crate::events::{self, Event};
use crate::message::Receipt;
use crate::store::flows::relay::{self, RELAY_BATCH};
use crate::store::ops::ack::{Ack, AckOutcome, Keep};
use crate::store::ops::note::Notes;
use crate::store::ops::relay::{OutboxEntry, OUTBOX_BYTES};
use crate::store::Keys;
use crate::MessageId;

/// Most acks and notes in one script call: a claim's largest batch.
const WRITE_BATCH: usize = 256;

/// Most bytes of results and notes in one script call (a bigger result
/// goes alone).
const WRITE_BYTES: usize = 1 << 20;

/// Acks waiting to be sent that are normal under load, at most: a batch
/// in flight and more gathering while it waits behind claims on the
/// connection. More means acks fall behind the handlers.
pub(crate) const ACK_SLACK: usize = 512;

/// What a shard's ack task sends.
pub(crate) enum Write {
    /// A successful delivery to acknowledge.
    Ack(AckItem),
    /// A running delivery's progress or log line.
    Note(NoteItem),
}

/// One successful delivery to acknowledge.
pub(crate) struct AckItem {
    /// Its lease fences the ack; after its deadline a retry is pointless.
    pub receipt: Receipt,
    /// Its result, and whether it wrote progress or log lines.
    pub kept: Kept,
    /// Dropped once the ack is sent or given up: the consumer counts acks
    /// not yet sent, and claims less while more than [`ACK_SLACK`] wait.
    pub _acking: Box<dyn Send>,
}

/// Batches of just recorded completions waiting for the relay task, at
/// most: past that the outbox keeps them for its next read.
const DELIVERIES_WAITING: usize = 64;

/// A shard's ack task, as the consumer sees it.
pub(crate) struct Acks {
    /// Where acks and notes go.
    pub tx: mpsc::UnboundedSender<Box<Write>>,
    /// Asks the shard's relay task for a relay of its outbox; it runs one
    /// at a time, and one asked for while one runs runs after it.
    pub relay: mpsc::Sender<()>,
}

/// What the relay task is given: reads of the outbox asked for, and
/// completions just recorded, to deliver as they are.
struct Relays {
    read: mpsc::Receiver<()>,
    deliver: mpsc::Receiver<Vec<OutboxEntry>>,
}

/// Starts the ack task of the queue's shard number `shard`, and its relay task;
/// they end once every sender is dropped, all acks are sent and the last
/// relay asked for has run.
pub(crate) fn spawn(ctx: Arc<Context>, shard: usize) -> (Acks, JoinHandle<()>) {
    let (tx, rx) = mpsc::unbounded_channel();
    // One relay asked for while one runs is enough: it reads the whole outbox.
    let (relay, read) = mpsc::channel(1);
    let (deliver, delivered) = mpsc::channel(DELIVERIES_WAITING);
    let relays = tokio::spawn(relay_when_asked(
        ctx.clone(),
        shard,
        Relays {
            read,
            deliver: delivered,
        },
    ));
    let acker = Acker {
        ctx,
        shard,
        relay: relay.clone(),
        deliver,
    };
    let task = tokio::spawn(async move {
        // With the acker and the loop gone, the relay task ends after any relay asked for.
        drop(batcher::run(acker, rx).await);
        let _ = relays.await;
    });
    (Acks { tx, relay }, task)
}

/// Delivers the completions ack calls recorded for parents in other
/// slots as they come, several calls' together (at most `RELAY_BATCH`
/// entries and `OUTBOX_BYTES` of results a time); and relays the shard's
/// outbox each time it is asked: by an ack call that recorded completions
/// of parents in this slot, or by the loop's tick whose probe found
/// entries. A failure leaves the entries in the outbox for the next tick,
/// whose probe finds them.
async fn relay_when_asked(ctx: Arc<Context>, shard: usize, mut relays: Relays) {
    let (client, k, retention) = (&ctx.client, &ctx.shards[shard], ctx.settings.dead_letter_retention);
    loop {
        let outcome = tokio::select! {
            biased;
            Some(mut entries) = relays.deliver.recv() => {
                let mut bytes = results_bytes(&entries);
                while entries.len() < RELAY_BATCH && bytes < OUTBOX_BYTES {
                    let Ok(more) = relays.deliver.try_recv() else { break };
                    bytes += results_bytes(&more);
                    entries.extend(more);
                }
                // Boxed, so that an idle task does not hold the delivery's state.
                Box::pin(relay::deliver(client, k, &entries, retention)).await
            }
            Some(()) = relays.read.recv() => Box::pin(relay::relay(client, k, retention)).await,
            else => return,
        };
        if let Err(e) = outcome {
            tracing::warn!(queue = %ctx.name, error = %e, "relay failed; the next tick retries");
        }
    }
}

/// The bytes of results `entries` carry.
fn results_bytes(entries: &[OutboxEntry]) -> u64 {
    entries
        .iter()
        .map(|e| match e {
            OutboxEntry::Done { result, .. } => result.len() as u64,
            OutboxEntry::Cancelled { .. } => 0,
        })
        .sum()
}

/// The ack task's state.
struct Acker {
    ctx: Arc<Context>,
    /// Its shard's number in `ctx.shards`.
    shard: usize,
    /// Asks the relay task for a relay.
    relay: mpsc::Sender<()>,
    /// Hands the relay task completions to deliver.
    deliver: mpsc::Sender<Vec<OutboxEntry>>,
}

impl Batcher for Acker {
    type Item = Write;
    const MAX_ITEMS: usize = WRITE_BATCH;
    const MAX_BYTES: usize = WRITE_BYTES;

    fn size(item: &Write) -> usize {
        match item {
            Write::Ack(ack) => ack.kept.result.as_ref().map_or(0, Vec::len),
            Write::Note(note) => note.text.len(),
        }
    }

    async fn send(&mut self, batch: &mut Vec<Write>) {
        let (mut acks, mut notes) = (Vec::new(), Vec::new());
        for item in batch.drain(..) {
            match item {
                Write::Ack(ack) => acks.push(ack),
                Write::Note(note) => notes.push(note),
            }
        }
        let (ctx, k) = (&self.ctx, &self.ctx.shards[self.shard]);
        let notes = Held::read(notes).await;
        if acks.is_empty() {
            notes.send(ctx, k).await;
            return;
        }
        let Flushed { read, deliver } = flush(ctx, k, &mut acks, notes).await;
        // Should the relay task have too many waiting, the outbox keeps
        // them for a read.
        let read = read || (!deliver.is_empty() && self.deliver.try_send(deliver).is_err());
        if read {
            // Full or not, the relay task reads the whole outbox.
            let _ = self.relay.try_send(());
        }
    }
}

/// What one flush of acks leaves to the relay task.
#[derive(Default)]
struct Flushed {
    /// A read of the outbox: completions of parents in this slot wait
    /// there (and an aborted child's).
    read: bool,
    /// Completions just recorded for parents in other slots.
    deliver: Vec<OutboxEntry>,
}

/// Sends one batch of acks with `notes`, retrying the acks on Redis
/// errors while any lease is still valid (the script is idempotent, so a
/// retry after a lost reply is harmless; the notes are not retried, as a
/// line would be appended twice); returns what the completions of the
/// flows' children it acked ask of the relay task.
async fn flush(ctx: &Context, k: &Keys, batch: &mut Vec<AckItem>, notes: Held) -> Flushed {
    let mut backoff = Duration::from_millis(20);
    let sent = Instant::now();
    let mut notes = Some(notes);
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
        let reply = {
            let ack = Ack {
                leases,
                result_retention: ctx.settings.result_retention,
                notes: notes.as_ref().map_or_else(Notes::none, |n| n.op(ctx)),
            };
            ctx.store(k).run(&ack).await
        };
        match reply {
            Ok(acked) => {
                if let Some(notes) = notes.take() {
                    notes.answer(ctx, Ok(&acked.notes));
                }
                let mut flushed = Flushed {
                    // An aborted child's completion waits in the outbox.
                    read: acked.acks.contains(&AckOutcome::Aborted),
                    deliver: Vec::new(),
                };
                for (i, entry) in acked.recorded {
                    let result = match ctx.settings.result_retention.is_zero() {
                        true => None,
                        false => batch[i].kept.result.as_deref(),
                    };
                    match OutboxEntry::parse(entry, result) {
                        Some(e @ OutboxEntry::Done { .. }) if e.parent_base() != Some(k.base.as_str()) => {
                            flushed.deliver.push(e)
                        }
                        _ => flushed.read = true,
                    }
                }
                for (item, outcome) in batch.iter().zip(acked.acks) {
                    report(ctx, item, outcome, sent);
                }
                batch.clear();
                return flushed;
            }
            Err(e) => {
                if let Some(notes) = notes.take() {
                    notes.answer(ctx, Err(&e));
                }
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
                    return Flushed::default();
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
    if outcome == AckOutcome::Aborted {
        aborted(ctx, id);
    } else if outcome != AckOutcome::LeaseLost {
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

/// Logs, counts and emits that message `id`, aborted while its handler
/// ran, has ended as aborted.
pub(crate) fn aborted(ctx: &Context, id: &MessageId) {
    tracing::debug!(queue = %ctx.name, %id, "aborted while its handler ran; ended as aborted");
    ctx.meters.aborted.increment(1);
    events::emit(&ctx.events, || Event::Aborted { id: id.clone() });
}
