//! Sending messages: [`NewMessage`] and the send transition.
//!
//! A single send is a batch of one: every send goes through [`send_batch`],
//! which validates all messages first, then stores them in chunks of at most
//! `batch_size` messages of one shard (one `send` script call each, several
//! in flight).

use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::time::{Duration, Instant, SystemTime};

use futures::StreamExt;

use crate::error::connection_failed;
use crate::events::{self, Event};
use crate::flow::{ChildPolicy, MessageRef};
use crate::maxima::{
    check_group, header_name_char, MAX_DELAY, MAX_HEADERS, MAX_HEADERS_BYTES, MAX_HEADER_NAME_LEN, MAX_PRIORITY,
    MAX_RETRY_COUNT, MAX_WINDOW,
};
use crate::payload::{IntoPayload, Payload};
use crate::queue::builder::check_expire_after;
use crate::queue::durability;
use crate::queue::durability::Durability;
use crate::queue::flow_links::{self as flow, Deps};
use crate::queue::{shard_of, Config};
use crate::store::ops::get::Get;
use crate::store::ops::send::{Outgoing, SendBatch, SendMode, SendOutcome};
use crate::store::stored::{decode_stored, encode_staged, encode_stored, ValueParts, STAGE_BYTES};
use crate::store::{Keys, Op};
use crate::{Backoff, DelayQueue, Error, MessageId, MessageInfo};

/// Most bytes of payload in one script call; larger batches are split.
const CHUNK_BYTES: usize = 1024 * 1024;
/// Script calls of one batch in flight at once.
const CHUNKS_IN_FLIGHT: usize = 8;

/// A message to send, with its options: one builder for single and batch
/// sends.
///
/// [`DelayQueue::send`] returns one bound to its queue
/// (`NewMessage<&DelayQueue>`): set options, then `.await` it to send.
/// [`NewMessage::new`] makes a free-standing one (`NewMessage`, with
/// `Q = ()`) for [`DelayQueue::send_batch`]. A message is due now unless
/// [`delay`](Self::delay) or [`at`](Self::at) says otherwise.
///
/// ```no_run
/// # async fn run(queue: delayqueue::DelayQueue) -> Result<(), delayqueue::Error> {
/// use std::time::Duration;
/// use delayqueue::NewMessage;
/// // One message: options on the send, then await it.
/// let id = queue.send("close order 42")
///     .delay(Duration::from_secs(1800))
///     .id("order-42")
///     .retry_count(5)
///     .await?;
/// // Many: the same options on each NewMessage.
/// let reminders = (0..3).map(|i| NewMessage::new(format!("remind user {i}")).delay(Duration::from_secs(60)));
/// queue.send_batch(reminders).await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[must_use = "a message is sent only when awaited (from queue.send) or passed to send_batch"]
pub struct NewMessage<Q = ()> {
    /// The queue it is bound to (from `DelayQueue::send`), or `()`.
    queue: Q,
    payload: Result<Payload, Error>,
    due: Due,
    id: Option<MessageId>,
    retry_count: Option<u32>,
    expire_after: Option<Duration>,
    backoff: Option<Backoff>,
    priority: u8,
    group: Option<String>,
    headers: Vec<(String, String)>,
    /// How it meets an earlier message of its id (docs/dedup.md).
    dedup: Option<Dedup>,
    /// [`delay`](Self::delay) or [`at`](Self::at) was called: a replace
    /// moves the due time.
    due_given: bool,
    /// The messages it waits for ([`after`](Self::after)).
    after: Vec<MessageRef>,
    policy: ChildPolicy,
    /// A flow's parent whose children set [`Flow`](crate::Flow) fills
    /// itself: stored waiting, linked by the flow.
    wait: bool,
}

/// What [`NewMessage::unique_for`], [`NewMessage::throttle`],
/// [`NewMessage::debounce`] and [`DelayQueue::replace`] asked for.
#[derive(Debug, Clone, Copy)]
enum Dedup {
    Unique(Duration),
    Throttle(Duration),
    Debounce(Duration),
    Replace,
}

/// What a send did with one message: from [`NewMessage::outcome`], which,
/// unlike `.await`, reports a refused duplicate as a value rather than an
/// error (docs/dedup.md).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Sent {
    /// Stored as a new message.
    Stored(MessageId),
    /// Replaced the pending message with this id
    /// ([`debounce`](NewMessage::debounce), [`DelayQueue::replace`]).
    Replaced(MessageId),
    /// Dropped, nothing written: a message with this id is live, or a
    /// [`unique_for`](NewMessage::unique_for) or
    /// [`throttle`](NewMessage::throttle) window of the id holds.
    Dropped {
        /// The id.
        id: MessageId,
        /// When the window that dropped it ends, by Redis's clock; `None`
        /// when a live message with this id dropped it.
        until: Option<SystemTime>,
    },
}

