//! The states a message can be in ([`MessageState`]), how many messages
//! are in each ([`Counts`]), and [`QueueStatus`]: that plus ages and
//! running totals.

use std::time::Duration;

/// A state a message can be in: each state is one Redis key of the queue
/// that holds the ids in it (docs/wire-format.md names them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum MessageState {
    /// Waiting for its due time (`pending` zset), which has not come yet.
    Pending,
    /// Due, waiting for a consumer (`ready` list, the priority zset or its
    /// group's zset); also a due message that no consumer has moved out of
    /// the `pending` zset yet, as [`Counts::ready`](crate::Counts) counts it.
    Ready,
    /// Delivered to a handler, until its lease runs out.
    Processing,
    /// Waiting to be delivered again (`retry` list).
    Retry,
    /// A dead letter: out of deliveries, expired or given up on.
    Dead,
    /// A flow's parent waiting for its children to finish (`waiting`
    /// zset, docs/workflows.md). Not in [`ALL`](Self::ALL): the states
    /// that browse, list and search page through.
    Waiting,
}

impl MessageState {
    /// Every state, in the order a message usually passes them.
    pub const ALL: [MessageState; 5] = [
        MessageState::Pending,
        MessageState::Ready,
        MessageState::Processing,
        MessageState::Retry,
        MessageState::Dead,
    ];

    /// The state's lowercase name, as the CLI and the dashboard spell it.
    ///
    /// ```
    /// use delayqueue::MessageState;
    /// assert_eq!(MessageState::Dead.as_str(), "dead");
    /// assert_eq!("dead".parse::<MessageState>().ok(), Some(MessageState::Dead));
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            MessageState::Pending => "pending",
            MessageState::Ready => "ready",
            MessageState::Processing => "processing",
            MessageState::Retry => "retry",
            MessageState::Dead => "dead",
            MessageState::Waiting => "waiting",
        }
    }
}

impl std::fmt::Display for MessageState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for MessageState {
    type Err = crate::Error;

    /// A state by its [`as_str`](MessageState::as_str) name; the name of
    /// the dead letters' Redis key (see docs/wire-format.md) is accepted
    /// for [`Dead`](MessageState::Dead) too.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "garbage" => Ok(MessageState::Dead),
            "waiting" => Ok(MessageState::Waiting),
            _ => MessageState::ALL.into_iter().find(|m| m.as_str() == s).ok_or_else(|| {
                crate::Error::InvalidArgument(format!(
                    "unknown state {s:?}: pending, ready, processing, retry or dead"
                ))
            }),
        }
    }
}

/// Number of messages in each state of a queue.
///
/// `ready` and `retry` count list entries, which may include entries of
/// cancelled messages until a consumer pops and skips them. From
/// [`DelayQueue::counts`](crate::DelayQueue::counts), or as part of
/// [`QueueStatus`].
///
/// Non-exhaustive: build an expected value from `Counts::default()` and
/// set fields.
///
/// ```
/// let mut want = delayqueue::Counts::default();
/// want.dead = 2;
/// assert_eq!(want.live(), 0);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Counts {
    /// Waiting for their due time: not due yet.
    pub pending: u64,
    /// Due, waiting for a consumer: from its due time on, also a message
    /// that no consumer has moved to the ready list yet.
    pub ready: u64,
    /// Delivered to a handler, not yet acked or nacked.
    pub processing: u64,
    /// Failed or timed out, waiting to be delivered again.
    pub retry: u64,
    /// Dead letters: out of deliveries, expired or given up on, kept for
    /// their retention.
    pub dead: u64,
    /// Parents of flows waiting for their children (docs/workflows.md);
    /// not counted in [`live`](Self::live).
    pub waiting: u64,
}

impl Counts {
    /// Messages not yet finished: everything but the dead letters.
    pub fn live(&self) -> u64 {
        self.pending + self.ready + self.processing + self.retry
    }

    /// The count of one state.
    pub(crate) fn of(&self, state: crate::MessageState) -> u64 {
        use crate::MessageState::*;
        match state {
            Pending => self.pending,
            Ready => self.ready,
            Processing => self.processing,
            Retry => self.retry,
            Dead => self.dead,
            Waiting => self.waiting,
        }
    }
}

