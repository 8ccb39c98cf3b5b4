//! Coalesced acks: handlers hand their acks, and their progress and log
//! lines (`notary.rs`), to one task per shard, which sends whatever has
//! piled up as a single `ack` script call, the notes first (or a `note`
//! call when only notes piled up; see `batcher.rs`). Fencing is per id
//! inside the script. One queue for both keeps each delivery's notes
//! ahead of its ack, so the ack waits for none, and a delivery's notes
//! sent with its ack get the result retention in that call.
//!
//! An ack completes its children's parents in this slot itself. The relay
//! of the other completions runs beside the acks, in a task of its own,
//! rather than between two ack calls: an ack never waits for a relay. The
//! completions an ack call recorded for parents in other slots come back
//! in its reply, and that task delivers them at once, without reading the
//! outbox (an aborted child's, recorded by the ack's abort, wait there for
//! its read). A child counts as acking until then, so the line ahead of a
//! parent's last child is bounded end to end: at most [`ACK_SLACK`] acks
//! and completions, fewer while they take longer than [`ACK_WAIT`]
//! ([`AckLine`]).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fred::clients::Client;
use futures::future::BoxFuture;
use futures::stream::{FuturesUnordered, StreamExt};
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
use crate::{Error, MessageId};

/// Most acks and notes in one script call: a claim's largest batch.
/// Calls of 128 cost progress and log lines 2-3 µs of Redis CPU a message
/// more and a parent's last child waited no less (docs/performance.md,
/// "Flows").
const WRITE_BATCH: usize = 256;

/// Most bytes of results and notes in one script call (a bigger result
/// goes alone).
const WRITE_BYTES: usize = 1 << 20;

/// Acks (and flow children's completions) waiting that are normal under
/// load, at most: a call in flight and the next gathering while it waits
/// behind claims on the connection. More means acks fall behind the
/// handlers, and each one waiting adds to how long the last one takes to
/// reach Redis (10-20 µs each for a flow's children), so claims wait.
pub(crate) const ACK_SLACK: usize = 256;

/// The fewest acks waiting that a loop lets pass before it claims less,
/// however long acks take.
const ACK_SLACK_LEAST: usize = 16;

/// How long a flow's child whose completion is relayed may take to be
/// done acking (its ack sent, its completion relayed) before the loop
/// lets fewer acks wait: a parent's last child waits behind the line of
/// those ahead of it.
const ACK_WAIT: Duration = Duration::from_millis(3);

/// A loop's finished deliveries whose ack is not done yet, and how many
/// may wait before it claims less (the slack): [`ACK_SLACK`] while the
/// flow children whose completions are relayed to their parents are done
/// within [`ACK_WAIT`], one less for each done later (down to
/// [`ACK_SLACK_LEAST`]), one more for each done in time and for each other
/// ack. While the slack is cut short, claims also keep what is claimed
/// and not done acking within half the claim limit and the slack
/// (`claim_capacity`). So the line ahead of a parent's last child is
/// bounded by time as well as count, while other acks keep the whole
/// slack: for them it only keeps leases from running out in the line, and
/// a shorter one makes smaller calls (progress and log lines cost a sixth
/// more with it; docs/performance.md, "Flows").
#[derive(Debug)]
pub(crate) struct AckLine {
    waiting: AtomicUsize,
    slack: AtomicUsize,
}

impl Default for AckLine {
    fn default() -> Self {
        AckLine {
            waiting: AtomicUsize::new(0),
            slack: AtomicUsize::new(ACK_SLACK),
        }
    }
}

impl AckLine {
    /// Deliveries finished and not done acking.
    pub(crate) fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Acquire)
    }

    /// How many may wait before the loop claims less.
    pub(crate) fn slack(&self) -> usize {
        self.slack.load(Ordering::Acquire)
    }

    /// One more delivery finished.
    pub(crate) fn finished(&self) {
        self.waiting.fetch_add(1, Ordering::AcqRel);
    }

    /// One delivery done acking; `waited`, how long after it finished, for
    /// a relayed child's.
    pub(crate) fn done(&self, waited: Option<Duration>) {
        self.waiting.fetch_sub(1, Ordering::AcqRel);
        let _ = self.slack.fetch_update(Ordering::AcqRel, Ordering::Acquire, |slack| {
            Some(match waited.is_some_and(|w| w > ACK_WAIT) {
                true => slack.saturating_sub(1).max(ACK_SLACK_LEAST),
                false => (slack + 1).min(ACK_SLACK),
            })
        });
    }
}

