//! [`Config`]: a queue's settings, as the builder leaves them.

use std::time::Duration;

use crate::consume::Settings;
use crate::maxima::MAX_BATCH_SIZE;
use crate::queue::Durability;
use crate::{Backoff, RateLimit};

/// `fetch_limit` unless set: this many, or 32 per handler when that is
/// larger. Larger claims share a script call's fixed cost among more messages.
const DEFAULT_FETCH_LIMIT: usize = 256;
const DEFAULT_FETCH_PER_HANDLER: usize = 32;

/// `fetch_limit` unless set, for `concurrency` handlers.
pub(crate) fn default_fetch_limit(concurrency: usize) -> usize {
    DEFAULT_FETCH_LIMIT.max(concurrency.saturating_mul(DEFAULT_FETCH_PER_HANDLER))
}

/// How long dead letters are kept unless set: 7 days.
const DEFAULT_DEAD_LETTER_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);
/// Most dead letters kept unless set.
const DEFAULT_DEAD_LIMIT: u64 = 10_000;

/// Settings of a queue; see the builder's methods for their meaning.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub fetch_interval: Duration,
    pub max_consume_duration: Duration,
    /// Unset: `max_consume_duration`.
    pub handler_timeout: Option<Duration>,
    pub fetch_limit: usize,
    pub concurrency: usize,
    pub default_retry_count: u32,
    pub backoff: Backoff,
    pub dead_letter_retention: Duration,
    pub dead_limit: u64,
    /// Unset: messages never expire.
    pub expire_after: Option<Duration>,
    pub max_payload_size: usize,
    pub batch_size: usize,
    pub durability: Durability,
    /// Written to Redis when a consumer starts; unset: left as Redis has it.
    pub rate_limit: Option<RateLimit>,
    /// Like `rate_limit`.
    pub global_concurrency: Option<u64>,
}

impl Config {
    /// Longest one handler run may take.
    pub(crate) fn handler_timeout(&self) -> Duration {
        self.handler_timeout.unwrap_or(self.max_consume_duration)
    }

    /// What a consumer of the queue runs with.
    pub(crate) fn consume_settings(&self) -> Settings {
        Settings {
            fetch_interval: self.fetch_interval,
            max_consume_duration: self.max_consume_duration,
            handler_timeout: self.handler_timeout(),
            fetch_limit: self.fetch_limit,
            concurrency: self.concurrency,
            default_retry_count: self.default_retry_count,
            backoff: self.backoff.clone(),
            dead_letter_retention: self.dead_letter_retention,
            dead_limit: self.dead_limit,
            batch_size: self.batch_size,
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            fetch_interval: Duration::from_secs(1),
            max_consume_duration: Duration::from_secs(5),
            handler_timeout: None,
            fetch_limit: DEFAULT_FETCH_LIMIT,
            concurrency: 1,
            default_retry_count: 3,
            backoff: Backoff::default(),
            dead_letter_retention: DEFAULT_DEAD_LETTER_RETENTION,
            dead_limit: DEFAULT_DEAD_LIMIT,
            expire_after: None,
            max_payload_size: 1024 * 1024,
            batch_size: MAX_BATCH_SIZE,
            durability: Durability::Memory,
            rate_limit: None,
            global_concurrency: None,
        }
    }
}
