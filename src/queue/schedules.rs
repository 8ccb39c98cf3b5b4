//! Repeating schedules of a queue: set, remove, pause, resume, list,
//! trigger (`change_schedule.lua`, `read_schedules.lua`, `fire.lua`), and a scheduler
//! for processes that do not consume. Each schedule lives in the shard of
//! its name's hash tag, where all its fires (`{<name>}@<ms>`) land too.

use std::collections::BTreeMap;
use std::time::Duration;

use fred::bytes::Bytes;

use crate::consume::Scheduler;
use crate::events::{self, Action, Event};
use crate::schedule::{self, fire_id, from_ms, Misfire, Schedule, ScheduleInfo, MAX_SCHEDULES};
use crate::store::ops::change_schedule::{Change, ChangeSchedule, Changed};
use crate::store::ops::fire::{Fire, Fired};
use crate::store::ops::read_schedules::{ReadSchedules, StoredSchedule, Which};
use crate::store::stored::{decode_stored, encode_stored, ValueParts};
use crate::store::Keys;
use crate::{DelayQueue, Error, MessageId, Payload};

impl DelayQueue {
    /// The keys of the shard that holds schedule `name` and its fires.
    fn schedule_shard(&self, name: &str) -> &Keys {
        self.shard_of(&fire_id(name, 0))
    }

    /// Creates schedule `name` or replaces its definition. Stored in Redis,
    /// so every instance and every restart sees it; consumers of the
    /// queue (or a [`run_schedules`](Self::run_schedules)) send its
    /// fires. Returns `false` when it was set with this very definition
    /// already (nothing changes, so every instance may set its schedules
    /// at start); a changed one withdraws its fires sent and not yet due
    /// and starts again from now.
    ///
    /// ```no_run
    /// # async fn run(queue: delayqueue::DelayQueue) -> Result<(), delayqueue::Error> {
    /// use delayqueue::Schedule;
    /// queue.set_schedule("nightly-cleanup", Schedule::cron("0 3 * * *", "cleanup").timezone("Europe/Berlin")).await?;
    /// # Ok(()) }
    /// ```
    pub async fn set_schedule(&self, name: &str, schedule: Schedule) -> Result<bool, Error> {
        schedule::check_name(name)?;
        schedule.timing()?;
        let config = &self.inner.config;
        let payload = schedule.payload?;
        if payload.len() > config.max_payload_size {
            return Err(Error::PayloadTooLarge {
                size: payload.len(),
                max: config.max_payload_size,
            });
        }
        let backoff = schedule.backoff.as_ref().map(|b| b.encode()).transpose()?;
        let retry_count = schedule.retry_count.unwrap_or(config.consume.default_retry_count);
        let value = encode_stored(&ValueParts {
            backoff: backoff.as_deref(),
            group: schedule.group.as_deref(),
            ..ValueParts::new(retry_count, payload.as_bytes())
        });
        let text = |s: &str| Bytes::from(s.to_string());
        let fields = vec![
            ("spec", text(&schedule.spec)),
            ("tz", text(&schedule.timezone)),
            ("misfire", text(schedule.misfire.as_str())),
            ("grace", text(&schedule.grace.as_millis().to_string())),
            ("value", Bytes::from(value)),
        ];
        let change = Change::Set {
            fields,
            max: MAX_SCHEDULES,
        };
        match self.change_schedule(name, change).await? {
            Changed::Full => Err(Error::InvalidArgument(format!(
                "queue {:?} holds {MAX_SCHEDULES} schedules already",
                self.inner.name
            ))),
            Changed::Same => Ok(false),
            done => {
                let created = done == Changed::Yes;
                tracing::info!(queue = %self.inner.name, schedule = name, created, spec = %schedule.spec, "schedule set");
                self.changed_schedule(Action::ScheduleSet, Some(name), None, 0);
                Ok(true)
            }
        }
    }

    /// Removes schedule `name` and withdraws its fires sent and not yet
    /// due. Returns `false` when there is none.
    pub async fn remove_schedule(&self, name: &str) -> Result<bool, Error> {
        schedule::check_name(name)?;
        let removed = self.change_schedule(name, Change::Remove).await? == Changed::Yes;
        if removed {
            tracing::info!(queue = %self.inner.name, schedule = name, "schedule removed");
            self.changed_schedule(Action::ScheduleRemoved, Some(name), None, 0);
        }
        Ok(removed)
    }

    /// Pauses schedule `name`: its fires sent and not yet due are
    /// withdrawn and it fires nothing until [`resume_schedule`](Self::resume_schedule).
    /// Returns `false` when it was paused already;
    /// [`Error::NoSuchSchedule`] when there is none.
    pub async fn pause_schedule(&self, name: &str) -> Result<bool, Error> {
        self.flip_schedule(name, Change::Pause, Action::SchedulePaused).await
    }

    /// Resumes schedule `name` from now: the fires its pause covered are
    /// not made up. Returns `false` when it was not paused.
    pub async fn resume_schedule(&self, name: &str) -> Result<bool, Error> {
        self.flip_schedule(name, Change::Resume, Action::ScheduleResumed).await
    }

    async fn flip_schedule(&self, name: &str, change: Change, action: Action) -> Result<bool, Error> {
        schedule::check_name(name)?;
        match self.change_schedule(name, change).await? {
            Changed::Yes => {
                tracing::info!(queue = %self.inner.name, schedule = name, ?action, "schedule changed");
                self.changed_schedule(action, Some(name), None, 0);
                Ok(true)
            }
            Changed::Same => Err(self.no_such_schedule(name)),
            _ => Ok(false),
        }
    }

