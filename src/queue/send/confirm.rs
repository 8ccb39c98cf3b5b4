//! Confirming a send: under a durability other than `Memory`, the shards
//! written to are waited on (WAIT / WAITAOF); when that, or a reconnect
//! during the send, leaves messages maybe lost, the send fails with
//! [`Error::Unconfirmed`] naming them.

use super::builder::Sent;
use super::dispatch::{reconnect_error, Dispatched};
use crate::error::connection_failed;
use crate::queue::durability::{self, Durability};
use crate::store::Keys;
use crate::{DelayQueue, Error, MessageId};

impl Dispatched {
    /// Waits until the replicas (or the append-only files) hold what this
    /// dispatch wrote, as the queue's durability says.
    pub(crate) async fn confirm(&mut self, queue: &DelayQueue) -> Result<(), Error> {
        let inner = &queue.inner;
        let config = &inner.config;
        // Duplicates wait too: a caller sending again after NotDurable
        // learns whether the replicas have caught up.
        if config.durability == Durability::Memory || self.written.is_empty() {
            return Ok(());
        }
        let confirmed: Vec<&MessageId> = self
            .results
            .iter()
            .filter_map(|r| match r {
                Ok(Sent::Stored(id) | Sent::Replaced(id)) => Some(id),
                _ => None,
            })
            .collect();
        let shards: Vec<&Keys> = self.written.iter().map(|&i| &inner.shards[i]).collect();
        // Boxed: its WAIT is a client future of kilobytes.
        let waited = Box::pin(durability::confirm(
            &inner.client,
            &inner.name,
            &config.durability,
            &shards,
        ))
        .await;
        let reconnected = self.reconnected || durability::reconnected(&mut self.reconnects);
        let failed = match waited {
            Err(Error::Redis(e)) if connection_failed(&e) && !confirmed.is_empty() => Some(e),
            Err(e) => return Err(e),
            Ok(()) if reconnected && !confirmed.is_empty() => Some(reconnect_error()),
            Ok(()) => None,
        };
        match failed {
            Some(source) => Err(Error::Unconfirmed {
                queue: inner.name.clone(),
                ids: confirmed.into_iter().cloned().collect(),
                source,
            }),
            None => Ok(()),
        }
    }
}
