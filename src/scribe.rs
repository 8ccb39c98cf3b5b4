//! What a delivery records besides its ack: the result its handler
//! returns (kept until the ack, which writes it), and its progress and log
//! lines, handed to the consumer's [`Desk`] (which sends those of all
//! running handlers of a shard together, ahead of their acks) without
//! waiting for Redis: a nack waits for them instead ([`Unwritten`]), an
//! ack follows them on the same queue. Every clone of a
//! [`Message`](crate::Message) shares its delivery's [`Scribe`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use tokio::sync::Notify;

use crate::flow::ChildrenPage;
use crate::maxima::{MAX_LOG_LINE, MAX_PROGRESS};
use crate::{Error, MessageId};

/// One delivery's result and notes.
#[derive(Default)]
pub(crate) struct Scribe {
    result: Mutex<Option<Vec<u8>>>,
    /// Progress or a log line was written: the ack gives them the result's retention.
    noted: AtomicBool,
    /// Set when the delivery starts; a message not being delivered writes nothing.
    desk: OnceLock<Box<dyn Desk>>,
    /// Its notes not written yet.
    unwritten: Arc<Unwritten>,
    /// The handler has returned: its lease is about to be acked or nacked.
    ended: AtomicBool,
}

/// The notes of one delivery handed to its desk and not written yet, and
/// the first that could not be: the nack of the delivery (or its renewed
/// lease's end) waits for them (a note after it would find no lease), and the next note or
/// [`Scribe::written`] reports that failure.
#[derive(Default)]
pub(crate) struct Unwritten {
    /// Notes on their way, and the first failure not reported yet.
    state: Mutex<(usize, Option<Error>)>,
    written: Notify,
}

impl std::fmt::Debug for Unwritten {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Unwritten").finish_non_exhaustive()
    }
}

impl Unwritten {
    /// One more note on its way.
    pub(crate) fn add(&self) {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).0 += 1;
    }

    /// One note written, or not (`outcome`).
    pub(crate) fn done(&self, outcome: Result<(), Error>) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.0 = state.0.saturating_sub(1);
        if let (Err(e), None) = (outcome, &state.1) {
            state.1 = Some(e);
        }
        if state.0 == 0 {
            self.written.notify_waiters();
        }
    }

    /// Once every note handed over so far is written or refused.
    pub(crate) async fn all_done(&self) {
        loop {
            let written = self.written.notified();
            if self.state.lock().unwrap_or_else(PoisonError::into_inner).0 == 0 {
                return;
            }
            written.await;
        }
    }

    /// The first failure not reported yet, taken.
    fn failure(&self) -> Option<Error> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).1.take()
    }
}

impl std::fmt::Debug for Scribe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scribe").finish_non_exhaustive()
    }
}

/// Where a running delivery writes: the consumer's side, fenced by the lease.
#[async_trait::async_trait]
pub(crate) trait Desk: Send + Sync {
    /// The largest result the queue keeps.
    fn max_result(&self) -> usize;
    /// Hands progress or a line (`text`) of delivery `attempt` of message
    /// `id` to the writer, which tells `unwritten` once Redis has it (or
    /// refused it); an error when it cannot be handed over.
    fn write(
        &self,
        id: &MessageId,
        attempt: u32,
        kind: NoteKind,
        text: &str,
        unwritten: &Arc<Unwritten>,
    ) -> Result<(), Error>;
    /// One page of parent `id`'s finished children, read by delivery `attempt`.
    async fn children(&self, id: &MessageId, attempt: u32, cursor: Option<&str>) -> Result<ChildrenPage, Error>;
}

/// What a note writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NoteKind {
    /// Progress, as JSON text: replaces the message's progress.
    Progress,
    /// A log line: appended to the message's log.
    Log,
}

impl Scribe {
    /// Lets the delivery write progress and logs through `desk`.
    pub(crate) fn open(&self, desk: Box<dyn Desk>) {
        let _ = self.desk.set(desk);
    }

