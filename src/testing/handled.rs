//! A handler run on a crafted message, without Redis: the delivery's
//! notes go to a [`Notebook`] and its end is judged by the consumer's own
//! [`Outcome::of`].

use std::any::Any;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::FutureExt;

use crate::consume::outcome::{Mode, Outcome};
use crate::flow::ChildrenPage;
use crate::message::{Receipt, SendTimes};
use crate::scribe::{Desk, NoteKind, Scribe, Unwritten};
use crate::{Backoff, Error, Handler, HandlerError, IntoPayload, Message, MessageId};

/// A message as a consumer would deliver it, crafted for a handler's unit
/// test: payload, id, attempt, retries, group, headers, priority.
///
/// ```
/// use delayqueue::testing::{TestMessage, Verdict};
/// use delayqueue::{HandlerError, Message, SkipRetry};
///
/// async fn charge(msg: Message) -> Result<(), HandlerError> {
///     msg.progress(50).await?;
///     msg.log("charging").await?;
///     if msg.payload() == b"bad card" {
///         return Err(SkipRetry::new("card refused").into());
///     }
///     Ok(())
/// }
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let ok = TestMessage::new("order 7").run(&charge).await.unwrap();
/// assert_eq!(ok.verdict, Verdict::Acked);
/// assert_eq!(ok.log, ["charging"]);
///
/// let refused = TestMessage::new("bad card").run(&charge).await.unwrap();
/// assert!(matches!(refused.verdict, Verdict::Dead { .. }));
/// # }
/// ```
#[derive(Debug)]
#[must_use = "a test message does nothing until run"]
pub struct TestMessage {
    id: MessageId,
    payload: Result<Vec<u8>, Error>,
    attempt: u32,
    retry_count: u32,
    priority: u8,
    group: Option<String>,
    headers: Vec<(String, String)>,
    deferrals: u32,
    backoff: Backoff,
    own_backoff: Option<Backoff>,
    time_limit: Duration,
    max_result: usize,
    /// When an abort comes, from the handler's start.
    abort_after: Option<Duration>,
}

/// What a handler did with a [`TestMessage`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Handled {
    /// How the consumer would end the delivery.
    pub verdict: Verdict,
    /// Every progress value written, in order (the last one is what
    /// `MessageInfo::progress` would show).
    pub progress: Vec<serde_json::Value>,
    /// The log lines written, in order, each cut as the queue cuts them.
    pub log: Vec<String>,
    /// The result the ack would keep.
    pub result: Option<Vec<u8>>,
}

/// How a consumer ends a delivery, from what its handler returned.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Verdict {
    /// It succeeded: the message is acked.
    Acked,
    /// It failed and has deliveries left: delivered again after `after`
    /// (a [`RetryAfter`](crate::RetryAfter)'s delay, else the message's
    /// own backoff, else the queue's: [`TestMessage::backoff`]).
    Retry {
        /// When the next delivery is due, from now.
        after: Duration,
        /// The failure, as the message's `last_error` would say it.
        reason: String,
    },
    /// It asked for a later delivery that does not count this one
    /// ([`RetryAfter::uncounted`](crate::RetryAfter::uncounted)).
    Deferred {
        /// When the next delivery is due, from now.
        after: Duration,
    },
    /// It became a dead letter: a [`SkipRetry`](crate::SkipRetry), or a
    /// failure on its last delivery (`reason` says which).
    Dead {
        /// Why, as the dead letter's `last_error` would say it.
        reason: String,
    },
    /// It was aborted while the handler ran
    /// ([`TestMessage::aborted_after`]): it ends as aborted, whatever the
    /// handler returned, and no result is kept.
    Aborted,
}

impl TestMessage {
    /// A first delivery of `payload` with a generated id, the default
    /// retries, no group, no headers and priority 0.
    pub fn new(payload: impl IntoPayload) -> Self {
        let defaults = crate::consume::settings::Settings::default();
        TestMessage {
            id: MessageId::generate(),
            payload: payload.into_payload().map(crate::payload::Payload::into_bytes),
            attempt: 1,
            retry_count: defaults.default_retry_count,
            priority: 0,
            group: None,
            headers: Vec::new(),
            deferrals: 0,
            backoff: defaults.backoff,
            own_backoff: None,
            time_limit: defaults.handler_timeout,
            max_result: defaults.max_result_size,
            abort_after: None,
        }
    }

    /// The message is aborted ([`DelayQueue::abort`](crate::DelayQueue::abort))
    /// `after` the handler starts (`Duration::ZERO`: as it starts):
    /// [`Message::aborted`](crate::Message::aborted) completes then, and if
    /// it came before the handler returned, the verdict is
    /// [`Verdict::Aborted`] whatever the handler returned, as in a queue.
    pub fn aborted_after(mut self, after: Duration) -> Self {
        self.abort_after = Some(after);
        self
    }

    /// Its id.
    pub fn id(mut self, id: impl Into<MessageId>) -> Self {
        self.id = id.into();
        self
    }

    /// Which delivery this is, 1 for the first.
    pub fn attempt(mut self, n: u32) -> Self {
        self.attempt = n.max(1);
        self
    }

    /// The retries it was sent with: with `attempt`, what
    /// [`Message::deliveries_left`] says.
    pub fn retry_count(mut self, n: u32) -> Self {
        self.retry_count = n;
        self
    }

