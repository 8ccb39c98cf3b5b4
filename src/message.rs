//! A delivered message, as the handler sees it.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::scribe::{NoteKind, Scribe};
use crate::{Backoff, ChildrenPage, Error, MessageId};

/// One delivery of a message to a [`Handler`](crate::Handler).
#[derive(Debug, Clone)]
pub struct Message {
    /// Which delivery of which message this is, and its lease.
    pub(crate) receipt: Receipt,
    pub(crate) payload: Vec<u8>,
    pub(crate) retry_count: u32,
    /// Its own backoff, when its send set one.
    pub(crate) backoff: Option<Backoff>,
    /// 0 (default) to `MAX_PRIORITY`.
    pub(crate) priority: u8,
    /// Name and value pairs, in the order the send set them.
    pub(crate) group: Option<String>,
    pub(crate) headers: Vec<(String, String)>,
    /// When the send stored it and when it was due, ms of Redis time.
    pub(crate) times: SendTimes,
    /// When this delivery was due, ms of Redis time.
    pub(crate) due_at_ms: u64,
    /// Deliveries the handler deferred before this one.
    pub(crate) deferrals: u32,
    /// This delivery's result, progress and log, shared by every clone.
    pub(crate) scribe: Arc<Scribe>,
    /// Cancelled when the message is aborted while this delivery runs
    /// (src/consume/aborts.rs); shared by every clone.
    pub(crate) abort: CancellationToken,
}

/// One delivery's receipt, from its claim to its ack or nack: the one
/// record of which delivery of which message it is, and of the lease that
/// fences its ack or nack.
#[derive(Debug, Clone)]
pub(crate) struct Receipt {
    pub id: MessageId,
    /// Which delivery this is, 1 for the first.
    pub attempt: u32,
    /// Visibility deadline in microseconds of Redis time: as claimed, or
    /// as last renewed.
    pub lease: i64,
    /// When that lease ends by this host's clock (never later than in
    /// Redis); acking or nacking after it is pointless.
    pub deadline: Instant,
}

impl Message {
    /// The message's id.
    pub fn id(&self) -> &MessageId {
        &self.receipt.id
    }

    /// Completes once the message is aborted
    /// ([`DelayQueue::abort`](crate::DelayQueue::abort)) while this delivery
    /// runs: at once through the consumer's wake-up connection, or at the
    /// next lease renewal when that signal was lost. Never completes
    /// otherwise. Whatever the handler returns after an abort, the message
    /// ends as aborted (docs/handlers.md, "Aborting a running handler").
    ///
    /// ```no_run
    /// # async fn run(msg: delayqueue::Message) -> Result<(), delayqueue::HandlerError> {
    /// # async fn export(_: &[u8]) -> Result<(), delayqueue::HandlerError> { Ok(()) }
    /// tokio::select! {
    ///     done = export(msg.payload()) => done,
    ///     () = msg.aborted() => Ok(()), // wind down; the outcome is "aborted" anyway
    /// }
    /// # }
    /// ```
    pub async fn aborted(&self) {
        self.abort.cancelled().await
    }

    /// Whether the message was aborted while this delivery runs (as far as
    /// this consumer has heard: see [`aborted`](Self::aborted)).
    pub fn is_aborted(&self) -> bool {
        self.abort.is_cancelled()
    }

    /// A token cancelled when the message is aborted (see
    /// [`aborted`](Self::aborted)), for code that takes tokio-util's
    /// [`CancellationToken`]. A child of the delivery's own: cancelling it
    /// tells nothing to the queue.
    pub fn abort_token(&self) -> CancellationToken {
        self.abort.child_token()
    }

    /// The payload bytes.
    pub fn payload(&self) -> &[u8] {
        &self.payload
    }

    /// The payload, owned.
    pub fn into_payload(self) -> Vec<u8> {
        self.payload
    }

    /// Which delivery this is: 1 for the first, 2 for the first retry, ...
    pub fn attempt(&self) -> u32 {
        self.receipt.attempt
    }

    /// Retries this message was sent with: at most `retry_count + 1` deliveries.
    pub fn retry_count(&self) -> u32 {
        self.retry_count
    }

    /// The priority it was sent with
    /// ([`NewMessage::priority`](crate::NewMessage::priority)), 0 by default.
    pub fn priority(&self) -> u8 {
        self.priority
    }

    /// Its group ([`NewMessage::group`](crate::NewMessage::group)), if it
    /// was sent with one.
    pub fn group(&self) -> Option<&str> {
        self.group.as_deref()
    }

