//! Finding the queues that live in a Redis, for tools such as the CLI.

use fred::prelude::{Client, ClientLike};
use fred::types::scan::ScanType;
use futures::TryStreamExt;
use std::collections::BTreeMap;

use crate::store::Keys;
use crate::Error;

/// A queue that [`find_queues`] found.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
#[non_exhaustive]
pub struct FoundQueue {
    /// Its name, as given to [`DelayQueue::builder`](crate::DelayQueue::builder).
    pub name: String,
    /// How many shards it is spread over ([`shards`](crate::DelayQueueBuilder::shards)):
    /// one more than the highest shard number found, 1 for an ordinary queue.
    pub shards: usize,
}

/// The queues under `key_prefix` (`"dq:"` unless the queues were built
/// with another [`key_prefix`](crate::DelayQueueBuilder::key_prefix)) that
/// were ever sent to or given a schedule, and not purged since (one that
/// had schedules stays), sorted by name. A name with
/// keys of both an ordinary and a sharded layout (a changed shard count)
/// is listed once for each.
///
/// Walks the whole keyspace with `SCAN` (on every primary of a cluster), a
/// page at a time: fine for tools and start-up checks, not for a hot path.
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
    Ok(found
        .into_iter()
        .map(|((name, _), shards)| FoundQueue { name, shards })
        .collect())
}
