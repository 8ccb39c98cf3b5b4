//! [`Settings`]: the consumer's settings, plain values the queue handle
//! fills in from its configuration when it starts a consumer.

use std::time::Duration;

use crate::Backoff;

/// Most script calls of one kind in a row (timeout, dead-letter collection,
/// promote) before the loop does other work.
pub(crate) const MAX_ROUNDS: usize = 8;

/// What a consumer is configured with; see the queue builder's methods of
/// the same names for their meaning.
#[derive(Debug)]
pub(crate) struct Settings {
    /// How often each shard is swept.
    pub fetch_interval: Duration,
    /// How long a claim leases a message: `max_consume_duration`.
    pub max_consume_duration: Duration,
    /// Longest one handler run may take.
    pub handler_timeout: Duration,
    /// Most messages claimed and not finished, over all shards.
    pub fetch_limit: usize,
    /// Handlers running at once.
    pub concurrency: usize,
    /// Retries of a message whose stored value does not say.
    pub default_retry_count: u32,
    /// The delays between deliveries of a message without a backoff of its own.
    pub backoff: Backoff,
    /// How long a dead letter is kept.
    pub dead_letter_retention: Duration,
    /// Most dead letters kept.
    pub dead_limit: u64,
    /// Most ids one script call moves.
    pub batch_size: usize,
}

impl Settings {
    /// Whether running handlers outlive a lease, so their leases are renewed.
    pub(crate) fn renews_leases(&self) -> bool {
        self.handler_timeout > self.max_consume_duration
    }
}

/// Settings as a queue built with the defaults and `concurrency`,
/// `fetch_limit` has them, for unit tests.
#[cfg(test)]
pub(crate) fn for_tests(concurrency: usize, fetch_limit: usize) -> Settings {
    Settings {
        fetch_interval: Duration::from_secs(1),
        max_consume_duration: Duration::from_secs(5),
        handler_timeout: Duration::from_secs(5),
        fetch_limit,
        concurrency,
        default_retry_count: 3,
        backoff: Backoff::default(),
        dead_letter_retention: Duration::from_secs(7 * 24 * 3600),
        dead_limit: 10_000,
        batch_size: crate::MAX_BATCH_SIZE,
    }
}
