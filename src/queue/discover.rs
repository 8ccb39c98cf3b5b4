//! Finding the queues that live in a Redis, for tools such as the CLI.

use fred::prelude::{Client, ClientLike};
use fred::types::scan::ScanType;
use futures::{StreamExt, TryStreamExt};
use std::collections::BTreeMap;

use crate::store::ops::shards::ShardRecord;
use crate::store::{Keys, Shard};
use crate::Error;

/// A queue that [`find_queues`] found.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
#[non_exhaustive]
pub struct FoundQueue {
    /// Its name, as given to [`DelayQueue::builder`](crate::DelayQueue::builder).
    pub name: String,
    /// How many shards it is spread over ([`shards`](crate::DelayQueueBuilder::shards)):
    /// the count the queue records ([`recorded_shards`]), else (a sharded
    /// queue whose handles never recorded it) one more than the highest
    /// shard number found; 1 for an ordinary queue.
    pub shards: usize,
}

/// The shard count queue `name` under `key_prefix` records: written by
/// its first sharded handle to send or consume (one key of the name's own
/// hash tag, `<prefix>{<name>}:totals`, so it is found by name alone).
/// `None` when none is recorded: an ordinary queue, or none of that name.
/// One script call.
///
/// ```no_run
/// # async fn run(client: delayqueue::fred::clients::Client) -> Result<(), delayqueue::Error> {
/// let shards = delayqueue::recorded_shards(&client, "dq:", "orders").await?.unwrap_or(1);
/// let orders = delayqueue::DelayQueue::builder("orders", client).shards(shards).build()?;
/// # Ok(()) }
/// ```
pub async fn recorded_shards(client: &Client, key_prefix: &str, name: &str) -> Result<Option<usize>, Error> {
    let keys = Keys::new(key_prefix, name)?;
    Shard::new(client, &keys, name).run(&ShardRecord::Read).await
}

/// Queues read at once by [`find_queues`].
const CONCURRENCY: usize = 64;

/// The queues under `key_prefix` (`"dq:"` unless the queues were built
/// with another [`key_prefix`](crate::DelayQueueBuilder::key_prefix)) that
/// were ever sent to or given a schedule, and not purged since (one that
/// had schedules stays), sorted by name, each sharded one with its
/// recorded shard count. A name with keys of both an ordinary and a
/// sharded layout but no recorded count (a changed shard count, by
/// handles older than the record) is listed once for each.
///
/// Walks the whole keyspace with `SCAN` (on every primary of a cluster), a
/// page at a time, and reads the shard count record of each ordinary queue
/// found (one script call each, 64 at a time): fine for tools and start-up
/// checks, not for a hot path.
///
/// ```no_run
/// # async fn run() -> Result<(), delayqueue::Error> {
/// let client = delayqueue::connect("redis://127.0.0.1:6379").await?;
/// for queue in delayqueue::find_queues(&client, "dq:").await? {
///     println!("{} ({} shards)", queue.name, queue.shards);
/// }
/// # Ok(()) }
/// ```
pub async fn find_queues(client: &Client, key_prefix: &str) -> Result<Vec<FoundQueue>, Error> {
    let pattern = Keys::totals_pattern(key_prefix);
    let kind = Some(ScanType::Hash);
    let keys: Vec<fred::types::Key> = if client.is_clustered() {
        client
            .scan_cluster_buffered(pattern, Some(1000), kind)
            .try_collect()
            .await?
    } else {
        client.scan_buffered(pattern, Some(1000), kind).try_collect().await?
    };
    // Name and sharded or not -> shard count.
    let mut found: BTreeMap<(String, bool), usize> = BTreeMap::new();
    for (name, shard) in keys
        .iter()
        .filter_map(|k| k.as_str())
        .filter_map(|k| Keys::name_of_totals(key_prefix, k))
    {
        let shards = found.entry((name.to_string(), shard.is_some())).or_insert(1);
        *shards = (*shards).max(shard.map_or(1, |i| i + 1));
    }
    // Only a name with an unsharded totals hash can hold a record.
    let unsharded: Vec<String> = found
        .keys()
        .filter(|(_, sharded)| !sharded)
        .map(|(name, _)| name.clone())
        .collect();
    let records: Vec<(String, Option<usize>)> = futures::stream::iter(unsharded)
        .map(|name| async move {
            let n = recorded_shards(client, key_prefix, &name).await?;
            Ok::<_, Error>((name, n))
        })
        .buffered(CONCURRENCY)
        .try_collect()
        .await?;
    for (name, recorded) in records {
        if let Some(n) = recorded {
            found.remove(&(name.clone(), true));
            found.insert((name, false), n);
        }
    }
    Ok(found
        .into_iter()
        .map(|((name, _), shards)| FoundQueue { name, shards })
        .collect())
}
