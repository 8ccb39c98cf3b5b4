//! Configuration of a queue: [`DelayQueueBuilder`].

use std::sync::Arc;
use std::time::Duration;

use fred::prelude::Client;

use crate::consume::{default_fetch_limit, Settings};
use crate::events;
use crate::maxima::{MAX_BATCH_SIZE, MAX_DELAY, MAX_LOG_LINES, MAX_RESULT_SIZE, MAX_RETRY_COUNT};
use crate::meters::Meters;
use crate::queue::{limits, Config, DelayQueue, Inner};
use crate::store::Keys;
use crate::{Backoff, Durability, Error, RateLimit};

/// Builds a [`DelayQueue`]; every method takes and returns the builder.
///
/// ```no_run
/// # async fn run() -> Result<(), delayqueue::Error> {
/// use std::time::Duration;
/// use delayqueue::DelayQueue;
///
/// let client = delayqueue::connect("redis://127.0.0.1:6379").await?;
/// let queue = DelayQueue::builder("orders", client)
///     .concurrency(16)
///     .max_consume_duration(Duration::from_secs(30))
///     .build()?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
#[must_use = "call .build() to get the queue"]
pub struct DelayQueueBuilder {
    name: String,
    client: Client,
    key_prefix: String,
    shards: usize,
    /// Set explicitly: then it must not be below `concurrency`.
    fetch_limit: Option<usize>,
    /// Unset: `max_consume_duration`, whichever order the two are set in.
    handler_timeout: Option<Duration>,
    config: Config,
}

impl DelayQueueBuilder {
    pub(crate) fn new(name: impl Into<String>, client: Client) -> Self {
        DelayQueueBuilder {
            name: name.into(),
            client,
            key_prefix: "dq:".into(),
            shards: 1,
            fetch_limit: None,
            handler_timeout: None,
            config: Config::default(),
        }
    }

    /// How often a consumer sweeps the queue: moves due messages, takes back
    /// timed-out deliveries and deletes old dead letters. Default 1 s. Due messages
    /// the consumer knows of are fetched on time regardless of the tick.
    pub fn fetch_interval(mut self, d: Duration) -> Self {
        self.config.consume.fetch_interval = d;
        self
    }

    /// How often a consumer writes its entry in the registry of live
    /// consumers ([`consumers`](crate::consumers), docs/operations.md,
    /// "Live consumers"): one script call per interval per process (the
    /// consumers of one client share an entry, which beats as often as
    /// the most frequent of them asks). The entry lives three intervals,
    /// so a killed consumer drops out of the listing at most that long
    /// after its last heartbeat. Default 5 s (TTL 15 s); at least 100 ms.
    /// A [`Worker`](crate::Worker) beats as its first queue says.
    pub fn heartbeat(mut self, d: Duration) -> Self {
        self.config.consume.heartbeat = d;
        self
    }

    /// The visibility timeout: how long a delivery holds its message
    /// without word from its consumer. A consumer that crashes or hangs
    /// loses its messages after this long, and they are redelivered. Unless
    /// [`handler_timeout`](Self::handler_timeout) is longer, it is also the
    /// longest a handler may run. Default 5 s.
    pub fn max_consume_duration(mut self, d: Duration) -> Self {
        self.config.consume.max_consume_duration = d;
        self
    }

    /// Longest one handler run may take; then it is cancelled and the
    /// delivery counts as failed. Default: `max_consume_duration`.
    ///
    /// When longer than `max_consume_duration`, the consumer renews the
    /// lease of each running handler before it runs out (a heartbeat, like
    /// BullMQ's lock renewal), so a slow but alive handler keeps its
    /// message, while the messages of a consumer that crashed still come
    /// back after `max_consume_duration`.
    ///
    /// ```no_run
    /// # async fn run(client: delayqueue::fred::clients::Client) -> Result<(), delayqueue::Error> {
    /// use std::time::Duration;
    /// // Reports take up to 10 minutes; a dead worker's are retried within 30 s.
    /// let queue = delayqueue::DelayQueue::builder("reports", client)
    ///     .max_consume_duration(Duration::from_secs(30))
    ///     .handler_timeout(Duration::from_secs(600))
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    pub fn handler_timeout(mut self, d: Duration) -> Self {
        self.handler_timeout = Some(d);
        self
    }

