//! Groups (docs/groups.md): per-group concurrency and pause, kept in Redis
//! in the shard each group lives in, so every consumer obeys the same ones.
//! Claims enforce them (`lua/claim.lua`).

use crate::events::Action;
use crate::maxima::check_group;
use crate::store::ops::groups::{ChangeGroups, GroupChange};
use crate::{DelayQueue, Error};

impl DelayQueue {
    /// Sets (or with `None` clears) the most messages of group `group`
    /// processing at once, across all consumers, over the default of
    /// [`group_concurrency`](crate::DelayQueueBuilder::group_concurrency).
    /// 1 makes the group ordered. Returns `false` when it was so already.
    /// One O(log groups) script call.
    ///
    /// ```no_run
    /// # async fn run(queue: delayqueue::DelayQueue) -> Result<(), delayqueue::Error> {
    /// queue.set_group_concurrency("tenant-42", Some(2)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn set_group_concurrency(&self, group: &str, m: Option<u32>) -> Result<bool, Error> {
        check_group(group)?;
        check_concurrency(m)?;
        self.change_group(
            GroupChange::Limit(Some(group), m),
            Action::GroupLimitsChanged,
            Some(group),
        )
        .await
    }

    /// Sets (or with `None` clears) the concurrency of every group without
    /// one of its own, as the builder's
    /// [`group_concurrency`](crate::DelayQueueBuilder::group_concurrency)
    /// does when a consumer starts. Returns `false` when it was so already.
    ///
    /// ```no_run
    /// # async fn run(queue: delayqueue::DelayQueue) -> Result<(), delayqueue::Error> {
    /// queue.set_default_group_concurrency(Some(4)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn set_default_group_concurrency(&self, m: Option<u32>) -> Result<bool, Error> {
        check_concurrency(m)?;
        let changed = self
            .each_shard(|k| async move {
                let op = ChangeGroups {
                    change: GroupChange::Limit(None, m),
                };
                self.store(k).run(&op).await
            })
            .await?
            .contains(&true);
        if changed {
            tracing::info!(queue = %self.inner.name, "default group concurrency changed");
            self.changed_group(Action::GroupLimitsChanged, None);
        }
        Ok(changed)
    }

    /// Pauses group `group` for every consumer, until
    /// [`resume_group`](Self::resume_group): its messages wait (due ones
    /// in their group), the other groups' are delivered as usual; what is
    /// processing finishes. Returns `false` when it was paused already.
    ///
    /// ```no_run
    /// # async fn run(queue: delayqueue::DelayQueue) -> Result<(), delayqueue::Error> {
    /// queue.pause_group("tenant-42").await?;
    /// queue.resume_group("tenant-42").await?;
    /// # Ok(()) }
    /// ```
    pub async fn pause_group(&self, group: &str) -> Result<bool, Error> {
        check_group(group)?;
        self.change_group(GroupChange::Pause(group), Action::GroupPaused, Some(group))
            .await
    }

    /// Resumes a paused group: its due messages are claimed again at once.
    /// Returns `false` when it was not paused.
    pub async fn resume_group(&self, group: &str) -> Result<bool, Error> {
        check_group(group)?;
        self.change_group(GroupChange::Resume(group), Action::GroupResumed, Some(group))
            .await
    }

    /// Makes `change` in the shard of `group`.
    async fn change_group(&self, change: GroupChange<'_>, action: Action, group: Option<&str>) -> Result<bool, Error> {
        let k = &self.inner.shards[self.shard_index(group.unwrap_or_default())];
        let changed = self.store(k).run(&ChangeGroups { change }).await?;
        if changed {
            tracing::info!(queue = %self.inner.name, group, ?action, "group changed");
            self.changed_group(action, group);
        }
        Ok(changed)
    }
}

/// A group concurrency is at least 1.
fn check_concurrency(m: Option<u32>) -> Result<(), Error> {
    if m == Some(0) {
        return Err(Error::InvalidArgument("group concurrency must be at least 1".into()));
    }
    Ok(())
}
