//! A delivered message, as the handler sees it.

use crate::{Error, MessageId};

/// One delivery of a message to a [`Handler`](crate::Handler).
#[derive(Debug, Clone)]
pub struct Message {
    pub(crate) id: MessageId,
    pub(crate) payload: Vec<u8>,
    pub(crate) attempt: u32,
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
