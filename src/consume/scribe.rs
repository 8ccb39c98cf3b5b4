//! The consumer's side of a delivery's [`Scribe`](crate::scribe::Scribe):
//! progress and log lines written through its shard's ack task
//! (`notary.rs`, `acker.rs`), each fenced by its delivery's lease.

use std::sync::{Arc, Weak};

use super::acker::Write;
use super::notary::{Current, NoteItem};
use super::state::Shared;
use crate::flow::ChildrenPage;
use crate::scribe::{Desk, NoteKind, Unwritten};
use crate::{Error, MessageId};

/// Where a running delivery writes (its shard's loop), and the lease that
/// fences it. Weak: a message kept past its delivery must not keep the
/// loop (and its ack task) alive through a shutdown.
pub(crate) struct ShardDesk {
    pub shared: Weak<Shared>,
    pub lease: Current,
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

    fn write(
        &self,
        id: &MessageId,
        attempt: u32,
        kind: NoteKind,
        text: &str,
        unwritten: &Arc<Unwritten>,
    ) -> Result<(), Error> {
        unwritten.add();
        let item = NoteItem {
            id: id.clone(),
            attempt,
            lease: self.lease.clone(),
            kind,
            text: text.to_string(),
            unwritten: unwritten.clone(),
        };
        // The loop has ended (or is ending): so has the delivery. The
        // loop is not kept alive while the note waits.
        let sent = self
            .shared
            .upgrade()
            .map(|s| s.acks().tx.send(Box::new(Write::Note(item))).is_ok());
        if sent != Some(true) {
            let lost = || Error::LeaseLost {
                id: id.clone(),
                attempt,
            };
            unwritten.done(Err(lost()));
            return Err(lost());
        }
        Ok(())
    }
}
