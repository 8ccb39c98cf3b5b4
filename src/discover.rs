//! Finding the queues that live in a Redis, for tools such as the CLI.

use fred::prelude::{Client, ClientLike};
use fred::types::scan::ScanType;
use futures::TryStreamExt;

use crate::keys::Keys;
use crate::Error;

/// The names of the queues under `key_prefix` (`"dq:"` unless the queues
/// were built with another [`key_prefix`](crate::DelayQueueBuilder::key_prefix))
/// that were ever sent to and not purged since, sorted.
///
/// Walks the whole keyspace with `SCAN` (on every primary of a cluster), a
/// page at a time: fine for tools and start-up checks, not for a hot path.
///
/// ```no_run
/// # async fn run() -> Result<(), delayqueue::Error> {
/// let client = delayqueue::connect("redis://127.0.0.1:6379").await?;
/// for name in delayqueue::find_queues(&client, "dq:").await? {
///     println!("{name}");
/// }
/// # Ok(()) }
/// ```
pub async fn find_queues(client: &Client, key_prefix: &str) -> Result<Vec<String>, Error> {
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
    let mut names: Vec<String> = keys
        .iter()
        .filter_map(|k| k.as_str())
        .filter_map(|k| Keys::name_of_totals(key_prefix, k).map(str::to_string))
        .collect();
    names.sort();
    names.dedup();
    Ok(names)
}
