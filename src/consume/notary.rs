//! A shard's notes task: the progress and log lines of all its running
//! handlers go to it, and it sends whatever has piled up as one
//! `note.lua` call (see `batcher.rs`), each note fenced by its delivery's
//! lease, announced as `Event::Progress` once stored, and tells each
//! delivery's [`Unwritten`] its own note's outcome (the delivery's ack
//! or nack waits for them).

use std::sync::Arc;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::batcher::{self, Batcher};
use super::context::Context;
use super::lease::Lease;
use crate::events::{self, Event};
use crate::scribe::{NoteKind, Unwritten};
use crate::store::ops::note::{Note, Noted, Notes};
use crate::{Error, MessageId};

/// Most notes in one script call.
const NOTE_BATCH: usize = 128;

/// Most bytes of progress and lines in one script call (each is at most
/// `MAX_PROGRESS` or `MAX_LOG_LINE`).
const NOTE_BYTES: usize = 64 << 10;

/// The lease a delivery holds now.
#[derive(Clone)]
pub(crate) enum Current {
    /// As claimed: handlers within one lease are never renewed.
    Claimed(i64),
    /// Renewed while the handler runs.
    Renewed(Arc<Lease>),
}

impl Current {
    /// The lease now, after any renewal in flight; `None` once lost or ended.
    async fn now(&self) -> Option<i64> {
        match self {
            Current::Claimed(lease) => Some(*lease),
            Current::Renewed(l) => l.current().await,
        }
    }
}

/// One note on its way to Redis, and where its outcome goes.
pub(crate) struct NoteItem {
    pub id: MessageId,
    pub attempt: u32,
    pub lease: Current,
    pub kind: NoteKind,
    pub text: String,
    pub unwritten: Arc<Unwritten>,
}

impl NoteItem {
    fn lost(&self) -> Error {
        Error::LeaseLost {
            id: self.id.clone(),
            attempt: self.attempt,
        }
    }

    fn answer(self, outcome: Result<(), Error>) {
        self.unwritten.done(outcome);
    }
}

/// Starts the notes task of the queue's shard number `shard`; it ends once every
/// sender is dropped and all notes are sent.
pub(crate) fn spawn(ctx: Arc<Context>, shard: usize) -> (mpsc::UnboundedSender<Box<NoteItem>>, JoinHandle<()>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let task = tokio::spawn(async move {
        batcher::run(Notary { ctx, shard }, rx).await;
    });
    (tx, task)
}

/// The notes task's state.
struct Notary {
    ctx: Arc<Context>,
    /// Its shard's number in `ctx.shards`.
    shard: usize,
}

impl Batcher for Notary {
    type Item = NoteItem;
    const MAX_ITEMS: usize = NOTE_BATCH;
    const MAX_BYTES: usize = NOTE_BYTES;

    fn size(item: &NoteItem) -> usize {
        item.text.len()
    }

    async fn send(&mut self, batch: &mut Vec<NoteItem>) {
        // Leases are read now, when the call goes out: a renewal while a
        // note waited fences it with the renewed lease.
        let mut held = Vec::with_capacity(batch.len());
        for item in batch.drain(..) {
            match item.lease.now().await {
                Some(lease) => held.push((item, lease)),
                None => {
                    let lost = item.lost();
                    item.answer(Err(lost));
                }
            }
        }
        if held.is_empty() {
            return;
        }
        let s = &self.ctx.settings;
        let op = Notes {
            notes: held
                .iter()
                .map(|(item, lease)| Note {
                    id: item.id.as_str(),
                    lease: *lease,
                    kind: item.kind,
                    text: &item.text,
                })
                .collect(),
            max_lines: s.max_log_lines,
            // Kept past any end of this delivery: the ack shortens it to
            // the result retention, a burial leaves it past the dead letter's.
            ttl: s.result_retention.max(s.dead_letter_retention) + s.handler_timeout.max(s.max_consume_duration),
        };
        let reply = self.ctx.store(&self.ctx.shards[self.shard]).run(&op).await;
        match reply {
            Ok(outcomes) => {
                for ((item, _), outcome) in held.into_iter().zip(outcomes) {
                    let outcome = match outcome {
                        Noted::Written => {
                            if item.kind == NoteKind::Progress {
                                events::emit(&self.ctx.events, || Event::Progress {
                                    id: item.id.clone(),
                                    value: item.text.clone(),
                                });
                            }
                            Ok(())
                        }
                        Noted::LeaseLost => Err(item.lost()),
                        Noted::WrongType => Err(Error::WrongType {
                            queue: self.ctx.name.clone(),
                            detail: format!("the log key of message {} holds another type", item.id),
                        }),
                    };
                    item.answer(outcome);
                }
            }
            Err(e) => {
                for (item, _) in held {
                    item.answer(Err(e.again()));
                }
            }
        }
    }
}
