//! The consumer's side of a delivery's [`Scribe`](crate::scribe::Scribe):
//! progress and log lines written through its shard (`note.lua`), fenced
//! by the delivery's lease, announced as `Event::Progress`.

use std::sync::{Arc, Weak};

use super::lease::Lease;
use super::state::Shared;
use crate::events::{self, Event};
use crate::flow::ChildrenPage;
use crate::scribe::{Desk, NoteKind};
use crate::store::ops::note::{Note, Noted};
use crate::{Error, MessageId};

/// Where a running delivery writes (its shard's loop), and the lease that
/// fences it. Weak: a message kept past its delivery must not keep the
/// loop (and its ack task) alive through a shutdown.
pub(crate) struct ShardDesk {
    pub shared: Weak<Shared>,
    pub lease: Current,
}

/// The lease a delivery holds now.
pub(crate) enum Current {
    /// As claimed: handlers within one lease are never renewed.
    Claimed(i64),
    /// Renewed while the handler runs.
    Renewed(Arc<Lease>),
}

#[async_trait::async_trait]
impl Desk for ShardDesk {
    fn max_result(&self) -> usize {
        self.shared
            .upgrade()
            .map_or(usize::MAX, |s| s.ctx.settings.max_result_size)
    }

    async fn children(&self, id: &MessageId, attempt: u32, cursor: Option<&str>) -> Result<ChildrenPage, Error> {
        // The loop has ended: so has the delivery.
        let shared = self.shared.upgrade().ok_or_else(|| Error::LeaseLost {
            id: id.clone(),
            attempt,
        })?;
        shared.store().children(id.as_str(), cursor).await
    }

    async fn write(&self, id: &MessageId, attempt: u32, note: NoteKind<'_>) -> Result<(), Error> {
        let lost = || Error::LeaseLost {
            id: id.clone(),
            attempt,
        };
        // The loop has ended: so has the delivery.
        let shared = self.shared.upgrade().ok_or_else(lost)?;
        let ctx = &shared.ctx;
        let lease = match &self.lease {
            Current::Claimed(lease) => Some(*lease),
            Current::Renewed(l) => l.current().await,
        };
        let lease = lease.ok_or_else(lost)?;
        let (progress, line) = match note {
            NoteKind::Progress(v) => (Some(v), None),
            NoteKind::Log(line) => (None, Some(line)),
        };
        let s = &ctx.settings;
        let op = Note {
            id: id.as_str(),
            lease,
            progress,
            line,
            max_lines: s.max_log_lines,
            // Kept past any end of this delivery: the ack shortens it to
            // the result retention, a burial leaves it past the dead letter's.
            ttl: s.result_retention.max(s.dead_letter_retention) + s.handler_timeout.max(s.max_consume_duration),
        };
        match shared.store().run(&op).await? {
            Noted::Written => {
                if let Some(v) = progress {
                    events::emit(&ctx.events, || Event::Progress {
                        id: id.clone(),
                        value: v.to_string(),
                    });
                }
                Ok(())
            }
            Noted::LeaseLost => Err(lost()),
        }
    }
}
