//! What a delivery records besides its ack: the result its handler
//! returns (kept until the ack, which writes it), and its progress and log
//! lines, written through the consumer's [`Desk`] (which sends those of
//! all running handlers of a shard together). Every clone of
//! a [`Message`](crate::Message) shares its delivery's [`Scribe`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};

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
    /// Writes progress or a line (`text`) of delivery `attempt` of message
    /// `id`, returning once Redis has it.
    async fn write(&self, id: &MessageId, attempt: u32, kind: NoteKind, text: &str) -> Result<(), Error>;
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

    /// Writes progress (JSON text, at most `MAX_PROGRESS` bytes) or a log
    /// line (cut to `MAX_LOG_LINE` bytes) of delivery `attempt` of `id`.
    pub(crate) async fn write(&self, id: &MessageId, attempt: u32, kind: NoteKind, text: &str) -> Result<(), Error> {
        let Some(desk) = self.desk.get() else {
            return Err(Error::InvalidArgument(
                "progress and logs are written only while the message is being handled".into(),
            ));
        };
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
        desk.write(id, attempt, kind, text).await
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
