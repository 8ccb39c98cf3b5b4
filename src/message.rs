//! A delivered message, as the handler sees it.

use crate::{Backoff, Error, MessageId};

/// One delivery of a message to a [`Handler`](crate::Handler).
#[derive(Debug, Clone)]
pub struct Message {
    pub(crate) id: MessageId,
    pub(crate) payload: Vec<u8>,
    pub(crate) attempt: u32,
    pub(crate) retry_count: u32,
    /// Its own backoff, when its send set one.
    pub(crate) backoff: Option<Backoff>,
    /// Visibility deadline in microseconds of Redis time; fences ack and nack.
    pub(crate) lease: i64,
}

impl Message {
    /// The message's id.
    pub fn id(&self) -> &MessageId {
        &self.id
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
        self.attempt
    }

    /// Retries this message was sent with: at most `retry_count + 1` deliveries.
    pub fn retry_count(&self) -> u32 {
        self.retry_count
    }

    /// Deliveries left after this one should it fail; 0 on the last
    /// attempt, after which a failure makes it a dead letter.
    pub fn retries_left(&self) -> u32 {
        (self.retry_count + 1).saturating_sub(self.attempt)
    }

    /// The payload decoded as JSON.
    ///
    /// A payload that does not decode gives [`Error::Json`]; return it from
    /// the handler (`?`) and the message follows the normal retry path.
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