    /// Its headers ([`NewMessage::header`](crate::NewMessage::header)): name
    /// and value pairs in the order the send set them; empty when it set
    /// none.
    pub fn headers(&self) -> &[(String, String)] {
        &self.headers
    }

    /// The value of header `name`, if the send set it.
    ///
    /// ```
    /// # use delayqueue::{Message, HandlerError};
    /// async fn handle(msg: Message) -> Result<(), HandlerError> {
    ///     let tenant = msg.header("tenant").unwrap_or("default");
    ///     println!("{} for tenant {tenant}", msg.id());
    ///     Ok(())
    /// }
    /// ```
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    /// When this delivery was due, by Redis's clock: for the first, the
    /// time its send (or its last
    /// [`reschedule`](crate::DelayQueue::reschedule)) set; for a retry, the
    /// failure (or lease timeout) that ended the delivery before plus its
    /// backoff; for a requeued dead letter, the requeue. `now - due_at` is
    /// this delivery's lateness. A delivery handed back unstarted (a
    /// consumer shutting down) keeps its due time.
    ///
    /// ```
    /// # use delayqueue::{Message, HandlerError};
    /// async fn handle(msg: Message) -> Result<(), HandlerError> {
    ///     let late = msg.due_at().elapsed().unwrap_or_default();
    ///     println!("{} handled {late:?} after its due time", msg.id());
    ///     Ok(())
    /// }
    /// ```
    pub fn due_at(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(self.due_at_ms)
    }

    /// When the message's first delivery was due: the time its send (or
    /// its last [`reschedule`](crate::DelayQueue::reschedule)) set, by
    /// Redis's clock. The same on every delivery, so `now - first_due_at`
    /// on a retry includes the earlier deliveries and their backoff. Never
    /// before [`sent_at`](Self::sent_at).
    pub fn first_due_at(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(self.times.due_at_ms)
    }

    /// How often the handler deferred this message with an uncounted
    /// [`RetryAfter`](crate::RetryAfter::uncounted) before this delivery.
    /// A deferral does not count as an attempt, so a message deferred on
    /// its first delivery comes back with [`attempt`](Self::attempt) 1 and
    /// this one up by one: a handler bounds its deferrals with it.
    pub fn deferrals(&self) -> u32 {
        self.deferrals
    }

    /// When the message was stored by its send, by Redis's clock (a send
    /// that replaced a dead letter of the same id: the new send).
    pub fn sent_at(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(self.times.sent_at_ms)
    }

    /// Deliveries left after this one should it fail; 0 on the last
    /// attempt, after which a failure makes it a dead letter. The same
    /// count as [`MessageInfo::deliveries_left`](crate::MessageInfo::deliveries_left)
    /// while this delivery runs.
    ///
    /// ```
    /// # use delayqueue::{HandlerError, Message};
    /// async fn handle(msg: Message) -> Result<(), HandlerError> {
    ///     if msg.deliveries_left() == 0 {
    ///         println!("last try for {}", msg.id());
    ///     }
    ///     Ok(())
    /// }
    /// ```
    pub fn deliveries_left(&self) -> u32 {
        (self.retry_count + 1).saturating_sub(self.receipt.attempt)
    }

    /// Reports the handler's progress: a number from 0 to 100, or any
    /// JSON value (`{"done": 3, "of": 10}`), at most
    /// [`MAX_PROGRESS`](crate::MAX_PROGRESS) bytes as JSON. It replaces the
    /// last one, shows in [`MessageInfo::progress`](crate::MessageInfo::progress)
    /// and emits [`Event::Progress`](crate::Event::Progress). Handed over
    /// without waiting for Redis: the notes of all running handlers go
    /// together, within milliseconds, each written only while this
    /// delivery holds the message's lease; the ack or nack waits for them.
    /// One that could not be written is returned by the next call (or by
    /// [`notes_written`](Self::notes_written)); after the handler returned,
    /// [`Error::LeaseLost`] at once. Kept after the ack for the queue's
    /// `result_retention` (docs/results.md).
    ///
    /// ```
    /// # use delayqueue::{Message, HandlerError};
    /// async fn handle(msg: Message) -> Result<(), HandlerError> {
    ///     for step in 1..=4 {
    ///         // ... one quarter of the work ...
    ///         msg.progress(step * 25).await?;
    ///     }
    ///     Ok(())
    /// }
    /// ```
    pub async fn progress(&self, value: impl serde::Serialize) -> Result<(), Error> {
        let value = serde_json::to_value(value)?;
        if let Some(n) = value.as_f64() {
            if !(0.0..=100.0).contains(&n) {
                return Err(Error::InvalidArgument(format!("progress {n} is not 0 to 100")));
            }
        }
        self.scribe
            .write(self.id(), self.attempt(), NoteKind::Progress, &value.to_string())
    }

