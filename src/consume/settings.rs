//! [`Settings`]: the consumer's settings, plain values the queue builder
//! fills in (and keeps in the queue's configuration beside the
//! producer-only ones), with their defaults.

use std::time::Duration;

use crate::maxima::MAX_BATCH_SIZE;
use crate::Backoff;

/// Most script calls of one kind in a row (timeout, dead-letter collection,
/// promote) before the loop does other work.
pub(crate) const MAX_ROUNDS: usize = 8;

/// How many `fetch_interval`s an idle shard's loop sleeps at most between
/// probes while wake-ups reach it. Wake-ups and the due times it knows of
/// end its sleep; this poll only bounds what a lost wake-up costs (one
/// lost while the subscriber was disconnected costs nothing: the
/// reconnect makes every loop probe), and at 300 (5 minutes by default)
/// 10,000 idle queues cost Redis about 37 read-only calls a second
/// (docs/performance.md, "Idle queues").
const IDLE_PROBE_INTERVALS: u32 = 300;

/// `fetch_limit` unless set: this many, or 32 per handler when that is
/// larger. Larger claims share a script call's fixed cost among more messages.
const DEFAULT_FETCH_LIMIT: usize = 256;
const DEFAULT_FETCH_PER_HANDLER: usize = 32;

/// `group_share` unless set: beside a backlog of another group, 8 kept
/// the p99 lateness of a group just come due within 2x of its lateness on
/// an empty queue, the backlog draining at the ungrouped rate
/// (docs/performance.md, "Groups").
const DEFAULT_GROUP_SHARE: usize = 8;

/// `fetch_limit` unless set, for `concurrency` handlers.
pub(crate) fn default_fetch_limit(concurrency: usize) -> usize {
    DEFAULT_FETCH_LIMIT.max(concurrency.saturating_mul(DEFAULT_FETCH_PER_HANDLER))
}

/// What a consumer is configured with; see the queue builder's methods of
/// the same names for their meaning.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// How often a shard with work about is probed (and swept when the
    /// probe says so); an idle one, every [`Settings::idle_probe`] at most.
    pub fetch_interval: Duration,
    /// How long a claim leases a message: `max_consume_duration`.
    pub max_consume_duration: Duration,
    /// Longest one handler run may take; the builder makes it
    /// `max_consume_duration` unless set.
    pub handler_timeout: Duration,
    /// Most messages claimed and not finished, over all shards.
    pub fetch_limit: usize,
    /// Handlers running at once.
    pub concurrency: usize,
    /// Retries of a message whose stored value does not say (and of a sent
    /// one whose send does not say).
    pub default_retry_count: u32,
    /// The delays between deliveries of a message without a backoff of its own.
    pub backoff: Backoff,
    /// How long a dead letter is kept.
    pub dead_letter_retention: Duration,
    /// Most dead letters kept.
    pub dead_limit: u64,
    /// Most ids one script call moves (or one send call writes).
    pub batch_size: usize,
    /// How long an acked message's result, progress and log are kept.
    pub result_retention: Duration,
    /// Largest result a handler may return, in bytes.
    pub max_result_size: usize,
    /// Log lines kept per message.
    pub max_log_lines: usize,
    /// Most messages of each group a claim takes while a group with no
    /// more than this due is served beside others (0: no such cap).
    pub group_share: usize,
    /// How often a consumer writes its entry in the registry of live
    /// consumers; the entry lives `heartbeat::TTL_BEATS` times as long.
    pub heartbeat: Duration,
}

impl Settings {
    /// The longest an idle shard's loop goes without a probe, when
    /// wake-ups reach it.
    pub(crate) fn idle_probe(&self) -> Duration {
        self.fetch_interval.saturating_mul(IDLE_PROBE_INTERVALS)
    }

    /// Whether running handlers outlive a lease, so their leases are renewed.
    pub(crate) fn renews_leases(&self) -> bool {
        self.handler_timeout > self.max_consume_duration
    }
}

impl Default for Settings {
    fn default() -> Self {
        let max_consume_duration = Duration::from_secs(5);
        Settings {
            fetch_interval: Duration::from_secs(1),
            max_consume_duration,
            handler_timeout: max_consume_duration,
            fetch_limit: DEFAULT_FETCH_LIMIT,
            concurrency: 1,
            default_retry_count: 3,
            backoff: Backoff::default(),
            dead_letter_retention: Duration::from_secs(7 * 24 * 3600),
            dead_limit: 10_000,
            batch_size: MAX_BATCH_SIZE,
            result_retention: Duration::from_secs(24 * 3600),
            max_result_size: 512 * 1024,
            max_log_lines: 100,
            group_share: DEFAULT_GROUP_SHARE,
            heartbeat: Duration::from_secs(5),
        }
    }
}

/// The defaults with `concurrency` and `fetch_limit`, for unit tests.
#[cfg(test)]
pub(crate) fn for_tests(concurrency: usize, fetch_limit: usize) -> Settings {
    Settings {
        concurrency,
        fetch_limit,
        ..Settings::default()
    }
}
