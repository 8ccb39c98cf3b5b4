//! Sending messages: [`SendBuilder`] and the send transition.

use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::time::Duration;

use fred::prelude::Value;

use crate::builder::{check_msg_ttl, MAX_DELAY, MAX_RETRY_COUNT};
use crate::payload::Payload;
use crate::{scripts, DelayQueue, Error, MessageId};

/// A send with per-message options; `.await` it to send.
///
/// Created by [`DelayQueue::send_delay_msg`] and
/// [`DelayQueue::send_schedule_msg`].
#[must_use = "a send does nothing until it is awaited"]
pub struct SendBuilder<'a> {
    queue: &'a DelayQueue,
    payload: Result<Payload, Error>,
    delay: Duration,
    id: Option<MessageId>,
    retry_count: Option<u32>,
    msg_ttl: Option<Duration>,
}

impl<'a> SendBuilder<'a> {
    pub(crate) fn new(queue: &'a DelayQueue, payload: Result<Payload, Error>, delay: Duration) -> Self {
        SendBuilder {
            queue,
            payload,
            delay,
            id: None,
            retry_count: None,
            msg_ttl: None,
        }
    }

    /// Uses this id instead of a generated one. The send is then idempotent:
    /// while a message with this id is pending, ready, being retried or
    /// processed, another send with it fails with [`Error::Duplicate`] and
    /// changes nothing.
    pub fn id(mut self, id: impl Into<MessageId>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// Retries of this message: at most `n + 1` deliveries.
    pub fn retry_count(mut self, n: u32) -> Self {
        self.retry_count = Some(n);
        self
    }

    /// How long this payload is kept past its due time.
    pub fn msg_ttl(mut self, ttl: Duration) -> Self {
        self.msg_ttl = Some(ttl);
        self
    }

    async fn send(self) -> Result<MessageId, Error> {
        let q = &self.queue.inner;
        let payload = self.payload?;
        if payload.len() > q.config.max_payload_size {
            return Err(Error::PayloadTooLarge {
                size: payload.len(),
                max: q.config.max_payload_size,
            });
        }
        if self.delay > MAX_DELAY {
            return Err(Error::InvalidArgument(format!(
                "delay {:?} is longer than MAX_DELAY",
                self.delay
            )));
        }
        let retry_count = self.retry_count.unwrap_or(q.config.default_retry_count);
        if retry_count > MAX_RETRY_COUNT {
            return Err(Error::InvalidArgument(format!(
                "retry_count must be at most {MAX_RETRY_COUNT}"
            )));
        }
        let ttl = self.msg_ttl.unwrap_or(q.config.msg_ttl);
        check_msg_ttl(ttl)?;
        let (id, generated) = match self.id {
            Some(id) => {
                id.validate()?;
                (id, false)
            }
            None => (MessageId::generate(), true),
        };
        let k = &q.keys;
        let keys = k.for_send(id.as_str());
        let args: Vec<Value> = vec![
            id.as_str().into(),
            Value::Bytes(payload.into_bytes().into()),
            (self.delay.as_millis() as i64).into(),
            (ttl.as_millis() as i64).into(),
            i64::from(retry_count).into(),
        ];
        let reply: Vec<i64> = self.queue.call(&scripts::SEND, keys, args).await?;
        match reply.first() {
            Some(1) => {
                tracing::debug!(queue = %q.name, %id, delay_ms = self.delay.as_millis() as u64, "sent");
                Ok(id)
            }
            // A generated id is unique to this call: finding it means fred
            // re-sent the script after a lost reply, and the first run stored it.
            Some(0) if generated => Ok(id),
            Some(0) => Err(Error::Duplicate(id)),
            _ => Err(Error::UnexpectedReply {
                script: "send",
                detail: format!("{reply:?}"),
            }),
        }
    }
}

impl<'a> IntoFuture for SendBuilder<'a> {
    type Output = Result<MessageId, Error>;
    type IntoFuture = Pin<Box<dyn Future<Output = Self::Output> + Send + 'a>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.send())
    }
}