    /// Its priority.
    pub fn priority(mut self, p: u8) -> Self {
        self.priority = p;
        self
    }

    /// Its fairness group.
    pub fn group(mut self, group: impl Into<String>) -> Self {
        self.group = Some(group.into());
        self
    }

    /// Adds a header.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Deliveries the handler deferred before this one.
    pub fn deferrals(mut self, n: u32) -> Self {
        self.deferrals = n;
        self
    }

    /// The queue's backoff, which a failure's retry delay comes from when
    /// neither the handler nor the message names one (default: the
    /// queue's default).
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// The message's own backoff, as its send set it.
    pub fn own_backoff(mut self, backoff: Backoff) -> Self {
        self.own_backoff = Some(backoff);
        self
    }

    /// The handler's time limit (the queue's `handler_timeout`).
    pub fn time_limit(mut self, limit: Duration) -> Self {
        self.time_limit = limit;
        self
    }

    /// Runs `handler` on the message, as a consumer would: within the time
    /// limit, a panic caught, its result and notes kept. Fails only when
    /// the payload given to [`new`](Self::new) did not encode.
    pub async fn run(self, handler: &impl Handler) -> Result<Handled, Error> {
        let payload = match &self.payload {
            Ok(p) => p.clone(),
            Err(e) => return Err(Error::InvalidArgument(format!("test message payload: {e}"))),
        };
        let notebook = Arc::new(Notebook {
            max_result: self.max_result,
            notes: Mutex::default(),
        });
        let scribe = Arc::new(Scribe::default());
        scribe.open(Box::new(notebook.clone()));
        let msg = self.message(payload, scribe.clone());
        let token = msg.abort.clone();
        let abort = self.abort_after.map(|after| {
            let token = token.clone();
            tokio::spawn(async move {
                tokio::time::sleep(after).await;
                token.cancel();
            })
        });
        let ran: Option<Result<Result<(), HandlerError>, Box<dyn Any + Send>>> =
            tokio::time::timeout(self.time_limit, AssertUnwindSafe(handler.handle(msg)).catch_unwind())
                .await
                .ok();
        if let Some(abort) = abort {
            abort.abort();
        }
        let mut result = None;
        let verdict = match Outcome::of(ran, self.time_limit, &scribe) {
            Outcome::Done(kept) => {
                result = kept.result;
                Verdict::Acked
            }
            Outcome::Failed(f) => match f.mode {
                Mode::Dead => Verdict::Dead { reason: f.reason },
                Mode::Defer(after) => Verdict::Deferred { after },
                Mode::Fail(_) if self.attempt > self.retry_count => Verdict::Dead { reason: f.reason },
                Mode::Fail(after) => Verdict::Retry {
                    after: after
                        .unwrap_or_else(|| self.own_backoff.as_ref().unwrap_or(&self.backoff).delay(self.attempt)),
                    reason: f.reason,
                },
                Mode::Release => Verdict::Deferred { after: Duration::ZERO },
            },
            Outcome::Unstarted | Outcome::Unreadable => Verdict::Deferred { after: Duration::ZERO },
        };
        // An abort that came while the handler ran decides (lua/include/abort.lua).
        let verdict = if token.is_cancelled() {
            result = None;
            Verdict::Aborted
        } else {
            verdict
        };
        let notes = std::mem::take(&mut *notebook.notes.lock().unwrap_or_else(PoisonError::into_inner));
        Ok(Handled {
            verdict,
            progress: notes.progress,
            log: notes.log,
            result,
        })
    }

    fn message(&self, payload: Vec<u8>, scribe: Arc<Scribe>) -> Message {
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        Message {
            receipt: Receipt {
                id: self.id.clone(),
                attempt: self.attempt,
                lease: (now_ms as i64 + self.time_limit.as_millis() as i64) * 1000,
                deadline: tokio::time::Instant::now() + self.time_limit,
            },
            payload,
            retry_count: self.retry_count,
            backoff: self.own_backoff.clone(),
            priority: self.priority,
            group: self.group.clone(),
            headers: self.headers.clone(),
            times: SendTimes {
                sent_at_ms: now_ms,
                due_at_ms: now_ms,
            },
            due_at_ms: now_ms,
            deferrals: self.deferrals,
            scribe,
            abort: Default::default(),
        }
    }
}

/// What a run's handler wrote.
#[derive(Default)]
struct Notes {
    progress: Vec<serde_json::Value>,
    log: Vec<String>,
}

/// The [`Desk`] of a test run: keeps what the handler writes.
struct Notebook {
    max_result: usize,
    notes: Mutex<Notes>,
}

#[async_trait::async_trait]
impl Desk for Arc<Notebook> {
    fn max_result(&self) -> usize {
        self.max_result
    }

    fn write(
        &self,
        _id: &MessageId,
        _attempt: u32,
        kind: NoteKind,
        text: &str,
        _unwritten: &Arc<Unwritten>,
    ) -> Result<(), Error> {
        let mut notes = self.notes.lock().unwrap_or_else(PoisonError::into_inner);
        match kind {
            NoteKind::Progress => notes.progress.push(serde_json::from_str(text)?),
            NoteKind::Log => notes.log.push(text.to_string()),
        }
        Ok(())
    }

    async fn children(&self, _id: &MessageId, _attempt: u32, _cursor: Option<&str>) -> Result<ChildrenPage, Error> {
        Ok(ChildrenPage {
            items: Vec::new(),
            next: None,
        })
    }
}
