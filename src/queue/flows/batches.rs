//! Batches with callbacks (docs/workflows.md, Batches), built on flows: a
//! callback is a parent whose children are the batch's members, kept
//! waiting while the batch is open by one more child that only
//! [`Batch::close`] finishes.

use std::time::Duration;

use fred::bytes::Bytes;

use super::links::Deps;
use super::waiting::send_joining;
use crate::flow::wire::{ChildRef, Outcome};
use crate::flow::ChildPolicy;
use crate::store::ops::flow_complete::{complete, Completion};
use crate::store::ops::flow_status::FlowStatus;
use crate::{DelayQueue, Error, MessageId, NewMessage};

/// A batch about to be opened: its callbacks, from [`DelayQueue::batch`].
#[derive(Debug)]
#[must_use = "a batch exists only once opened"]
pub struct BatchBuilder<'a> {
    queue: &'a DelayQueue,
    id: Option<MessageId>,
    on_complete: Option<NewMessage>,
    on_success: Option<NewMessage>,
}

/// An open batch: messages sent through it are its members
/// ([`send`](Self::send)); its callbacks run once it is
/// [`close`](Self::close)d and its members finished.
#[derive(Debug, Clone)]
pub struct Batch {
    queue: DelayQueue,
    id: MessageId,
    /// Each callback's id and policy.
    callbacks: Vec<(MessageId, ChildPolicy)>,
}

/// Where a batch stands, from [`DelayQueue::batch_status`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct BatchStatus {
    /// Members may still be added ([`Batch::close`] not called yet).
    pub open: bool,
    /// Members sent so far.
    pub total: u64,
    /// Members not finished yet.
    pub left: u64,
    /// Members acked (or no longer stored when added).
    pub acked: u64,
    /// Members that became dead letters.
    pub dead: u64,
    /// Members cancelled or deleted.
    pub cancelled: u64,
}

/// The header every callback carries: its batch's id.
pub const BATCH_HEADER: &str = "batch";

impl DelayQueue {
    /// Starts a batch: register its callbacks, then
    /// [`open`](BatchBuilder::open) it (docs/workflows.md, Batches).
    ///
    /// ```no_run
    /// # async fn run(queue: delayqueue::DelayQueue) -> Result<(), delayqueue::Error> {
    /// use delayqueue::NewMessage;
    /// let batch = queue
    ///     .batch()
    ///     .id("import-7")
    ///     .on_complete(NewMessage::new("import 7 finished"))
    ///     .on_success(NewMessage::new("import 7 succeeded"))
    ///     .open()
    ///     .await?;
    /// for row in 0..3 {
    ///     batch.send(NewMessage::new(format!("row {row}"))).await?;
    /// }
    /// batch.close().await?;
    /// let status = queue.batch_status("import-7").await?;
    /// # let _ = status;
    /// # Ok(()) }
    /// ```
    pub fn batch(&self) -> BatchBuilder<'_> {
        BatchBuilder {
            queue: self,
            id: None,
            on_complete: None,
            on_success: None,
        }
    }

    /// Where batch `id` stands: read from its `on_complete` callback, else
    /// its `on_success` one, while that is stored (it waits, or its handler
    /// runs); `None` once it was acked, or when it is unknown (an
    /// `on_success` removed by a dead member included).
    ///
    /// ```no_run
    /// # async fn run(queue: delayqueue::DelayQueue) -> Result<(), delayqueue::Error> {
    /// if let Some(s) = queue.batch_status("import-7").await? {
    ///     println!("{} of {} left", s.left, s.total);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn batch_status(&self, id: impl AsRef<str>) -> Result<Option<BatchStatus>, Error> {
        let id = MessageId::from(id.as_ref());
        id.validate()?;
        for kind in [ON_COMPLETE, ON_SUCCESS] {
            let cb = callback_id(&id, kind);
            let k = self.shard_of(cb.as_str());
            let open = open_member(self, &cb);
            let c = self
                .store(k)
                .run(&FlowStatus {
                    id: cb.as_str(),
                    open_member: Some(&open),
                })
                .await?;
            if c.stored {
                return Ok(Some(BatchStatus {
                    open: c.open,
                    total: c.left + c.acked + c.dead + c.cancelled,
                    left: c.left,
                    acked: c.acked,
                    dead: c.dead,
                    cancelled: c.cancelled,
                }));
            }
        }
        Ok(None)
    }
}

