//! Walking a state in order from a cursor, shard after shard: [`Browse`]
//! (stable pages) and [`Search`] (the messages whose payload holds a text,
//! in bounded batches). Both run `walk` steps (`lua/walk.lua`); the cursor
//! is the shard and the last entry read, so a walk finds its place again
//! however the queue changed between calls.

use std::future::{Future, IntoFuture};
use std::pin::Pin;

use crate::info::{MAX_PAGE, PREVIEW_BYTES};
use crate::maxima::check_group;
use crate::store::ops::walk::{Anchor, Walk};
use crate::{DelayQueue, Error, Found, MessageId, MessageInfo, MessageState, Order, Page};

/// Most messages one [`Search`] reads.
pub const MAX_SCAN: usize = 100_000;
/// Messages a [`Search`] reads unless [`Search::scan`] says otherwise.
const DEFAULT_SCAN: usize = 10_000;
/// Messages a browse page or a search returns unless `limit` says otherwise.
const DEFAULT_LIMIT: usize = 100;

/// The options [`Browse`] and [`Search`] share, and the `.await` that
/// runs them (their `run`) for a `$reply`.
macro_rules! walk_options {
    ($builder:ident => $reply:ident, $what:literal) => {
        impl $builder<'_> {
            /// The direction of the walk; [`Order::Asc`] unless set.
            pub fn order(mut self, order: Order) -> Self {
                self.order = order;
                self
            }

            /// Goes on just after where the call that returned this cursor
            /// ([`Page::cursor`] or [`Found::cursor`]) stopped; `None`: from
            /// the first message. The cursor must come from a browse or
            /// search of the same state and order.
            pub fn after(mut self, cursor: Option<String>) -> Self {
                self.after = cursor;
                self
            }

            #[doc = concat!("At most `n` ", $what, " (1 to [`MAX_PAGE`]); 100 unless set.")]
            pub fn limit(mut self, n: usize) -> Self {
                self.limit = n;
                self
            }
        }

        #[doc = concat!("Runs it: `.await` gives a [`", stringify!($reply), "`].")]
        impl<'a> IntoFuture for $builder<'a> {
            type Output = Result<$reply, Error>;
            type IntoFuture = Pin<Box<dyn Future<Output = Self::Output> + Send + 'a>>;

            fn into_future(self) -> Self::IntoFuture {
                Box::pin(self.run())
            }
        }
    };
}

/// One page of a state in a stable order, from
/// [`DelayQueue::browse`]: set options, then `.await` it for a [`Page`]
/// whose [`cursor`](Page::cursor) gives the next.
///
/// ```no_run
/// # async fn run(queue: delayqueue::DelayQueue) -> Result<(), delayqueue::Error> {
/// use delayqueue::{MessageState, Order};
/// let mut cursor = None;
/// loop {
///     let page = queue.browse(MessageState::Pending).order(Order::Desc).after(cursor).limit(50).await?;
///     for m in &page.items {
///         println!("{} due {:?}", m.id, m.due);
///     }
///     cursor = page.cursor;
///     if cursor.is_none() {
///         break;
///     }
/// }
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[must_use = "a browse reads nothing until awaited"]
pub struct Browse<'a> {
    queue: &'a DelayQueue,
    state: MessageState,
    order: Order,
    after: Option<String>,
    limit: usize,
}

walk_options!(Browse => Page, "messages");

impl Browse<'_> {
    async fn run(self) -> Result<Page, Error> {
        check_limit(self.limit)?;
        let from = Cursor::parse(self.queue, self.state, self.order, self.after.as_deref())?;
        let walked = walk(self.queue, self.state, self.order, from, "", self.limit, self.limit).await?;
        let total = match &self.queue.inner.shards[..] {
            [_] => walked.total,
            _ => self
                .queue
                .shard_statuses()
                .await?
                .iter()
                .map(|s| s.counts.of(self.state))
                .sum(),
        };
        Ok(Page {
            items: walked.items,
            total,
            next: None,
            cursor: walked.next.map(|c| c.encode(self.state, self.order)),
        })
    }
}

