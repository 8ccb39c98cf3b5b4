//! [`QueueStats`]: how many messages are in each state; [`QueueStatus`]:
//! that plus ages and running totals.

use std::time::Duration;

/// Number of messages in each state of a queue.
///
/// `ready` and `retry` count list entries, which may include entries of
/// cancelled messages until a consumer pops and skips them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueStats {
    /// Waiting for their due time.
    pub pending: u64,
    /// Due, waiting for a consumer.
    pub ready: u64,
    /// Delivered to a handler, not yet acked or nacked.
    pub processing: u64,
    /// Failed or timed out, waiting to be delivered again.
    pub retry: u64,
    /// Dead letters: out of deliveries, kept for their retention.
    pub garbage: u64,
}

impl QueueStats {
    /// Messages not yet finished: everything but garbage.
    pub fn live(&self) -> u64 {
        self.pending + self.ready + self.processing + self.retry
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
    /// Messages dropped because their payload expired before delivery.
    pub expired: u64,
}

/// [`QueueStats`] plus what an operator watches, from
/// [`DelayQueue::status`](crate::DelayQueue::status), taken atomically.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueStatus {
    /// Messages per state.
    pub counts: QueueStats,
    /// How long the earliest pending message is overdue: due but not yet
    /// moved to ready, as when no consumer runs. `None` when none is.
    pub oldest_overdue: Option<Duration>,
    /// How long until the earliest pending message is due; `None` when
    /// pending is empty or it is overdue.
    pub next_due: Option<Duration>,
    /// How long ago the oldest dead letter died.
    pub oldest_dead: Option<Duration>,
    /// Running totals.
    pub totals: Totals,
}