const ON_COMPLETE: &str = "complete";
const ON_SUCCESS: &str = "success";

/// The id of batch `id`'s callback of `kind`.
fn callback_id(id: &MessageId, kind: &str) -> MessageId {
    MessageId::from(format!("{id}:{kind}"))
}

/// The child that keeps a callback waiting while its batch is open.
fn open_member(queue: &DelayQueue, callback: &MessageId) -> ChildRef {
    queue.shard_of(callback.as_str()).open_batch_member()
}

impl BatchBuilder<'_> {
    /// The batch's id (generated unless given): open the same id again to
    /// go on with a batch after a lost reply.
    pub fn id(mut self, id: impl Into<MessageId>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// A message sent once every member finished, whatever became of them
    /// (sent to the batch's queue, with the header [`BATCH_HEADER`]).
    pub fn on_complete(mut self, msg: NewMessage) -> Self {
        self.on_complete = Some(msg);
        self
    }

    /// A message sent once every member was acked; removed (never sent)
    /// as soon as a member becomes a dead letter or is cancelled.
    pub fn on_success(mut self, msg: NewMessage) -> Self {
        self.on_success = Some(msg);
        self
    }

    /// Stores the callbacks, waiting until the batch is closed and its
    /// members finished. At least one callback is needed
    /// ([`Error::InvalidFlow`]). Idempotent for a given [`id`](Self::id).
    pub async fn open(self) -> Result<Batch, Error> {
        let id = self.id.unwrap_or_else(MessageId::generate);
        id.validate()?;
        let queue = self.queue;
        let wanted = [
            (ON_COMPLETE, self.on_complete, ChildPolicy::Ignore),
            (ON_SUCCESS, self.on_success, ChildPolicy::Remove),
        ];
        let mut callbacks = Vec::new();
        for (kind, msg, policy) in wanted {
            let Some(msg) = msg else { continue };
            let cb = callback_id(&id, kind);
            let deps = Deps {
                children: vec![open_member(queue, &cb)],
                policy,
            };
            let msg = msg.id(cb.clone()).header(BATCH_HEADER, id.as_str());
            queue.send_prepared(msg.clone_for_flow(Some(deps))).await?;
            callbacks.push((cb, policy));
        }
        if callbacks.is_empty() {
            return Err(Error::InvalidFlow {
                reason: "a batch needs on_complete or on_success".into(),
            });
        }
        Ok(Batch {
            queue: queue.clone(),
            id,
            callbacks,
        })
    }
}

impl Batch {
    /// The batch's id, for [`DelayQueue::batch_status`].
    pub fn id(&self) -> &MessageId {
        &self.id
    }

    /// Sends `msg` to the batch's queue as a member; see
    /// [`send_to`](Self::send_to).
    pub async fn send(&self, msg: NewMessage) -> Result<MessageId, Error> {
        let queue = self.queue.clone();
        self.send_to(&queue, msg).await
    }

    /// Sends `msg` to `queue` (any queue) as a member of the batch: the
    /// callbacks wait for it. Give it an id to make a repeat after an
    /// error safe; a live message of that id joins the batch as it is.
    ///
    /// ```no_run
    /// # async fn run(batch: delayqueue::Batch, mail: delayqueue::DelayQueue) -> Result<(), delayqueue::Error> {
    /// use delayqueue::NewMessage;
    /// batch.send_to(&mail, NewMessage::new("notify").id("notify-7")).await?;
    /// # Ok(()) }
    /// ```
    pub async fn send_to(&self, queue: &DelayQueue, msg: NewMessage) -> Result<MessageId, Error> {
        send_joining(&self.queue, &self.callbacks, queue, msg).await
    }

    /// Closes the batch: no member is added after this, and its callbacks
    /// run once its members finished (at once if they all have).
    /// Idempotent.
    pub async fn close(&self) -> Result<(), Error> {
        let client = &self.queue.inner.client;
        for (cb, policy) in &self.callbacks {
            let k = self.queue.shard_of(cb.as_str());
            let closing = Completion {
                parent: cb.as_str().to_string(),
                child: open_member(&self.queue, cb),
                outcome: Outcome::Closed,
                policy: *policy,
                result: Bytes::new(),
            };
            complete(client, k, &[closing], self.retention()).await?;
        }
        Ok(())
    }

    fn retention(&self) -> Duration {
        self.queue.inner.config.consume.dead_letter_retention
    }
}
