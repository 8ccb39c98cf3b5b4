//! Handlers that take a batch: [`BatchHandler`], and the gathering that
//! turns it into a [`Handler`] the consume runtime runs like any other.
//!
//! Each delivery hands its message to one gathering task and waits for its
//! own outcome. The task keeps an open batch per value of the header that
//! splits batches (one without a split) and runs it once it holds `size`
//! messages or `wait` after its
//! first arrived. So the runtime is unchanged: each message keeps its
//! handler slot, its time limit, its renewed lease and its own ack or
//! nack, and a consumer that dies mid-batch leaves every lease of the
//! batch to run out.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tracing::Instrument;

use crate::handler::{keep_result, panic_text};
use crate::{Handler, HandlerError, IntoResult, Message};

/// Processes due messages several at a time, for bulk work such as one
/// multi-row insert. Returns one result per message, in the order of the
/// batch: `Ok` acks that message, an error nacks it alone (retried after
/// its backoff, or as a [`RetryAfter`](crate::RetryAfter) or
/// [`SkipRetry`](crate::SkipRetry) says), so a partial failure retries
/// only the messages that failed. A message without a result (the vector
/// is short) fails; a panic fails the whole batch.
///
/// Start it with [`DelayQueue::consume_batch`](crate::DelayQueue::consume_batch).
/// An async closure is a batch handler too:
///
/// ```
/// use delayqueue::{BatchHandler, HandlerError, Message, SkipRetry};
///
/// fn is_batch_handler(_: impl BatchHandler) {}
/// is_batch_handler(|batch: Vec<Message>| async move {
///     // One insert for the readable ones; the others are dead at once.
///     batch
///         .iter()
///         .map(|msg| match std::str::from_utf8(msg.payload()) {
///             Ok(_) => Ok(()),
///             Err(e) => Err(SkipRetry::new(e).into()),
///         })
///         .collect::<Vec<Result<(), HandlerError>>>()
/// });
/// ```
#[async_trait::async_trait]
pub trait BatchHandler: Send + Sync + 'static {
    /// Handles one batch: at least one message, at most the batch size.
    /// Delivery is at-least-once: a message may arrive again, in another
    /// batch, so make the work idempotent.
    async fn handle(&self, batch: Vec<Message>) -> Vec<Result<(), HandlerError>>;
}

#[async_trait::async_trait]
impl<F, Fut, R> BatchHandler for F
where
    F: Fn(Vec<Message>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Vec<Result<R, HandlerError>>> + Send,
    R: IntoResult + Send,
{
    async fn handle(&self, batch: Vec<Message>) -> Vec<Result<(), HandlerError>> {
        let scribes: Vec<_> = batch.iter().map(|m| m.scribe.clone()).collect();
        let results = self(batch).await;
        // Results beyond the batch have no message to keep them; the
        // gathering reports the count.
        results
            .into_iter()
            .enumerate()
            .map(|(i, r)| match scribes.get(i) {
                Some(scribe) => keep_result(scribe, r?),
                None => r.map(drop),
            })
            .collect()
    }
}

/// How messages are gathered into batches.
#[derive(Debug, Clone)]
pub(crate) struct Gathering {
    /// Most messages in one batch.
    pub size: usize,
    /// How long a batch stays open for more after its first message.
    pub wait: Duration,
    /// The header whose value splits messages into batches; none: one part.
    pub split: Option<String>,
    /// The queue's name, for the batch's span and logs.
    pub queue: String,
}

/// What a delivery waiting in a batch is told: its handler's result, or
/// the text of the panic that ended the batch.
type Verdict = Result<Result<(), HandlerError>, String>;

type Item = (Message, oneshot::Sender<Verdict>);

/// A [`BatchHandler`] as a per-message [`Handler`]: each call waits for
/// its message's outcome in a batch. Needs a tokio runtime to be created.
pub(crate) struct Gatherer {
    tx: mpsc::UnboundedSender<Item>,
}

impl Gatherer {
    /// Starts the gathering task of `handler`; it ends once the gatherer
    /// is dropped and its last batch has started.
    pub(crate) fn start(handler: impl BatchHandler, how: Gathering) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(gather(Arc::new(handler), how, rx));
        Gatherer { tx }
    }
}

