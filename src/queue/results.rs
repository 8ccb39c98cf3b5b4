//! Reading the results that handlers return ([`DelayQueue::result`]), and
//! waiting for one ([`DelayQueue::wait_result`]): the wait registers in
//! Redis, the ack publishes the id, and the queue's wake-up connection
//! (`consume::wake`) routes it here, so a waiting call reads once per
//! completion, never on a timer.

use std::time::Duration;

use tokio::time::Instant;

use crate::consume::wake;
use crate::store::ops::wait::{Wait, Waited};
use crate::{DelayQueue, Error, MessageId};

impl DelayQueue {
    /// The result that the handler of message `id` returned, kept for the
    /// queue's [`result_retention`](crate::DelayQueueBuilder::result_retention)
    /// after its ack; `None` when there is none (not acked yet, acked
    /// without a result, or its retention ended). O(1).
    ///
    /// ```no_run
    /// # async fn run(queue: delayqueue::DelayQueue, id: delayqueue::MessageId) -> Result<(), delayqueue::Error> {
    /// if let Some(bytes) = queue.result(&id).await? {
    ///     println!("{id} returned {} bytes", bytes.len());
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn result(&self, id: impl AsRef<str>) -> Result<Option<Vec<u8>>, Error> {
        let id = id.as_ref();
        MessageId::check(id)?;
        let read = Wait {
            id,
            wait: Duration::ZERO,
        };
        Ok(match self.store(self.shard_of(id)).run(&read).await? {
            Waited::Result(r) => Some(r),
            Waited::Stored | Waited::Neither => None,
        })
    }

    /// [`result`](Self::result) decoded as JSON (a handler that returned
    /// [`Json`](crate::Json)); a result that does not decode gives
    /// [`Error::Json`].
    ///
    /// ```no_run
    /// # async fn run(queue: delayqueue::DelayQueue, id: delayqueue::MessageId) -> Result<(), delayqueue::Error> {
    /// let size: Option<(u32, u32)> = queue.result_json(&id).await?;
    /// # Ok(()) }
    /// ```
    pub async fn result_json<T: serde::de::DeserializeOwned>(&self, id: impl AsRef<str>) -> Result<Option<T>, Error> {
        match self.result(id).await? {
            Some(bytes) => Ok(Some(serde_json::from_slice(&bytes)?)),
            None => Ok(None),
        }
    }

    /// Waits up to `timeout` for message `id` to be acked, and returns its
    /// result. The ack wakes the wait (through Redis pub/sub, one
    /// connection per client shared with the consumers' wake-ups), so it
    /// returns as soon as the result is written; without pub/sub it looks
    /// again every `fetch_interval`.
    ///
    /// - `Ok(Some(result))`: the result, now or once acked;
    /// - `Ok(None)`: the timeout passed first (the message is still
    ///   stored: waiting, retried or dead), or it was acked without a result
    ///   kept (a handler returning `()`, or `result_retention` zero);
    /// - [`Error::NoSuchMessage`] when, at the call, neither the message
    ///   nor a result of it is stored (unknown, cancelled, or its result
    ///   expired).
    ///
    /// ```no_run
    /// # async fn run(queue: delayqueue::DelayQueue) -> Result<(), delayqueue::Error> {
    /// use std::time::Duration;
    /// let id = queue.send("render invoice 7").await?;
    /// match queue.wait_result(&id, Duration::from_secs(30)).await? {
    ///     Some(pdf) => println!("{} bytes", pdf.len()),
    ///     None => println!("not done within 30 s"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn wait_result(&self, id: impl AsRef<str>, timeout: Duration) -> Result<Option<Vec<u8>>, Error> {
        let id = id.as_ref();
        MessageId::check(id)?;
        let k = self.shard_of(id);
        // Listening before the wait registers, so no ack falls in between.
        let (acks, _listening) = wake::listen(&self.inner.client, vec![k.done.clone()]).await;
        let deadline = Instant::now() + timeout;
        let every = self.inner.config.consume.fetch_interval;
        let mut first = true;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.store(k).run(&Wait { id, wait: left }).await? {
                Waited::Result(r) => return Ok(Some(r)),
                Waited::Neither if first => {
                    return Err(Error::NoSuchMessage {
                        queue: self.inner.name.clone(),
                        id: MessageId::from(id),
                    })
                }
                Waited::Neither => return Ok(None),
                Waited::Stored => {}
            }
            first = false;
            if left.is_zero() {
                return Ok(None);
            }
            // Any waited id of the shard finishing wakes this; a lost
            // wake-up costs one fetch_interval.
            let look_again = deadline.min(Instant::now() + every);
            // Not subscribed (no pub/sub), it never rings: that is the fetch_interval.
            let _ = tokio::time::timeout_at(look_again, acks[0].rung()).await;
        }
    }
}
