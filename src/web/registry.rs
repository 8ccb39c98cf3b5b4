//! The queues the dashboard shows: a [`Listing`] of those found in Redis by
//! [`find_queues`](crate::find_queues) (a keyspace `SCAN`) with their counts
//! for sorting, plus those given by [`Dashboard::queue`](super::Dashboard::queue).
//! The listing holds names and counts, not handles: a handle is built for
//! the queues a request reads, so memory grows by a few dozen bytes per
//! queue. It is read at the first request and again, while an overview is
//! being looked at, when older than [`REFRESH`]: one scan at a time.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fred::prelude::Client;
use futures::StreamExt;

use crate::{find_queues, Counts, DelayQueue, Error, QueueStatus};

/// Longest the listing is used before it is read again.
pub(crate) const REFRESH: Duration = Duration::from_secs(30);

/// Status reads run at once by [`statuses`] and by a listing's read.
const CONCURRENCY: usize = 64;

/// The status of each queue (one script per shard), in the given order, at
/// most [`CONCURRENCY`] queues at a time. The queues are taken from `queues`
/// as their turn comes: a lazy iterator that builds handles keeps at most
/// that many alive at once.
pub(crate) async fn statuses(
    queues: impl IntoIterator<Item = DelayQueue>,
) -> Vec<(DelayQueue, Result<QueueStatus, Error>)> {
    futures::stream::iter(queues)
        .map(|q| async move {
            let status = q.status().await;
            (q, status)
        })
        .buffered(CONCURRENCY)
        .collect()
        .await
}

/// One queue of the listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Listed {
    pub name: String,
    pub shards: usize,
    /// Its counts when the listing was read (zero when they could not be).
    pub counts: Counts,
}

/// Every queue under the prefix, in name order, as read at `at`.
#[derive(Debug)]
pub(crate) struct Listing {
    pub at: Instant,
    pub queues: Vec<Listed>,
}

impl Listing {
    /// The queues whose name starts with `prefix`: a slice, as the
    /// listing is in name order.
    pub(crate) fn starting_with(&self, prefix: &str) -> &[Listed] {
        let from = self.queues.partition_point(|q| q.name.as_str() < prefix);
        let len = self.queues[from..].partition_point(|q| q.name.starts_with(prefix));
        &self.queues[from..from + len]
    }
}

/// The listing, and the shard count of every queue known by name.
#[derive(Debug)]
pub(crate) struct Registry {
    client: Client,
    prefix: String,
    /// The handles given by the application: they win over found ones.
    given: BTreeMap<String, DelayQueue>,
    /// Age at which the listing is read again, when wanted ([`REFRESH`]).
    refresh: Duration,
    listing: Mutex<Option<Arc<Listing>>>,
    /// Name -> shard count: the listing's, and those looked up by name
    /// since (a queue sent to after the listing was read).
    known: Mutex<HashMap<String, usize>>,
    /// When the listing was last asked for: a refresh is only worth it
    /// while someone looks at the overview.
    wanted: Mutex<Option<Instant>>,
    /// Held while reading the listing, so that concurrent requests read it once.
    scanning: tokio::sync::Mutex<()>,
}

impl Registry {
    /// The key prefix of the queues shown, and of the registry of live consumers.
    pub(crate) fn prefix(&self) -> &str {
        &self.prefix
    }

    pub(crate) fn new(client: Client, prefix: String, given: Vec<DelayQueue>, refresh: Duration) -> Self {
        Registry {
            client,
            prefix,
            given: given.into_iter().map(|q| (q.name().to_string(), q)).collect(),
            refresh,
            listing: Mutex::new(None),
            known: Mutex::new(HashMap::new()),
            wanted: Mutex::new(None),
            scanning: tokio::sync::Mutex::new(()),
        }
    }

