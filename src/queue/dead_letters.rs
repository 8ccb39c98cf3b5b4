//! Dead letters: messages that used up their deliveries wait in the
//! dead zset (scored by time of death) for their retention. Requeue
//! gives them a new life; delete ends theirs.

use std::time::Duration;

use crate::events::Action;
use crate::store::ops::{gc::Gc, requeue::Requeue};
use crate::store::Keys;
use crate::{DelayQueue, Error, MessageId};

/// Which dead letters a call acts on.
pub(crate) enum Which<'a> {
    One(&'a str),
    All,
}

impl<'a> Which<'a> {
    fn id(&self) -> Option<&'a str> {
        match *self {
            Which::One(id) => Some(id),
            Which::All => None,
        }
    }
}

/// Requeues dead letters; returns how many went back to ready.
pub(crate) async fn requeue(queue: &DelayQueue, which: Which<'_>) -> Result<u64, Error> {
    let inner = &queue.inner;
    let one = which.id();
    let done = repeat(queue, which, |k, ids| async move {
        let requeue = Requeue {
            limit: inner.config.consume.batch_size,
            ids,
        };
        let done = queue.store(k).run(&requeue).await?;
        Ok((done.requeued, done.taken))
    })
    .await?;
    tracing::info!(queue = %inner.name, requeued = done, "dead letters requeued");
    if done > 0 {
        queue.changed(Action::Requeued, one, done);
    }
    Ok(done)
}

/// Deletes dead letters; returns how many.
pub(crate) async fn delete(queue: &DelayQueue, which: Which<'_>) -> Result<u64, Error> {
    let inner = &queue.inner;
    let one = which.id();
    let done = repeat(queue, which, |k, ids| async move {
        // Retention 0 and no size limit: every dead letter qualifies.
        let gc = Gc {
            limit: inner.config.consume.batch_size,
            dead_letter_retention: Duration::ZERO,
            max_kept: u64::MAX,
            ids,
        };
        let deleted = queue.store(k).run(&gc).await?;
        Ok((deleted, deleted))
    })
    .await?;
    tracing::info!(queue = %inner.name, deleted = done, "dead letters deleted");
    if done > 0 {
        queue.changed(Action::Deleted, one, done);
    }
    Ok(done)
}

/// Runs `call` for one id in its shard, or shard by shard in batches until
/// the dead letters there were at the start are done (never more rounds
/// than those need, so a steady stream of new deaths cannot keep it going).
/// `call` returns how many it acted on and how many it took out of the dead zset.
async fn repeat<'k, F, Fut>(queue: &'k DelayQueue, which: Which<'k>, call: F) -> Result<u64, Error>
where
    F: Fn(&'k Keys, Vec<&'k str>) -> Fut,
    Fut: std::future::Future<Output = Result<(u64, u64), Error>>,
{
    if let Which::One(id) = which {
        MessageId::check(id)?;
        let k = queue.shard_of(id);
        return Ok(call(k, vec![id]).await?.0);
    }
    let batch = queue.inner.config.consume.batch_size as u64;
    let mut done = 0;
    for k in queue.inner.shards.iter() {
        let rounds = queue.shard_status(k).await?.counts.dead / batch + 1;
        for _ in 0..rounds {
            let (acted, taken) = call(k, Vec::new()).await?;
            done += acted;
            if taken < batch {
                break;
            }
        }
    }
    Ok(done)
}

impl DelayQueue {
    /// Moves a dead letter back to ready, with its retries restored.
    /// Returns `false` when `id` is not a dead letter.
    pub async fn requeue_dead(&self, id: impl AsRef<str>) -> Result<bool, Error> {
        Ok(requeue(self, Which::One(id.as_ref())).await? == 1)
    }

    /// Moves every dead letter back to ready, in batches of `batch_size`;
    /// returns how many. Letters that die while it runs may stay.
    pub async fn requeue_all_dead(&self) -> Result<u64, Error> {
        requeue(self, Which::All).await
    }

    /// Deletes a dead letter. Returns `false` when `id` is not one.
    pub async fn delete_dead(&self, id: impl AsRef<str>) -> Result<bool, Error> {
        Ok(delete(self, Which::One(id.as_ref())).await? == 1)
    }

    /// Deletes every dead letter, in batches; returns how many.
    pub async fn delete_all_dead(&self) -> Result<u64, Error> {
        delete(self, Which::All).await
    }
}
