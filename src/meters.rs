//! Counters and histograms through the `metrics` facade: whatever recorder
//! the application installs (Prometheus, StatsD, ...) receives them, each
//! labelled `queue`. Without a recorder they cost next to nothing.

use metrics::{counter, histogram, Counter, Histogram};

/// The handles of one queue, registered when the queue is built (so install
/// the recorder before building queues).
#[derive(Debug)]
pub(crate) struct Meters {
    /// Messages stored by sends.
    pub sent: Counter,
    /// Handler runs started.
    pub delivered: Counter,
    /// Deliveries acked.
    pub acked: Counter,
    /// Deliveries that failed in a handler: error, panic or handler time-out.
    pub nacked: Counter,
    /// Failed deliveries (including lease time-outs) that will be retried.
    pub retried: Counter,
    /// Messages moved to the dead letters.
    pub dead: Counter,
    /// Messages discarded undelivered (past their `expire_after`, or their
    /// payload gone) and made dead letters with reason `expired`.
    pub expired: Counter,
    /// Leases that ran out without an ack (consumer died or hung).
    pub timed_out: Counter,
    /// Acks and nacks that came after their lease ran out.
    pub lease_lost: Counter,
    /// Seconds each handler run took.
    pub handler_duration: Histogram,
    /// Seconds between a message's due time and its move to ready.
    pub lateness: Histogram,
}

impl Meters {
    pub(crate) fn new(queue: &str) -> Self {
        let q = queue.to_string();
        Meters {
            sent: counter!("delayqueue_sent_total", "queue" => q.clone()),
            delivered: counter!("delayqueue_delivered_total", "queue" => q.clone()),
            acked: counter!("delayqueue_acked_total", "queue" => q.clone()),
            nacked: counter!("delayqueue_nacked_total", "queue" => q.clone()),
            retried: counter!("delayqueue_retried_total", "queue" => q.clone()),
            dead: counter!("delayqueue_dead_total", "queue" => q.clone()),
            expired: counter!("delayqueue_expired_total", "queue" => q.clone()),
            timed_out: counter!("delayqueue_timed_out_total", "queue" => q.clone()),
            lease_lost: counter!("delayqueue_lease_lost_total", "queue" => q.clone()),
            handler_duration: histogram!("delayqueue_handler_duration_seconds", "queue" => q.clone()),
            lateness: histogram!("delayqueue_lateness_seconds", "queue" => q),
        }
    }
}
