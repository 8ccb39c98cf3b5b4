//! Handler middleware through `tower`: a [`Handler`] becomes a
//! `tower::Service` ([`HandlerService`]), and any service of messages
//! becomes a handler again ([`service`]), so handlers are wrapped in
//! `tower::Layer`s (timeouts, concurrency limits, logging, tenant context)
//! instead of a middleware trait of this crate's own.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use tower::Service;

use crate::handler::keep_result;
use crate::{Handler, HandlerError, IntoResult, Message};

/// A [`Handler`] as a `tower::Service<Message>`, the innermost service of
/// a `tower::ServiceBuilder` stack; [`service`] turns the stack back into
/// a handler. Cloning it is cheap: the clones share the handler.
///
/// ```
/// use std::time::Duration;
/// use delayqueue::{HandlerError, HandlerService, Message};
/// use tower::ServiceBuilder;
///
/// let handler = delayqueue::service(
///     ServiceBuilder::new()
///         .concurrency_limit(4)                 // at most 4 of these at once
///         .timeout(Duration::from_secs(10))     // an Elapsed error: retried after the backoff
///         .service(HandlerService::new(|msg: Message| async move {
///             println!("{} is due", msg.id());
///             Ok::<(), HandlerError>(())
///         })),
/// );
/// # fn is_handler(_: impl delayqueue::Handler) {}
/// # is_handler(handler);
/// ```
pub struct HandlerService<H> {
    handler: Arc<H>,
}

impl<H: Handler> HandlerService<H> {
    /// `handler` as a service.
    pub fn new(handler: H) -> Self {
        HandlerService {
            handler: Arc::new(handler),
        }
    }
}

impl<H> Clone for HandlerService<H> {
    fn clone(&self) -> Self {
        HandlerService {
            handler: self.handler.clone(),
        }
    }
}

impl<H> fmt::Debug for HandlerService<H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HandlerService").finish_non_exhaustive()
    }
}

impl<H: Handler> Service<Message> for HandlerService<H> {
    type Response = ();
    type Error = HandlerError;
    type Future = Pin<Box<dyn Future<Output = Result<(), HandlerError>> + Send>>;

    /// Always ready: the consumer's handler slots (`concurrency`) are the
    /// handler's own limit; layers above add theirs.
    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), HandlerError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, msg: Message) -> Self::Future {
        let handler = self.handler.clone();
        Box::pin(async move { handler.handle(msg).await })
    }
}

/// A `tower::Service<Message>` as a [`Handler`], for
/// [`DelayQueue::start_consume`](crate::DelayQueue::start_consume) and
/// [`Worker::queue`](crate::Worker::queue): `Ok(())` acks, an error nacks
/// as a handler's error does (a [`RetryAfter`](crate::RetryAfter) or
/// [`SkipRetry`](crate::SkipRetry) that the layers pass on still steers the
/// retry; tower's own layers pass errors on unchanged), and a panic
/// anywhere in the stack is a handler panic.
///
/// Each delivery calls its own clone of the service, made ready first
/// (`poll_ready`), as tower's contract asks: a layer that applies
/// backpressure (a concurrency or rate limit) holds the delivery there,
/// inside its handler slot and time limit.
///
/// ```
/// use delayqueue::{HandlerError, Message};
///
/// let handler = delayqueue::service(tower::service_fn(|msg: Message| async move {
///     println!("{} is due", msg.id());
///     Ok::<(), HandlerError>(())
/// }));
/// # fn is_handler(_: impl delayqueue::Handler) {}
/// # is_handler(handler);
/// ```
pub fn service<S>(svc: S) -> ServiceHandler<S>
where
    S: Service<Message> + Clone + Send + 'static,
    S::Response: IntoResult,
    S::Error: Into<HandlerError>,
    S::Future: Send,
{
    ServiceHandler { svc: Mutex::new(svc) }
}

/// A `tower::Service` as a [`Handler`]; made by [`service`].
pub struct ServiceHandler<S> {
    /// Behind a lock so that a service that is `Send` but not `Sync` (a
    /// concurrency limit's semaphore future) can be shared by the
    /// deliveries; held only to clone it.
    svc: Mutex<S>,
}

impl<S> fmt::Debug for ServiceHandler<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServiceHandler").finish_non_exhaustive()
    }
}

#[async_trait::async_trait]
impl<S> Handler for ServiceHandler<S>
where
    S: Service<Message> + Clone + Send + 'static,
    S::Response: IntoResult,
    S::Error: Into<HandlerError>,
    S::Future: Send,
{
    async fn handle(&self, msg: Message) -> Result<(), HandlerError> {
        // A clone only panics in the user's Clone; the service is still whole.
        let mut svc = self.svc.lock().unwrap_or_else(PoisonError::into_inner).clone();
        std::future::poll_fn(|cx| svc.poll_ready(cx))
            .await
            .map_err(Into::into)?;
        let scribe = msg.scribe.clone();
        keep_result(&scribe, svc.call(msg).await.map_err(Into::into)?)
    }
}