    /// Most messages a consumer holds at once (claimed but not finished),
    /// at least `concurrency`. Default 256, or 32 × `concurrency` when that
    /// is larger. The consumer also never claims more than it expects to
    /// start within the visibility timeout.
    pub fn fetch_limit(mut self, n: usize) -> Self {
        self.fetch_limit = Some(n);
        self
    }

    /// Handlers a consumer runs at the same time. Default 1.
    pub fn concurrency(mut self, n: usize) -> Self {
        self.config.consume.concurrency = n;
        self
    }

    /// Retries of a message whose delivery failed, unless its send says
    /// otherwise: `n` means at most `n + 1` deliveries. Default 3.
    pub fn default_retry_count(mut self, n: u32) -> Self {
        self.config.consume.default_retry_count = n;
        self
    }

    /// A fixed delay before a failed message is delivered again: the same
    /// as `.backoff(Backoff::fixed(d))`.
    pub fn nack_redelivery_delay(self, d: Duration) -> Self {
        self.backoff(Backoff::fixed(d))
    }

    /// How long a failed message waits before its next delivery, unless
    /// its send or its handler says otherwise. Default: exponential from
    /// 1 s, doubling up to 10 min, with jitter. See [`Backoff`].
    ///
    /// ```no_run
    /// # async fn run(client: delayqueue::fred::clients::Client) -> Result<(), delayqueue::Error> {
    /// use std::time::Duration;
    /// use delayqueue::{Backoff, DelayQueue};
    /// let queue = DelayQueue::builder("webhooks", client)
    ///     .backoff(Backoff::exponential(Duration::from_secs(5), Duration::from_secs(3600)))
    ///     .default_retry_count(8)
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.config.consume.backoff = backoff;
        self
    }

    /// How long a dead letter (a message that used up its deliveries) is
    /// kept for inspection and requeueing before it is deleted. Default 7
    /// days; zero deletes dead messages at the next sweep.
    pub fn dead_letter_retention(mut self, d: Duration) -> Self {
        self.config.consume.dead_letter_retention = d;
        self
    }

    /// How long the result of an acked message is kept for
    /// [`DelayQueue::result`](crate::DelayQueue::result), and with it the
    /// progress and log lines its delivery wrote. Default 1 day; zero keeps
    /// none (the ack deletes them). See docs/results.md.
    ///
    /// ```no_run
    /// # async fn run(client: delayqueue::fred::clients::Client) -> Result<(), delayqueue::Error> {
    /// use std::time::Duration;
    /// let queue = delayqueue::DelayQueue::builder("thumbnails", client)
    ///     .result_retention(Duration::from_secs(3600))
    ///     .max_result_size(64 * 1024)
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    pub fn result_retention(mut self, d: Duration) -> Self {
        self.config.consume.result_retention = d;
        self
    }

    /// Largest result a handler may return, in bytes. A bigger one fails
    /// its delivery with [`Error::ResultTooLarge`] as its reason (retried
    /// like any failure); it is never cut. Default 512 KiB, at most
    /// [`MAX_RESULT_SIZE`](crate::MAX_RESULT_SIZE).
    pub fn max_result_size(mut self, bytes: usize) -> Self {
        self.config.consume.max_result_size = bytes;
        self
    }

    /// How many of its last [`Message::log`](crate::Message::log) lines a
    /// message keeps. Default 100, 1 to [`MAX_LOG_LINES`](crate::MAX_LOG_LINES).
    pub fn max_log_lines(mut self, n: usize) -> Self {
        self.config.consume.max_log_lines = n;
        self
    }

    /// Most dead letters kept; beyond it the oldest are deleted first.
    /// Default 10,000.
    pub fn dead_letter_limit(mut self, n: u64) -> Self {
        self.config.consume.dead_limit = n;
        self
    }

    /// Discards a message not delivered within `d` of its due time, unless
    /// its send says otherwise ([`NewMessage::expire_after`](crate::NewMessage::expire_after)):
    /// for messages worthless after a while (a reminder for a meeting that
    /// is over). Default: none, a message waits for a consumer however long
    /// it takes.
    ///
    /// The deadline is due time + `d` by Redis's clock, fixed at send, and
    /// holds for retries too: a claim after it does not deliver the message
    /// but moves it to the dead letters with reason `"expired"`, counts it
    /// in [`Totals::expired`](crate::Totals), emits
    /// [`Event::Expired`](crate::Event::Expired) and logs a warning. 1 ms
    /// to `MAX_DELAY`.
    ///
    /// ```no_run
    /// # async fn run(client: delayqueue::fred::clients::Client) -> Result<(), delayqueue::Error> {
    /// use std::time::Duration;
    /// let queue = delayqueue::DelayQueue::builder("reminders", client)
    ///     .expire_after(Duration::from_secs(600))
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    pub fn expire_after(mut self, d: Duration) -> Self {
        self.config.expire_after = Some(d);
        self
    }

    /// Largest payload a send accepts, in bytes. Default 1 MiB.
    pub fn max_payload_size(mut self, bytes: usize) -> Self {
        self.config.max_payload_size = bytes;
        self
    }

    /// Most ids one script call moves (1 to 1000). Default 1000.
    pub fn batch_size(mut self, n: usize) -> Self {
        self.config.consume.batch_size = n;
        self
    }

    /// When a send returns `Ok`: once the primary has the message (default),
    /// or once replicas or append-only files confirm it too. See
    /// [`Durability`].
    pub fn durability(mut self, durability: Durability) -> Self {
        self.config.durability = durability;
        self
    }

    /// At most `n` messages of the queue start (are leased to a handler) in
    /// any window of `per`, across all its consumers, by Redis's clock
    /// (BullMQ's limiter). Written to Redis when a consumer of this queue
    /// starts, where [`DelayQueue::set_rate_limit`] changes or clears it and
    /// [`status`](DelayQueue::status) shows it; a consumer built without it
    /// obeys what Redis holds. Default: none.
    ///
    /// Claims are paced: each fiftieth of `per` starts at most
    /// `ceil(n / 50)`, and never more than `n` in any window of `per`, so
    /// a backlog drains at 50/51 of `n` (98%), evenly, not in bursts. With
    /// `shards(k)` each shard gets `n / k` (the first `n % k` one more):
    /// the total never exceeds `n`, and reaches it only while every shard
    /// has work. `n` is at least the shard count; `per` is whole
    /// milliseconds from 1 ms to `MAX_DELAY`. See docs/limits.md.
    ///
    /// ```no_run
    /// # async fn run(client: delayqueue::fred::clients::Client) -> Result<(), delayqueue::Error> {
    /// use std::time::Duration;
    /// let queue = delayqueue::DelayQueue::builder("emails", client)
    ///     .rate_limit(100, Duration::from_secs(1))
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    pub fn rate_limit(mut self, n: u64, per: Duration) -> Self {
        self.config.rate_limit = Some(RateLimit::new(n, per));
        self
    }

    /// At most `n` messages of the queue processing at once, across all its
    /// consumers (each consumer's own [`concurrency`](Self::concurrency)
    /// still holds too). Stored like [`rate_limit`](Self::rate_limit),
    /// changed with [`DelayQueue::set_global_concurrency`]. With
    /// `shards(k)` each shard gets its share as for the rate limit. A
    /// delivery counts from its claim until its ack or nack, or until a
    /// sweep takes back its lease after its consumer died. Default: none.
    ///
    /// ```no_run
    /// # async fn run(client: delayqueue::fred::clients::Client) -> Result<(), delayqueue::Error> {
    /// let queue = delayqueue::DelayQueue::builder("reports", client)
    ///     .concurrency(16)
    ///     .global_concurrency(10)
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    pub fn global_concurrency(mut self, n: u64) -> Self {
        self.config.global_concurrency = Some(n);
        self
    }

    /// At most `m` messages of any one group
    /// ([`NewMessage::group`](crate::NewMessage::group)) processing at once,
    /// across all consumers: the default of every group without its own
    /// ([`DelayQueue::set_group_concurrency`]). Stored like
    /// [`rate_limit`](Self::rate_limit) when a consumer starts. A group of
    /// concurrency 1 is ordered: see [`ordered`](Self::ordered). `m` is at
    /// least 1. Default: none (docs/groups.md).
    ///
    /// ```no_run
    /// # async fn run(client: delayqueue::fred::clients::Client) -> Result<(), delayqueue::Error> {
    /// let queue = delayqueue::DelayQueue::builder("imports", client)
    ///     .group_concurrency(4)
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    pub fn group_concurrency(mut self, m: u64) -> Self {
        self.config.group_concurrency = Some(m);
        self
    }

    /// At most `n` messages of any one group start in any window of `per`,
    /// by Redis's clock, exactly as [`rate_limit`](Self::rate_limit) for
    /// the whole queue (which holds on top): the default of every group
    /// without its own ([`DelayQueue::set_group_rate`]). Stored when a
    /// consumer starts. A group at its rate waits, out of the turns, until
    /// its window lets one more start. Default: none (docs/groups.md).
    ///
    /// ```no_run
    /// # async fn run(client: delayqueue::fred::clients::Client) -> Result<(), delayqueue::Error> {
    /// use std::time::Duration;
    /// let queue = delayqueue::DelayQueue::builder("webhooks", client)
    ///     .group_rate_limit(10, Duration::from_secs(1))
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    pub fn group_rate_limit(mut self, n: u64, per: Duration) -> Self {
        self.config.group_rate_limit = Some(RateLimit::new(n, per));
        self
    }

    /// While a group with at most `n` messages due is claimed beside groups
    /// with more, a claim takes at most `n` of each group, and the consumer
    /// claims again at once: the claim that serves a group just come due
    /// stays short, so its message does not wait for a claim of hundreds of
    /// another group's. Backlogs alone get full claims. Default 8; 0 turns
    /// it off (larger claims, a little more throughput for the backlog,
    /// more lateness for the light group). At most
    /// [`MAX_BATCH_SIZE`](crate::MAX_BATCH_SIZE). See docs/groups.md.
    ///
    /// ```no_run
    /// # async fn run(client: delayqueue::fred::clients::Client) -> Result<(), delayqueue::Error> {
    /// let queue = delayqueue::DelayQueue::builder("imports", client)
    ///     .group_share(4)
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    pub fn group_share(mut self, n: usize) -> Self {
        self.config.consume.group_share = n;
        self
    }

    /// Every group is ordered: [`group_concurrency(1)`](Self::group_concurrency).
    /// One message of a group at a time, in due order (a higher priority
    /// first); a message that fails with deliveries left goes back to the
    /// head of its group, which waits out its backoff, so nothing else of
    /// the group starts until it is retried or dead (docs/groups.md).
    ///
    /// ```no_run
    /// # async fn run(client: delayqueue::fred::clients::Client) -> Result<(), delayqueue::Error> {
    /// let queue = delayqueue::DelayQueue::builder("ledger", client).ordered().build()?;
    /// # Ok(()) }
    /// ```
    pub fn ordered(self) -> Self {
        self.group_concurrency(1)
    }

    /// Prefix of every key of the queue. Default `dq:`, so the keys of queue
    /// `orders` are `dq:{orders}:...`.
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.key_prefix = prefix.into();
        self
    }

    /// Spreads the queue over `n` hash tags, `{name#0}` .. `{name#<n-1>}`
    /// (1 to [`MAX_SHARDS`](crate::MAX_SHARDS)), so one busy queue uses every primary of a Redis Cluster
    /// instead of one. Default 1: an ordinary queue, tagged `{name}`.
    ///
    /// Each message lives in one shard, picked by a hash of its id, so
    /// per-message semantics stay the same (idempotent ids, cancel,
    /// reschedule, fencing). A consumer claims from every shard in turn, no
    /// shard getting more than its share of `fetch_limit` while others have
    /// work; stats, inspection, dead letters and purge cover all shards. Each
    /// shard costs a consumer its own sweep per `fetch_interval`.
    ///
    /// Every producer and consumer of a queue must use the same `n`: a
    /// consumer reads shards `0..n` only, and ids are looked up in the shard
    /// their hash picks among `n`. A consumer warns when it finds keys of
    /// another layout. See `docs/scaling.md` for changing `n`.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), delayqueue::Error> {
    /// let client = delayqueue::connect("redis-cluster://127.0.0.1:7000").await?;
    /// let queue = delayqueue::DelayQueue::builder("emails", client).shards(6).build()?;
    /// assert_eq!(queue.shards(), 6);
    /// # Ok(()) }
    /// ```
    pub fn shards(mut self, n: usize) -> Self {
        self.shards = n;
        self
    }

    /// Checks the settings and builds the queue. Nothing is sent to Redis.
    pub fn build(self) -> Result<DelayQueue, Error> {
        let shards = Keys::shards(&self.key_prefix, &self.name, self.shards)?;
        let record = Keys::new(&self.key_prefix, &self.name)?;
        let mut config = self.config;
        let s = &mut config.consume;
        s.fetch_limit = self.fetch_limit.unwrap_or(default_fetch_limit(s.concurrency));
        s.handler_timeout = self.handler_timeout.unwrap_or(s.max_consume_duration);
        let (c, s) = (&config, &config.consume);
        let bad = |what: String| Err(Error::InvalidArgument(what));
        check_intervals(s)?;
        if s.concurrency == 0 {
            return bad("concurrency must be at least 1".into());
        }
        if s.fetch_limit < s.concurrency {
            return bad(format!("fetch_limit must be at least concurrency ({})", s.concurrency));
        }
        if s.default_retry_count > MAX_RETRY_COUNT {
            return bad(format!("default_retry_count must be at most {MAX_RETRY_COUNT}"));
        }
        s.backoff.validate()?;
        if s.dead_letter_retention > MAX_DELAY {
            return bad("dead_letter_retention is longer than MAX_DELAY".into());
        }
        if s.result_retention > MAX_DELAY {
            return bad("result_retention is longer than MAX_DELAY".into());
        }
        if s.max_result_size > MAX_RESULT_SIZE {
            return bad(format!("max_result_size must be at most {MAX_RESULT_SIZE}"));
        }
        if !(1..=MAX_LOG_LINES).contains(&s.max_log_lines) {
            return bad(format!("max_log_lines must be 1 to {MAX_LOG_LINES}"));
        }
        if let Some(d) = c.expire_after {
            check_expire_after(d)?;
        }
        if let Some(rate) = &c.rate_limit {
            limits::check_rate(rate, shards.len())?;
        }
        if let Some(n) = c.global_concurrency {
            limits::check_concurrency(n, shards.len())?;
        }
        if c.group_concurrency == Some(0) {
            return bad("group_concurrency must be at least 1".into());
        }
        if let Some(rate) = &c.group_rate_limit {
            limits::check_rate(rate, 1)?;
        }
        if s.group_share > MAX_BATCH_SIZE {
            return bad(format!("group_share must be at most {MAX_BATCH_SIZE}"));
        }
        if !(1..=MAX_BATCH_SIZE).contains(&s.batch_size) {
            return bad(format!("batch_size must be 1 to {MAX_BATCH_SIZE}"));
        }
        // Cheap, and it reaches a recorder installed since the last build.
        crate::meters::describe_metrics();
        Ok(DelayQueue {
            inner: Arc::new(Inner {
                shards: shards.into(),
                record,
                recorded: tokio::sync::OnceCell::new(),
                waitaof_checked: std::sync::Mutex::new(None),
                prefix: self.key_prefix,
                meters: Arc::new(Meters::new(&self.name)),
                events: events::Events::default(),
                name: self.name,
                config,
                nodes: crate::store::nodes::hold(&self.client),
                client: self.client,
            }),
        })
    }
}

