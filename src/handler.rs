//! The user's message handler.

use std::future::Future;

use crate::Message;

/// What a handler returns on failure: any error. The message is nacked and
/// retried (or moved to garbage when its deliveries are used up).
pub type HandlerError = Box<dyn std::error::Error + Send + Sync>;

/// Processes delivered messages. `Ok` acks the message, `Err` nacks it; a
/// panic or exceeding `max_consume_duration` counts like an `Err`.
///
/// Implement it on a type, or pass an async closure:
///
/// ```
/// use delayqueue::{Handler, HandlerError, Message};
///
/// struct CloseOrder;
///
/// #[async_trait::async_trait]
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
/// ```
#[async_trait::async_trait]
pub trait Handler: Send + Sync + 'static {
    /// Handles one delivery of a message. Delivery is at-least-once: the
    /// same message may arrive again, so make the work idempotent.
    async fn handle(&self, msg: Message) -> Result<(), HandlerError>;
}

#[async_trait::async_trait]
impl<F, Fut> Handler for F
where
    F: Fn(Message) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), HandlerError>> + Send,
{
    async fn handle(&self, msg: Message) -> Result<(), HandlerError> {
        self(msg).await
    }
}