    /// Keeps `result` for the ack, after checking its size against `max`.
    pub(crate) fn set(&self, result: Option<Vec<u8>>, max: usize) -> Result<(), Error> {
        if let Some(r) = &result {
            if r.len() > max {
                return Err(Error::ResultTooLarge { size: r.len(), max });
            }
        }
        *self.result.lock().unwrap_or_else(PoisonError::into_inner) = result;
        Ok(())
    }

    /// The largest result the queue keeps; unlimited outside a delivery.
    pub(crate) fn max_result(&self) -> usize {
        self.desk.get().map_or(usize::MAX, |d| d.max_result())
    }

    /// The result set, taken for the ack.
    pub(crate) fn take(&self) -> Option<Vec<u8>> {
        self.result.lock().unwrap_or_else(PoisonError::into_inner).take()
    }

    /// Whether progress or a log line was written.
    pub(crate) fn noted(&self) -> bool {
        self.noted.load(Ordering::Acquire)
    }

    /// The handler has returned: later notes are refused with
    /// [`Error::LeaseLost`], as the ack or nack ends the lease.
    pub(crate) fn end(&self) {
        self.ended.store(true, Ordering::Release);
    }

    /// Once every note handed over so far is written: the first that could
    /// not be (lease lost, a log key of another type) not reported yet.
    pub(crate) async fn written(&self) -> Result<(), Error> {
        self.unwritten.all_done().await;
        self.unwritten.failure().map_or(Ok(()), Err)
    }

    /// Hands progress (JSON text, at most `MAX_PROGRESS` bytes) or a log
    /// line (cut to `MAX_LOG_LINE` bytes) of delivery `attempt` of `id` to
    /// the desk; an earlier note's failure not reported yet is returned.
    pub(crate) fn write(&self, id: &MessageId, attempt: u32, kind: NoteKind, text: &str) -> Result<(), Error> {
        let Some(desk) = self.desk.get() else {
            return Err(Error::InvalidArgument(
                "progress and logs are written only while the message is being handled".into(),
            ));
        };
        if self.ended.load(Ordering::Acquire) {
            return Err(Error::LeaseLost {
                id: id.clone(),
                attempt,
            });
        }
        let text = match kind {
            NoteKind::Progress if text.len() > MAX_PROGRESS => {
                return Err(Error::ProgressTooLarge {
                    size: text.len(),
                    max: MAX_PROGRESS,
                })
            }
            NoteKind::Progress => text,
            NoteKind::Log => cut(text, MAX_LOG_LINE),
        };
        // Marked before the write: an ack racing a write still gives it the retention.
        self.noted.store(true, Ordering::Release);
        desk.write(id, attempt, kind, text, &self.unwritten)?;
        self.unwritten.failure().map_or(Ok(()), Err)
    }

    /// One page of parent `id`'s finished children, read through the desk.
    pub(crate) async fn children(
        &self,
        id: &MessageId,
        attempt: u32,
        cursor: Option<&str>,
    ) -> Result<ChildrenPage, Error> {
        let Some(desk) = self.desk.get() else {
            return Err(Error::InvalidArgument(
                "children's results are read this way only while the message is being handled".into(),
            ));
        };
        desk.children(id, attempt, cursor).await
    }
}

/// `line` cut to at most `max` bytes, on a character boundary.
fn cut(line: &str, max: usize) -> &str {
    if line.len() <= max {
        return line;
    }
    let mut end = max;
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    &line[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_line_is_cut_on_a_char_boundary() {
        assert_eq!(cut("abc", 3), "abc");
        assert_eq!(cut("abcd", 3), "abc");
        assert_eq!(cut("aé", 2), "a", "never half a character");
    }

    #[test]
    fn a_result_over_the_maximum_is_refused_whole() {
        let s = Scribe::default();
        assert!(matches!(
            s.set(Some(vec![0; 11]), 10),
            Err(Error::ResultTooLarge { size: 11, max: 10 })
        ));
        assert_eq!(s.take(), None, "nothing kept, nothing cut");
        s.set(Some(vec![1; 10]), 10).unwrap();
        assert_eq!(s.take(), Some(vec![1; 10]));
    }
}