impl Sent {
    /// The message's id, whatever happened.
    pub fn id(&self) -> &MessageId {
        match self {
            Sent::Stored(id) | Sent::Replaced(id) | Sent::Dropped { id, .. } => id,
        }
    }
}

/// When a message is due: after a delay by Redis's clock, or at a time of
/// this host's clock.
#[derive(Debug, Clone, Copy)]
enum Due {
    In(Duration),
    At(SystemTime),
}

impl NewMessage {
    /// A message with `payload`, due now unless [`delay`](Self::delay) or
    /// [`at`](Self::at) says otherwise; for
    /// [`DelayQueue::send_batch`].
    pub fn new(payload: impl IntoPayload) -> Self {
        Self::bound((), payload)
    }
}

impl<Q> NewMessage<Q> {
    pub(crate) fn bound(queue: Q, payload: impl IntoPayload) -> Self {
        NewMessage {
            queue,
            payload: payload.into_payload(),
            due: Due::In(Duration::ZERO),
            id: None,
            retry_count: None,
            expire_after: None,
            backoff: None,
            priority: 0,
            group: None,
            headers: Vec::new(),
            dedup: None,
            due_given: false,
            after: Vec::new(),
            policy: ChildPolicy::Fail,
            wait: false,
        }
    }

    /// Becomes due only once every message of `refs` has finished (acked,
    /// or dead or cancelled as [`on_dead_child`](Self::on_dead_child) says),
    /// and not before its own delay (docs/workflows.md): it waits in the
    /// `waiting` state until then. Each ref is an id of this queue or a
    /// [`MessageRef`] of another queue. A ref that is no longer stored when
    /// the send links it (acked long ago, or never sent: the two cannot be
    /// told apart) counts as acked. Give the message an [`id`](Self::id) to
    /// make a send that failed half-way safe to repeat. At most
    /// [`MAX_FLOW_CHILDREN`](crate::MAX_FLOW_CHILDREN) refs; not with
    /// [`unique_for`](Self::unique_for), [`throttle`](Self::throttle),
    /// [`debounce`](Self::debounce) or a replace ([`Error::InvalidFlow`]).
    ///
    /// ```no_run
    /// # async fn run(queue: delayqueue::DelayQueue) -> Result<(), delayqueue::Error> {
    /// let a = queue.send("resize image").await?;
    /// let b = queue.send("scan image").await?;
    /// queue.send("publish image").id("publish-7").after([a, b]).await?;
    /// # Ok(()) }
    /// ```
    pub fn after<R: Into<MessageRef>>(mut self, refs: impl IntoIterator<Item = R>) -> Self {
        self.after.extend(refs.into_iter().map(Into::into));
        self
    }