    async fn change_schedule(&self, name: &str, change: Change) -> Result<Changed, Error> {
        let op = ChangeSchedule { name, change };
        self.store(self.schedule_shard(name)).run(&op).await
    }

    fn no_such_schedule(&self, name: &str) -> Error {
        Error::NoSuchSchedule {
            queue: self.inner.name.clone(),
            name: name.to_string(),
        }
    }

    /// Every schedule of the queue, by name, with its next fire time. One
    /// script call per 100 schedules per shard.
    ///
    /// ```no_run
    /// # async fn run(queue: delayqueue::DelayQueue) -> Result<(), delayqueue::Error> {
    /// for s in queue.schedules().await? {
    ///     println!("{} {} next {:?}", s.name, s.spec, s.next_fire);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn schedules(&self) -> Result<Vec<ScheduleInfo>, Error> {
        // By name: a schedule whose cursor a scheduler moved while the
        // pages were read is read twice, and the later read wins.
        let mut out = BTreeMap::new();
        for keys in self.inner.shards.iter() {
            let mut after = None;
            for _ in 0..2 * MAX_SCHEDULES.div_ceil(crate::consume::SCHEDULE_PAGE) {
                let which = Which::Page {
                    horizon: None,
                    after: after.as_ref(),
                    limit: crate::consume::SCHEDULE_PAGE,
                };
                let read = self.store(keys).run(&ReadSchedules { which }).await?;
                for s in &read.schedules {
                    out.insert(s.name.clone(), info(s, read.now_ms));
                }
                if read.schedules.len() < crate::consume::SCHEDULE_PAGE {
                    break;
                }
                after = read.schedules.into_iter().last();
            }
        }
        Ok(out.into_values().collect())
    }

    /// Schedule `name`, if the queue has it.
    pub async fn schedule(&self, name: &str) -> Result<Option<ScheduleInfo>, Error> {
        schedule::check_name(name)?;
        let op = ReadSchedules {
            which: Which::Named(name),
        };
        let read = self.store(self.schedule_shard(name)).run(&op).await?;
        Ok(read.schedules.first().map(|s| info(s, read.now_ms)))
    }

    /// Sends one fire of schedule `name` now, outside its timing (its
    /// cursor and next fires stay as they are), also while it is paused.
    /// Returns the message's id, `{<name>}@t<generated id>`.
    pub async fn trigger_schedule(&self, name: &str) -> Result<MessageId, Error> {
        schedule::check_name(name)?;
        let id = format!("{{{name}}}@t{}", MessageId::generate());
        let op = Fire {
            name,
            id: &id,
            version: None,
            at_ms: 0,
            cursor_ms: 0,
            expire_after: None,
        };
        let q = &self.inner;
        match self.store(self.schedule_shard(name)).run(&op).await? {
            Fired::Sent => {
                q.meters.sent.increment(1);
                tracing::info!(queue = %q.name, schedule = name, %id, "schedule triggered");
                let id = MessageId::from(id);
                events::emit(&q.events, || Event::Sent { id: id.clone() });
                self.changed_schedule(Action::ScheduleTriggered, Some(name), Some(id.as_str()), 1);
                Ok(id)
            }
            Fired::Changed => Err(self.no_such_schedule(name)),
            other => Err(Error::WrongType {
                queue: q.name.clone(),
                detail: format!("trigger of schedule {name}: {other:?}"),
            }),
        }
    }

    /// Runs a scheduler for this queue's schedules in this process, for
    /// processes that produce but do not consume (every consumer runs one
    /// already). Any number may run; each fire is sent once.
    ///
    /// ```no_run
    /// # async fn run(queue: delayqueue::DelayQueue) -> Result<(), delayqueue::Error> {
    /// let scheduler = queue.run_schedules();
    /// // ...
    /// scheduler.shutdown().await?;
    /// # Ok(()) }
    /// ```
    pub fn run_schedules(&self) -> Scheduler {
        Scheduler::start(self.consume_context())
    }
}

/// A stored schedule as the API shows it.
fn info(s: &StoredSchedule, now_ms: i64) -> ScheduleInfo {
    let timing = s.timing().ok();
    let value = s.field("value").map(|v| v.to_vec()).unwrap_or_default();
    let stored = decode_stored(&value);
    let paused = s.field("paused").is_some();
    ScheduleInfo {
        name: s.name.clone(),
        spec: s.text("spec").unwrap_or_default().to_string(),
        timezone: s.text("tz").unwrap_or("UTC").to_string(),
        paused,
        last_fire: s.number("last").map(from_ms),
        next_fire: if paused {
            None
        } else {
            timing.as_ref().and_then(|t| t.next_after(now_ms)).map(from_ms)
        },
        fired: s.number("fired").and_then(|n| u64::try_from(n).ok()).unwrap_or(0),
        misfire: s.text("misfire").and_then(Misfire::parse).unwrap_or_default(),
        misfire_grace: Duration::from_millis(s.number("grace").and_then(|n| u64::try_from(n).ok()).unwrap_or(0)),
        retry_count: stored.as_ref().map_or(0, |v| v.retry_count),
        payload: Payload::from(stored.map_or(&[][..], |v| v.payload)),
    }
}
