//! How a delivery ended: [`Outcome`], and for one that did not succeed,
//! the [`Failure`] that says how to end it and what to log. Pure: the
//! handler's result goes in, a verdict comes out.

use std::any::Any;
use std::time::Duration;

use crate::handler::panic_text;
use crate::message::Receipt;
use crate::scribe::Scribe;
use crate::{Backoff, HandlerError, MessageId, RetryAfter, SkipRetry, MAX_DELAY};

/// Longest failure reason stored with a message, in bytes.
const MAX_REASON: usize = 1000;

/// A delivery that has ended, ready to be settled.
pub(crate) struct Ended {
    /// Its receipt, with the lease as renewed or as claimed.
    pub receipt: Receipt,
    /// The message's own backoff, when its send set one.
    pub backoff: Option<Backoff>,
    pub outcome: Outcome,
}

impl Ended {
    /// A claimed delivery whose value is unreadable, so it never reaches a handler.
    pub(crate) fn unreadable(receipt: Receipt) -> Self {
        Ended {
            receipt,
            backoff: None,
            outcome: Outcome::Unreadable,
        }
    }
}

/// How a delivery ended.
pub(crate) enum Outcome {
    /// The handler succeeded: ack, with what it leaves.
    Done(Kept),
    /// The handler ran and failed (error, panic, time limit): nack, and
    /// the failure counts.
    Failed(Failure),
    /// The handler never started: hand the message back uncounted.
    Unstarted,
    /// The claimed value was unreadable: no handler can take it, so it is
    /// dead at once.
    Unreadable,
}

/// What a successful delivery leaves for its ack to keep.
#[derive(Debug, Default)]
pub(crate) struct Kept {
    /// The handler's result.
    pub result: Option<Vec<u8>>,
    /// It wrote progress or log lines: the ack gives them the result's retention.
    pub noted: bool,
}

/// What the handler's run gave: `None` when it ran out of time, else
/// what it returned or the panic it raised.
pub(crate) type Ran = Option<Result<Result<(), HandlerError>, Box<dyn Any + Send>>>;

impl Outcome {
    /// The outcome of a handler run that was given `limit` and wrote
    /// through `scribe`.
    pub(crate) fn of(ran: Ran, limit: Duration, scribe: &Scribe) -> Outcome {
        match ran {
            Some(Ok(Ok(()))) => Outcome::Done(Kept {
                result: scribe.take(),
                noted: scribe.noted(),
            }),
            Some(Ok(Err(e))) => Outcome::Failed(Failure::from_error(e)),
            Some(Err(panic)) => {
                let what = panic_text(&*panic);
                Outcome::Failed(Failure::new(Mode::Fail(None), Cause::Panic, format!("panic: {what}")))
            }
            // The configured limit, not the time measured, so that failures
            // of one cause share one reason.
            None => Outcome::Failed(Failure::new(
                Mode::Fail(None),
                Cause::TimeLimit,
                format!("handler timed out (limit {limit:?})"),
            )),
        }
    }
}

/// Why and how a delivery ends without an ack.
pub(crate) struct Failure {
    pub mode: Mode,
    pub cause: Cause,
    pub reason: String,
}

/// What ended a delivery without an ack: the subject of its one log line,
/// which the nack writes once it knows the outcome.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Cause {
    /// The handler returned an error.
    Error,
    /// The handler panicked: a bug, logged at ERROR.
    Panic,
    /// The handler ran past its time limit and was cancelled.
    TimeLimit,
    /// The claimed value was unreadable; the claim logged it at ERROR.
    Unreadable,
    /// The delivery never started; handing it back is routine.
    Unstarted,
}

impl Cause {
    pub(crate) fn describe(self) -> &'static str {
        match self {
            Cause::Error => "handler failed",
            Cause::Panic => "handler panicked",
            Cause::TimeLimit => "handler exceeded its time limit and was cancelled",
            Cause::Unreadable => "unreadable message",
            Cause::Unstarted => "unstarted delivery handed back",
        }
    }
}

/// How a delivery that did not succeed ends.
#[derive(Debug, PartialEq)]
pub(crate) enum Mode {
    /// The delivery failed and counts; retry after the delay (the backoff's
    /// when None).
    Fail(Option<Duration>),
    /// The delivery failed and retrying cannot help: dead at once.
    Dead,
    /// The delivery never started; it does not count.
    Release,
    /// The handler asked for a delivery after the delay that does not
    /// count this one ([`RetryAfter::uncounted`]).
    Defer(Duration),
}

impl Failure {
    pub(crate) fn new(mode: Mode, cause: Cause, mut reason: String) -> Self {
        if reason.len() > MAX_REASON {
            let mut end = MAX_REASON;
            while !reason.is_char_boundary(end) {
                end -= 1;
            }
            reason.truncate(end);
        }
        Failure { mode, cause, reason }
    }

