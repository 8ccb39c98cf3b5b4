//! [`Config`]: a queue's settings, as the builder leaves them.

use std::time::Duration;

use crate::consume::Settings;
use crate::queue::Durability;
use crate::RateLimit;

/// Settings of a queue; see the builder's methods for their meaning.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    /// What a consumer of the queue runs with. Sends read
    /// `default_retry_count` and `batch_size` from it too.
    pub consume: Settings,
    /// Unset: messages never expire.
    pub expire_after: Option<Duration>,
    pub max_payload_size: usize,
    pub durability: Durability,
    /// Written to Redis when a consumer starts; unset: left as Redis has it.
    pub rate_limit: Option<RateLimit>,
    /// Like `rate_limit`.
    pub global_concurrency: Option<u64>,
    /// The default concurrency of every group; like `rate_limit`.
    pub group_concurrency: Option<u64>,
    /// The default rate of every group; like `rate_limit`.
    pub group_rate_limit: Option<RateLimit>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            consume: Settings::default(),
            expire_after: None,
            max_payload_size: 1024 * 1024,
            durability: Durability::Memory,
            rate_limit: None,
            global_concurrency: None,
            group_concurrency: None,
            group_rate_limit: None,
        }
    }
}