/// Counts kept by the queue's scripts since the queue was first used (or
/// last purged), across every producer and consumer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Totals {
    /// Messages stored.
    pub sent: u64,
    /// Deliveries acked.
    pub acked: u64,
    /// Deliveries that failed: handler errors, panics, time-outs.
    pub failed: u64,
    /// Messages that became dead letters.
    pub dead: u64,
    /// Messages discarded undelivered (past their `expire_after`, or their
    /// payload gone): dead letters with reason `"expired"`.
    pub expired: u64,
    /// Messages aborted while processing that ended as aborted
    /// ([`DelayQueue::abort`](crate::DelayQueue::abort)); a waiting
    /// message aborted is cancelled, not counted here.
    pub aborted: u64,
}

/// [`Counts`] plus what an operator watches, from
/// [`DelayQueue::status`](crate::DelayQueue::status), taken atomically.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueStatus {
    /// Messages per state.
    pub counts: Counts,
    /// The queue's latency: how long the oldest due message has waited to
    /// start, since its due time, wherever it waits (pending but due, the
    /// retry or ready list, the priorities, a group); `None` when no due
    /// message waits. It grows while no consumer runs, or while they fall
    /// behind. A bounded read: what it leaves out (a group held back by
    /// its own limits or pause, a group past the ring's first 16) is in
    /// docs/operations.md §5.
    pub latency: Option<Duration>,
    /// How long until the next message that is not due yet is due; `None`
    /// when none waits for its due time.
    pub next_due: Option<Duration>,
    /// How long ago the oldest dead letter died.
    pub oldest_dead: Option<Duration>,
    /// Running totals.
    pub totals: Totals,
    /// Whether the queue is paused ([`DelayQueue::pause`](crate::DelayQueue::pause)):
    /// consumers lease nothing new until it is resumed.
    pub paused: bool,
    /// The queue's rate limit, over all its shards
    /// ([`DelayQueue::set_rate_limit`](crate::DelayQueue::set_rate_limit)).
    pub rate_limit: Option<RateLimit>,
    /// Most messages of the queue processing at once, over all its shards
    /// ([`DelayQueue::set_global_concurrency`](crate::DelayQueue::set_global_concurrency)).
    pub global_concurrency: Option<u64>,
}

/// At most `limit` messages of a queue start (are leased to a consumer)
/// in any window of `per`, across all its consumers; see
/// [`DelayQueueBuilder::rate_limit`](crate::DelayQueueBuilder::rate_limit).
///
/// ```
/// use std::time::Duration;
/// let limit = delayqueue::RateLimit::new(1000, Duration::from_secs(1));
/// assert_eq!((limit.limit, limit.per), (1000, Duration::from_secs(1)));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RateLimit {
    /// Most starts per window.
    pub limit: u64,
    /// The window, in whole milliseconds.
    pub per: Duration,
}

impl RateLimit {
    /// At most `limit` starts in any window of `per`.
    pub fn new(limit: u64, per: Duration) -> Self {
        RateLimit { limit, per }
    }
}

