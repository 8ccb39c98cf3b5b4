//! [`DelayQueue::consume_batch`]: a consumer whose handler takes batches,
//! with the batch's size, wait and split by a header.

use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use super::DelayQueue;
use crate::batch::{Gatherer, Gathering};
use crate::maxima::MAX_BATCH_SIZE;
use crate::{BatchHandler, Consumer, Error};

/// A batch consumer to start: [`DelayQueue::consume_batch`], its options,
/// then `.await`.
#[must_use = "a batch consumer starts only when awaited"]
pub struct ConsumeBatch<'a, B> {
    queue: &'a DelayQueue,
    handler: B,
    size: usize,
    wait: Duration,
    split: Option<String>,
}

impl<B> std::fmt::Debug for ConsumeBatch<'_, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConsumeBatch")
            .field("queue", &self.queue.name())
            .field("size", &self.size)
            .field("wait", &self.wait)
            .field("split", &self.split)
            .finish_non_exhaustive()
    }
}

impl<B: BatchHandler> ConsumeBatch<'_, B> {
    /// Most messages in one batch, 1 to [`MAX_BATCH_SIZE`]. Default 100.
    pub fn size(mut self, n: usize) -> Self {
        self.size = n;
        self
    }

    /// How long a batch waits for more messages after its first arrived,
    /// before it runs with what it has; less than the queue's
    /// `handler_timeout`, which runs from a message's arrival in its
    /// batch. Default 50 ms. A full batch runs at once.
    pub fn wait(mut self, d: Duration) -> Self {
        self.wait = d;
        self
    }

    /// Batches hold only messages with the same value of the header `name`
    /// (messages without it form one part), e.g. a tenant: each part
    /// fills and waits on its own. Unrelated to a message's
    /// [`group`](crate::NewMessage::group) (fairness between groups).
    pub fn split_by_header(mut self, name: impl Into<String>) -> Self {
        self.split = Some(name.into());
        self
    }

    /// The former name of [`split_by_header`](Self::split_by_header).
    #[deprecated(
        since = "0.1.0",
        note = "renamed split_by_header: a group is a fairness group (NewMessage::group)"
    )]
    pub fn group_by_header(self, name: impl Into<String>) -> Self {
        self.split_by_header(name)
    }

    async fn start(self) -> Result<Consumer, Error> {
        let settings = &self.queue.inner.config.consume;
        if !(1..=MAX_BATCH_SIZE).contains(&self.size) {
            return Err(Error::InvalidArgument(format!(
                "batch size must be 1 to {MAX_BATCH_SIZE}, not {}",
                self.size
            )));
        }
        if self.wait >= settings.handler_timeout {
            return Err(Error::InvalidArgument(format!(
                "batch wait ({:?}) must be less than handler_timeout ({:?})",
                self.wait, settings.handler_timeout
            )));
        }
        let how = Gathering {
            size: self.size,
            wait: self.wait,
            split: self.split,
            queue: self.queue.name().to_string(),
        };
        // A handler slot per message of `concurrency` full batches, so
        // that many batches fill and run at once.
        let slots = settings.concurrency.saturating_mul(self.size);
        self.queue
            .consume_with(Arc::new(Gatherer::start(self.handler, how)), |s| {
                s.concurrency = slots;
                s.fetch_limit = s.fetch_limit.max(slots);
            })
            .await
    }
}

impl<'a, B: BatchHandler> IntoFuture for ConsumeBatch<'a, B> {
    type Output = Result<Consumer, Error>;
    type IntoFuture = Pin<Box<dyn Future<Output = Self::Output> + Send + 'a>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.start())
    }
}

impl DelayQueue {
    /// Starts a consumer that delivers this queue's due messages to
    /// `handler` in batches: up to [`size`](ConsumeBatch::size) messages
    /// at once, or what arrived within [`wait`](ConsumeBatch::wait) of the
    /// first. Each message is acked or nacked on its own result, its lease
    /// renewed while its batch runs when `handler_timeout` is longer than
    /// `max_consume_duration`; a consumer that dies mid-batch leaves the
    /// whole batch to be delivered again once the leases run out. The
    /// queue's `concurrency` is how many full batches fill and run at once.
    ///
    /// Fails with [`Error::InvalidArgument`] for a size of 0 or above
    /// [`MAX_BATCH_SIZE`], or a wait not below `handler_timeout`; and as
    /// [`start_consume`](Self::start_consume) does.
    ///
    /// ```no_run
    /// # async fn run(queue: delayqueue::DelayQueue) -> Result<(), delayqueue::Error> {
    /// use std::time::Duration;
    /// use delayqueue::{HandlerError, Message};
    ///
    /// let consumer = queue
    ///     .consume_batch(|batch: Vec<Message>| async move {
    ///         println!("inserting {} rows in one statement", batch.len());
    ///         batch.iter().map(|_| Ok(())).collect::<Vec<Result<(), HandlerError>>>()
    ///     })
    ///     .size(100)
    ///     .wait(Duration::from_millis(200))
    ///     .split_by_header("tenant")
    ///     .await?;
    /// consumer.shutdown().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn consume_batch<B: BatchHandler>(&self, handler: B) -> ConsumeBatch<'_, B> {
        ConsumeBatch {
            queue: self,
            handler,
            size: 100,
            wait: Duration::from_millis(50),
            split: None,
        }
    }
}
