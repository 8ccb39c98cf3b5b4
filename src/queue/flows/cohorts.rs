//! Cohorts (docs/workflows.md, Cohorts): messages sent over time with
//! callbacks once all finished (what Sidekiq and Laravel call batches;
//! here "batch" means many messages at once). Built on flows: a
//! callback is a parent whose children are the cohort's members, kept
//! waiting while the cohort is open by one more child that only
//! [`Cohort::close`] finishes.

use std::time::Duration;

use fred::bytes::Bytes;

use super::links::Deps;
use super::waiting::send_joining;
use crate::flow::wire::{ChildRef, Outcome};
use crate::flow::ChildPolicy;
use crate::store::ops::flow_complete::{complete, Completion};
use crate::store::ops::flow_status::FlowStatus;
use crate::{DelayQueue, Error, MessageId, NewMessage};

/// A cohort about to be opened: its callbacks, from [`DelayQueue::cohort`].
#[derive(Debug)]
#[must_use = "a cohort exists only once opened"]
pub struct CohortBuilder<'a> {
    queue: &'a DelayQueue,
    id: Option<MessageId>,
    on_complete: Option<NewMessage>,
    on_success: Option<NewMessage>,
}

/// An open cohort: messages sent through it are its members
/// ([`send`](Self::send)); its callbacks run once it is
/// [`close`](Self::close)d and its members finished.
#[derive(Debug, Clone)]
pub struct Cohort {
    queue: DelayQueue,
    id: MessageId,
    /// Each callback's id and policy.
    callbacks: Vec<(MessageId, ChildPolicy)>,
}

/// Where a cohort stands, from [`DelayQueue::cohort_status`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct CohortStatus {
    /// Members may still be added ([`Cohort::close`] not called yet).
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

/// The header every callback carries: its cohort's id.
pub const COHORT_HEADER: &str = "cohort";

impl DelayQueue {
    /// Starts a cohort: register its callbacks, then
    /// [`open`](CohortBuilder::open) it (docs/workflows.md, Cohorts).
    ///
    /// ```no_run
    /// # async fn run(queue: delayqueue::DelayQueue) -> Result<(), delayqueue::Error> {
    /// use delayqueue::NewMessage;
    /// let cohort = queue
    ///     .cohort()
    ///     .id("import-7")
    ///     .on_complete(NewMessage::new("import 7 finished"))
    ///     .on_success(NewMessage::new("import 7 succeeded"))
    ///     .open()
    ///     .await?;
    /// for row in 0..3 {
    ///     cohort.send(NewMessage::new(format!("row {row}"))).await?;
    /// }
    /// cohort.close().await?;
    /// let status = queue.cohort_status("import-7").await?;
    /// # let _ = status;
    /// # Ok(()) }
    /// ```
    pub fn cohort(&self) -> CohortBuilder<'_> {
        CohortBuilder {
            queue: self,
            id: None,
            on_complete: None,
            on_success: None,
        }
    }

    /// Where cohort `id` stands: read from its `on_complete` callback, else
    /// its `on_success` one, while that is stored (it waits, or its handler
    /// runs); `None` once it was acked, or when it is unknown (an
    /// `on_success` removed by a dead member included).
    ///
    /// ```no_run
    /// # async fn run(queue: delayqueue::DelayQueue) -> Result<(), delayqueue::Error> {
    /// if let Some(s) = queue.cohort_status("import-7").await? {
    ///     println!("{} of {} left", s.left, s.total);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn cohort_status(&self, id: impl AsRef<str>) -> Result<Option<CohortStatus>, Error> {
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
                return Ok(Some(CohortStatus {
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

/// The former name of [`Cohort`].
#[deprecated(note = "renamed Cohort: a batch is many messages at once (send_batch, consume_batch)")]
pub type Batch = Cohort;
/// The former name of [`CohortBuilder`].
#[deprecated(note = "renamed CohortBuilder")]
pub type BatchBuilder<'a> = CohortBuilder<'a>;
/// The former name of [`CohortStatus`].
#[deprecated(note = "renamed CohortStatus")]
pub type BatchStatus = CohortStatus;
/// The former name of [`COHORT_HEADER`].
#[deprecated(note = "renamed COHORT_HEADER")]
pub const BATCH_HEADER: &str = COHORT_HEADER;

impl DelayQueue {
    /// The former name of [`cohort`](Self::cohort).
    #[deprecated(note = "renamed cohort: a batch is many messages at once (send_batch, consume_batch)")]
    pub fn batch(&self) -> CohortBuilder<'_> {
        self.cohort()
    }

    /// The former name of [`cohort_status`](Self::cohort_status).
    #[deprecated(note = "renamed cohort_status")]
    pub async fn batch_status(&self, id: impl AsRef<str>) -> Result<Option<CohortStatus>, Error> {
        self.cohort_status(id).await
    }
}

const ON_COMPLETE: &str = "complete";
const ON_SUCCESS: &str = "success";

/// The id of cohort `id`'s callback of `kind`.
fn callback_id(id: &MessageId, kind: &str) -> MessageId {
    MessageId::from(format!("{id}:{kind}"))
}

/// The child that keeps a callback waiting while its cohort is open.
fn open_member(queue: &DelayQueue, callback: &MessageId) -> ChildRef {
    queue.shard_of(callback.as_str()).open_cohort_member()
}

impl CohortBuilder<'_> {
    /// The cohort's id (generated unless given): open the same id again to
    /// go on with a cohort after a lost reply.
    pub fn id(mut self, id: impl Into<MessageId>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// A message sent once every member finished, whatever became of them
    /// (sent to the cohort's queue, with the header [`COHORT_HEADER`]).
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

    /// Stores the callbacks, waiting until the cohort is closed and its
    /// members finished. At least one callback is needed
    /// ([`Error::InvalidFlow`]). Idempotent for a given [`id`](Self::id).
    pub async fn open(self) -> Result<Cohort, Error> {
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
            let msg = msg.id(cb.clone()).header(COHORT_HEADER, id.as_str());
            queue.send_prepared(msg.clone_for_flow(Some(deps))).await?;
            callbacks.push((cb, policy));
        }
        if callbacks.is_empty() {
            return Err(Error::InvalidFlow {
                reason: "a cohort needs on_complete or on_success".into(),
            });
        }
        Ok(Cohort {
            queue: queue.clone(),
            id,
            callbacks,
        })
    }
}

impl Cohort {
    /// The cohort's id, for [`DelayQueue::cohort_status`].
    pub fn id(&self) -> &MessageId {
        &self.id
    }

    /// Sends `msg` to the cohort's queue as a member; see
    /// [`send_to`](Self::send_to).
    pub async fn send(&self, msg: NewMessage) -> Result<MessageId, Error> {
        let queue = self.queue.clone();
        self.send_to(&queue, msg).await
    }

    /// Sends `msg` to `queue` (any queue) as a member of the cohort: the
    /// callbacks wait for it. Give it an id to make a repeat after an
    /// error safe; a live message of that id joins the cohort as it is.
    ///
    /// ```no_run
    /// # async fn run(cohort: delayqueue::Cohort, mail: delayqueue::DelayQueue) -> Result<(), delayqueue::Error> {
    /// use delayqueue::NewMessage;
    /// cohort.send_to(&mail, NewMessage::new("notify").id("notify-7")).await?;
    /// # Ok(()) }
    /// ```
    pub async fn send_to(&self, queue: &DelayQueue, msg: NewMessage) -> Result<MessageId, Error> {
        send_joining(&self.queue, &self.callbacks, queue, msg).await
    }

    /// Closes the cohort: no member is added after this, and its callbacks
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
