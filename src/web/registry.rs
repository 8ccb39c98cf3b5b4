//! The queues the dashboard shows: those found in Redis by
//! [`find_queues`](crate::find_queues) (a keyspace `SCAN`, so cached and
//! refreshed at most every [`REFRESH`]) plus those given by
//! [`Dashboard::queue`](super::Dashboard::queue). One handle per queue.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fred::prelude::Client;
use futures::StreamExt;

use crate::{find_queues, DelayQueue, Error, QueueStatus};

/// Longest the cached list of queues is used before it is scanned again.
pub(crate) const REFRESH: Duration = Duration::from_secs(30);

/// Status reads run at once by [`statuses`].
const CONCURRENCY: usize = 16;

/// The status of every queue (one script per shard), in name order, at
/// most [`CONCURRENCY`] queues at a time.
pub(crate) async fn statuses(queues: &BTreeMap<String, DelayQueue>) -> Vec<(DelayQueue, Result<QueueStatus, Error>)> {
    futures::stream::iter(queues.values().cloned())
        .map(|q| async move {
            let status = q.status().await;
            (q, status)
        })
        .buffered(CONCURRENCY)
        .collect()
        .await
}

/// The cached queues, by name.
#[derive(Debug)]
pub(crate) struct Registry {
    client: Client,
    prefix: String,
    /// The handles given by the application: they win over found ones.
    given: Vec<DelayQueue>,
    cache: Mutex<Option<Cached>>,
    /// Held while scanning, so concurrent first requests scan once.
    scanning: tokio::sync::Mutex<()>,
}

#[derive(Debug, Clone)]
struct Cached {
    at: Instant,
    queues: Arc<BTreeMap<String, DelayQueue>>,
}

impl Registry {
    pub(crate) fn new(client: Client, prefix: String, given: Vec<DelayQueue>) -> Self {
        Registry {
            client,
            prefix,
            given,
            cache: Mutex::new(None),
            scanning: tokio::sync::Mutex::new(()),
        }
    }

    fn cached(&self) -> Option<Cached> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Every queue, sorted by name: the cached list, or the first scan's.
    pub(crate) async fn all(&self) -> Result<Arc<BTreeMap<String, DelayQueue>>, Error> {
        if let Some(c) = self.cached() {
            return Ok(c.queues);
        }
        let _scan = self.scanning.lock().await;
        if let Some(c) = self.cached() {
            return Ok(c.queues);
        }
        self.scan().await
    }

    /// Scans again when the list is older than [`REFRESH`] (the background task).
    pub(crate) async fn refresh_if_stale(&self) -> Result<(), Error> {
        if self.cached().is_some_and(|c| c.at.elapsed() < REFRESH) {
            return Ok(());
        }
        let _scan = self.scanning.lock().await;
        self.scan().await.map(drop)
    }

    /// Queue `name`: from the list, else (a queue sent to since the last
    /// scan) the queue of that name with the shard count it records, or an
    /// ordinary one when it records none and exists in Redis (one script
    /// call, one `EXISTS`). `None` when unknown.
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

    /// Drops `name` from the cached list, so the next lookup reads its
    /// shard count again.
    pub(crate) fn forget(&self, name: &str) {
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = cache.as_mut().filter(|c| c.queues.contains_key(name)) {
            let mut queues = (*c.queues).clone();
            queues.remove(name);
            c.queues = Arc::new(queues);
        }
    }

    async fn lookup(&self, name: &str, create: bool) -> Result<Option<DelayQueue>, Error> {
        if let Some(q) = self.all().await?.get(name) {
            return Ok(Some(q.clone()));
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
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = cache.as_mut() {
            let mut queues = (*c.queues).clone();
            queues.insert(name.to_string(), queue.clone());
            c.queues = Arc::new(queues);
        }
        Ok(Some(queue))
    }

    fn build(&self, name: &str, shards: usize) -> Result<DelayQueue, Error> {
        DelayQueue::builder(name, self.client.clone())
            .key_prefix(self.prefix.as_str())
            .shards(shards)
            .build()
    }

    async fn scan(&self) -> Result<Arc<BTreeMap<String, DelayQueue>>, Error> {
        let mut queues = BTreeMap::new();
        for found in find_queues(&self.client, &self.prefix).await? {
            // A name found with two layouts and no recorded shard count
            // (changed by handles older than the record): the first, the
            // ordinary one, is shown.
            if queues.contains_key(&found.name) {
                continue;
            }
            if let Ok(q) = self.build(&found.name, found.shards) {
                queues.insert(found.name, q);
            }
        }
        for q in &self.given {
            queues.insert(q.name().to_string(), q.clone());
        }
        let queues = Arc::new(queues);
        *self.cache.lock().unwrap_or_else(|e| e.into_inner()) = Some(Cached {
            at: Instant::now(),
            queues: queues.clone(),
        });
        Ok(queues)
    }
}