    /// What becomes of it when a message it waits for
    /// ([`after`](Self::after)) becomes a dead letter or is cancelled;
    /// [`ChildPolicy::Fail`] unless set.
    ///
    /// ```no_run
    /// # async fn run(queue: delayqueue::DelayQueue) -> Result<(), delayqueue::Error> {
    /// use delayqueue::ChildPolicy;
    /// let thumbs = queue.send("thumbnail").await?;
    /// // The page goes out with or without its thumbnail.
    /// queue.send("publish page").after([thumbs]).on_dead_child(ChildPolicy::Ignore).await?;
    /// # Ok(()) }
    /// ```
    pub fn on_dead_child(mut self, policy: ChildPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// The id the caller chose, if any.
    pub(crate) fn chosen_id(&self) -> Option<&MessageId> {
        self.id.as_ref()
    }

    /// A copy to send as a flow's parent (`wait`), unbound.
    pub(crate) fn clone_for_flow(&self, wait: bool) -> NewMessage {
        NewMessage {
            queue: (),
            payload: match &self.payload {
                Ok(p) => Ok(p.clone()),
                Err(e) => Err(Error::InvalidArgument(e.to_string())),
            },
            due: self.due,
            id: self.id.clone(),
            retry_count: self.retry_count,
            expire_after: self.expire_after,
            backoff: self.backoff.clone(),
            priority: self.priority,
            group: self.group.clone(),
            headers: self.headers.clone(),
            dedup: self.dedup,
            due_given: self.due_given,
            after: Vec::new(),
            policy: self.policy,
            wait,
        }
    }

    /// Due after `d`, measured by Redis's clock from when Redis stores it.
    /// At most [`MAX_DELAY`]. Replaces an earlier [`at`](Self::at).
    pub fn delay(mut self, d: Duration) -> Self {
        self.due = Due::In(d);
        self.due_given = true;
        self
    }

    /// Due at `t`. The time is turned into a delay by this host's clock
    /// when the message is sent; a time in the past means due now.
    /// Replaces an earlier [`delay`](Self::delay).
    pub fn at(mut self, t: SystemTime) -> Self {
        self.due = Due::At(t);
        self.due_given = true;
        self
    }

    /// Refuses this send while a message with its [`id`](Self::id) is live
    /// and for `ttl` after that message finished (acked, dead or
    /// cancelled), by Redis's clock: such a send fails with
    /// [`Error::Duplicate`], naming when the window ends, and writes
    /// nothing. The id's marker expires by itself (docs/dedup.md). `ttl` is
    /// 1 ms to [`MAX_WINDOW`]; the send needs an id. Replaces an earlier
    /// [`throttle`](Self::throttle) or [`debounce`](Self::debounce).
    ///
    /// ```no_run
    /// # async fn run(queue: delayqueue::DelayQueue) -> Result<(), delayqueue::Error> {
    /// use std::time::Duration;
    /// use delayqueue::Error;
    /// // One welcome mail per user per day, however often sign-up is retried.
    /// match queue.send("welcome user 7").id("welcome-7").unique_for(Duration::from_secs(86_400)).await {
    ///     Ok(_) | Err(Error::Duplicate { .. }) => {}
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn unique_for(self, ttl: Duration) -> Self {
        self.dedup(Dedup::Unique(ttl))
    }

    /// Lets the first send of its [`id`](Self::id) within `window` through
    /// and refuses the others until the window, counted from that first
    /// send by Redis's clock, ends: `.await` fails with
    /// [`Error::Duplicate`], [`outcome`](NewMessage::outcome) gives
    /// [`Sent::Dropped`]. `window` is 1 ms to [`MAX_WINDOW`]; the send needs
    /// an id. Replaces an earlier [`unique_for`](Self::unique_for) or
    /// [`debounce`](Self::debounce).
    ///
    /// ```no_run
    /// # async fn run(queue: delayqueue::DelayQueue) -> Result<(), delayqueue::Error> {
    /// use std::time::Duration;
    /// use delayqueue::Sent;
    /// // At most one cache refresh a minute; the rest are dropped.
    /// let sent = queue.send("refresh").id("refresh-cache").throttle(Duration::from_secs(60)).outcome().await?;
    /// if let Sent::Dropped { until, .. } = sent {
    ///     println!("throttled until {until:?}");
    /// }
    /// # Ok(()) }
    /// ```
    pub fn throttle(self, window: Duration) -> Self {
        self.dedup(Dedup::Throttle(window))
    }

    /// Debounces sends of its [`id`](Self::id): the message is due `window`
    /// from now (as [`delay`](Self::delay) says), and while it is still
    /// pending, the next such send replaces its payload, headers and
    /// options and moves its due time to `window` from then, so the handler
    /// sees only the last payload. Once the message is due (its due time
    /// passed, whether or not a consumer moved it yet) or being
    /// processed, a debounced send is refused as a duplicate
    /// ([`Error::Duplicate`]); once it finished, the next one is a new
    /// message. `window` is 1 ms to [`MAX_WINDOW`]; the send needs an id.
    /// Replaces an earlier [`unique_for`](Self::unique_for) or
    /// [`throttle`](Self::throttle).
    ///
    /// ```no_run
    /// # async fn run(queue: delayqueue::DelayQueue) -> Result<(), delayqueue::Error> {
    /// use std::time::Duration;
    /// // Reindex once the user stopped typing for 2 s, with the last text.
    /// queue.send("draft v3").id("reindex-doc-9").debounce(Duration::from_secs(2)).await?;
    /// # Ok(()) }
    /// ```
    pub fn debounce(mut self, window: Duration) -> Self {
        self.due = Due::In(window);
        self.dedup(Dedup::Debounce(window))
    }

    /// Makes this send a replace of the pending message with its
    /// [`id`](Self::id), as [`DelayQueue::replace`] does, for
    /// [`DelayQueue::send_batch`]: that message's result is then
    /// [`Error::NotPending`] when there is none to replace.
    ///
    /// ```no_run
    /// # async fn run(queue: delayqueue::DelayQueue) -> Result<(), delayqueue::Error> {
    /// use delayqueue::NewMessage;
    /// let fixes = [("invoice-5", "total: 12"), ("invoice-6", "total: 7")];
    /// queue.send_batch(fixes.map(|(id, p)| NewMessage::new(p).id(id).replacing())).await?;
    /// # Ok(()) }
    /// ```
    pub fn replacing(self) -> Self {
        self.dedup(Dedup::Replace)
    }

    /// Sets the mode; a replace keeps its own.
    fn dedup(mut self, dedup: Dedup) -> Self {
        match self.dedup {
            Some(Dedup::Replace) => {
                self.payload = Err(Error::InvalidArgument(
                    "a replace takes no unique_for, throttle or debounce".into(),
                ))
            }
            _ => self.dedup = Some(dedup),
        }
        self
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
    ///
    /// ```no_run
    /// # async fn run(queue: delayqueue::DelayQueue) -> Result<(), delayqueue::Error> {
    /// use std::time::Duration;
    /// // Worthless once the meeting has started.
    /// queue.send("meeting in 5 min")
    ///     .delay(Duration::from_secs(3300))
    ///     .expire_after(Duration::from_secs(300))
    ///     .await?;
    /// # Ok(()) }
    /// ```
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

    /// Its priority, 0 (the default, lowest) to [`MAX_PRIORITY`]: among
    /// messages that are due, a higher priority is delivered first, and
    /// messages of one priority in due order. A priority above
    /// `MAX_PRIORITY` fails the send with [`Error::InvalidArgument`].
    /// Retries are delivered before any new message, whatever their
    /// priority (docs/priorities.md).
    ///
    /// ```no_run
    /// # async fn run(queue: delayqueue::DelayQueue) -> Result<(), delayqueue::Error> {
    /// // Ahead of every due message of priority 0 to 4.
    /// queue.send("password reset mail").priority(5).await?;
    /// # Ok(()) }
    /// ```
    pub fn priority(mut self, priority: u8) -> Self {
        self.priority = priority;
        self
    }

    /// Puts the message in a group, such as the tenant it is for
    /// (docs/groups.md): due messages of different groups are claimed in
    /// turn, so a group with a big backlog delays another group's message
    /// by at most one turn, and each group's own concurrency
    /// ([`DelayQueueBuilder::group_concurrency`](crate::DelayQueueBuilder::group_concurrency),
    /// [`DelayQueue::set_group_concurrency`]) and pause
    /// ([`DelayQueue::pause_group`]) hold. A message without a group is
    /// served as one more group. Names are 1 to [`MAX_GROUP_LEN`](crate::MAX_GROUP_LEN) ASCII
    /// letters, digits, `-`, `_` and `.`; another fails the send with
    /// [`Error::InvalidGroup`].
    ///
    /// ```no_run
    /// # async fn run(queue: delayqueue::DelayQueue) -> Result<(), delayqueue::Error> {
    /// queue.send("import row 1").group("tenant-42").await?;
    /// # Ok(()) }
    /// ```
    pub fn group(mut self, group: impl Into<String>) -> Self {
        self.group = Some(group.into());
        self
    }

    /// Sets a header: a name and a string value the handler reads with
    /// [`Message::header`](crate::Message::header), kept across retries
    /// and requeues. Setting a name again replaces its value. Names are 1
    /// to [`MAX_HEADER_NAME_LEN`] ASCII letters, digits, `-`, `_` and `.`; a
    /// message has at most [`MAX_HEADERS`] headers and
    /// [`MAX_HEADERS_BYTES`] of names and values together. A header that
    /// breaks one fails the send with [`Error::InvalidHeader`]. A message
    /// without headers takes no more room in Redis than it would if
    /// headers did not exist.
    ///
    /// With the feature `otel`, a send inside a `tracing` span adds the
    /// span's W3C `traceparent` (and `tracestate`) here, counted against
    /// these limits, unless `traceparent` is set already.
    ///
    /// ```no_run
    /// # async fn run(queue: delayqueue::DelayQueue) -> Result<(), delayqueue::Error> {
    /// queue.send("close order 42")
    ///     .header("tenant", "acme")
    ///     .header("request-id", "7f3a")
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        let (name, value) = (name.into(), value.into());
        match self.headers.iter_mut().find(|(n, _)| *n == name) {
            Some(entry) => entry.1 = value,
            None => self.headers.push((name, value)),
        }
        self
    }

    /// Checks the message against the queue's limits and encodes it, for a
    /// queue of `shards` shards.
    fn prepare(self, config: &Config, shards: usize) -> Result<Outgoing, Error> {
        let wait = self.wait || !self.after.is_empty();
        if wait && self.dedup.is_some() {
            return Err(Error::InvalidFlow {
                reason: "a message that waits for others cannot be sent with unique_for, throttle, debounce or replace"
                    .into(),
            });
        }
        let payload = self.payload?;
        if payload.len() > config.max_payload_size {
            return Err(Error::PayloadTooLarge {
                size: payload.len(),
                max: config.max_payload_size,
            });
        }
        let delay = match self.due {
            Due::In(d) => d,
            Due::At(t) => super::delay_until(t),
        };
        if delay > MAX_DELAY {
            return Err(Error::InvalidArgument(format!(
                "delay {delay:?} is longer than MAX_DELAY"
            )));
        }
        let retry_count = self.retry_count.unwrap_or(config.consume.default_retry_count);
        if retry_count > MAX_RETRY_COUNT {
            return Err(Error::InvalidArgument(format!(
                "retry_count must be at most {MAX_RETRY_COUNT}"
            )));
        }
        if self.priority > MAX_PRIORITY {
            return Err(Error::InvalidArgument(format!(
                "priority {} is above MAX_PRIORITY ({MAX_PRIORITY})",
                self.priority
            )));
        }
        // The trace context is checked with the caller's headers.
        #[cfg(feature = "otel")]
        let mut headers = self.headers;
        #[cfg(feature = "otel")]
        crate::otel::inject(&mut headers);
        #[cfg(not(feature = "otel"))]
        let headers = self.headers;
        check_headers(&headers)?;
        if let Some(group) = &self.group {
            check_group(group)?;
        }
        let expire_after = self.expire_after.or(config.expire_after);
        if let Some(d) = expire_after {
            check_expire_after(d)?;
        }
        // A group lives in one shard, so its limits are exact: with shards,
        // a grouped message's id must hash to its group's shard, since
        // every call that takes an id finds the shard from it.
        let group_shard = self
            .group
            .as_deref()
            .filter(|_| shards > 1)
            .map(|g| shard_of(g, shards));
        let (id, own_id) = match self.id {
            Some(id) => {
                id.validate()?;
                if let Some(shard) = group_shard.filter(|&s| s != shard_of(id.as_str(), shards)) {
                    return Err(Error::InvalidGroup {
                        group: self.group.unwrap_or_default(),
                        reason: format!(
                            "with shards, a message of this group needs an id of its shard ({shard}): \
                             leave the id to be generated"
                        ),
                    });
                }
                (id, true)
            }
            None => (generate_in(group_shard, shards), false),
        };
        let mode = self.dedup.map(|d| send_mode(d, own_id, self.due_given)).transpose()?;
        let backoff = match &self.backoff {
            Some(b) => {
                b.validate()?;
                Some(b.encode()?)
            }
            None => None,
        };
        let parts = ValueParts {
            retry_count,
            backoff: backoff.as_deref(),
            priority: self.priority,
            group: self.group.as_deref(),
            headers: &headers,
            payload: payload.as_bytes(),
        };
        // A big payload stays out of Lua: its value is SET at a staging
        // string and renamed by the script (lua/send.lua).
        let staged = payload.len() > STAGE_BYTES;
        let value = match staged {
            true => encode_staged(
                &parts,
                u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                expire_after.is_some(),
            ),
            false => encode_stored(&parts),
        };
        Ok(Outgoing {
            id,
            value: value.into(),
            delay,
            expire_after,
            own_id,
            stage: staged.then(|| MessageId::generate().as_str().to_string()),
            mode,
            wait,
        })
    }
}

/// The script's mode for `dedup`, after checking its window; `own_id`: the
/// message has a caller-chosen id, which every mode needs; `due_given`: a
/// replace moves the due time.
fn send_mode(dedup: Dedup, own_id: bool, due_given: bool) -> Result<SendMode, Error> {
    let (name, window) = match dedup {
        Dedup::Unique(d) => ("unique_for", Some(d)),
        Dedup::Throttle(d) => ("throttle", Some(d)),
        Dedup::Debounce(d) => ("debounce", Some(d)),
        Dedup::Replace => ("replace", None),
    };
    if !own_id {
        return Err(Error::InvalidArgument(format!("{name} needs an id (.id(..))")));
    }
    if let Some(d) = window {
        if d.as_millis() == 0 || d > MAX_WINDOW {
            return Err(Error::InvalidArgument(format!(
                "{name} window {d:?} must be 1 ms to MAX_WINDOW ({MAX_WINDOW:?})"
            )));
        }
    }
    Ok(match dedup {
        Dedup::Unique(d) => SendMode::Unique(d),
        Dedup::Throttle(d) => SendMode::Throttle(d),
        Dedup::Debounce(_) => SendMode::Debounce,
        Dedup::Replace => SendMode::Replace { move_due: due_given },
    })
}

/// A generated id, of shard `shard` of `shards` when given: ids hash
/// evenly, so this takes `shards` tries on average.
fn generate_in(shard: Option<usize>, shards: usize) -> MessageId {
    loop {
        let id = MessageId::generate();
        if shard.is_none_or(|s| s == shard_of(id.as_str(), shards)) {
            return id;
        }
    }
}

/// Checks headers against the limits on their names, count and size.
fn check_headers(headers: &[(String, String)]) -> Result<(), Error> {
    let invalid = |name: &str, reason: String| Error::InvalidHeader {
        name: name.to_string(),
        reason,
    };
    if headers.len() > MAX_HEADERS {
        let name = &headers[MAX_HEADERS].0;
        return Err(invalid(name, format!("more than MAX_HEADERS ({MAX_HEADERS}) headers")));
    }
    let mut bytes = 0;
    for (name, value) in headers {
        if name.is_empty() || name.len() > MAX_HEADER_NAME_LEN {
            return Err(invalid(
                name,
                format!("a name is 1 to MAX_HEADER_NAME_LEN ({MAX_HEADER_NAME_LEN}) bytes"),
            ));
        }
        if let Some(c) = name.chars().find(|&c| !header_name_char(c)) {
            return Err(invalid(
                name,
                format!("{c:?} in a name (ASCII letters, digits, '-', '_' and '.' only)"),
            ));
        }
        bytes += name.len() + value.len();
        if bytes > MAX_HEADERS_BYTES {
            return Err(invalid(
                name,
                format!("names and values exceed MAX_HEADERS_BYTES ({MAX_HEADERS_BYTES}) bytes"),
            ));
        }
    }
    Ok(())
}

/// Sends `msgs`; see [`DelayQueue::send_batch`]. A refused duplicate is
/// [`Sent::Dropped`] here.
pub(crate) async fn send_batch<Q>(
    queue: &DelayQueue,
    msgs: impl IntoIterator<Item = NewMessage<Q>>,
) -> Result<Vec<Result<Sent, Error>>, Error> {
    let inner = &queue.inner;
    let config = &inner.config;
    let mut deps: Vec<Option<Deps>> = Vec::new();
    let prepared = msgs
        .into_iter()
        .map(|m| {
            deps.push(match m.after.is_empty() {
                true => None,
                false => Some(Deps::new(queue, &m.after, m.policy)?),
            });
            m.prepare(config, queue.shards())
        })
        .collect::<Result<Vec<_>, _>>()?;
    // A parent's children set is filled before the parent is stored
    // (docs/workflows.md).
    // A parent already live gets no child: a send refused as a duplicate
    // writes nothing (it links only what its set holds, for a re-send).
    for (m, d) in prepared.iter().zip(deps.iter_mut()) {
        if let Some(d) = d {
            *d = flow::add_deps(queue, m.id.as_str(), d, true).await?;
        }
    }
    let (client, name) = (&inner.client, &inner.name);
    durability::check_waitaof(client, name, &config.durability, &inner.shards, &inner.waitaof_checked).await?;
    if queue.shards() > 1 {
        queue.claim_shard_count().await?;
    }
    // Chunks per shard; each message keeps its place in the results.
    let mut open: Vec<Option<usize>> = vec![None; queue.shards()];
    let mut chunks: Vec<Chunk> = Vec::new();
    for (place, msg) in prepared.into_iter().enumerate() {
        let shard = queue.shard_index(msg.id.as_str());
        let chunk = match open[shard] {
            Some(c)
                if chunks[c].msgs.len() < config.consume.batch_size
                    && chunks[c].bytes + msg.value.len() <= CHUNK_BYTES =>
            {
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
    let started = Instant::now();
    // A reconnect during the call means fred may have re-sent a script
    // whose first run stored its messages, and that a WAIT on the new
    // connection counts none of them.
    let mut reconnects = durability::reconnects(&inner.client);
    // Every chunk to its end, failed or not: what is in flight runs anyway.
    let stored: Vec<(Chunk, Result<<SendBatch as Op>::Reply, Error>)> = futures::stream::iter(chunks)
        .map(|chunk| store_chunk(queue, chunk))
        .buffered(CHUNKS_IN_FLIGHT)
        .collect()
        .await;
    let mut reconnected = durability::reconnected(&mut reconnects);
    // The error to report when a chunk failed: a lost connection first,
    // since it leaves messages of the call maybe stored.
    let mut failure: Option<Error> = None;
    let mut done = Vec::with_capacity(stored.len());
    for (chunk, outcomes) in stored {
        match outcomes {
            Ok(outcomes) => done.push((chunk, Some(outcomes))),
            Err(e) => {
                if failure.as_ref().is_none_or(|f| !lost(f) && lost(&e)) {
                    failure = Some(e);
                }
                done.push((chunk, None));
            }
        }
    }
    match failure {
        Some(Error::Redis(source)) if connection_failed(&source) => {
            let ids = done
                .into_iter()
                .flat_map(|(chunk, _)| chunk.places.into_iter().zip(chunk.msgs.into_iter().map(|m| m.id)))
                .collect();
            return Err(Error::Unconfirmed {
                queue: inner.name.clone(),
                ids: in_order(ids),
                source,
            });
        }
        Some(e) => return Err(e),
        None => {}
    }
    let mut results = Vec::new();
    for (chunk, outcomes) in done {
        let k = &inner.shards[chunk.shard];
        let outcomes = outcomes.unwrap_or_default();
        for ((m, place), (outcome, until)) in chunk.msgs.into_iter().zip(chunk.places).zip(outcomes) {
            results.push((place, judge(queue, k, m, outcome, until, reconnected, started).await));
        }
    }
    let results = in_order(results);
    // Then each parent stored, or found stored (a re-send), is linked to its children.
    for (r, d) in results.iter().zip(&deps) {
        if let (Ok(Sent::Stored(id) | Sent::Dropped { id, until: None }), Some(d)) = (r, d) {
            flow::link(queue, id.as_str(), d).await?;
        }
    }
    let confirmed: Vec<&MessageId> = results
        .iter()
        .filter_map(|r| match r {
            Ok(Sent::Stored(id) | Sent::Replaced(id)) => Some(id),
            _ => None,
        })
        .collect();
    // Duplicates wait too: a caller sending again after NotDurable learns
    // whether the replicas have caught up.
    if config.durability != Durability::Memory && !written.is_empty() {
        let shards: Vec<&Keys> = written.iter().map(|&i| &inner.shards[i]).collect();
        let waited = durability::confirm(&inner.client, &inner.name, &config.durability, &shards).await;
        reconnected = reconnected || durability::reconnected(&mut reconnects);
        let failed = match waited {
            Err(Error::Redis(e)) if connection_failed(&e) && !confirmed.is_empty() => Some(e),
            Err(e) => return Err(e),
            Ok(()) if reconnected && !confirmed.is_empty() => Some(reconnect_error()),
            Ok(()) => None,
        };
        if let Some(e) = failed {
            let ids = confirmed.into_iter().cloned().collect();
            return Err(Error::Unconfirmed {
                queue: inner.name.clone(),
                ids,
                source: e,
            });
        }
    }
    Ok(results)
}

/// Messages of one shard that one script call stores.
struct Chunk {
    shard: usize,
    msgs: Vec<Outgoing>,
    /// Where each message was in the caller's batch.
    places: Vec<usize>,
    bytes: usize,
}

/// Stores one chunk with one `send` script call; returns the chunk with
/// what the script did with each message.
async fn store_chunk(queue: &DelayQueue, chunk: Chunk) -> (Chunk, Result<<SendBatch as Op>::Reply, Error>) {
    let op = SendBatch { msgs: chunk.msgs };
    let outcomes = queue.store(&queue.inner.shards[chunk.shard]).run(&op).await;
    let chunk = Chunk { msgs: op.msgs, ..chunk };
    (chunk, outcomes)
}

/// Whether `e` says the connection failed, so the call's messages may be
/// stored or not.
fn lost(e: &Error) -> bool {
    matches!(e, Error::Redis(e) if connection_failed(e))
}

/// The values of `placed` sorted by their place in the caller's batch.
fn in_order<T>(mut placed: Vec<(usize, T)>) -> Vec<T> {
    placed.sort_unstable_by_key(|(place, _)| *place);
    placed.into_iter().map(|(_, v)| v).collect()
}

/// The result of message `m` from what the script did with it. A live id
/// is this call's own message, stored by a first run whose reply was lost
/// (fred re-sent the script on a new connection), when the id was
/// generated, or when the client `reconnected` during the call (which
/// began `started`) and Redis holds the same message, stored since then;
/// otherwise it is a duplicate, or for a replace, not pending. A marker
/// that refused it (`until`: when it expires) may be this call's own
/// message's too, when the client reconnected.
async fn judge(
    queue: &DelayQueue,
    k: &Keys,
    m: Outgoing,
    outcome: SendOutcome,
    until: Option<SystemTime>,
    reconnected: bool,
    started: Instant,
) -> Result<Sent, Error> {
    let q = &queue.inner;
    let replace = matches!(m.mode, Some(SendMode::Replace { .. }));
    let own = match outcome {
        SendOutcome::Stored => true,
        SendOutcome::Replaced => {
            tracing::debug!(queue = %q.name, id = %m.id, delay_ms = m.delay.as_millis() as u64, "replaced");
            return Ok(Sent::Replaced(m.id));
        }
        SendOutcome::Missing => return Err(not_pending(&q.name, m.id, false)),
        SendOutcome::Live if replace => return Err(not_pending(&q.name, m.id, true)),
        SendOutcome::Live if !m.own_id => true,
        SendOutcome::Live | SendOutcome::Held if reconnected => match queue.store(k).run(&Get { id: m.id.as_str() }).await {
            Ok(Some((found, now))) => stored_by_this_call(&found, now, &m, started.elapsed()),
            // Delivered and acked since: it cannot be told.
            Ok(None) => return Err(unconfirmed(&q.name, m.id, reconnect_error())),
            Err(Error::Redis(e)) if connection_failed(&e) => return Err(unconfirmed(&q.name, m.id, e)),
            Err(e) => return Err(e),
        },
        SendOutcome::Held => return Ok(Sent::Dropped { id: m.id, until }),
        SendOutcome::Live => false,
        SendOutcome::WrongType => {
            return Err(Error::WrongType {
                queue: q.name.clone(),
                detail: format!("the payload key of message {} holds another type", m.id),
            })
        }
        SendOutcome::StagedGone => {
            return Err(Error::Internal(format!(
                "the staged value of message {} was gone (evicted?) when the send script ran; nothing was stored, send it again",
                m.id
            )))
        }
    };
    if !own {
        return Ok(Sent::Dropped { id: m.id, until: None });
    }
    tracing::debug!(queue = %q.name, id = %m.id, delay_ms = m.delay.as_millis() as u64, "sent");
    q.meters.sent.increment(1);
    events::emit(&q.events, || Event::Sent { id: m.id.clone() });
    Ok(Sent::Stored(m.id))
}

/// [`Error::NotPending`] for a replace of message `id`.
fn not_pending(queue: &str, id: MessageId, live: bool) -> Error {
    Error::NotPending {
        queue: queue.to_string(),
        id,
        live,
    }
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

/// Whether `found`, read at `now` by Redis's clock, is message `m` as a
/// call that began `elapsed` ago stored it: the same payload, headers,
/// retry count, backoff, priority, delay and expiry, stored since the call
/// began. (Its times come from the primary that stored it: after a
/// failover, a clock skew between the two primaries shifts that bound.)
fn stored_by_this_call(found: &MessageInfo, now: SystemTime, m: &Outgoing, elapsed: Duration) -> bool {
    let (Some(sent), Some(sent_at)) = (decode_stored(&m.value), found.sent_at) else {
        return false;
    };
    // Redis's times are whole milliseconds.
    let began = now.checked_sub(elapsed + Duration::from_millis(1));
    let delay = found.first_due.and_then(|due| due.duration_since(sent_at).ok());
    let backoff = |b: Option<&Backoff>| b.map(|b| b.encode().ok());
    began.is_none_or(|began| sent_at >= began)
        && found.payload == sent.payload
        && found.headers == sent.headers
        && found.retry_count == Some(sent.retry_count)
        && found.priority == sent.priority
        && found.group == sent.group
        && backoff(found.backoff.as_ref()) == backoff(sent.backoff.as_ref())
        && delay == Some(Duration::from_millis(m.delay.as_millis() as u64))
        && found.expires_at.is_some() == m.expire_after.is_some()
}

/// [`Error::Unconfirmed`] for message `id` alone.
fn unconfirmed(queue: &str, id: MessageId, source: fred::error::Error) -> Error {
    Error::Unconfirmed {
        queue: queue.to_string(),
        ids: vec![id],
        source,
    }
}

/// The source of an [`Error::Unconfirmed`] that no command failed with:
/// the client reconnected during the send.
fn reconnect_error() -> fred::error::Error {
    fred::error::Error::new(
        fred::error::ErrorKind::IO,
        "the connection to Redis was re-established during the send",
    )
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

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;
    use crate::validation_cases::{assert_rust_agrees, text};

    /// The message a case of the table describes; `None` when Rust cannot
    /// represent it (a negative or fractional number, a lone surrogate).
    fn message(v: &Value) -> Option<NewMessage> {
        let mut m = NewMessage::new(v.get("payload").map_or(Some(String::new()), text)?);
        if let Some(id) = v.get("id") {
            m = m.id(text(id)?);
        }
        if let Some(ms) = v.get("delay_ms") {
            m = m.delay(Duration::from_millis(ms.as_u64()?));
        }
        if let Some(ms) = v.get("at_ms_from_now") {
            let ms = ms.as_i64()?;
            let span = Duration::from_millis(ms.unsigned_abs());
            let now = SystemTime::now();
            m = m.at(if ms < 0 { now - span } else { now + span });
        }
        if let Some(n) = v.get("retry_count") {
            m = m.retry_count(u32::try_from(n.as_u64()?).ok()?);
        }
        if let Some(p) = v.get("priority") {
            m = m.priority(u8::try_from(p.as_u64()?).ok()?);
        }
        if let Some(g) = v.get("group") {
            m = m.group(text(g)?);
        }
        for pair in v.get("headers").and_then(Value::as_array).into_iter().flatten() {
            m = m.header(text(&pair[0])?, text(&pair[1])?);
        }
        Some(m)
    }

    #[test]
    fn messages_are_judged_as_the_shared_table_says() {
        assert_rust_agrees("messages", |v| {
            Some(message(v)?.prepare(&Config::default(), 1).map(drop))
        });
    }
}
