//! A delivery's notes (its progress and log lines) on their way to Redis:
//! handed to its shard's ack task (`acker.rs`), which sends those that
//! piled up with the acks it sends, or alone (`note.lua`) when it has no
//! acks; each is fenced by its delivery's lease, announced as
//! `Event::Progress` once stored, and tells its delivery's [`Unwritten`]
//! its outcome (a nack, or a renewed lease's end, waits for them).

use std::sync::Arc;

use super::context::Context;
use super::lease::Lease;
use crate::events::{self, Event};
use crate::scribe::{NoteKind, Unwritten};
use crate::store::ops::note::{Note, Noted, Notes};
use crate::store::Keys;
use crate::{Error, MessageId};

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

/// Notes with the lease each is fenced by, read when their call goes out.
pub(crate) struct Held(Vec<(NoteItem, i64)>);

impl Held {
    /// Reads the leases of `notes` now: a renewal while a note waited
    /// fences it with the renewed lease. A note whose delivery holds no
    /// lease any more is answered at once.
    pub(crate) async fn read(notes: Vec<NoteItem>) -> Held {
        let mut held = Vec::with_capacity(notes.len());
        for item in notes {
            match item.lease.now().await {
                Some(lease) => held.push((item, lease)),
                None => {
                    let lost = item.lost();
                    item.answer(Err(lost));
                }
            }
        }
        Held(held)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The script call's notes, kept as the queue's settings say.
    pub(crate) fn op(&self, ctx: &Context) -> Notes<'_> {
        let s = &ctx.settings;
        Notes {
            notes: self
                .0
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
        }
    }

    /// Sends the notes as one `note.lua` call.
    pub(crate) async fn send(self, ctx: &Context, k: &Keys) {
        if self.is_empty() {
            return;
        }
        let reply = ctx.store(k).run(&self.op(ctx)).await;
        self.answer(ctx, reply.as_deref());
    }

    /// Tells each note's delivery what its call did with it (`reply`: one
    /// outcome per note, in order), announcing each progress stored.
    pub(crate) fn answer(self, ctx: &Context, reply: Result<&[Noted], &Error>) {
        let outcomes = match reply {
            Ok(outcomes) => outcomes,
            Err(e) => {
                for (item, _) in self.0 {
                    item.answer(Err(e.again()));
                }
                return;
            }
        };
        for ((item, _), &outcome) in self.0.into_iter().zip(outcomes) {
            let outcome = match outcome {
                Noted::Written => {
                    if item.kind == NoteKind::Progress {
                        events::emit(&ctx.events, || Event::Progress {
                            id: item.id.clone(),
                            value: item.text.clone(),
                        });
                    }
                    Ok(())
                }
                Noted::LeaseLost => Err(item.lost()),
                Noted::WrongType => Err(Error::WrongType {
                    queue: ctx.name.clone(),
                    detail: format!("the log key of message {} holds another type", item.id),
                }),
            };
            item.answer(outcome);
        }
    }
}
