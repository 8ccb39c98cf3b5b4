//! [`Durability`]: how sure a send is that its message survives Redis
//! failures before it returns `Ok`.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use fred::prelude::{Client, ClientLike};
use fred::types::config::Options;
use fred::types::{ClusterHash, CustomCommand};

use crate::store::nodes;
use crate::store::scripts::{info_field, server_name_of};
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
/// docs/reliability.md states each promise with its conditions. A
/// confirmation that does not come within its timeout fails the send with
/// [`Error::NotDurable`]; one cut short by a lost connection, or a send
/// during which the client reconnected, fails it with
/// [`Error::Unconfirmed`]. Either way the message may be stored: send it
/// again with the same id.
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
    /// later, or Valkey; the primary needs `appendonly yes` for `local`).
    /// On an older server every send fails with
    /// [`Error::WaitAofUnsupported`] before storing anything.
    Aof {
        /// Whether the primary's own AOF must have it.
        local: bool,
        /// Replicas whose AOF must have it.
        replicas: u32,
        /// Longest wait for them.
        timeout: Duration,
    },
}

/// A watch on the client's connections: fred announces each new
/// connection before it re-sends the commands the old one left
/// unanswered; on a cluster, the primaries' connections and slot changes
/// count too (`store::nodes`).
pub(crate) type Reconnects = nodes::Watch;

/// Watches the client's connections from now on.
pub(crate) fn reconnects(client: &Client) -> Reconnects {
    nodes::watch(client)
}

/// Whether a connection changed since `rx` began watching.
pub(crate) fn reconnected(rx: &mut Reconnects) -> bool {
    rx.changed()
}

/// What [`check_waitaof`] found on the client's current connections: a
/// receiver of the reconnections since, and `Err` with the name of a
/// server that lacks `WAITAOF`.
pub(crate) type WaitAofFound = Option<(Reconnects, Result<(), String>)>;

/// Refuses a `Durability::Aof` send before it stores anything when a node
/// of the queue lacks `WAITAOF` (Redis before 7.2): the send would store
/// the message and then fail, and a caller retrying without an id would
/// send it twice. Asks `INFO server` (which the documented ACLs grant) once
/// per connection, whatever it answers: again after any reconnect, which
/// may reach another server. `checked` keeps the answer (an error asking
/// is not kept: the next send asks again).
pub(crate) async fn check_waitaof(
    client: &Client,
    queue: &str,
    durability: &Durability,
    shards: &[Keys],
    checked: &Mutex<WaitAofFound>,
) -> Result<(), Error> {
    if !matches!(durability, Durability::Aof { .. }) {
        return Ok(());
    }
    let refused = |server: String| Error::WaitAofUnsupported {
        queue: queue.to_string(),
        server,
    };
    {
        let mut checked = checked.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((rx, found)) = checked.as_mut() {
            if !reconnected(rx) {
                return found.clone().map_err(refused);
            }
        }
        *checked = None;
    }
    let rx = reconnects(client);
    let mut found = Ok(());
    for k in shards {
        let info: String = nodes::on_slot(client, slot_of(k), |node| async move {
            node.custom(
                CustomCommand::new_static("INFO", ClusterHash::Custom(slot_of(k)), false),
                vec!["server"],
            )
            .await
        })
        .await
        .map_err(|e| Error::from_redis(queue, e))?;
        if !has_waitaof(&info) {
            found = Err(server_name_of(&info));
            break;
        }
    }
    *checked.lock().unwrap_or_else(PoisonError::into_inner) = Some((rx, found.clone()));
    found.map_err(refused)
}

/// Whether the server `INFO server` describes has `WAITAOF`: Redis 7.2 or
/// later, and Valkey, which reports the Redis version it matches (7.2.4).
/// An unreadable version counts as having it: `WAITAOF` itself then answers.
fn has_waitaof(info: &str) -> bool {
    let Some(version) = info_field(info, "redis_version") else {
        return true;
    };
    let mut parts = version.split('.').map(|p| p.parse::<u32>().ok());
    match (parts.next().flatten(), parts.next().flatten()) {
        (Some(major), Some(minor)) => (major, minor) >= (7, 2),
        _ => true,
    }
}

/// The slot of shard `k`.
fn slot_of(k: &Keys) -> u16 {
    fred::util::redis_keyslot(k.pending.as_bytes())
}

/// Waits until the writes this client made so far to the nodes of
/// `shards` meet `durability`.
///
/// `WAIT`/`WAITAOF` cover every write sent earlier on the same connection:
/// this goes to the connection of the shard's primary, which the send
/// that just returned used. If the connection closes
/// while it waits, or is down when it is sent, this fails rather than
/// confirm nothing on a new connection; a reconnect completed between the
/// send and this call is for the caller to notice ([`reconnected`]).
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
    let slot = slot_of(k);
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
    let reply: fred::prelude::Value = nodes::connection(client, slot)
        .with_options(&once)
        .custom(
            CustomCommand::new_static(command, ClusterHash::Custom(slot), true),
            args,
        )
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waitaof_is_known_from_redis_7_2_and_in_valkey() {
        let info = |fields: &str| format!("# Server\r\n{fields}\r\nredis_mode:standalone\r\n");
        assert!(!has_waitaof(&info("redis_version:7.0.15")));
        assert!(!has_waitaof(&info("redis_version:6.2.14")));
        assert!(has_waitaof(&info("redis_version:7.2.0")));
        assert!(has_waitaof(&info("redis_version:8.0.2")));
        // Valkey 8 and 9 report the Redis version they match.
        assert!(has_waitaof(&info("redis_version:7.2.4\r\nvalkey_version:9.0.0")));
        assert!(has_waitaof(&info("nothing to go by")));
    }
}