/// The consumer's intervals and time limits within their bounds.
fn check_intervals(s: &Settings) -> Result<(), Error> {
    let bad = |what: &str| Err(Error::InvalidArgument(what.into()));
    if s.fetch_interval.is_zero() {
        return bad("fetch_interval must be positive");
    }
    if s.heartbeat < Duration::from_millis(100) || s.heartbeat > MAX_DELAY {
        return bad("heartbeat must be between 100 ms and MAX_DELAY");
    }
    if s.max_consume_duration < Duration::from_millis(10) {
        return bad("max_consume_duration must be at least 10 ms");
    }
    if s.handler_timeout < Duration::from_millis(10) || s.handler_timeout > MAX_DELAY {
        return bad("handler_timeout must be between 10 ms and MAX_DELAY");
    }
    Ok(())
}

/// An expire_after is 1 ms to `MAX_DELAY`: 0 ms is how the send script
/// hears "never".
pub(crate) fn check_expire_after(d: Duration) -> Result<(), Error> {
    if d < Duration::from_millis(1) || d > MAX_DELAY {
        return Err(Error::InvalidArgument(
            "expire_after must be between 1 ms and MAX_DELAY".into(),
        ));
    }
    Ok(())
}

impl DelayQueue {
    /// Starts building queue `name` on `client` (any fred client:
    /// standalone, cluster or sentinel; see [`connect`](crate::connect) for
    /// one with sane defaults).
    pub fn builder(name: impl Into<String>, client: Client) -> DelayQueueBuilder {
        DelayQueueBuilder::new(name, client)
    }
}
