//! What an integration test does to a queue: read everything it holds,
//! make what is pending due now, and handle what is due to the end.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crate::info::MAX_PAGE;
use crate::{DelayQueue, Error, Handler, HandlerError, Message, MessageInfo, MessageState};

/// Most messages [`held`] reads of each state.
const HELD_PER_STATE: usize = 100_000;

/// Every message `queue` holds, state by state (pending, ready,
/// processing, retry, dead), each in its state's order, at most 100,000 of
/// each state; flow parents waiting for children are not listed (they
/// count in `counts().waiting`, and `get` reads one). Payloads are the
/// first [`PREVIEW_BYTES`](crate::PREVIEW_BYTES), as `browse` gives them:
/// [`DelayQueue::get`] reads one whole.
///
/// ```no_run
/// # async fn run(queue: delayqueue::DelayQueue) -> Result<(), delayqueue::Error> {
/// use delayqueue::{testing, MessageState};
/// queue.send("welcome mail").delay(std::time::Duration::from_secs(60)).await?;
/// let held = testing::held(&queue).await?;
/// assert!(held.iter().any(|m| m.state == MessageState::Pending && m.payload == b"welcome mail"));
/// # Ok(()) }
/// ```
pub async fn held(queue: &DelayQueue) -> Result<Vec<MessageInfo>, Error> {
    let mut all = Vec::new();
    for state in MessageState::ALL {
        let mut cursor = None;
        let mut read = 0;
        loop {
            let page = queue.browse(state).after(cursor).limit(MAX_PAGE).await?;
            read += page.items.len();
            all.extend(page.items);
            match page.cursor {
                Some(next) if read < HELD_PER_STATE => cursor = Some(next),
                _ => break,
            }
        }
    }
    Ok(all)
}

/// Makes every pending message of `queue` due now (each rescheduled with
/// no delay): a test of a 7-day reminder need not wait 7 days. Returns how
/// many moved.
pub async fn make_due(queue: &DelayQueue) -> Result<usize, Error> {
    let mut moved = 0;
    let mut cursor = None;
    let mut ids = Vec::new();
    loop {
        let page = queue
            .browse(MessageState::Pending)
            .after(cursor)
            .limit(MAX_PAGE)
            .await?;
        ids.extend(page.items.into_iter().map(|m| m.id));
        match page.cursor {
            Some(next) if ids.len() < HELD_PER_STATE => cursor = Some(next),
            _ => break,
        }
    }
    for id in ids {
        if queue.reschedule(id.as_str(), Duration::ZERO).await? {
            moved += 1;
        }
    }
    Ok(moved)
}

/// What [`drain`] handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Drained {
    /// Deliveries the handler ran.
    pub handled: u64,
    /// Of those, the ones whose handler returned an error.
    pub failed: u64,
}

/// Consumes `queue` with `handler` (the queue's own settings) until
/// nothing in it is due: nothing ready, processing or waiting for a
/// retry, and no pending message due by now. Retries due later stay
/// pending (call [`make_due`] and drain again). Fails with
/// [`Error::Internal`] if that takes longer than `limit`.
///
/// ```no_run
/// # async fn run(queue: delayqueue::DelayQueue) -> Result<(), delayqueue::Error> {
/// use std::time::Duration;
/// use delayqueue::{testing, HandlerError, Message};
/// queue.send("order 7").delay(Duration::from_secs(1800)).await?;
/// testing::make_due(&queue).await?;
/// let drained = testing::drain(&queue, |_m: Message| async { Ok::<(), HandlerError>(()) }, Duration::from_secs(30)).await?;
/// assert_eq!(drained.handled, 1);
/// # Ok(()) }
/// ```
pub async fn drain(queue: &DelayQueue, handler: impl Handler, limit: Duration) -> Result<Drained, Error> {
    let counting = Arc::new(Counting {
        handler,
        handled: AtomicU64::new(0),
        failed: AtomicU64::new(0),
    });
    let consumer = queue.start_consume(counting.clone()).await?;
    let end = Instant::now() + limit;
    let drained = loop {
        if !anything_due(queue).await? {
            break Ok(());
        }
        if Instant::now() >= end {
            break Err(Error::Internal(format!("drain: messages still due after {limit:?}")));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    consumer.shutdown().await?;
    drained?;
    Ok(Drained {
        handled: counting.handled.load(Ordering::Relaxed),
        failed: counting.failed.load(Ordering::Relaxed),
    })
}

async fn anything_due(queue: &DelayQueue) -> Result<bool, Error> {
    let c = queue.status().await?.counts;
    if c.ready + c.processing + c.retry > 0 {
        return Ok(true);
    }
    let first = queue.browse(MessageState::Pending).limit(1).await?;
    Ok(first
        .items
        .first()
        .and_then(|m| m.due)
        .is_some_and(|due| due <= SystemTime::now()))
}

/// A handler that counts its runs and failures.
struct Counting<H> {
    handler: H,
    handled: AtomicU64,
    failed: AtomicU64,
}

#[async_trait::async_trait]
impl<H: Handler> Handler for Arc<Counting<H>> {
    async fn handle(&self, msg: Message) -> Result<(), HandlerError> {
        let r = self.handler.handle(msg).await;
        self.handled.fetch_add(1, Ordering::Relaxed);
        if r.is_err() {
            self.failed.fetch_add(1, Ordering::Relaxed);
        }
        r
    }
}
