//! Sending messages: [`NewMessage`] and the send transition.
//!
//! A single send is a batch of one: every send goes through [`send_batch`],
//! in named steps: each message checked and encoded (`prepare.rs`); the
//! waiting parents' children sets filled, then all stored in chunks of at
//! most `batch_size` messages of one shard, one `send` script call each,
//! several in flight (`flows/waiting.rs`, `dispatch.rs`); the parents
//! linked to their children; the writes confirmed as the durability says
//! (`confirm.rs`). `builder.rs` is the message's builder.

mod builder;
mod confirm;
mod dispatch;
mod ids;
mod prepare;

use std::future::{Future, IntoFuture};
use std::pin::Pin;

pub use builder::{NewMessage, Sent};
pub(crate) use dispatch::{dispatch, Dispatched};
pub(crate) use prepare::{prepare_all, Prepared};

use crate::payload::IntoPayload;
use crate::queue::flows::waiting::store_waiting;
use crate::{DelayQueue, Error, MessageId};

/// Sends `msgs`; see [`DelayQueue::send_batch`]. A refused duplicate is
/// [`Sent::Dropped`] here.
pub(crate) async fn send_batch<Q>(
    queue: &DelayQueue,
    msgs: impl IntoIterator<Item = NewMessage<Q>>,
) -> Result<Vec<Result<Sent, Error>>, Error> {
    let prepared = prepare_all(queue, msgs)?;
    let mut stored = store_waiting(queue, prepared).await?;
    stored.link(queue).await?;
    stored.sent.confirm(queue).await?;
    Ok(stored.sent.results)
}

/// A send's result as `.await` and [`DelayQueue::send_batch`] give it: a
/// dropped message is an [`Error::Duplicate`].
fn refused_as_error(queue: &DelayQueue, sent: Result<Sent, Error>) -> Result<MessageId, Error> {
    match sent? {
        Sent::Stored(id) | Sent::Replaced(id) => Ok(id),
        Sent::Dropped { id, until } => Err(Error::Duplicate {
            queue: queue.inner.name.clone(),
            id,
            until,
        }),
    }
}

impl NewMessage<&DelayQueue> {
    /// Sends the message and says what became of it: unlike `.await`, a
    /// duplicate refused (a live id, a [`unique_for`](Self::unique_for) or
    /// [`throttle`](Self::throttle) window) is [`Sent::Dropped`], not an
    /// error, and a [`debounce`](Self::debounce) or
    /// [`DelayQueue::replace`] that replaced a pending message is
    /// [`Sent::Replaced`].
    ///
    /// ```no_run
    /// # async fn run(queue: delayqueue::DelayQueue) -> Result<(), delayqueue::Error> {
    /// use std::time::Duration;
    /// use delayqueue::Sent;
    /// match queue.send("sync").id("sync-acct-3").throttle(Duration::from_secs(10)).outcome().await? {
    ///     Sent::Stored(id) => println!("sent {id}"),
    ///     Sent::Dropped { id, .. } => println!("{id} throttled"),
    ///     other => println!("{other:?}"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn outcome(self) -> Result<Sent, Error> {
        let mut results = send_batch(self.queue, [self]).await?;
        results
            .pop()
            .unwrap_or_else(|| Err(Error::Internal("send of one message returned nothing".into())))
    }

    async fn send(self) -> Result<MessageId, Error> {
        let queue = self.queue;
        refused_as_error(queue, self.outcome().await)
    }
}

/// Sends the message: `queue.send(payload).await`.
impl<'a> IntoFuture for NewMessage<&'a DelayQueue> {
    type Output = Result<MessageId, Error>;
    type IntoFuture = Pin<Box<dyn Future<Output = Self::Output> + Send + 'a>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.send())
    }
}

