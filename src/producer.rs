//! Sending messages: [`NewMessage`], [`SendBuilder`] and the send transition.
//!
//! A single send is a batch of one: every send goes through [`send_batch`],
//! which validates all messages first, then stores them in chunks of at most
//! `batch_size` messages of one shard (one `send` script call each, several
//! in flight).

use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::time::{Duration, SystemTime};

use futures::{StreamExt, TryStreamExt};

use crate::builder::{check_expire_after, Config, MAX_DELAY, MAX_RETRY_COUNT};
use crate::events::{self, Event};
use crate::payload::{IntoPayload, Payload};
use crate::store::ops::send::{Outgoing, SendBatch, SendOutcome};
use crate::store::stored::encode_stored;
use crate::{durability, Backoff, DelayQueue, Error, MessageId};

/// Most bytes of payload in one script call; larger batches are split.
const CHUNK_BYTES: usize = 1024 * 1024;
/// Script calls of one batch in flight at once.
const CHUNKS_IN_FLIGHT: usize = 8;

/// A message to send with its options, for [`DelayQueue::send_batch`].
///
/// ```
/// use std::time::Duration;
/// use delayqueue::NewMessage;
/// let msg = NewMessage::new("close order 42", Duration::from_secs(1800))
///     .id("order-42")
///     .retry_count(5);
/// ```
#[derive(Debug)]
#[must_use = "a NewMessage does nothing until it is sent"]
pub struct NewMessage {
    payload: Result<Payload, Error>,
    delay: Duration,
    id: Option<MessageId>,
    retry_count: Option<u32>,
    expire_after: Option<Duration>,
    backoff: Option<Backoff>,
}

impl NewMessage {
    /// A message due after `delay`, measured by Redis's clock from when
    /// Redis stores it.
    pub fn new(payload: impl IntoPayload, delay: Duration) -> Self {
        NewMessage {
            payload: payload.into_payload(),
            delay,
            id: None,
            retry_count: None,
            expire_after: None,
            backoff: None,
        }
    }

    /// A message due at `at`, turned into a delay by this host's clock now;
    /// a time in the past means due now.
    pub fn at(payload: impl IntoPayload, at: SystemTime) -> Self {
        let delay = at.duration_since(SystemTime::now()).unwrap_or(Duration::ZERO);
        Self::new(payload, delay)
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

    /// Discards this message if it is not delivered within `d` of its due
    /// time, instead of the queue's
    /// [`expire_after`](crate::DelayQueueBuilder::expire_after) (default:
    /// never). The deadline is fixed at send by Redis's clock and holds for
    /// retries too; a discarded message becomes a dead letter with reason
    /// `"expired"`. 1 ms to `MAX_DELAY`.
    pub fn expire_after(mut self, d: Duration) -> Self {
        self.expire_after = Some(d);
        self
    }

    /// This message's own [`Backoff`] between failed deliveries, instead of
    /// the queue's. Fixed and exponential only: a custom one fails the send
    /// with [`Error::InvalidArgument`].
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = Some(backoff);
        self
    }

    /// Checks the message against the queue's limits and encodes it.
    fn prepare(self, config: &Config) -> Result<Outgoing, Error> {
        let payload = self.payload?;
        if payload.len() > config.max_payload_size {
            return Err(Error::PayloadTooLarge {
                size: payload.len(),
                max: config.max_payload_size,
            });
        }
        if self.delay > MAX_DELAY {
            return Err(Error::InvalidArgument(format!(
                "delay {:?} is longer than MAX_DELAY",
                self.delay
            )));
        }
        let retry_count = self.retry_count.unwrap_or(config.default_retry_count);
        if retry_count > MAX_RETRY_COUNT {
            return Err(Error::InvalidArgument(format!(
                "retry_count must be at most {MAX_RETRY_COUNT}"
            )));
        }
        let expire_after = self.expire_after.or(config.expire_after);
        if let Some(d) = expire_after {
            check_expire_after(d)?;
        }
        let (id, own_id) = match self.id {
            Some(id) => {
                id.validate()?;
                (id, true)
            }
            None => (MessageId::generate(), false),
        };
        let backoff = match &self.backoff {
            Some(b) => {
                b.validate()?;
                Some(b.encode()?)
            }
            None => None,
        };
        Ok(Outgoing {
            id,
            value: encode_stored(retry_count, backoff.as_deref(), payload.as_bytes()).into(),
            delay: self.delay,
            expire_after,
            own_id,
        })
    }
}

