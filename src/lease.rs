//! Lease renewal: while a handler runs longer than the visibility timeout
//! allows, the consumer renews its delivery's lease, so a slow but alive
//! handler keeps its message and only a crashed or stuck consumer loses it.
//!
//! Each running delivery holds a [`Lease`]: the lease value that fences its
//! ack or nack, and the matching deadline by this host's clock. One task per
//! consumer renews every registered lease each third of the visibility
//! timeout with one `extend` call per batch. A delivery reads its lease only
//! after its handler ends, through the same lock a renewal holds while in
//! flight, so the ack always carries the lease Redis has.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex as SyncMutex};

use fred::prelude::Value;
use tokio::sync::Mutex;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::keys::Keys;
use crate::{scripts, DelayQueue, MessageId};

/// A delivery's current lease.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Held {
    /// Visibility deadline in microseconds of Redis time; fences ack and nack.
    pub lease: i64,
    /// When the lease ends by this host's clock (never later than in Redis).
    pub deadline: Instant,
    /// A renewal found the lease gone: the message was taken back.
    pub lost: bool,
    /// The handler has ended: the lease is no longer renewed.
    done: bool,
}

/// The lease of one running delivery.
pub(crate) struct Lease {
    id: MessageId,
    held: Mutex<Held>,
}

impl Lease {
    pub fn new(id: MessageId, lease: i64, deadline: Instant) -> Arc<Lease> {
        Arc::new(Lease {
            id,
            held: Mutex::new(Held {
                lease,
                deadline,
                lost: false,
                done: false,
            }),
        })
    }

    /// Stops renewals and returns the final lease, after any renewal in
    /// flight, so an ack never races a renewal that replaces its lease.
    pub async fn finish(&self) -> Held {
        let mut held = self.held.lock().await;
        held.done = true;
        *held
    }
}

/// The leases a consumer renews: those of its running handlers.
#[derive(Default)]
pub(crate) struct Leases {
    running: SyncMutex<HashMap<u64, Arc<Lease>>>,
    next: AtomicU64,
}

/// Keeps a lease renewed until dropped.
pub(crate) struct Renewing<'a> {
    leases: &'a Leases,
    key: u64,
}

impl Drop for Renewing<'_> {
    fn drop(&mut self) {
        self.leases.running.lock().unwrap().remove(&self.key);
    }
}

impl Leases {
    /// Renews `lease` until the returned guard is dropped.
    pub fn renew(&self, lease: &Arc<Lease>) -> Renewing<'_> {
        let key = self.next.fetch_add(1, Ordering::Relaxed);
        self.running.lock().unwrap().insert(key, lease.clone());
        Renewing { leases: self, key }
    }

    fn snapshot(&self) -> Vec<Arc<Lease>> {
        self.running.lock().unwrap().values().cloned().collect()
    }
}

/// Starts the renewal task of the shard with keys `k`; abort it once no
/// handler runs.
pub(crate) fn spawn(queue: DelayQueue, k: Keys, leases: Arc<Leases>) -> JoinHandle<()> {
    tokio::spawn(async move {
        let every = queue.inner.config.max_consume_duration / 6;
        let mut tick = tokio::time::interval_at(Instant::now() + every, every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let running = leases.snapshot();
            for batch in running.chunks(queue.inner.config.batch_size) {
                if let Err(e) = renew(&queue, &k, batch).await {
                    tracing::warn!(queue = %queue.name(), error = %e, "lease renewal failed; retrying at the next tick");
                }
            }
        }
    })
}

/// Renews one batch of leases with one `extend` call.
async fn renew(queue: &DelayQueue, k: &Keys, batch: &[Arc<Lease>]) -> Result<(), crate::Error> {
    let inner = &queue.inner;
    let vis = inner.config.max_consume_duration;
    let mut held = Vec::with_capacity(batch.len());
    for lease in batch {
        let h = lease.held.lock().await;
        if !h.done && !h.lost && h.deadline.saturating_duration_since(Instant::now()) < vis * 2 / 3 {
            held.push((lease, h));
        }
    }
    if held.is_empty() {
        return Ok(());
    }
    let now = Instant::now();
    let mut args: Vec<Value> = Vec::with_capacity(1 + 3 * held.len());
    args.push(k.msg_prefix.as_str().into());
    let mut renewed = Vec::with_capacity(held.len());
    for (lease, h) in &held {
        // Moving the deadline by this host's clock keeps the mapping between
        // the two clocks that the claim established.
        let extra = (now + vis).saturating_duration_since(h.deadline);
        let new = h.lease + extra.as_micros() as i64;
        args.push(lease.id.as_str().into());
        args.push(h.lease.into());
        args.push(new.into());
        renewed.push((new, h.deadline + extra));
    }
    let reply: Vec<i64> = queue.call(&scripts::EXTEND, k.for_extend(), args).await?;
    for ((lease, h), (ok, (new, deadline))) in held.iter_mut().zip(reply.into_iter().zip(renewed)) {
        if ok == 1 {
            (h.lease, h.deadline) = (new, deadline);
        } else {
            h.lost = true;
            tracing::warn!(
                queue = %inner.name, id = %lease.id,
                "lease lost while the handler runs (renewal came too late); the message is delivered again"
            );
        }
    }
    Ok(())
}