/// A bounded search of one state, from [`DelayQueue::search`]: set
/// options, then `.await` it for what it [`Found`].
///
/// ```no_run
/// # async fn run(queue: delayqueue::DelayQueue) -> Result<(), delayqueue::Error> {
/// use delayqueue::MessageState;
/// let mut cursor = None;
/// for _ in 0..10 {
///     let found = queue.search(MessageState::Dead, "order 42").after(cursor).limit(50).scan(10_000).await?;
///     for m in &found.items {
///         println!("{}: {:?}", m.id, m.last_error);
///     }
///     cursor = found.cursor;
///     if cursor.is_none() {
///         break;
///     }
/// }
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[must_use = "a search reads nothing until awaited"]
pub struct Search<'a> {
    queue: &'a DelayQueue,
    state: MessageState,
    text: String,
    order: Order,
    after: Option<String>,
    limit: usize,
    scan: usize,
}

walk_options!(Search => Found, "matches");

impl Search<'_> {
    /// Reads at most `n` messages (1 to [`MAX_SCAN`]); 10,000 unless set.
    pub fn scan(mut self, n: usize) -> Self {
        self.scan = n;
        self
    }

    async fn run(self) -> Result<Found, Error> {
        check_limit(self.limit)?;
        if !(1..=MAX_SCAN).contains(&self.scan) {
            return Err(Error::InvalidArgument(format!("scan must be 1 to {MAX_SCAN}")));
        }
        if self.text.is_empty() {
            return Err(Error::InvalidArgument("search text must not be empty".into()));
        }
        let from = Cursor::parse(self.queue, self.state, self.order, self.after.as_deref())?;
        let mut items = Vec::new();
        // The message with this id, wherever it lies: one lookup, made once
        // per search (by the call without a cursor); the walk leaves that id out.
        if self.after.is_none() && MessageId::check(&self.text).is_ok() {
            if let Some(mut m) = self.queue.get(&self.text).await?.filter(|m| m.state == self.state) {
                m.payload.truncate(PREVIEW_BYTES);
                items.push(m);
            }
        }
        let left = self.limit - items.len();
        let walked = match left {
            0 => Walked {
                next: Some(from),
                ..Walked::default()
            },
            _ => walk(self.queue, self.state, self.order, from, &self.text, left, self.scan).await?,
        };
        items.extend(walked.items);
        Ok(Found {
            items,
            scanned: walked.read,
            cursor: walked.next.map(|c| c.encode(self.state, self.order)),
        })
    }
}

fn check_limit(limit: usize) -> Result<(), Error> {
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(Error::InvalidArgument(format!("limit must be 1 to {MAX_PAGE}")));
    }
    Ok(())
}

/// A place in a walk: a shard, and the last entry read in it (`None`: the
/// walk starts at the shard's first entry).
#[derive(Debug, Default)]
struct Cursor {
    shard: usize,
    after: Option<Anchor>,
}

impl Cursor {
    /// `<state><order><shard>[:<score, position or group/score>:<id>]`
    /// (past a whole group: `<group>/:`); the state and order tell a
    /// cursor of another walk.
    fn encode(&self, state: MessageState, order: Order) -> String {
        let tag = tag(state, order);
        match &self.after {
            None => format!("{tag}{}", self.shard),
            Some(a) => format!("{tag}{}:{}:{}", self.shard, a.at, a.id),
        }
    }

