//! Pausing a queue: a flag in Redis per shard, so it holds for every
//! consumer and across restarts. While it is set, claims lease nothing;
//! sends, promotions, acks and sweeps go on.

use crate::events::Action;
use crate::store::ops::pause::Pause;
use crate::{DelayQueue, Error};

/// Sets or clears the flag on every shard; true when any shard changed.
async fn set(queue: &DelayQueue, paused: bool) -> Result<bool, Error> {
    let changed = queue
        .each_shard(|k| async move { queue.store(k).run(&Pause { paused }).await })
        .await?;
    let changed = changed.contains(&true);
    if changed {
        let action = if paused { Action::Paused } else { Action::Resumed };
        tracing::info!(queue = %queue.inner.name, ?action, "queue pause flag changed");
        queue.changed(action, None, 0);
    }
    Ok(changed)
}

impl DelayQueue {
    /// Pauses the queue for every consumer, until [`resume`](Self::resume):
    /// consumers lease nothing new from their next claim on (within one
    /// `fetch_interval`) and finish what they hold. Sends still succeed and
    /// due messages move to ready, where they wait, neither early nor lost.
    /// Stored in Redis, so it holds across restarts. Returns `false` when
    /// the queue was paused already. One O(1) script call per shard.
    ///
    /// ```no_run
    /// # async fn run(queue: delayqueue::DelayQueue) -> Result<(), delayqueue::Error> {
    /// queue.pause().await?;
    /// assert!(queue.is_paused().await?);
    /// // ... deploy, repair the downstream service ...
    /// queue.resume().await?;
    /// # Ok(()) }
    /// ```
    pub async fn pause(&self) -> Result<bool, Error> {
        set(self, true).await
    }

    /// Resumes a paused queue: sleeping consumers are woken and claim at
    /// once. Returns `false` when it was not paused.
    pub async fn resume(&self) -> Result<bool, Error> {
        set(self, false).await
    }

    /// Whether the queue is paused (any of its shards, should a pause have
    /// reached only some). Also in [`status`](Self::status).
    pub async fn is_paused(&self) -> Result<bool, Error> {
        Ok(self.status().await?.paused)
    }
}