#[async_trait::async_trait]
impl Handler for Gatherer {
    async fn handle(&self, msg: Message) -> Result<(), HandlerError> {
        let (tx, rx) = oneshot::channel();
        self.tx.send((msg, tx)).map_err(|_| "the batch gathering has stopped")?;
        match rx.await {
            Ok(Ok(result)) => result,
            // Raised again here, so the delivery reports the batch's panic
            // as any handler's panic (the hook already printed it once).
            Ok(Err(panic)) => std::panic::resume_unwind(Box::new(panic)),
            Err(_) => Err("the batch ended without an outcome for this message".into()),
        }
    }
}

/// A batch still taking messages.
struct Open {
    key: Option<String>,
    /// When it runs, full or not.
    until: Instant,
    items: Vec<Item>,
}

/// The gathering task: fills one open batch per part and starts each
/// when full or when its wait is over.
async fn gather<B: BatchHandler>(handler: Arc<B>, how: Gathering, mut rx: mpsc::UnboundedReceiver<Item>) {
    let mut open: Vec<Open> = Vec::new();
    loop {
        let next = open.iter().map(|o| o.until).min();
        let item = tokio::select! {
            item = rx.recv() => item,
            _ = tokio::time::sleep_until(next.unwrap_or_else(Instant::now)), if next.is_some() => {
                let now = Instant::now();
                let (due, rest): (Vec<_>, Vec<_>) = open.into_iter().partition(|o| o.until <= now);
                open = rest;
                for batch in due {
                    tokio::spawn(run(handler.clone(), how.queue.clone(), batch.items));
                }
                continue;
            }
        };
        // Every delivery is gone: the consumer has stopped.
        let Some(item) = item else { break };
        let key = how.split.as_deref().and_then(|h| item.0.header(h)).map(str::to_string);
        let at = match open.iter().position(|o| o.key == key) {
            Some(at) => at,
            None => {
                open.push(Open {
                    key,
                    until: Instant::now() + how.wait,
                    items: Vec::with_capacity(how.size),
                });
                open.len() - 1
            }
        };
        open[at].items.push(item);
        if open[at].items.len() >= how.size {
            tokio::spawn(run(handler.clone(), how.queue.clone(), open.swap_remove(at).items));
        }
    }
    for batch in open {
        tokio::spawn(run(handler.clone(), how.queue.clone(), batch.items));
    }
}

/// Runs one batch and tells each delivery its outcome. Should every
/// delivery give up waiting (each is cut at its time limit), the batch is
/// cancelled: nobody would take its outcomes.
async fn run<B: BatchHandler>(handler: Arc<B>, queue: String, items: Vec<Item>) {
    let (msgs, mut replies): (Vec<Message>, Vec<_>) = items.into_iter().unzip();
    let n = msgs.len();
    let span = tracing::info_span!("delayqueue.handle_batch", queue = %queue, messages = n);
    let handled = AssertUnwindSafe(handler.handle(msgs)).catch_unwind().instrument(span);
    let ran = {
        let gone = futures::future::join_all(replies.iter_mut().map(|r| r.closed()));
        tokio::select! {
            ran = handled => Some(ran),
            _ = gone => None,
        }
    };
    match ran {
        None => {
            tracing::debug!(%queue, messages = n, "every delivery of the batch ended first (time limit); batch cancelled")
        }
        Some(Ok(results)) => {
            let got = results.len();
            if got != n {
                tracing::warn!(%queue, messages = n, results = got, "a batch handler returned a result count other than its message count; messages without one fail");
            }
            let mut results = results.into_iter();
            for reply in replies {
                let result = results.next().unwrap_or_else(|| {
                    Err(format!("the batch handler returned {got} results for {n} messages; none for this one").into())
                });
                let _ = reply.send(Ok(result));
            }
        }
        Some(Err(panic)) => {
            let what = panic_text(&*panic);
            for reply in replies {
                let _ = reply.send(Err(what.clone()));
            }
        }
    }
}
