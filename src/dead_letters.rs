//! Dead letters: messages that used up their deliveries wait in the
//! `garbage` zset (scored by time of death) for their retention. Requeue
//! gives them a new life; delete ends theirs.

use fred::prelude::Value;

use crate::keys::Keys;
use crate::{scripts, DelayQueue, Error, MessageId};

/// Which dead letters a call acts on.
pub(crate) enum Which<'a> {
    One(&'a str),
    All,
}

/// Requeues dead letters; returns how many went back to ready.
pub(crate) async fn requeue(queue: &DelayQueue, which: Which<'_>) -> Result<u64, Error> {
    let inner = &queue.inner;
    let done = repeat(queue, which, |k, ids| {
        let mut args: Vec<Value> = vec![
            k.msg_prefix.as_str().into(),
            (inner.config.batch_size as i64).into(),
            k.wake.as_str().into(),
        ];
        args.extend(ids);
        async move {
            let reply: Vec<i64> = queue.call(&scripts::REQUEUE, k.for_requeue(), args).await?;
            match reply[..] {
                [requeued, taken] => Ok((requeued, taken)),
                _ => Err(Error::UnexpectedReply {
                    script: "requeue",
                    detail: format!("{reply:?}"),
                }),
            }
        }
    })
    .await?;
    tracing::info!(queue = %inner.name, requeued = done, "dead letters requeued");
    Ok(done)
}

/// Deletes dead letters; returns how many.
pub(crate) async fn delete(queue: &DelayQueue, which: Which<'_>) -> Result<u64, Error> {
    let inner = &queue.inner;
    let done = repeat(queue, which, |k, ids| {
        // Retention 0 and no size limit: every dead letter qualifies.
        let mut args: Vec<Value> = vec![
            k.msg_prefix.as_str().into(),
            (inner.config.batch_size as i64).into(),
            0.into(),
            i64::MAX.into(),
        ];
        args.extend(ids);
        async move {
            let deleted: i64 = queue.call(&scripts::GC, k.for_gc(), args).await?;
            Ok((deleted, deleted))
        }
    })
    .await?;
    tracing::info!(queue = %inner.name, deleted = done, "dead letters deleted");
    Ok(done)
}

/// Runs `call` for one id in its shard, or shard by shard in batches until
/// the dead letters there were at the start are done (never more rounds
/// than those need, so a steady stream of new deaths cannot keep it going).
/// `call` returns how many it acted on and how many it took out of garbage.
async fn repeat<'k, F, Fut>(queue: &'k DelayQueue, which: Which<'_>, call: F) -> Result<u64, Error>
where
    F: Fn(&'k Keys, Vec<Value>) -> Fut,
    Fut: std::future::Future<Output = Result<(i64, i64), Error>>,
{
    if let Which::One(id) = which {
        MessageId::check(id)?;
        let k = queue.shard_of(id);
        return Ok(call(k, vec![id.into()]).await?.0.max(0) as u64);
    }
    let batch = queue.inner.config.batch_size as i64;
    let mut done = 0;
    for k in &queue.inner.shards {
        let rounds = queue.shard_status(k).await?.counts.dead / batch as u64 + 1;
        for _ in 0..rounds {
            let (acted, taken) = call(k, Vec::new()).await?;
            done += acted.max(0) as u64;
            if taken < batch {
                break;
            }
        }
    }
    Ok(done)
}