/// Sends `msgs`; see [`DelayQueue::send_batch`].
pub(crate) async fn send_batch(
    queue: &DelayQueue,
    msgs: impl IntoIterator<Item = NewMessage>,
) -> Result<Vec<Result<MessageId, Error>>, Error> {
    let config = &queue.inner.config;
    let prepared = msgs
        .into_iter()
        .map(|m| m.prepare(config))
        .collect::<Result<Vec<_>, _>>()?;
    // Chunks per shard; each message keeps its place in the results.
    let mut open: Vec<Option<usize>> = vec![None; queue.shards()];
    let mut chunks: Vec<Chunk> = Vec::new();
    for (place, msg) in prepared.into_iter().enumerate() {
        let shard = queue.shard_index(msg.id.as_str());
        let chunk = match open[shard] {
            Some(c) if chunks[c].msgs.len() < config.batch_size && chunks[c].bytes + msg.value.len() <= CHUNK_BYTES => {
                c
            }
            _ => {
                chunks.push(Chunk {
                    shard,
                    msgs: Vec::new(),
                    places: Vec::new(),
                    bytes: 0,
                });
                open[shard] = Some(chunks.len() - 1);
                chunks.len() - 1
            }
        };
        let chunk = &mut chunks[chunk];
        chunk.bytes += msg.value.len();
        chunk.places.push(place);
        chunk.msgs.push(msg);
    }
    let written: Vec<usize> = open
        .iter()
        .enumerate()
        .filter_map(|(shard, c)| c.map(|_| shard))
        .collect();
    let places: Vec<Vec<usize>> = chunks.iter_mut().map(|c| std::mem::take(&mut c.places)).collect();
    let results: Vec<Vec<Result<MessageId, Error>>> = futures::stream::iter(chunks)
        .map(|chunk| send_chunk(queue, chunk))
        .buffered(CHUNKS_IN_FLIGHT)
        .try_collect()
        .await?;
    if !written.is_empty() {
        durability::confirm(queue, &written).await?;
    }
    let mut ordered: Vec<(usize, Result<MessageId, Error>)> = places
        .into_iter()
        .flatten()
        .zip(results.into_iter().flatten())
        .collect();
    ordered.sort_unstable_by_key(|(place, _)| *place);
    Ok(ordered.into_iter().map(|(_, result)| result).collect())
}

/// Messages of one shard that one script call stores.
struct Chunk {
    shard: usize,
    msgs: Vec<Outgoing>,
    /// Where each message was in the caller's batch.
    places: Vec<usize>,
    bytes: usize,
}

/// Stores one chunk with one `send` script call.
async fn send_chunk(queue: &DelayQueue, chunk: Chunk) -> Result<Vec<Result<MessageId, Error>>, Error> {
    let q = &queue.inner;
    let op = SendBatch { msgs: chunk.msgs };
    let statuses = queue.store(&q.shards[chunk.shard]).run(&op).await?;
    let results = op
        .msgs
        .into_iter()
        .zip(statuses)
        .map(|(m, status)| match status {
            SendOutcome::Stored => {
                tracing::debug!(queue = %q.name, id = %m.id, delay_ms = m.delay.as_millis() as u64, "sent");
                q.meters.sent.increment(1);
                events::emit(&q.events, || Event::Sent { id: m.id.clone() });
                Ok(m.id)
            }
            // A generated id is unique to this call: finding it means fred
            // re-sent the script after a lost reply, and the first run stored it.
            SendOutcome::Live if !m.own_id => Ok(m.id),
            SendOutcome::Live => Err(Error::Duplicate {
                queue: q.name.clone(),
                id: m.id,
            }),
            SendOutcome::WrongType => Err(Error::WrongType {
                queue: q.name.clone(),
                detail: format!("the payload key of message {} holds another type", m.id),
            }),
        })
        .collect();
    Ok(results)
}

/// A send with per-message options; `.await` it to send.
///
/// Created by [`DelayQueue::send_delay_msg`] and
/// [`DelayQueue::send_schedule_msg`].
#[must_use = "a send does nothing until it is awaited"]
pub struct SendBuilder<'a> {
    queue: &'a DelayQueue,
    msg: NewMessage,
}

impl<'a> SendBuilder<'a> {
    pub(crate) fn new(queue: &'a DelayQueue, msg: NewMessage) -> Self {
        SendBuilder { queue, msg }
    }

    /// Uses this id instead of a generated one; see [`NewMessage::id`].
    pub fn id(mut self, id: impl Into<MessageId>) -> Self {
        self.msg = self.msg.id(id);
        self
    }

    /// Retries of this message: at most `n + 1` deliveries.
    pub fn retry_count(mut self, n: u32) -> Self {
        self.msg = self.msg.retry_count(n);
        self
    }

    /// Discards this message if it is not delivered within `d` of its due
    /// time; see [`NewMessage::expire_after`].
    ///
    /// ```no_run
    /// # async fn run(queue: delayqueue::DelayQueue) -> Result<(), delayqueue::Error> {
    /// use std::time::Duration;
    /// // Worthless once the meeting has started.
    /// queue.send_delay_msg("meeting in 5 min", Duration::from_secs(3300))
    ///     .expire_after(Duration::from_secs(300))
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn expire_after(mut self, d: Duration) -> Self {
        self.msg = self.msg.expire_after(d);
        self
    }

    /// This message's own backoff; see [`NewMessage::backoff`].
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.msg = self.msg.backoff(backoff);
        self
    }

    async fn send(self) -> Result<MessageId, Error> {
        let mut results = send_batch(self.queue, [self.msg]).await?;
        results
            .pop()
            .unwrap_or_else(|| Err(Error::Internal("send of one message returned nothing".into())))
    }
}

impl<'a> IntoFuture for SendBuilder<'a> {
    type Output = Result<MessageId, Error>;
    type IntoFuture = Pin<Box<dyn Future<Output = Self::Output> + Send + 'a>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.send())
    }
}
