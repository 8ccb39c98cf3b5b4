//! The user's message handler, and the errors it can return to steer a retry.

use std::fmt;
use std::future::Future;
use std::time::Duration;

use crate::scribe::Scribe;
use crate::{IntoPayload, Message};

/// What a handler returns on failure: any error. The message is nacked and
/// retried after the queue's [`Backoff`](crate::Backoff) (or moved to the
/// dead letters when its deliveries are used up). Return a [`RetryAfter`]
/// to choose the delay, or a [`SkipRetry`] to give up at once.
pub type HandlerError = Box<dyn std::error::Error + Send + Sync>;

/// A handler error that asks for the next delivery after `delay` instead of
/// the backoff's delay, e.g. when a server answered "429, retry in 30 s".
/// The failed delivery still counts, unless it is marked
/// [`uncounted`](Self::uncounted).
///
/// ```
/// use std::time::Duration;
/// use delayqueue::{HandlerError, Message, RetryAfter};
///
/// async fn handle(msg: Message) -> Result<(), HandlerError> {
///     let busy = true;
///     if busy {
///         return Err(RetryAfter::new(Duration::from_secs(30), "rate limited").into());
///     }
///     Ok(())
/// }
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub struct RetryAfter {
    /// How long until the next delivery.
    pub delay: Duration,
    /// Why the delivery failed; recorded as its failure reason.
    pub reason: HandlerError,
    /// Whether the delivery counts against the message's retries and in
    /// the failure totals; `true` unless [`uncounted`](Self::uncounted).
    pub counted: bool,
}

impl RetryAfter {
    /// Retry after `delay`, because of `reason`.
    pub fn new(delay: Duration, reason: impl Into<HandlerError>) -> Self {
        RetryAfter {
            delay,
            reason: reason.into(),
            counted: true,
        }
    }

    /// The delivery does not count: the message keeps all its retries, is
    /// not counted in [`Totals::failed`](crate::Totals) or the retried
    /// metric, emits [`Event::Deferred`](crate::Event::Deferred) instead of
    /// [`Event::Failed`](crate::Event::Failed) and is logged at DEBUG. The
    /// next delivery has the same [`attempt`](crate::Message::attempt)
    /// number, and [`deferrals`](crate::Message::deferrals) one more: a
    /// handler that defers whenever `attempt() == 1` defers forever, one
    /// that bounds `deferrals()` does not. For "not now" answers that say nothing about the
    /// message (a rate limit upstream). Its reason is still recorded. A
    /// handler that always defers keeps the message forever; an
    /// [`expire_after`](crate::DelayQueueBuilder::expire_after) bounds that.
    ///
    /// ```
    /// use std::time::Duration;
    /// use delayqueue::{HandlerError, RetryAfter};
    ///
    /// fn throttled(retry_in: Duration) -> HandlerError {
    ///     RetryAfter::new(retry_in, "429 from the mail API").uncounted().into()
    /// }
    /// # let _ = throttled(Duration::from_secs(1));
    /// ```
    pub fn uncounted(mut self) -> Self {
        self.counted = false;
        self
    }
}

impl fmt::Display for RetryAfter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (retry in {:?})", self.reason, self.delay)
    }
}

impl std::error::Error for RetryAfter {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(self.reason.as_ref())
    }
}

/// A handler error that says retrying cannot help (a malformed payload, an
/// order that no longer exists): the message goes to the dead letters at
/// once, whatever retries it has left. Like asynq's `SkipRetry` or BullMQ's
/// `UnrecoverableError`.
///
/// ```
/// use delayqueue::{HandlerError, Message, SkipRetry};
///
/// async fn handle(msg: Message) -> Result<(), HandlerError> {
///     let Ok(order_id) = std::str::from_utf8(msg.payload()) else {
///         return Err(SkipRetry::new("payload is not UTF-8").into());
///     };
///     println!("closing {order_id}");
///     Ok(())
/// }
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub struct SkipRetry {
    /// Why the message cannot be handled; recorded as its failure reason.
    pub reason: HandlerError,
}

impl SkipRetry {
    /// Give up on this message, because of `reason`.
    pub fn new(reason: impl Into<HandlerError>) -> Self {
        SkipRetry { reason: reason.into() }
    }
}

impl fmt::Display for SkipRetry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (not retried)", self.reason)
    }
}

impl std::error::Error for SkipRetry {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(self.reason.as_ref())
    }
}

