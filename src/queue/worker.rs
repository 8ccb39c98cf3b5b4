//! [`Worker`]: one consumer over several queues, each with its own
//! handler, sharing one set of handler slots by weight or by strict order.

use std::sync::Arc;

use crate::consume::default_fetch_limit;
use crate::consume::Member;
use crate::{Consumer, DelayQueue, Error, Handler};

/// Consumes several queues in one runtime: one pool of handler slots
/// (`concurrency`) and one claim limit (`fetch_limit`) shared by all, one
/// wake-up connection per Redis client, and a loop per queue (and shard)
/// that costs one read-only script call per `fetch_interval` while its
/// queue is idle.
///
/// Each queue has its own [`Handler`] (a queue is the unit of work here,
/// as a task type is in a mux) and a weight. While several queues have
/// messages waiting, each claims its weight's part of the limit, so with
/// weights 6, 3 and 1 they get about 60 %, 30 % and 10 % of the
/// deliveries; a queue without work leaves its part to the others. With
/// [`strict_priority`](Self::strict_priority) a queue claims only while
/// no queue added before it has messages waiting. The rest of each
/// queue's settings (leases, retries, backoff, `fetch_interval`) are its
/// own, as its builder set them.
///
/// ```no_run
/// # async fn run(client: delayqueue::fred::prelude::Client) -> Result<(), delayqueue::Error> {
/// use delayqueue::{DelayQueue, HandlerError, Message, Worker};
///
/// let critical = DelayQueue::builder("critical", client.clone()).build()?;
/// let default = DelayQueue::builder("default", client.clone()).build()?;
/// let low = DelayQueue::builder("low", client).build()?;
/// let consumer = Worker::new()
///     .queue(&critical, 6, |m: Message| async move { println!("critical {}", m.id()); Ok::<(), HandlerError>(()) })
///     .queue(&default, 3, |m: Message| async move { println!("default {}", m.id()); Ok::<(), HandlerError>(()) })
///     .queue(&low, 1, |m: Message| async move { println!("low {}", m.id()); Ok::<(), HandlerError>(()) })
///     .concurrency(16)
///     .start()
///     .await?;
/// // ... until the process is asked to stop:
/// consumer.shutdown().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Default)]
#[must_use = "a Worker does nothing until started"]
pub struct Worker {
    queues: Vec<(DelayQueue, Arc<dyn Handler>, u32)>,
    strict: bool,
    concurrency: Option<usize>,
    fetch_limit: Option<usize>,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let queues: Vec<(&str, u32)> = self.queues.iter().map(|(q, _, w)| (q.name(), *w)).collect();
        f.debug_struct("Worker")
            .field("queues", &queues)
            .field("strict", &self.strict)
            .field("concurrency", &self.concurrency)
            .field("fetch_limit", &self.fetch_limit)
            .finish()
    }
}

impl Worker {
    /// A worker of no queues yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `queue`, delivered to `handler`, with `weight` (1 or more): its
    /// part of the shared limits while other queues have work too. Under
    /// strict priority the weight is unused, and the order of these calls
    /// is the order of priority, highest first.
    pub fn queue(mut self, queue: &DelayQueue, weight: u32, handler: impl Handler) -> Self {
        self.queues.push((queue.clone(), Arc::new(handler), weight));
        self
    }

    /// A queue claims only while no queue added before it has messages
    /// waiting (asynq's `StrictPriority`), instead of by weight.
    pub fn strict_priority(mut self) -> Self {
        self.strict = true;
        self
    }

    /// Handlers running at once over all queues. Default: the sum of the
    /// queues' own `concurrency`.
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = Some(n);
        self
    }

    /// Most messages claimed and not finished over all queues; at least
    /// `concurrency`. Default 256, or 32 × `concurrency` when that is larger.
    pub fn fetch_limit(mut self, n: usize) -> Self {
        self.fetch_limit = Some(n);
        self
    }

    /// Starts consuming every queue, as
    /// [`DelayQueue::start_consume`] does each. Stop it with
    /// [`Consumer::shutdown`], which drains every queue.
    ///
    /// Fails with [`Error::InvalidArgument`] without queues, with a weight
    /// of 0, with a queue added twice, or with `concurrency` 0 or above
    /// `fetch_limit`; and as `start_consume` does.
    pub async fn start(self) -> Result<Consumer, Error> {
        let bad = |why: String| Err(Error::InvalidArgument(why));
        if self.queues.is_empty() {
            return bad("a Worker needs at least one queue".into());
        }
        for (i, (queue, _, weight)) in self.queues.iter().enumerate() {
            if *weight == 0 {
                return bad(format!("queue {:?}: weight must be 1 or more", queue.name()));
            }
            if self.queues[..i].iter().any(|(q, _, _)| q.same_queue(queue)) {
                return bad(format!("queue {:?} added twice", queue.name()));
            }
        }
        let concurrency = self
            .concurrency
            .unwrap_or_else(|| self.queues.iter().map(|(q, _, _)| q.concurrency()).sum());
        let fetch_limit = self.fetch_limit.unwrap_or_else(|| default_fetch_limit(concurrency));
        if concurrency == 0 || fetch_limit < concurrency {
            return bad(format!(
                "concurrency must be 1 or more and at most fetch_limit ({concurrency} and {fetch_limit})"
            ));
        }
        let mut members = Vec::with_capacity(self.queues.len());
        for (queue, handler, weight) in self.queues {
            queue.prepare_consume().await?;
            let mut ctx = queue.consume_context();
            ctx.settings.concurrency = concurrency;
            ctx.settings.fetch_limit = fetch_limit;
            members.push(Member {
                ctx,
                handler,
                weight: weight.into(),
            });
        }
        Ok(Consumer::start(members, self.strict).await)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::RedisServer;

    #[tokio::test]
    async fn bad_workers_fail_to_start_with_the_reason() {
        let server = RedisServer::start().await;
        let q = DelayQueue::builder("q", server.client().await).build().unwrap();
        let ok = |_m: crate::Message| async { Ok::<(), crate::HandlerError>(()) };
        let reason = |r: Result<Consumer, Error>| match r {
            Err(Error::InvalidArgument(why)) => why,
            other => panic!("{other:?}"),
        };
        assert!(reason(Worker::new().start().await).contains("at least one queue"));
        assert!(reason(Worker::new().queue(&q, 0, ok).start().await).contains("weight"));
        assert!(reason(Worker::new().queue(&q, 1, ok).queue(&q, 2, ok).start().await).contains("twice"));
        let over = Worker::new().queue(&q, 1, ok).concurrency(8).fetch_limit(4);
        assert!(reason(over.start().await).contains("fetch_limit"));
    }
}
