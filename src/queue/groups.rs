//! Groups (docs/groups.md): per-group concurrency, rate and pause, kept in Redis
//! in the shard each group lives in, so every consumer obeys the same ones.
//! Claims enforce them (`lua/claim.lua`).

use crate::events::Action;
use crate::info::MAX_PAGE;
use crate::maxima::check_group;
use crate::queue::limits::check_rate;
use crate::store::ops::groups::{ChangeGroups, GroupChange};
use crate::store::ops::list_groups::ListGroups;
use crate::{DelayQueue, Error, GroupInfo, GroupPage, RateLimit};

impl DelayQueue {
    /// One page of the queue's groups, in name order: at most `limit`
    /// (1 to [`MAX_PAGE`]) from `offset` on, with their counts, own limits
    /// and pause; and the defaults: those stored in Redis, else (until a
    /// consumer stores its builder's when it starts) this handle's
    /// builder's. O(log groups + limit) per shard.
    ///
    /// ```no_run
    /// # async fn run(queue: delayqueue::DelayQueue) -> Result<(), delayqueue::Error> {
    /// let page = queue.groups(0, 100).await?;
    /// for g in &page.items {
    ///     println!("{}: {} ready, {} processing, paused {}", g.name, g.ready, g.processing, g.paused);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn groups(&self, offset: u64, limit: usize) -> Result<GroupPage, Error> {
        if !(1..=MAX_PAGE).contains(&limit) {
            return Err(Error::InvalidArgument(format!("limit must be 1 to {MAX_PAGE}")));
        }
        let (mut page, mut skip) = (GroupPage::default(), offset);
        for (i, k) in self.inner.shards.iter().enumerate() {
            let want = limit - page.items.len();
            let shard = self
                .store(k)
                .run(&ListGroups {
                    offset: skip,
                    limit: want,
                    only: None,
                })
                .await?;
            if i == 0 {
                // Redis's, else this handle's builder's: what its consumers
                // store when they start.
                let c = &self.inner.config;
                page.default_concurrency = shard.default_concurrency.or(c.group_concurrency);
                page.default_rate = shard.default_rate.or(c.group_rate_limit);
            }
            page.total += shard.total;
            skip = skip.saturating_sub(shard.total);
            page.items.extend(shard.groups);
        }
        Ok(page)
    }

    /// Group `group` alone, read in its shard: `None` when the queue does
    /// not know it (no due message, none in processing, no wait and no
    /// setting of its own). Its limits are its own; `None` in them means
    /// the defaults of [`groups`](Self::groups). O(log groups).
    ///
    /// ```no_run
    /// # async fn run(queue: delayqueue::DelayQueue) -> Result<(), delayqueue::Error> {
    /// if let Some(g) = queue.group("tenant-42").await? {
    ///     println!("{} ready, {} processing", g.ready, g.processing);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn group(&self, group: &str) -> Result<Option<GroupInfo>, Error> {
        check_group(group)?;
        let k = &self.inner.shards[self.shard_index(group)];
        let shard = self
            .store(k)
            .run(&ListGroups {
                offset: 0,
                limit: 1,
                only: Some(group),
            })
            .await?;
        Ok(shard.groups.into_iter().next())
    }

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
    pub async fn set_group_concurrency(&self, group: &str, m: Option<u64>) -> Result<bool, Error> {
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
    pub async fn set_default_group_concurrency(&self, m: Option<u64>) -> Result<bool, Error> {
        check_concurrency(m)?;
        self.change_default(GroupChange::Limit(None, m)).await
    }

    /// Sets (or with `None` clears) group `group`'s rate: at most
    /// `limit` of its messages start in any window of `per`, by Redis's
    /// clock, exactly as the queue's
    /// [`rate_limit`](crate::DelayQueueBuilder::rate_limit) (which holds
    /// on top), over the default of
    /// [`group_rate_limit`](crate::DelayQueueBuilder::group_rate_limit).
    /// A changed rate starts with a full window. Returns `false` when it
    /// was so already.
    ///
    /// ```no_run
    /// # async fn run(queue: delayqueue::DelayQueue) -> Result<(), delayqueue::Error> {
    /// use std::time::Duration;
    /// use delayqueue::RateLimit;
    /// queue.set_group_rate("tenant-42", Some(RateLimit::new(10, Duration::from_secs(1)))).await?;
    /// # Ok(()) }
    /// ```
    pub async fn set_group_rate(&self, group: &str, rate: Option<RateLimit>) -> Result<bool, Error> {
        check_group(group)?;
        let rate = group_rate(rate)?;
        self.change_group(
            GroupChange::Rate(Some(group), rate),
            Action::GroupLimitsChanged,
            Some(group),
        )
        .await
    }

    /// Sets (or with `None` clears) the rate of every group without one of
    /// its own, as the builder's
    /// [`group_rate_limit`](crate::DelayQueueBuilder::group_rate_limit)
    /// does when a consumer starts.
    ///
    /// ```no_run
    /// # async fn run(queue: delayqueue::DelayQueue) -> Result<(), delayqueue::Error> {
    /// use std::time::Duration;
    /// use delayqueue::RateLimit;
    /// queue.set_default_group_rate(Some(RateLimit::new(5, Duration::from_secs(1)))).await?;
    /// # Ok(()) }
    /// ```
    pub async fn set_default_group_rate(&self, rate: Option<RateLimit>) -> Result<bool, Error> {
        let rate = group_rate(rate)?;
        self.change_default(GroupChange::Rate(None, rate)).await
    }

    /// Makes `change` of the defaults on every shard.
    async fn change_default(&self, change: GroupChange<'_>) -> Result<bool, Error> {
        let changed = self
            .each_shard(|k| async move { self.store(k).run(&ChangeGroups { change }).await })
            .await?
            .contains(&true);
        if changed {
            tracing::info!(queue = %self.inner.name, "group defaults changed");
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

/// A group's rate as groups.lua takes it, `(n, per ms)`, checked: a
/// group lives in one shard, so it is not shared out.
fn group_rate(rate: Option<RateLimit>) -> Result<Option<(u64, u64)>, Error> {
    rate.map(|r| {
        check_rate(&r, 1)?;
        Ok((r.limit, r.per.as_millis() as u64))
    })
    .transpose()
}

/// A group concurrency is at least 1.
fn check_concurrency(m: Option<u64>) -> Result<(), Error> {
    if m == Some(0) {
        return Err(Error::InvalidArgument("group concurrency must be at least 1".into()));
    }
    Ok(())
}
