//! [`Durability`]: how sure a send is that its message survives Redis
//! failures before it returns `Ok`.

use std::time::Duration;

use fred::prelude::ClientLike;
use fred::types::config::Options;
use fred::types::{ClusterHash, CustomCommand};

use fred::prelude::Client;

use crate::store::Keys;
use crate::Error;

/// When a send returns `Ok`. Set with
/// [`DelayQueueBuilder::durability`](crate::DelayQueueBuilder::durability).
///
/// | setting | `Ok` means the message is | lost by |
/// |---|---|---|
/// | `Memory` (default) | in the primary's memory, and in its AOF if `appendfsync always` | a crash of a primary without `appendfsync always`; a failover before the replicas got it |
/// | `Replicas` | also in the memory of `replicas` replicas | losing the primary and those replicas at once |
/// | `Aof` | fsynced to the AOF of the primary (when `local`) and of `replicas` replicas | losing all their disks |
///
/// A confirmation that does not come within its timeout fails the send with
/// [`Error::NotDurable`]; the message is stored on the primary all the same,
/// so send it again with the same caller-given id to be sure: `Ok`, or
/// [`Error::Duplicate`], then means it is stored and confirmed.
///
/// ```no_run
/// # async fn run(client: delayqueue::fred::clients::Client) -> Result<(), delayqueue::Error> {
/// use std::time::Duration;
/// use delayqueue::{DelayQueue, Durability};
/// let queue = DelayQueue::builder("payments", client)
///     .durability(Durability::Replicas { replicas: 1, timeout: Duration::from_millis(500) })
///     .build()?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Durability {
    /// `Ok` once the primary has the message (no extra round trip).
    #[default]
    Memory,
    /// `Ok` once `replicas` replicas have it too (Redis `WAIT`).
    Replicas {
        /// Replicas that must confirm.
        replicas: u32,
        /// Longest wait for them.
        timeout: Duration,
    },
    /// `Ok` once it is fsynced to the append-only file of the primary
    /// (`local`) and of `replicas` replicas (Redis `WAITAOF`, Redis 7.2 or
    /// later; the primary needs `appendonly yes` for `local`).
    Aof {
        /// Whether the primary's own AOF must have it.
        local: bool,
        /// Replicas whose AOF must have it.
        replicas: u32,
        /// Longest wait for them.
        timeout: Duration,
    },
}

/// Waits until the writes this client made so far to the nodes of
/// `shards` meet `durability`.
///
/// `WAIT`/`WAITAOF` cover every write sent earlier on the same connection:
/// fred keeps one connection per server and routes this to the queue's
/// node, so it covers the send that just returned. If the connection closes
/// while it waits, or is down when it is sent, this fails rather than
/// confirm nothing on a new connection; a reconnect completed between the
/// send and this call still goes unnoticed.
pub(crate) async fn confirm(
    client: &Client,
    queue: &str,
    durability: &Durability,
    shards: &[&Keys],
) -> Result<(), Error> {
    // One at a time: a blocking WAIT holds up its connection anyway.
    for k in shards {
        confirm_shard(client, queue, durability, k).await?;
    }
    Ok(())
}

/// Waits on the node of one shard.
async fn confirm_shard(client: &Client, queue: &str, durability: &Durability, k: &Keys) -> Result<(), Error> {
    let slot = ClusterHash::Custom(fred::util::redis_keyslot(k.pending.as_bytes()));
    let (command, args, wanted): (&'static str, Vec<i64>, [i64; 2]) = match *durability {
        Durability::Memory => return Ok(()),
        Durability::Replicas { replicas, timeout } => {
            let replicas = i64::from(replicas);
            ("WAIT", vec![replicas, millis(timeout)], [0, replicas])
        }
        Durability::Aof {
            local,
            replicas,
            timeout,
        } => {
            let (local, replicas) = (i64::from(local), i64::from(replicas));
            ("WAITAOF", vec![local, replicas, millis(timeout)], [local, replicas])
        }
    };
    // WAIT/WAITAOF count the writes of their own connection. Re-sent on a
    // new connection (fred re-sends a command whose connection closed, e.g.
    // when the primary died and a replica took over) it would count nothing
    // and confirm at once. So: one attempt, and none while disconnected.
    let once = Options {
        max_attempts: Some(1),
        fail_fast: true,
        ..Default::default()
    };
    let reply: fred::prelude::Value = client
        .with_options(&once)
        .custom(CustomCommand::new_static(command, slot, true), args)
        .await
        .map_err(|e| Error::from_redis(queue, e))?;
    // WAIT answers the replicas that have it; WAITAOF [local, replicas].
    let got: [i64; 2] = match reply {
        fred::prelude::Value::Array(v) if v.len() == 2 => [v[0].as_i64().unwrap_or(0), v[1].as_i64().unwrap_or(0)],
        other => [0, other.as_i64().unwrap_or(0)],
    };
    if got[0] < wanted[0] || got[1] < wanted[1] {
        return Err(Error::NotDurable {
            queue: queue.to_string(),
            confirmed: got[1].max(0) as u32,
            wanted: wanted[1] as u32,
            local: got[0] >= wanted[0],
        });
    }
    Ok(())
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}