    fn cached(&self) -> Option<Arc<Listing>> {
        self.listing.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The listing: the cached one, or the first read's. Marks it wanted.
    pub(crate) async fn listing(&self) -> Result<Arc<Listing>, Error> {
        *self.wanted.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
        self.first().await
    }

    /// The cached listing, else the first read's.
    async fn first(&self) -> Result<Arc<Listing>, Error> {
        match self.cached() {
            Some(l) => Ok(l),
            None => self.read_unless_changed(None).await,
        }
    }

    /// Reads the listing again when it is older than the refresh age and
    /// was asked for within that age (the background task).
    pub(crate) async fn refresh_if_stale(&self) -> Result<(), Error> {
        let wanted = *self.wanted.lock().unwrap_or_else(|e| e.into_inner());
        if wanted.is_none_or(|w| w.elapsed() >= self.refresh.max(REFRESH)) {
            return Ok(());
        }
        match self.cached() {
            Some(l) if l.at.elapsed() < self.refresh => Ok(()),
            seen => self.read_unless_changed(seen).await.map(drop),
        }
    }

    /// Reads the listing, unless another caller replaced `seen` while this
    /// one waited for the lock: then that caller's listing is the answer.
    async fn read_unless_changed(&self, seen: Option<Arc<Listing>>) -> Result<Arc<Listing>, Error> {
        let _scan = self.scanning.lock().await;
        if let Some(now) = self.cached() {
            if !seen.is_some_and(|s| Arc::ptr_eq(&s, &now)) {
                return Ok(now);
            }
        }
        self.read().await
    }

    /// Queue `name`: given, known, else (a queue sent to since the listing
    /// was read) the queue of that name with the shard count it records, or
    /// an ordinary one when it records none and exists in Redis (one
    /// script call, one `EXISTS`). `None` when unknown.
    pub(crate) async fn get(&self, name: &str) -> Result<Option<DelayQueue>, Error> {
        self.lookup(name, false).await
    }

    /// Queue `name` as [`get`](Self::get) finds it, else a new ordinary
    /// queue of that name (its first message creates it): where producers
    /// send. A queue sharded after it was listed here is refused by the send
    /// script ([`Error::ShardCount`]), never written to the unsharded layout;
    /// [`forget`](Self::forget) it then, and the next call finds its count.
    pub(crate) async fn get_or_new(&self, name: &str) -> Result<DelayQueue, Error> {
        match self.lookup(name, true).await? {
            Some(q) => Ok(q),
            None => self.build(name, 1),
        }
    }

    /// Drops the shard count known for `name`, so the next lookup reads it again.
    pub(crate) fn forget(&self, name: &str) {
        self.known.lock().unwrap_or_else(|e| e.into_inner()).remove(name);
    }

    /// The handle of queue `name` spread over `shards`: the given one, or a new one.
    pub(crate) fn handle(&self, name: &str, shards: usize) -> Result<DelayQueue, Error> {
        match self.given.get(name) {
            Some(q) => Ok(q.clone()),
            None => self.build(name, shards),
        }
    }

    /// Handles of `queues`, built as the iterator is advanced (for
    /// [`statuses`], which keeps few alive at once).
    pub(crate) fn handles<'a>(&'a self, queues: &'a [Listed]) -> impl Iterator<Item = DelayQueue> + Send + 'a {
        queues.iter().filter_map(move |q| self.handle(&q.name, q.shards).ok())
    }

    async fn lookup(&self, name: &str, create: bool) -> Result<Option<DelayQueue>, Error> {
        if let Some(q) = self.given.get(name) {
            return Ok(Some(q.clone()));
        }
        // The first lookup reads the listing: it knows sharded queues that
        // record no shard count.
        self.first().await?;
        let known = self.known.lock().unwrap_or_else(|e| e.into_inner()).get(name).copied();
        if let Some(shards) = known {
            return self.build(name, shards).map(Some);
        }
        let recorded = match crate::recorded_shards(&self.client, &self.prefix, name).await {
            Ok(n) => n,
            Err(e) if create => return Err(e),
            Err(Error::InvalidQueueName { .. } | Error::InvalidArgument(_)) => return Ok(None),
            Err(e) => return Err(e),
        };
        let queue = match self.build(name, recorded.unwrap_or(1)) {
            Ok(queue) => queue,
            Err(e) if create => return Err(e),
            Err(_) => return Ok(None),
        };
        if !create && recorded.is_none() && !queue.exists().await? {
            return Ok(None);
        }
        self.known
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name.to_string(), queue.shards());
        Ok(Some(queue))
    }