/// Counts a finished delivery in its loop's [`AckLine`] until dropped.
pub(crate) trait AckGuard: Send {
    /// Its completion goes to the relay: how long it takes to be done
    /// bounds the line.
    fn relayed(&mut self);
}

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
    /// Dropped once the ack is sent or given up, and the completion it
    /// recorded relayed: the consumer counts acks not yet done, and claims
    /// less while more than its slack wait ([`AckLine`]).
    pub _acking: Option<Box<dyn AckGuard>>,
}

/// Ack calls' completions waiting for the relay task, at most: past that
/// the outbox keeps them for its next read.
const RECORDED_WAITING: usize = 64;

/// A shard's ack task, as the consumer sees it.
pub(crate) struct Acks {
    /// Where acks and notes go.
    pub tx: mpsc::UnboundedSender<Box<Write>>,
    /// Asks the shard's relay task for a relay of its outbox; such reads
    /// run one at a time, and one asked for while one runs runs after it.
    pub relay: mpsc::Sender<()>,
}

/// What the relay task is given: the tick's reads of the outbox, and
/// the completions ack calls recorded.
struct Relays {
    read: mpsc::Receiver<()>,
    recorded: mpsc::Receiver<Recorded>,
}

/// The completions one ack call recorded, for the relay task. Each child
/// still counts as acking (its ack's guard is here) until its completion
/// reached its parent: deliveries that fall behind hold claims back as
/// acks do, so a parent's last child waits behind a bounded line.
#[derive(Default)]
struct Recorded {
    /// Those of parents in other slots, to deliver as they are.
    deliver: Vec<OutboxEntry>,
    /// Whether the outbox needs a read: an aborted child's completion
    /// waits there (and any entry the reply's reading did not take).
    read: bool,
    _acking: Vec<Box<dyn AckGuard>>,
}

/// Starts the ack task of the queue's shard number `shard`, and its relay task;
/// they end once every sender is dropped, all acks are sent and the last
/// relay asked for has run.
pub(crate) fn spawn(ctx: Arc<Context>, shard: usize) -> (Acks, JoinHandle<()>) {
    let (tx, rx) = mpsc::unbounded_channel();
    // One relay asked for while one runs is enough: it reads the whole outbox.
    let (relay, read) = mpsc::channel(1);
    let (recorded, to_relay) = mpsc::channel(RECORDED_WAITING);
    let relays = tokio::spawn(relay_when_asked(
        ctx.clone(),
        shard,
        Relays {
            read,
            recorded: to_relay,
        },
    ));
    let acker = Acker {
        ctx,
        shard,
        relay: relay.clone(),
        recorded,
    };
    let task = tokio::spawn(async move {
        // With the acker and the loop gone, the relay task ends after any relay asked for.
        drop(batcher::run(acker, rx).await);
        let _ = relays.await;
    });
    (Acks { tx, relay }, task)
}

/// Relays one relay task runs at once, at most. A relay makes two calls
/// in turn (the completions on the parents' slots, then the drop of their
/// outbox entries): with one at a time, a parent's last child waited for
/// both of the relay before it (1-2 ms under load, docs/performance.md,
/// "Flows"). Completions are idempotent (a child leaves its parent's set
/// once), so relays that overlap may deliver an entry twice, harmlessly.
const RELAYS_AT_ONCE: usize = 2;

/// Takes the completions ack calls recorded as they come, several calls'
/// together (at most `RELAY_BATCH` entries and `OUTBOX_BYTES` of results
/// a time): delivers those of parents in other slots as they are, then
/// relays the shard's outbox if one asked for it; and relays the outbox
/// each time the loop's tick asks, its probe having found entries; at
/// most [`RELAYS_AT_ONCE`] of them run at once. A failure leaves the
/// entries in the outbox for the next tick, whose probe finds them.
async fn relay_when_asked(ctx: Arc<Context>, shard: usize, mut relays: Relays) {
    let (client, k, retention) = (&ctx.client, &ctx.shards[shard], ctx.settings.dead_letter_retention);
    // Each relay says whether it read the outbox; boxed, so that an idle
    // task does not hold a relay's state.
    let mut running: FuturesUnordered<BoxFuture<'_, (bool, Result<(), Error>)>> = FuturesUnordered::new();
    // Outbox reads running. Those the tick asks for go one at a time, as
    // two would take the same entries; a recorded relay's own read (an
    // aborted child's completion waits in the outbox) does not wait for
    // one, and an entry both take is applied once.
    let mut reading = 0;
    loop {
        let room = running.len() < RELAYS_AT_ONCE;
        let outcome = tokio::select! {
            biased;
            Some((read, outcome)) = running.next(), if !running.is_empty() => {
                reading -= usize::from(read);
                outcome
            }
            Some(mut got) = relays.recorded.recv(), if room => {
                let mut bytes = results_bytes(&got.deliver);
                while got.deliver.len() < RELAY_BATCH && bytes < OUTBOX_BYTES {
                    let Ok(more) = relays.recorded.try_recv() else { break };
                    bytes += results_bytes(&more.deliver);
                    got.deliver.extend(more.deliver);
                    got.read |= more.read;
                    got._acking.extend(more._acking);
                }
                reading += usize::from(got.read);
                // The children count as acking until their relay ends.
                running.push(Box::pin(async move {
                    (got.read, relay_recorded(client, k, retention, &got.deliver, got.read).await)
                }));
                Ok(())
            }
            Some(()) = relays.read.recv(), if room && reading == 0 => {
                reading += 1;
                running.push(Box::pin(async move { (true, relay::relay(client, k, retention).await.map(drop)) }));
                Ok(())
            }
            else => return,
        };
        if let Err(e) = outcome {
            tracing::warn!(queue = %ctx.name, error = %e, "relay failed; the next tick retries");
        }
    }
}