/// Processes delivered messages. `Ok` acks the message, `Err` nacks it; a
/// panic or exceeding `handler_timeout` counts like an `Err`.
///
/// An async closure may return a result with its `Ok`: bytes, a string or
/// a [`Json`](crate::Json) value ([`IntoResult`]), kept for
/// [`DelayQueue::result`](crate::DelayQueue::result). A type that
/// implements the trait sets its result with
/// [`Message::set_result`](crate::Message::set_result).
///
/// Implement it on a type, or pass an async closure:
///
/// ```
/// use delayqueue::{Handler, HandlerError, Message};
///
/// struct CloseOrder;
///
/// #[delayqueue::async_trait]
/// impl Handler for CloseOrder {
///     async fn handle(&self, msg: Message) -> Result<(), HandlerError> {
///         println!("closing {} (attempt {})", msg.id(), msg.attempt());
///         Ok(())
///     }
/// }
///
/// fn is_handler(_: impl Handler) {}
/// is_handler(CloseOrder);
/// is_handler(|msg: Message| async move {
///     if msg.payload().is_empty() {
///         return Err("empty payload".into());
///     }
///     Ok::<(), HandlerError>(())
/// });
/// // A closure's `Ok` value is the message's result.
/// is_handler(|msg: Message| async move {
///     Ok::<_, HandlerError>(delayqueue::Json(msg.payload().len()))
/// });
/// ```
#[async_trait::async_trait]
pub trait Handler: Send + Sync + 'static {
    /// Handles one delivery of a message. Delivery is at-least-once: the
    /// same message may arrive again, so make the work idempotent.
    async fn handle(&self, msg: Message) -> Result<(), HandlerError>;
}

#[async_trait::async_trait]
impl<F, Fut, R> Handler for F
where
    F: Fn(Message) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<R, HandlerError>> + Send,
    R: IntoResult,
{
    async fn handle(&self, msg: Message) -> Result<(), HandlerError> {
        let scribe = msg.scribe.clone();
        keep_result(&scribe, self(msg).await?)
    }
}

/// Keeps a handler's returned result for the ack; `()` keeps what
/// `set_result` set.
pub(crate) fn keep_result(scribe: &Scribe, result: impl IntoResult) -> Result<(), HandlerError> {
    if let Some(result) = result.into_result()? {
        scribe.set(Some(result), scribe.max_result())?;
    }
    Ok(())
}

/// What a handler may return as its message's result: `()` for none,
/// or a payload (`&str`, `String`, `&[u8]`, `Vec<u8>`,
/// [`Payload`](crate::Payload), [`Json`](crate::Json) of any `Serialize`).
///
/// ```
/// use delayqueue::{HandlerError, IntoResult, Json, Message};
///
/// async fn resize(msg: Message) -> Result<Json<(u32, u32)>, HandlerError> {
///     Ok(Json((640, 480)))
/// }
/// assert_eq!(Json((640, 480)).into_result().unwrap(), Some(b"[640,480]".to_vec()));
/// assert_eq!(().into_result().unwrap(), None);
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a handler result",
    note = "a result is `()`, `&str`, `String`, `&[u8]`, `Vec<u8>`, `Payload` or `Json(..)`"
)]
pub trait IntoResult {
    /// The result's bytes; `None` for no result. A value that does not
    /// serialize fails the delivery.
    fn into_result(self) -> Result<Option<Vec<u8>>, crate::Error>;
}

impl IntoResult for () {
    fn into_result(self) -> Result<Option<Vec<u8>>, crate::Error> {
        Ok(None)
    }
}

impl<T: IntoPayload> IntoResult for T {
    fn into_result(self) -> Result<Option<Vec<u8>>, crate::Error> {
        Ok(Some(self.into_payload()?.into_bytes()))
    }
}

/// The text of a panic's payload: its message, or empty when it is not text.
pub(crate) fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_default()
}

// The handler-facing decode lives here, next to `SkipRetry`, so a message
// does not depend on the handler that receives it.
impl Message {
    /// The payload decoded as JSON; a payload that does not decode gives a
    /// [`SkipRetry`] (its reason the [`Error::Json`](crate::Error::Json)): return it from the
    /// handler (`?`) and the message becomes a dead letter at once, with
    /// the decode error as its reason, instead of being retried.
    ///
    /// ```
    /// # use delayqueue::{Message, HandlerError};
    /// #[derive(serde::Deserialize)]
    /// struct CloseOrder { order_id: u64 }
    ///
    /// async fn handle(msg: Message) -> Result<(), HandlerError> {
    ///     let job: CloseOrder = msg.json_or_skip()?;   // malformed: dead now, not retried
    ///     println!("closing order {}", job.order_id);
    ///     Ok(())
    /// }
    /// ```
    pub fn json_or_skip<T: serde::de::DeserializeOwned>(&self) -> Result<T, SkipRetry> {
        self.json().map_err(SkipRetry::new)
    }

    /// Sets this delivery's result, kept once the handler returns `Ok`
    /// (the ack writes it): for a [`Handler`] implemented on a type, whose
    /// `handle` returns `()`. A closure handler returns its result instead.
    /// A later call replaces it. A result over the queue's
    /// [`max_result_size`](crate::DelayQueueBuilder::max_result_size)
    /// gives [`Error::ResultTooLarge`](crate::Error::ResultTooLarge) and is not kept.
    ///
    /// ```
    /// use delayqueue::{Handler, HandlerError, Json, Message};
    ///
    /// struct Quote;
    ///
    /// #[delayqueue::async_trait]
    /// impl Handler for Quote {
    ///     async fn handle(&self, msg: Message) -> Result<(), HandlerError> {
    ///         msg.set_result(Json(serde_json::json!({"price": 42})))?;
    ///         Ok(())
    ///     }
    /// }
    /// ```
    pub fn set_result(&self, result: impl IntoResult) -> Result<(), crate::Error> {
        self.scribe.set(result.into_result()?, self.scribe.max_result())
    }
}