    /// An unstarted delivery, handed back.
    pub(crate) fn release() -> Self {
        Failure::new(Mode::Release, Cause::Unstarted, String::new())
    }

    /// A claimed message whose stored value this crate cannot read.
    pub(crate) fn unreadable() -> Self {
        Failure::new(Mode::Dead, Cause::Unreadable, "unreadable stored value".into())
    }

    /// A handler's error; [`SkipRetry`] and [`RetryAfter`] steer the retry.
    fn from_error(e: HandlerError) -> Self {
        let mode = if e.is::<SkipRetry>() {
            Mode::Dead
        } else {
            match e.downcast_ref::<RetryAfter>() {
                Some(r) if !r.counted => Mode::Defer(r.delay.min(MAX_DELAY)),
                r => Mode::Fail(r.map(|r| r.delay.min(MAX_DELAY))),
            }
        };
        Failure::new(mode, Cause::Error, e.to_string())
    }

    /// The one line about this failed delivery, once its `outcome` is
    /// known: ERROR for a panic, WARN for a failure, DEBUG for what needs
    /// no attention or was logged already.
    pub(crate) fn log(&self, queue: &str, id: &MessageId, attempt: u32, outcome: &str, retry_in: Option<Duration>) {
        let (what, reason) = (self.cause.describe(), &self.reason);
        let retry_in = retry_in.map(tracing::field::debug);
        match self.cause {
            Cause::Panic => tracing::error!(%queue, %id, attempt, %reason, retry_in, "{what}; {outcome}"),
            Cause::Error | Cause::TimeLimit => {
                tracing::warn!(%queue, %id, attempt, %reason, retry_in, "{what}; {outcome}")
            }
            Cause::Unreadable | Cause::Unstarted => {
                tracing::debug!(%queue, %id, attempt, %reason, retry_in, "{what}; {outcome}")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed(ran: Ran) -> Failure {
        match Outcome::of(ran, Duration::from_secs(3), &Scribe::default()) {
            Outcome::Failed(f) => f,
            Outcome::Done(_) => panic!("Done"),
            Outcome::Unstarted => panic!("Unstarted"),
            Outcome::Unreadable => panic!("Unreadable"),
        }
    }

    fn error(e: impl Into<HandlerError>) -> Ran {
        Some(Ok(Err(e.into())))
    }

    #[test]
    fn a_handler_result_is_classified() {
        let scribe = Scribe::default();
        scribe.set(Some(b"42".to_vec()), 2).unwrap();
        match Outcome::of(Some(Ok(Ok(()))), Duration::ZERO, &scribe) {
            Outcome::Done(kept) => assert_eq!((kept.result.as_deref(), kept.noted), (Some(&b"42"[..]), false)),
            _ => panic!("not Done"),
        }

        let f = failed(error("boom"));
        assert_eq!(
            (f.mode, f.cause, f.reason.as_str()),
            (Mode::Fail(None), Cause::Error, "boom")
        );

        let f = failed(error(SkipRetry::new("bad payload")));
        assert_eq!((f.mode, f.cause), (Mode::Dead, Cause::Error));

        let later = Duration::from_secs(42);
        let f = failed(error(RetryAfter::new(later, "busy")));
        assert_eq!((f.mode, f.cause), (Mode::Fail(Some(later)), Cause::Error));
        let f = failed(error(RetryAfter::new(MAX_DELAY * 2, "never")));
        assert_eq!(f.mode, Mode::Fail(Some(MAX_DELAY)), "capped at MAX_DELAY");
        let f = failed(error(RetryAfter::new(later, "429").uncounted()));
        assert_eq!((f.mode, f.reason.as_str()), (Mode::Defer(later), "429 (retry in 42s)"));

        let f = failed(None);
        assert_eq!(
            (f.mode, f.cause, f.reason.as_str()),
            (Mode::Fail(None), Cause::TimeLimit, "handler timed out (limit 3s)")
        );
    }

    #[test]
    fn a_panic_is_a_failure_with_its_message() {
        let f = failed(Some(Err(Box::new("static text"))));
        assert_eq!(
            (f.mode, f.cause, f.reason.as_str()),
            (Mode::Fail(None), Cause::Panic, "panic: static text")
        );
        let f = failed(Some(Err(Box::new(format!("formatted {}", 7)))));
        assert_eq!(f.reason, "panic: formatted 7");
        let f = failed(Some(Err(Box::new(7u8))));
        assert_eq!(f.reason, "panic: ");
    }

    #[test]
    fn a_long_reason_is_cut_on_a_char_boundary() {
        let f = failed(error("é".repeat(MAX_REASON)));
        assert_eq!(f.reason.len(), MAX_REASON);
        let f = failed(error(format!("x{}", "é".repeat(MAX_REASON))));
        assert_eq!(f.reason.len(), MAX_REASON - 1, "never half a character");
        assert_eq!(Failure::release().mode, Mode::Release);
        assert_eq!(Failure::unreadable().cause, Cause::Unreadable);
    }
}