    fn build(&self, name: &str, shards: usize) -> Result<DelayQueue, Error> {
        DelayQueue::builder(name, self.client.clone())
            .key_prefix(self.prefix.as_str())
            .shards(shards)
            .build()
    }

    /// One `find_queues`, then the status of each queue found (at most
    /// [`CONCURRENCY`] at a time) for the counts the overview sorts by.
    async fn read(&self) -> Result<Arc<Listing>, Error> {
        let mut shards: BTreeMap<String, usize> = BTreeMap::new();
        for found in find_queues(&self.client, &self.prefix).await? {
            // A name found with two layouts and no recorded shard count
            // (changed by handles older than the record): the first, the
            // ordinary one, is shown.
            shards.entry(found.name).or_insert(found.shards);
        }
        for q in self.given.values() {
            shards.insert(q.name().to_string(), q.shards());
        }
        let read = statuses(
            shards
                .into_iter()
                .filter_map(move |(name, n)| self.handle(&name, n).ok()),
        )
        .await;
        let queues: Vec<Listed> = read
            .into_iter()
            .map(|(q, status)| Listed {
                name: q.name().to_string(),
                shards: q.shards(),
                counts: status.map(|s| s.counts).unwrap_or_else(|e| {
                    tracing::debug!(target: "delayqueue::web", queue = q.name(), error = %e, "cannot read its counts");
                    Counts::default()
                }),
            })
            .collect();
        let listing = Arc::new(Listing {
            at: Instant::now(),
            queues,
        });
        *self.known.lock().unwrap_or_else(|e| e.into_inner()) =
            listing.queues.iter().map(|q| (q.name.clone(), q.shards)).collect();
        *self.listing.lock().unwrap_or_else(|e| e.into_inner()) = Some(listing.clone());
        Ok(listing)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::RedisServer;

    /// `SCAN` calls the server has run: one listing read runs the same number.
    fn scans(server: &RedisServer) -> u64 {
        server
            .raw_command(&["INFO", "commandstats"])
            .lines()
            .find_map(|l| l.strip_prefix("cmdstat_scan:calls="))
            .and_then(|rest| rest.split(',').next()?.parse().ok())
            .unwrap_or(0)
    }

    #[tokio::test]
    async fn concurrent_requests_and_refreshes_read_the_listing_once() {
        let server = RedisServer::start().await;
        let client = server.client().await;
        for i in 0..40 {
            let q = DelayQueue::builder(format!("q{i:02}"), client.clone()).build().unwrap();
            for _ in 0..i % 4 {
                q.send("x").delay(Duration::from_secs(600)).await.unwrap();
            }
        }
        // Refreshed at every chance: only the lock keeps reads apart.
        let registry = || Registry::new(client.clone(), "dq:".into(), Vec::new(), Duration::ZERO);

        let before = scans(&server);
        let one = registry().listing().await.unwrap();
        let per_read = scans(&server) - before;
        assert!(per_read >= 1);
        assert_eq!(one.queues.len(), 30, "the queues sent to");
        let q03 = one.queues.iter().find(|q| q.name == "q03").unwrap();
        assert_eq!(q03.counts.pending, 3, "{q03:?}");

        // The first requests, and refreshes with them, on a new registry.
        let r = registry();
        let before = scans(&server);
        let firsts = (0..8).map(|_| async { r.listing().await.map(drop) });
        let refreshes = (0..8).map(|_| r.refresh_if_stale());
        let (a, b) = tokio::join!(futures::future::join_all(firsts), futures::future::join_all(refreshes));
        assert!(a.into_iter().chain(b).all(|r| r.is_ok()));
        assert_eq!(scans(&server) - before, per_read, "concurrent first requests read once");

        // Stale: concurrent refreshes read once more, and all see that read.
        let first = r.listing().await.unwrap();
        let before = scans(&server);
        let results = futures::future::join_all((0..8).map(|_| r.refresh_if_stale())).await;
        assert!(results.into_iter().all(|r| r.is_ok()));
        assert_eq!(scans(&server) - before, per_read, "concurrent refreshes read once");
        let second = r.listing().await.unwrap();
        assert!(!Arc::ptr_eq(&first, &second), "the refresh replaced the listing");
        assert_eq!(second.queues, first.queues);
    }
}