/// Delivers `entries` (completions for other slots), then reads the
/// outbox if `read`; a failed delivery does not skip the read.
async fn relay_recorded(
    client: &Client,
    k: &Keys,
    retention: Duration,
    entries: &[OutboxEntry],
    read: bool,
) -> Result<(), Error> {
    let delivered = match entries.is_empty() {
        true => Ok(0),
        false => relay::deliver(client, k, entries, retention).await,
    };
    let read = match read {
        true => relay::relay(client, k, retention).await,
        false => Ok(0),
    };
    delivered.and(read).map(drop)
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
    /// Hands the relay task the completions ack calls recorded.
    recorded: mpsc::Sender<Recorded>,
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
        let recorded = flush(ctx, k, &mut acks, notes).await;
        if (recorded.read || !recorded.deliver.is_empty()) && self.recorded.try_send(recorded).is_err() {
            // With too many waiting for the relay task, the outbox keeps
            // them for a read; full or not, one reads the whole outbox.
            let _ = self.relay.try_send(());
        }
    }
}

/// Sends one batch of acks with `notes`, retrying the acks on Redis
/// errors while any lease is still valid (the script is idempotent, so a
/// retry after a lost reply is harmless; the notes are not retried, as a
/// line would be appended twice); returns what the completions of the
/// flows' children it acked ask of the relay task.
async fn flush(ctx: &Context, k: &Keys, batch: &mut Vec<AckItem>, notes: Held) -> Recorded {
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
                let mut recorded = Recorded {
                    // An aborted child's completion waits in the outbox.
                    read: acked.acks.contains(&AckOutcome::Aborted),
                    ..Recorded::default()
                };
                for (i, entry) in acked.recorded {
                    let result = match ctx.settings.result_retention.is_zero() {
                        true => None,
                        false => batch[i].kept.result.as_deref(),
                    };
                    match OutboxEntry::parse(entry, result) {
                        Some(e @ OutboxEntry::Done { .. }) if e.parent_base() != Some(k.base.as_str()) => {
                            recorded.deliver.push(e)
                        }
                        _ => recorded.read = true,
                    }
                    if let Some(mut acking) = batch[i]._acking.take() {
                        acking.relayed();
                        recorded._acking.push(acking);
                    }
                }
                for (item, outcome) in batch.iter().zip(acked.acks) {
                    report(ctx, item, outcome, sent);
                }
                batch.clear();
                return recorded;
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
                    return Recorded::default();
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_slack_shrinks_with_late_relayed_children_and_grows_back() {
        let line = AckLine::default();
        line.finished();
        line.finished();
        assert_eq!(line.waiting(), 2);
        line.done(Some(ACK_WAIT * 2));
        assert_eq!(
            (line.waiting(), line.slack()),
            (1, ACK_SLACK - 1),
            "a late relayed child"
        );
        line.done(None);
        assert_eq!(
            (line.waiting(), line.slack()),
            (0, ACK_SLACK),
            "any other ack counts as in time"
        );
        for _ in 0..ACK_SLACK * 2 {
            line.finished();
            line.done(Some(ACK_WAIT + Duration::from_micros(1)));
        }
        assert_eq!(line.slack(), ACK_SLACK_LEAST, "never below its least");
        line.finished();
        line.done(Some(ACK_WAIT));
        assert_eq!(line.slack(), ACK_SLACK_LEAST + 1, "done within the wait");
        for _ in 0..ACK_SLACK * 2 {
            line.finished();
            line.done(None);
        }
        assert_eq!(line.slack(), ACK_SLACK, "never above the count bound");
    }
}