    /// Appends a line to the message's log: the last
    /// [`max_log_lines`](crate::DelayQueueBuilder::max_log_lines) lines are
    /// kept, each cut to [`MAX_LOG_LINE`](crate::MAX_LOG_LINE) bytes (on a
    /// character boundary). Shown in [`MessageInfo::log`](crate::MessageInfo::log);
    /// fenced by the lease and kept as [`progress`](Self::progress) is.
    ///
    /// ```
    /// # use delayqueue::{Message, HandlerError};
    /// async fn handle(msg: Message) -> Result<(), HandlerError> {
    ///     msg.log("fetched 3 invoices").await?;
    ///     Ok(())
    /// }
    /// ```
    pub async fn log(&self, line: impl AsRef<str>) -> Result<(), Error> {
        self.scribe
            .write(self.id(), self.attempt(), NoteKind::Log, line.as_ref())
    }

    /// Waits until every [`progress`](Self::progress) and
    /// [`log`](Self::log) of this delivery so far is written, and returns
    /// the first that could not be and was not returned yet
    /// ([`Error::LeaseLost`]: this delivery lost the message's lease, so
    /// nothing of it was written; [`Error::WrongType`]: the log key holds
    /// another type). Only for a handler that must know before it goes
    /// on: the ack or nack waits for them anyway.
    ///
    /// ```
    /// # use delayqueue::{Message, HandlerError};
    /// async fn handle(msg: Message) -> Result<(), HandlerError> {
    ///     msg.progress(50).await?;
    ///     // Someone else may watch the progress before this goes on.
    ///     msg.notes_written().await?;
    ///     Ok(())
    /// }
    /// ```
    pub async fn notes_written(&self) -> Result<(), Error> {
        self.scribe.written().await
    }

    /// One page of this parent's finished children (a flow's parent, a
    /// batch's callback: docs/workflows.md), with their outcomes and the
    /// results their handlers returned; start with `cursor` `None`, then
    /// pass the page's `next` until it is `None`. The same as
    /// [`DelayQueue::children_results`](crate::DelayQueue::children_results)
    /// with this message's id, from inside its handler.
    ///
    /// ```
    /// use delayqueue::{HandlerError, Message};
    ///
    /// async fn close_order(msg: Message) -> Result<(), HandlerError> {
    ///     let mut cursor = None;
    ///     loop {
    ///         let page = msg.children_results(cursor).await?;
    ///         for child in &page.items {
    ///             println!("{} ended {:?}: {:?}", child.id, child.outcome, child.result);
    ///         }
    ///         cursor = page.next;
    ///         if cursor.is_none() {
    ///             return Ok(());
    ///         }
    ///     }
    /// }
    /// ```
    pub async fn children_results(&self, cursor: impl Into<Option<String>>) -> Result<ChildrenPage, Error> {
        self.scribe
            .children(self.id(), self.attempt(), cursor.into().as_deref())
            .await
    }

    /// The payload decoded as JSON.
    ///
    /// A payload that does not decode gives [`Error::Json`]; return it from
    /// the handler (`?`) and the message follows the normal retry path:
    /// redelivered until its retries are used up, then a dead letter. That
    /// suits a rolling deploy, where a retry may reach a consumer that
    /// knows the new shape; when no retry can help, use
    /// [`json_or_skip`](Self::json_or_skip).
    ///
    /// ```
    /// # use delayqueue::{Message, HandlerError};
    /// #[derive(serde::Deserialize)]
    /// struct CloseOrder { order_id: u64 }
    ///
    /// async fn handle(msg: Message) -> Result<(), HandlerError> {
    ///     let job: CloseOrder = msg.json()?;
    ///     println!("closing order {}", job.order_id);
    ///     Ok(())
    /// }
    /// ```
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T, Error> {
        Ok(serde_json::from_slice(&self.payload)?)
    }
}

/// When the send script stored a message and when it is due, ms of
/// Redis time (the stored value's `"/<sent at ms>+<delay ms>"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SendTimes {
    pub(crate) sent_at_ms: u64,
    pub(crate) due_at_ms: u64,
}
