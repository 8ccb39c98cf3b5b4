//! [`MessageInfo`]: what is known of one message, [`Page`]: one page of a
//! state, and [`Found`]: what a search found, as
//! [`DelayQueue::list`](crate::DelayQueue::list),
//! [`DelayQueue::browse`](crate::DelayQueue::browse),
//! [`DelayQueue::search`](crate::DelayQueue::search) and
//! [`DelayQueue::get`](crate::DelayQueue::get) return them; [`Order`], the
//! direction of a browse or search; [`GroupInfo`] and [`GroupPage`]: what
//! [`DelayQueue::groups`](crate::DelayQueue::groups) lists.

use std::time::{Duration, SystemTime};

use crate::{MessageId, MessageState};

/// Most messages one [`DelayQueue::list`](crate::DelayQueue::list),
/// [`browse`](crate::DelayQueue::browse) or
/// [`search`](crate::DelayQueue::search) call returns.
pub const MAX_PAGE: usize = 1000;
/// Payload bytes a listed message shows.
pub const PREVIEW_BYTES: usize = 256;

/// What is known of one message, from [`DelayQueue::list`](crate::DelayQueue::list) or
/// [`DelayQueue::get`](crate::DelayQueue::get). Times are by Redis's clock.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct MessageInfo {
    /// The message.
    pub id: MessageId,
    /// Where it is.
    pub state: MessageState,
    /// Deliveries so far (a running one included).
    pub attempts: u32,
    /// Retries it was sent with (`None` when its payload is gone).
    pub retry_count: Option<u32>,
    /// The backoff it was sent with
    /// ([`NewMessage::backoff`](crate::NewMessage::backoff)); `None`: the
    /// consumer's default applies (or its payload is gone).
    pub backoff: Option<crate::Backoff>,
    /// The priority it was sent with
    /// ([`NewMessage::priority`](crate::NewMessage::priority)); 0 when its
    /// payload is gone.
    pub priority: u8,
    /// Its group ([`NewMessage::group`](crate::NewMessage::group)); `None`
    /// when it has none or its payload is gone.
    pub group: Option<String>,
    /// Its headers ([`NewMessage::header`](crate::NewMessage::header)), in
    /// the order the send set them; empty when it has none or its payload
    /// is gone.
    pub headers: Vec<(String, String)>,
    /// Why its last delivery failed: the handler's error, the panic, or
    /// `timeout` (its lease ran out).
    pub last_error: Option<String>,
    /// When its next (or running) delivery is, or was, due: a pending
    /// message's due time, a retry's backoff included; for a ready, retry
    /// or processing message the due time of the delivery it waits for or
    /// runs ([`Message::due_at`](crate::Message::due_at)). `None` for a
    /// dead letter or when the payload is gone.
    pub due: Option<SystemTime>,
    /// When its first delivery was due, as its send (or a reschedule) set
    /// ([`Message::first_due_at`](crate::Message::first_due_at)); `None`
    /// when the payload is gone.
    pub first_due: Option<SystemTime>,
    /// Deliveries deferred by an uncounted
    /// [`RetryAfter`](crate::RetryAfter::uncounted), which are not in
    /// `attempts` ([`Message::deferrals`](crate::Message::deferrals)).
    pub deferrals: u32,
    /// When its send stored it, by Redis's clock (`None` when the payload,
    /// which holds it, is gone).
    pub sent_at: Option<SystemTime>,
    /// When its running delivery's lease runs out (processing only).
    pub lease_until: Option<SystemTime>,
    /// When it died (dead letters only).
    pub dead_since: Option<SystemTime>,
    /// Its payload: whole from `get`, the first [`PREVIEW_BYTES`] from `list`.
    pub payload: Vec<u8>,
    /// The payload's full length in bytes.
    pub payload_len: usize,
    /// How long until its payload is deleted: set for dead letters (their
    /// retention), `None` for a live message (kept until handled) or a
    /// payload that is gone.
    pub expires_in: Option<Duration>,
    /// When it expires undelivered: due time + its `expire_after`, by
    /// Redis's clock (`None`: never, or the payload is gone).
    pub expires_at: Option<SystemTime>,
    /// The result kept under its id ([`DelayQueue::result`](crate::DelayQueue::result)),
    /// from `get` only: a stored message has one when an earlier message of
    /// the same id was acked with one within the retention.
    pub result: Option<Vec<u8>>,
    /// The last progress its handler reported
    /// ([`Message::progress`](crate::Message::progress)), as JSON text;
    /// from `get` only.
    pub progress: Option<String>,
    /// Its last log lines ([`Message::log`](crate::Message::log)), oldest
    /// first; from `get` only.
    pub log: Vec<String>,
}