    /// The cursor `s` of a walk of `state` in `order` on `queue` (the start
    /// when `None`).
    fn parse(queue: &DelayQueue, state: MessageState, order: Order, s: Option<&str>) -> Result<Cursor, Error> {
        let Some(s) = s else {
            return Ok(Cursor::default());
        };
        let bad = |why: &str| {
            Error::InvalidArgument(format!(
                "invalid cursor {s:?}: {why}; pass the cursor of a page of the same state and order"
            ))
        };
        let rest = s
            .strip_prefix(&tag(state, order))
            .ok_or_else(|| bad("it is not from this state and order"))?;
        let (shard, anchor) = match rest.split_once(':') {
            Some((shard, anchor)) => (shard, Some(anchor)),
            None => (rest, None),
        };
        let shard: usize = shard.parse().map_err(|_| bad("no shard number"))?;
        if shard >= queue.shards() {
            return Err(bad("the queue has fewer shards"));
        }
        let Some(anchor) = anchor else {
            return Ok(Cursor { shard, after: None });
        };
        let (at, id) = anchor.split_once(':').ok_or_else(|| bad("no id"))?;
        let score = |at: &str| {
            at.bytes().all(|b| b.is_ascii_digit() || b"+-.eE".contains(&b))
                && at.parse::<f64>().is_ok_and(f64::is_finite)
        };
        // In the ready state, past the positions: a group's message, or past a group.
        let in_group = match at.split_once('/') {
            Some((group, at)) if state == MessageState::Ready && check_group(group).is_ok() => Some(at),
            _ => None,
        };
        if in_group != Some("") {
            MessageId::check(id).map_err(|e| bad(&format!("id {}", e.reason)))?;
        } else if !id.is_empty() {
            return Err(bad("an id after a whole group"));
        }
        let valid = match (state, in_group) {
            (_, Some(at)) => at.is_empty() || score(at),
            (MessageState::Ready | MessageState::Retry, None) => at.parse::<u64>().is_ok(),
            _ => score(at),
        };
        if !valid {
            return Err(bad("no valid position"));
        }
        Ok(Cursor {
            shard,
            after: Some(Anchor {
                at: at.into(),
                id: id.into(),
            }),
        })
    }
}

/// The first characters of a cursor of a walk of `state` in `order`.
fn tag(state: MessageState, order: Order) -> String {
    let s = match state {
        MessageState::Pending => 'p',
        MessageState::Ready => 'r',
        MessageState::Processing => 'u',
        MessageState::Retry => 't',
        MessageState::Dead => 'd',
        MessageState::Waiting => 'w',
    };
    let o = match order {
        Order::Asc => 'a',
        Order::Desc => 'd',
    };
    format!("{s}{o}")
}

/// What a walk over the shards found.
#[derive(Debug, Default)]
struct Walked {
    items: Vec<MessageInfo>,
    /// Entries read.
    read: u64,
    /// Entries in the state of the last shard read.
    total: u64,
    /// Where it stopped; `None` at the end of the last shard.
    next: Option<Cursor>,
}

/// Walks `state` in `order` from `from`, shard after shard, one `walk`
/// call of at most [`MAX_PAGE`] entries at a time, until it has `limit`
/// messages whose payload holds `text` (every message when empty), has read
/// `budget` entries, or reaches the end of the last shard.
async fn walk(
    queue: &DelayQueue,
    state: MessageState,
    order: Order,
    from: Cursor,
    text: &str,
    limit: usize,
    budget: usize,
) -> Result<Walked, Error> {
    super::inspect::listable(state)?;
    let shards = &queue.inner.shards;
    let mut out = Walked::default();
    let mut at = from;
    loop {
        let step = Walk {
            state,
            order,
            after: at.after.as_ref(),
            read: (budget - out.read as usize).min(MAX_PAGE),
            limit: limit - out.items.len(),
            preview: PREVIEW_BYTES,
            text,
        };
        let walked = queue.store(&shards[at.shard]).run(&step).await?;
        out.read += walked.read;
        out.total = walked.total;
        out.items.extend(walked.items);
        match walked.next {
            Some(anchor) => at.after = Some(anchor),
            None if at.shard + 1 < shards.len() => {
                at = Cursor {
                    shard: at.shard + 1,
                    after: None,
                }
            }
            None => return Ok(out),
        }
        if out.items.len() >= limit || out.read as usize >= budget {
            out.next = Some(at);
            return Ok(out);
        }
    }
}

