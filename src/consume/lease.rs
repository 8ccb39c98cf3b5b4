//! Lease renewal: while a handler runs longer than the max consume duration
//! allows, the consumer renews its delivery's lease, so a slow but alive
//! handler keeps its message and only a crashed or stuck consumer loses it.
//!
//! Each running delivery holds a [`Lease`]: the lease value that fences its
//! ack or nack, and the matching deadline by this host's clock. One task per
//! consumer renews every registered lease each third of the max consume
//! duration with one `extend` call per batch. A delivery reads its lease only
//! after its handler ends, through the same lock a renewal holds while in
//! flight, so the ack always carries the lease Redis has.
//!
//! A renewal whose reply is lost (a command timeout while Redis stalls, a
//! cut connection) may still run in Redis. Its target stays *unconfirmed*:
//! the next renewal repeats exactly that call, which `extend` accepts
//! whether or not it ran before, and the final lease is settled the same
//! way before the ack. So a stall shorter than the lease left costs nothing.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex as SyncMutex};
use std::time::Duration;

use tokio::sync::Mutex;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::aborts;
use super::context::Context;
use crate::message::Receipt;
use crate::store::ops::extend::{Extend, Renewed};
use crate::store::Keys;
use crate::{Error, MessageId};

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
    /// A renewal to this lease and deadline was sent, but its reply was
    /// lost: Redis holds either it or `lease`.
    unconfirmed: Option<(i64, Instant)>,
}

/// The lease of one running delivery.
pub(crate) struct Lease {
    id: MessageId,
    held: Mutex<Held>,
}

impl Lease {
    /// The lease of the delivery with `receipt`, as claimed.
    pub(crate) fn new(receipt: &Receipt) -> Arc<Lease> {
        Arc::new(Lease {
            id: receipt.id.clone(),
            held: Mutex::new(Held {
                lease: receipt.lease,
                deadline: receipt.deadline,
                lost: false,
                done: false,
                unconfirmed: None,
            }),
        })
    }

    /// The lease now, after any renewal in flight; `None` once it was
    /// lost or the handler has ended.
    pub(crate) async fn current(&self) -> Option<i64> {
        let held = self.held.lock().await;
        (!held.lost && !held.done).then_some(held.lease)
    }

    /// Stops renewals and returns the final lease, after any renewal in
    /// flight, so an ack never races a renewal that replaces its lease. A
    /// renewal whose reply was lost is settled first (repeated until it
    /// answers or its lease is over).
    pub(crate) async fn finish(&self, ctx: &Context, k: &Keys) -> Held {
        let mut held = self.held.lock().await;
        held.done = true;
        let mut backoff = Duration::from_millis(20);
        while let Some((_, deadline)) = held.unconfirmed {
            // The unconfirmed target is repeated; `next` is not asked.
            match extend(ctx, k, [(self, &mut *held)], |h| (h.lease, h.deadline)).await {
                Ok(()) => break,
                Err(e) if Instant::now() + backoff < deadline => {
                    tracing::debug!(queue = %ctx.name, id = %self.id, error = %e, "settling a lease renewal; retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                }
                Err(_) => {
                    held.lost = true;
                    break;
                }
            }
        }
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
    pub(crate) fn renew(&self, lease: &Arc<Lease>) -> Renewing<'_> {
        let key = self.next.fetch_add(1, Ordering::Relaxed);
        self.running.lock().unwrap().insert(key, lease.clone());
        Renewing { leases: self, key }
    }

    fn snapshot(&self) -> Vec<Arc<Lease>> {
        self.running.lock().unwrap().values().cloned().collect()
    }
}

/// Starts the renewal task of the queue's shard number `shard`; abort it
/// once no handler runs.
pub(crate) fn spawn(ctx: Arc<Context>, shard: usize, leases: Arc<Leases>) -> JoinHandle<()> {
    tokio::spawn(async move {
        let k = &ctx.shards[shard];
        let every = ctx.settings.max_consume_duration / 6;
        let mut tick = tokio::time::interval_at(Instant::now() + every, every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let running = leases.snapshot();
            for batch in running.chunks(ctx.settings.batch_size) {
                // Boxed, so that the waiting task does not hold the renewal's state.
                if let Err(e) = Box::pin(renew(&ctx, k, batch)).await {
                    // A renewal that fails for good shows as a late ack or nack, which warns.
                    tracing::debug!(queue = %ctx.name, error = %e, "lease renewal failed; retrying at the next tick");
                }
            }
        }
    })
}

/// Renews one batch of leases with one `extend` call.
async fn renew(ctx: &Context, k: &Keys, batch: &[Arc<Lease>]) -> Result<(), Error> {
    let vis = ctx.settings.max_consume_duration;
    let mut held = Vec::with_capacity(batch.len());
    for lease in batch {
        let h = lease.held.lock().await;
        let due = h.unconfirmed.is_some() || h.deadline.saturating_duration_since(Instant::now()) < vis * 2 / 3;
        if !h.done && !h.lost && due {
            held.push((&**lease, h));
        }
    }
    if held.is_empty() {
        return Ok(());
    }
    let now = Instant::now();
    // Moving the deadline by this host's clock keeps the mapping between
    // the two clocks that the claim established.
    extend(ctx, k, held.iter_mut().map(|(l, h)| (*l, &mut **h)), |h| {
        let extra = (now + vis).saturating_duration_since(h.deadline);
        (h.lease + extra.as_micros() as i64, h.deadline + extra)
    })
    .await
}

/// One `extend` call for `leases`: each moves to its unconfirmed target if
/// it has one (the repeat of a call whose reply was lost), else to the
/// target `next` gives. Updates each lease from the reply; on an error the
/// targets stay unconfirmed.
async fn extend<'a>(
    ctx: &Context,
    k: &Keys,
    leases: impl IntoIterator<Item = (&'a Lease, &'a mut Held)>,
    next: impl Fn(&Held) -> (i64, Instant),
) -> Result<(), Error> {
    let mut calls = Vec::new();
    let mut renewals = Vec::new();
    for (lease, h) in leases {
        let target = h.unconfirmed.unwrap_or_else(|| next(h));
        h.unconfirmed = Some(target);
        renewals.push((lease.id.as_str(), h.lease, target.0));
        calls.push((lease, h, target));
    }
    let reply = ctx.store(k).run(&Extend { renewals }).await?;
    for ((lease, h, (new, deadline)), renewed) in calls.into_iter().zip(reply) {
        h.unconfirmed = None;
        if renewed != Renewed::Lost {
            (h.lease, h.deadline) = (new, deadline);
            if renewed == Renewed::Aborted {
                // The abort signal's fallback (it may have been lost).
                aborts::fire(&k.wake, lease.id.as_str());
            }
        } else {
            h.lost = true;
            // Debug: the handler's ack or nack finds the lease gone and warns.
            tracing::debug!(
                queue = %ctx.name, id = %lease.id,
                "lease lost while the handler runs (renewal came too late); the message is delivered again"
            );
        }
    }
    Ok(())
}
