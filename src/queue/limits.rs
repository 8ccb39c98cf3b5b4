//! Queue-wide limits: a rate limit and a global concurrency limit, kept in
//! Redis per shard (fields of the totals hash), so every consumer obeys
//! the same ones and `status` shows them. Claims enforce them
//! (`lua/claim.lua`); each shard holds its share of a limit, and the
//! shares add up to it exactly.

use std::time::Duration;

use crate::events::Action;
use crate::maxima::MAX_DELAY;
use crate::store::ops::limits::{Limit, SetLimit};
use crate::{DelayQueue, Error, RateLimit};

/// Shard `i`'s share of `n` over `shards`: `n / shards`, one more for the
/// first `n % shards`, so the shares add up to `n`.
pub(crate) fn share(n: u64, shards: usize, i: usize) -> u64 {
    let shards = shards as u64;
    n / shards + u64::from((i as u64) < n % shards)
}

/// Checks a limit of `n` over `shards`: every shard needs a share of at least 1.
fn check_count(what: &str, n: u64, shards: usize) -> Result<(), Error> {
    if n < shards as u64 {
        return Err(Error::InvalidArgument(format!(
            "{what} must be at least 1 per shard ({shards}), not {n}"
        )));
    }
    Ok(())
}

/// Checks a rate limit for a queue of `shards` shards.
pub(crate) fn check_rate(rate: &RateLimit, shards: usize) -> Result<(), Error> {
    check_count("rate_limit", rate.limit, shards)?;
    if rate.per < Duration::from_millis(1) || rate.per > MAX_DELAY || !rate.per.subsec_nanos().is_multiple_of(1_000_000)
    {
        return Err(Error::InvalidArgument(
            "rate_limit's period must be whole milliseconds from 1 ms to MAX_DELAY".into(),
        ));
    }
    Ok(())
}

/// Checks a global concurrency limit for a queue of `shards` shards.
pub(crate) fn check_concurrency(n: u64, shards: usize) -> Result<(), Error> {
    check_count("global_concurrency", n, shards)
}

impl DelayQueue {
    /// Sets (or with `None` clears) the queue's rate limit for every
    /// consumer: at most `limit` messages start in any window of `per`
    /// (see [`DelayQueueBuilder::rate_limit`](crate::DelayQueueBuilder::rate_limit)).
    /// Stored in Redis, so it holds across restarts and shows in
    /// [`status`](Self::status); consumers follow it from their next claim.
    /// Returns `false` when it was so already. One O(1) script call per shard.
    ///
    /// ```no_run
    /// # async fn run(queue: delayqueue::DelayQueue) -> Result<(), delayqueue::Error> {
    /// use std::time::Duration;
    /// use delayqueue::RateLimit;
    /// queue.set_rate_limit(Some(RateLimit::new(100, Duration::from_secs(1)))).await?;
    /// assert_eq!(queue.status().await?.rate_limit.map(|r| r.limit), Some(100));
    /// queue.set_rate_limit(None).await?;
    /// # Ok(()) }
    /// ```
    pub async fn set_rate_limit(&self, rate: Option<RateLimit>) -> Result<bool, Error> {
        let n = self.shards();
        if let Some(rate) = &rate {
            check_rate(rate, n)?;
        }
        self.set_limit(|i| Limit::Rate(rate.map(|r| (share(r.limit, n, i), r.per.as_millis() as u64))))
            .await
    }

    /// Sets (or with `None` clears) the most messages of the queue
    /// processing at once, over all consumers (see
    /// [`DelayQueueBuilder::global_concurrency`](crate::DelayQueueBuilder::global_concurrency)).
    /// Stored in Redis like [`set_rate_limit`](Self::set_rate_limit).
    ///
    /// ```no_run
    /// # async fn run(queue: delayqueue::DelayQueue) -> Result<(), delayqueue::Error> {
    /// queue.set_global_concurrency(Some(10)).await?;
    /// assert_eq!(queue.status().await?.global_concurrency, Some(10));
    /// # Ok(()) }
    /// ```
    pub async fn set_global_concurrency(&self, n: Option<u64>) -> Result<bool, Error> {
        let shards = self.shards();
        if let Some(n) = n {
            check_concurrency(n, shards)?;
        }
        self.set_limit(|i| Limit::Concurrency(n.map(|n| share(n, shards, i))))
            .await
    }

    /// Sets shard `i`'s limit to `limit(i)` on every shard.
    async fn set_limit(&self, limit: impl Fn(usize) -> Limit) -> Result<bool, Error> {
        let shards = self.inner.shards.iter().enumerate();
        let changed = futures::future::try_join_all(shards.map(|(i, k)| {
            let op = SetLimit { limit: limit(i) };
            async move { self.store(k).run(&op).await }
        }))
        .await?;
        let changed = changed.contains(&true);
        if changed {
            tracing::info!(queue = %self.inner.name, "queue limits changed");
            self.changed(Action::LimitsChanged, None, 0);
        }
        Ok(changed)
    }

    /// Writes the limits the builder set (those it did not set stay as
    /// Redis has them), before a consumer starts.
    pub(crate) async fn apply_configured_limits(&self) -> Result<(), Error> {
        let c = &self.inner.config;
        if let Some(rate) = c.rate_limit {
            self.set_rate_limit(Some(rate)).await?;
        }
        if let Some(n) = c.global_concurrency {
            self.set_global_concurrency(Some(n)).await?;
        }
        if let Some(m) = c.group_concurrency {
            self.set_default_group_concurrency(Some(m)).await?;
        }
        if let Some(rate) = c.group_rate_limit {
            self.set_default_group_rate(Some(rate)).await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_add_up_to_the_limit() {
        for (n, shards) in [(10, 3), (1000, 4), (7, 7), (1001, 1024)] {
            let shares: Vec<u64> = (0..shards).map(|i| share(n, shards, i)).collect();
            assert_eq!(shares.iter().sum::<u64>(), n, "{n} over {shards}");
            assert!(shares
                .iter()
                .all(|&s| s >= n / shards as u64 && s <= n.div_ceil(shards as u64)));
        }
        assert!(check_concurrency(3, 4).is_err(), "a shard without a share");
        let rate = |n, ms| RateLimit::new(n, Duration::from_millis(ms));
        assert!(check_rate(&rate(10, 0), 1).is_err());
        assert!(check_rate(&rate(10, 1), 1).is_ok());
        assert!(check_rate(&RateLimit::new(10, Duration::from_micros(1500)), 1).is_err());
    }
}
