//! [`NewMessage`], the builder of one message to send, and [`Sent`], what
//! a send did with it.

use std::time::{Duration, SystemTime};

use crate::flow::{ChildPolicy, MessageRef};
use crate::payload::{IntoPayload, Payload};
use crate::queue::flows::links::Deps;
use crate::{Backoff, Error, MessageId};

/// A message to send, with its options: one builder for single and batch
/// sends.
///
/// [`DelayQueue::send`](crate::DelayQueue::send) returns one bound to its queue
/// (`NewMessage<&DelayQueue>`): set options, then `.await` it to send.
/// [`NewMessage::new`] makes a free-standing one (`NewMessage`, with
/// `Q = ()`) for [`DelayQueue::send_batch`](crate::DelayQueue::send_batch). A message is due now unless
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
    pub(super) queue: Q,
    pub(super) payload: Result<Payload, Error>,
    pub(super) due: Due,
    pub(super) id: Option<MessageId>,
    /// `id` was generated for a flow (which needs it before the send),
    /// not chosen by the caller: it is sent as a generated id.
    pub(super) id_generated: bool,
    pub(super) retry_count: Option<u32>,
    pub(super) expire_after: Option<Duration>,
    pub(super) backoff: Option<Backoff>,
    pub(super) priority: u8,
    pub(super) group: Option<String>,
    pub(super) headers: Vec<(String, String)>,
    /// How it meets an earlier message of its id (docs/dedup.md).
    pub(super) dedup: Option<Dedup>,
    /// [`delay`](Self::delay) or [`at`](Self::at) was called: a replace
    /// moves the due time.
    pub(super) due_given: bool,
    /// The messages it waits for ([`after`](Self::after)).
    pub(super) after: Vec<MessageRef>,
    pub(super) policy: ChildPolicy,
    /// The children a [`Flow`](crate::Flow) or a batch resolved for it:
    /// stored waiting for them.
    pub(super) deps: Option<Deps>,
}

/// What [`NewMessage::unique_for`], [`NewMessage::throttle`],
/// [`NewMessage::debounce`] and [`DelayQueue::replace`](crate::DelayQueue::replace) asked for.
#[derive(Debug, Clone, Copy)]
pub(super) enum Dedup {
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
    /// ([`debounce`](NewMessage::debounce), [`DelayQueue::replace`](crate::DelayQueue::replace)).
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
pub(super) enum Due {
    In(Duration),
    At(SystemTime),
}

impl NewMessage {
    /// A message with `payload`, due now unless [`delay`](Self::delay) or
    /// [`at`](Self::at) says otherwise; for
    /// [`DelayQueue::send_batch`](crate::DelayQueue::send_batch).
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
            id_generated: false,
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
            deps: None,
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

    /// Whether the caller chose its id (a flow's generated one is not).
    pub(crate) fn own_id(&self) -> bool {
        self.id.is_some() && !self.id_generated
    }

    /// Its id and itself: the caller's id, else one generated now (in its
    /// group's shard of the `shards` of its queue), for a flow that must
    /// name the message before the send. A generated id is stored as such
    /// (a live or dead message of it can only be this message's earlier
    /// send).
    pub(crate) fn identified(mut self, shards: usize) -> (MessageId, Self) {
        let id = match &self.id {
            Some(id) => id.clone(),
            None => {
                let id = super::ids::generate_for(self.group.as_deref(), shards);
                self.id = Some(id.clone());
                self.id_generated = true;
                id
            }
        };
        (id, self)
    }

    /// An unbound copy to send as part of a flow, waiting for `deps` when
    /// given.
    pub(crate) fn clone_for_flow(&self, deps: Option<Deps>) -> NewMessage {
        NewMessage {
            queue: (),
            payload: match &self.payload {
                Ok(p) => Ok(p.clone()),
                Err(e) => Err(Error::InvalidArgument(e.to_string())),
            },
            due: self.due,
            id: self.id.clone(),
            id_generated: self.id_generated,
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
            deps,
        }
    }

    /// Due after `d`, measured by Redis's clock from when Redis stores it.
    /// At most [`MAX_DELAY`](crate::MAX_DELAY). Replaces an earlier [`at`](Self::at).
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
    /// 1 ms to [`MAX_WINDOW`](crate::MAX_WINDOW); the send needs an id. Replaces an earlier
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
    /// [`Sent::Dropped`]. `window` is 1 ms to [`MAX_WINDOW`](crate::MAX_WINDOW); the send needs
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
    /// message. `window` is 1 ms to [`MAX_WINDOW`](crate::MAX_WINDOW); the send needs an id.
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
    /// [`id`](Self::id), as [`DelayQueue::replace`](crate::DelayQueue::replace) does, for
    /// [`DelayQueue::send_batch`](crate::DelayQueue::send_batch): that message's result is then
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
        self.id_generated = false;
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

    /// Its priority, 0 (the default, lowest) to [`MAX_PRIORITY`](crate::MAX_PRIORITY): among
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
    /// [`DelayQueue::set_group_concurrency`](crate::DelayQueue::set_group_concurrency)) and pause
    /// ([`DelayQueue::pause_group`](crate::DelayQueue::pause_group)) hold. A message without a group is
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
    /// to [`MAX_HEADER_NAME_LEN`](crate::MAX_HEADER_NAME_LEN) ASCII letters, digits, `-`, `_` and `.`; a
    /// message has at most [`MAX_HEADERS`](crate::MAX_HEADERS) headers and
    /// [`MAX_HEADERS_BYTES`](crate::MAX_HEADERS_BYTES) of names and values together. A header that
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
}