impl DelayQueue {
    /// Sends `msg` alone, a live message of its id taken as sent already
    /// (a flow's re-send).
    pub(crate) async fn send_prepared(&self, msg: NewMessage) -> Result<(), Error> {
        let mut results = send_batch(self, [msg]).await?;
        results
            .pop()
            .unwrap_or_else(|| Err(Error::Internal("send of one message returned nothing".into())))
            .map(drop)
    }

    /// Sends a message with `payload`, due now unless the returned
    /// [`NewMessage`] says otherwise: set its options, then `.await` it.
    ///
    /// ```no_run
    /// # async fn run(queue: delayqueue::DelayQueue) -> Result<(), delayqueue::Error> {
    /// use std::time::{Duration, Instant, SystemTime};
    /// let id = queue.send("close order 42")
    ///     .delay(Duration::from_secs(1800))         // or .at(SystemTime)
    ///     .id("order-42")
    ///     .retry_count(5)
    ///     .await?;
    /// queue.send("report").at(SystemTime::now() + Duration::from_secs(3600)).await?;
    /// queue.send("now").await?;
    /// # Ok(()) }
    /// ```
    pub fn send(&self, payload: impl IntoPayload) -> NewMessage<&DelayQueue> {
        NewMessage::bound(self, payload)
    }

    /// Sends many messages with few round trips: each chunk of up to
    /// `batch_size` messages (and 1 MiB of payload) is stored by one script
    /// call, several chunks in flight at once.
    ///
    /// Every message is checked first; one invalid message (too large, bad
    /// id, ...) fails the whole call before anything is written. Then each
    /// message gets its own result, in order: its id, or
    /// [`Error::Duplicate`] / [`Error::WrongType`] for that message alone.
    /// Each message is stored atomically, and so is each chunk; on a Redis
    /// error the call fails, and other chunks may already be stored. When
    /// the connection failed the error is [`Error::Unconfirmed`], naming
    /// every message that may be stored: send those again with the same ids
    /// (generated ones too), which is safe.
    ///
    /// ```no_run
    /// # async fn run(queue: delayqueue::DelayQueue) -> Result<(), delayqueue::Error> {
    /// use std::time::Duration;
    /// use delayqueue::NewMessage;
    /// let msgs = (0..1000).map(|i| NewMessage::new(format!("remind user {i}")).delay(Duration::from_secs(60)));
    /// for result in queue.send_batch(msgs).await? {
    ///     let id = result?;
    /// #   let _ = id;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn send_batch(
        &self,
        msgs: impl IntoIterator<Item = NewMessage>,
    ) -> Result<Vec<Result<MessageId, Error>>, Error> {
        let results = send_batch(self, msgs).await?;
        Ok(results.into_iter().map(|r| refused_as_error(self, r)).collect())
    }

    /// Replaces the payload of the pending message `id` with `payload`,
    /// keeping its due time unless [`delay`](NewMessage::delay) or
    /// [`at`](NewMessage::at) gives one; its headers and options become
    /// those of the returned [`NewMessage`] (set them, then `.await`).
    /// Atomic: the message is replaced whole, or, when it is due (ready,
    /// retry, or its due time passed while it waits for a consumer to move
    /// it), being processed or missing, the call fails with
    /// [`Error::NotPending`] and writes nothing. Its attempt record (a
    /// retry's deliveries so far) is kept. O(log n).
    ///
    /// ```no_run
    /// # async fn run(queue: delayqueue::DelayQueue) -> Result<(), delayqueue::Error> {
    /// use std::time::Duration;
    /// queue.send("total: 10").id("invoice-5").delay(Duration::from_secs(600)).await?;
    /// // The order changed before the invoice went out.
    /// queue.replace("invoice-5", "total: 12").await?;
    /// # Ok(()) }
    /// ```
    pub fn replace(&self, id: impl Into<MessageId>, payload: impl IntoPayload) -> NewMessage<&DelayQueue> {
        NewMessage::bound(self, payload).id(id).replacing()
    }
}