impl QueueStatus {
    /// The status of two shards of one queue as one: counts and totals
    /// add up, the oldest age and the nearest due time win.
    pub(crate) fn merge(self, other: Self) -> Self {
        let (a, b) = (self.counts, other.counts);
        let (s, t) = (self.totals, other.totals);
        QueueStatus {
            counts: Counts {
                pending: a.pending + b.pending,
                ready: a.ready + b.ready,
                processing: a.processing + b.processing,
                retry: a.retry + b.retry,
                dead: a.dead + b.dead,
                waiting: a.waiting + b.waiting,
            },
            latency: self.latency.max(other.latency),
            next_due: match (self.next_due, other.next_due) {
                (Some(x), Some(y)) => Some(x.min(y)),
                (x, y) => x.or(y),
            },
            oldest_dead: self.oldest_dead.max(other.oldest_dead),
            totals: Totals {
                sent: s.sent + t.sent,
                acked: s.acked + t.acked,
                failed: s.failed + t.failed,
                dead: s.dead + t.dead,
                expired: s.expired + t.expired,
                aborted: s.aborted + t.aborted,
            },
            // A pause that reached only some shards still holds those back.
            paused: self.paused || other.paused,
            // Each shard holds its share of a limit: the shares add up.
            rate_limit: match (self.rate_limit, other.rate_limit) {
                (Some(x), Some(y)) => Some(RateLimit::new(x.limit + y.limit, x.per.max(y.per))),
                (x, y) => x.or(y),
            },
            global_concurrency: match (self.global_concurrency, other.global_concurrency) {
                (Some(x), Some(y)) => Some(x + y),
                (x, y) => x.or(y),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::ops::{stats::Stats, Op};
    use fred::prelude::Value;

    /// The status lua/stats.lua replies `v` means.
    fn from_script(v: Vec<i64>) -> QueueStatus {
        Stats
            .reply(Value::Array(v.into_iter().map(Value::Integer).collect()))
            .unwrap()
    }

    #[test]
    fn shards_merge_into_one_status() {
        let ms = Duration::from_millis;
        // pending 2 (head due in 50 ms), nothing due, one dead 400 ms ago,
        // sent 5.
        let a = from_script(vec![
            2, 0, 1, 0, 1, 1000, -1, 600, 5, 1, 1, 1, 0, 0, 3, 500, 1000, 1050, 1, 2,
        ]);
        // A due message waiting 30 ms to start, sent 2.
        let b = from_script(vec![
            0, 4, 0, 2, 0, 1000, 970, -1, 2, 0, 0, 0, 4, 1, 2, 500, 1000, -1, 2, 1,
        ]);
        let m = a.merge(b);
        assert_eq!(m.counts.pending, 2);
        assert_eq!(m.counts.waiting, 3);
        assert_eq!(m.counts.live(), 2 + 4 + 1 + 2);
        assert_eq!(
            (m.latency, m.next_due, m.oldest_dead),
            (Some(ms(30)), Some(ms(50)), Some(ms(400)))
        );
        assert_eq!((m.totals.sent, m.totals.expired, m.totals.aborted), (7, 4, 3));
        assert!(m.paused && !a.paused);
        // Each shard holds its share of a limit.
        let per = Duration::from_secs(1);
        assert_eq!(
            (m.rate_limit, m.global_concurrency),
            (Some(RateLimit::new(1000, per)), Some(5))
        );
        assert_eq!(a.merge(QueueStatus::default()), a);
    }
}

/// What [`DelayQueue::abort`](crate::DelayQueue::abort) did, decided in
/// one script (docs/handlers.md, "Aborting a running handler").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AbortOutcome {
    /// The message was waiting (pending, ready, retry) or a dead letter:
    /// it is deleted, as [`DelayQueue::cancel`](crate::DelayQueue::cancel) does.
    Cancelled,
    /// The message was being processed: it is marked aborted and the
    /// consumer holding it tells its handler
    /// ([`Message::aborted`](crate::Message::aborted)). Whatever the handler
    /// returns, the message ends as aborted, not retried and not a dead
    /// letter; if the consumer dies, its lease's end ends it so.
    Aborting,
    /// The message was aborted already and has not ended yet; nothing written.
    AlreadyAborted,
    /// No such message: unknown, or finished (acked, ended, expired out of
    /// the dead letters); nothing written.
    NotFound,
}

impl AbortOutcome {
    /// Its name in the HTTP API, the CLI's JSON and the Python and Node
    /// producers: `cancelled`, `aborting`, `already_aborted`, `not_found`.
    pub fn as_str(self) -> &'static str {
        match self {
            AbortOutcome::Cancelled => "cancelled",
            AbortOutcome::Aborting => "aborting",
            AbortOutcome::AlreadyAborted => "already_aborted",
            AbortOutcome::NotFound => "not_found",
        }
    }

    /// Whether the abort did something: cancelled or marked the message.
    pub fn done(self) -> bool {
        matches!(self, AbortOutcome::Cancelled | AbortOutcome::Aborting)
    }
}