impl DelayQueue {
    /// One page of the messages in `state`, in a stable order, from a
    /// cursor: the returned [`Browse`] takes the [`Order`], the cursor of
    /// the page before ([`Page::cursor`]) and the page size, then `.await`
    /// it. Pending, processing and dead are walked by score (due time,
    /// lease deadline, time of death), equal scores by id; ready and retry
    /// by position, head first, and in a queue with groups the ready state
    /// goes on with the groups' due messages, group by group in name order,
    /// each group's in the order claims take them (docs/groups.md). Items
    /// come with a payload preview, as from
    /// [`list`](Self::list); [`Page::total`] counts the state.
    ///
    /// A page starts strictly after the last message of the page before,
    /// so a page walk reads every message that stays in the state (with
    /// its score) exactly once, in order, however the queue changes
    /// between pages; messages that join behind the cursor are read too.
    /// One script call per shard read, O(log n + limit) for the zsets.
    /// Lists: O(position + limit); the walk finds the last entry again
    /// where it was or, as claims pop the head, nearer the head (at most
    /// 1000 entries further back: each nack release pushes one at the
    /// head), and goes on from the head when it was claimed. The groups'
    /// due messages: O(log G + log n) per group visited (G known groups),
    /// at most 1000 groups a call (further calls go on past the last one
    /// visited). A sharded queue is walked shard after shard (its pages are in order within
    /// each shard) and its `total` costs one more O(1) call per shard.
    ///
    /// Fails with [`Error::InvalidArgument`] for a limit outside 1 to
    /// [`MAX_PAGE`] or a cursor that is not from a page of this state and
    /// order.
    ///
    /// ```no_run
    /// # async fn run(queue: delayqueue::DelayQueue) -> Result<(), delayqueue::Error> {
    /// use delayqueue::MessageState;
    /// let first = queue.browse(MessageState::Dead).limit(50).await?;
    /// let second = queue.browse(MessageState::Dead).after(first.cursor).limit(50).await?;
    /// # let _ = second;
    /// # Ok(()) }
    /// ```
    pub fn browse(&self, state: MessageState) -> Browse<'_> {
        Browse {
            queue: self,
            state,
            order: Order::Asc,
            after: None,
            limit: DEFAULT_LIMIT,
        }
    }

    /// The messages in `state` whose id is `text` or whose payload holds
    /// it: a plain, case-sensitive byte substring (no pattern, no
    /// decoding). The returned [`Search`] takes the [`Order`], a cursor,
    /// the most matches (`limit`) and the most messages to read (`scan`),
    /// then `.await` it for what it [`Found`].
    ///
    /// A search walks the state as [`browse`](Self::browse) does, from the
    /// cursor, and stops after `limit` matches or `scan` messages read
    /// (default 10,000, at most [`MAX_SCAN`]); [`Found::cursor`] says where,
    /// to go on from there. Only the first 128 KiB of each payload are
    /// searched: a text that starts later is not found. Cost: O(scan)
    /// payload reads, in script calls of at most 1000 messages and 128 KiB
    /// of payloads searched, so Redis is never blocked for long; other
    /// clients run between the calls. The message
    /// whose id is `text` is looked up first (one `get`, only at the start
    /// of a search) and comes first, wherever it lies in the state.
    ///
    /// Fails with [`Error::InvalidArgument`] for an empty text, a limit
    /// outside 1 to [`MAX_PAGE`], a scan outside 1 to [`MAX_SCAN`] or a
    /// cursor that is not from a walk of this state and order.
    ///
    /// ```no_run
    /// # async fn run(queue: delayqueue::DelayQueue) -> Result<(), delayqueue::Error> {
    /// use delayqueue::MessageState;
    /// let found = queue.search(MessageState::Pending, "customer-7").limit(10).await?;
    /// println!("{} matches in {} messages read", found.items.len(), found.scanned);
    /// # Ok(()) }
    /// ```
    pub fn search(&self, state: MessageState, text: impl Into<String>) -> Search<'_> {
        Search {
            queue: self,
            state,
            text: text.into(),
            order: Order::Asc,
            after: None,
            limit: DEFAULT_LIMIT,
            scan: DEFAULT_SCAN,
        }
    }
}