impl MessageInfo {
    /// Deliveries left: `retry_count + 1` before the first, not counting
    /// a running one (so while a delivery runs, the handler's
    /// [`Message::deliveries_left`](crate::Message::deliveries_left)), and
    /// none for a dead letter, whatever ended it early (`SkipRetry`,
    /// expiry): a requeue gives it its deliveries again. `None` when the
    /// payload (which holds the retry count) is gone.
    ///
    /// ```no_run
    /// # async fn run(queue: delayqueue::DelayQueue) -> Result<(), delayqueue::Error> {
    /// let id = queue.send("x").retry_count(2).await?;
    /// let info = queue.get(&id).await?.expect("just sent");
    /// assert_eq!(info.deliveries_left(), Some(3));
    /// # Ok(()) }
    /// ```
    pub fn deliveries_left(&self) -> Option<u32> {
        let n = self.retry_count?;
        Some(match self.state {
            MessageState::Dead => 0,
            _ => (n + 1).saturating_sub(self.attempts),
        })
    }
}

/// One page of [`DelayQueue::list`](crate::DelayQueue::list) or
/// [`DelayQueue::browse`](crate::DelayQueue::browse).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Page {
    /// The messages, in the state's order: by due time, lease deadline or
    /// time of death for pending, processing and dead; by position for the
    /// ready and retry lists.
    pub items: Vec<MessageInfo>,
    /// Entries in the state (list entries of cancelled messages included).
    pub total: u64,
    /// `list`: the offset of the next page; `None` on the last page (and
    /// always from `browse`).
    pub next: Option<usize>,
    /// `browse`: where the next page starts, to pass to
    /// [`Browse::after`](crate::Browse::after); `None` on the last page
    /// (and always from `list`). Opaque.
    pub cursor: Option<String>,
}

/// The direction of a [`browse`](crate::DelayQueue::browse) or
/// [`search`](crate::DelayQueue::search): by score for pending (due time),
/// processing (lease deadline) and dead (time of death), messages of equal
/// score by id; by position for the ready and retry lists, head (next to
/// be claimed) first.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Order {
    /// Earliest score, or the list's head, first.
    #[default]
    Asc,
    /// Latest score, or the list's tail, first.
    Desc,
}

/// What one [`DelayQueue::search`](crate::DelayQueue::search) call found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Found {
    /// The matching messages, in the walk's order (the one whose id is the
    /// text first), each with a payload preview.
    pub items: Vec<MessageInfo>,
    /// Messages read to find them.
    pub scanned: u64,
    /// Where the search stopped, to pass to
    /// [`Search::after`](crate::Search::after) to go on; `None`: it reached
    /// the end of the state. Opaque.
    pub cursor: Option<String>,
}

/// One group, as [`DelayQueue::groups`](crate::DelayQueue::groups) lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct GroupInfo {
    /// The group's name.
    pub name: String,
    /// Its due messages, waiting for their turn.
    pub ready: u64,
    /// Its messages in processing.
    pub processing: u64,
    /// Paused ([`DelayQueue::pause_group`](crate::DelayQueue::pause_group)).
    pub paused: bool,
    /// Its own concurrency; `None`: the default of [`GroupPage`].
    pub concurrency: Option<u64>,
    /// Its own rate; `None`: the default of [`GroupPage`].
    pub rate: Option<crate::RateLimit>,
    /// Until when it waits (an ordered group's failed message its retry,
    /// a group at its rate its window), by Redis's clock.
    pub waiting_until: Option<SystemTime>,
}

/// One page of a queue's groups, from [`DelayQueue::groups`](crate::DelayQueue::groups).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct GroupPage {
    /// Groups known in all: those with due messages, messages in
    /// processing, a wait or a setting of their own.
    pub total: u64,
    /// The concurrency of every group without its own: Redis's, else the
    /// handle's builder's; `None`: no limit.
    pub default_concurrency: Option<u64>,
    /// The rate of every group without its own, as `default_concurrency`.
    pub default_rate: Option<crate::RateLimit>,
    /// The groups of the page, in name order (shard by shard).
    pub items: Vec<GroupInfo>,
}
