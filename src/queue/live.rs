//! The registry of live consumers read: [`consumers`] and
//! [`DelayQueue::consumers`] (lua/consumers.lua).

use fred::prelude::Client;

use crate::registry::{decode, LiveConsumers, MAX_ENTRY_BYTES};
use crate::store::ops::consumers::ListConsumers;
use crate::store::{Keys, Shard};
use crate::{DelayQueue, Error};

/// Most consumers one listing reads.
pub const MAX_CONSUMERS_LISTED: usize = 500;

/// The live consumers under `key_prefix` (`"dq:"` unless the queues were
/// built with another [`key_prefix`](crate::DelayQueueBuilder::key_prefix)):
/// every running [`Consumer`](crate::Consumer) whose last heartbeat is
/// younger than its TTL, with its host, pid, queues and the messages its
/// handlers run now, soonest to expire first, at most
/// [`MAX_CONSUMERS_LISTED`] of them. An entry this version cannot read (of
/// another version, or written by something else) is in
/// [`skipped`](LiveConsumers::skipped) with the reason. One script call,
/// reading at most [`MAX_ENTRY_BYTES`] per entry; no SCAN.
///
/// ```no_run
/// # async fn run(client: delayqueue::fred::clients::Client) -> Result<(), delayqueue::Error> {
/// for c in delayqueue::consumers(&client, "dq:").await?.consumers {
///     println!("{} pid {}: {} running", c.host, c.pid, c.running_total);
/// }
/// # Ok(()) }
/// ```
pub async fn consumers(client: &Client, key_prefix: &str) -> Result<LiveConsumers, Error> {
    let registry = Keys::registry(key_prefix)?;
    let op = ListConsumers {
        limit: MAX_CONSUMERS_LISTED as u64,
        max_bytes: MAX_ENTRY_BYTES as u64,
    };
    let (live, listed) = Shard::new(client, &registry, "(consumer registry)").run(&op).await?;
    let mut out = LiveConsumers {
        live,
        ..LiveConsumers::default()
    };
    for (id, raw) in listed {
        match decode(&id, raw) {
            Ok(info) => out.consumers.push(info),
            Err(skipped) => out.skipped.push(skipped),
        }
    }
    Ok(out)
}

impl DelayQueue {
    /// The live consumers that read this queue: [`consumers`] of the
    /// queue's key prefix, those that list it among their queues.
    pub async fn consumers(&self) -> Result<LiveConsumers, Error> {
        let mut all = consumers(&self.inner.client, &self.inner.prefix).await?;
        all.consumers
            .retain(|c| c.queues.iter().any(|q| q.name == self.inner.name));
        Ok(all)
    }
}
