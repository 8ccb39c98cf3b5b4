//! What a running delivery records besides its ack: the result it returns
//! (kept until the ack, which writes it), and its progress and log lines,
//! written at once and fenced by the delivery's lease. Every clone of a
//! [`Message`](crate::Message) shares its delivery's [`Scribe`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use super::lease::Lease;
use super::state::Shared;
use crate::events::{self, Event};
use crate::maxima::{MAX_LOG_LINE, MAX_PROGRESS};
use crate::store::ops::note::{Note, Noted};
use crate::{Error, MessageId};

/// One delivery's result and notes.
#[derive(Default)]
pub(crate) struct Scribe {
    result: Mutex<Option<Vec<u8>>>,
    /// Progress or a log line was written: the ack gives them the result's retention.
    noted: AtomicBool,
    /// Set when the delivery starts; a message not being delivered writes nothing.
    desk: OnceLock<Desk>,
}

impl std::fmt::Debug for Scribe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scribe").finish_non_exhaustive()
    }
}

/// Where a running delivery writes (its shard's loop), and the lease that fences it.
pub(crate) struct Desk {
    pub shared: Arc<Shared>,
    pub lease: Current,
}

/// The lease a delivery holds now.
pub(crate) enum Current {
    /// As claimed: handlers within one lease are never renewed.
    Claimed(i64),
    /// Renewed while the handler runs.
    Renewed(Arc<Lease>),
}

impl Scribe {
    /// Lets the delivery write progress and logs through `desk`.
    pub(crate) fn open(&self, desk: Desk) {
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
        self.desk.get().map_or(usize::MAX, |d| d.shared.ctx.settings.max_result_size)
    }

    /// The result set, taken for the ack.
    pub(crate) fn take(&self) -> Option<Vec<u8>> {
        self.result.lock().unwrap_or_else(PoisonError::into_inner).take()
    }

    /// Whether progress or a log line was written.
    pub(crate) fn noted(&self) -> bool {
        self.noted.load(Ordering::Acquire)
    }

    /// Writes progress (JSON text) or a log line of delivery `attempt` of
    /// message `id`, fenced by the lease.
    pub(crate) async fn write(&self, id: &MessageId, attempt: u32, note: NoteKind<'_>) -> Result<(), Error> {
        let Some(desk) = self.desk.get() else {
            return Err(Error::InvalidArgument(
                "progress and logs are written only while the message is being handled".into(),
            ));
        };
        let ctx = &desk.shared.ctx;
        let lease = match &desk.lease {
            Current::Claimed(lease) => Some(*lease),
            Current::Renewed(l) => l.current().await,
        };
        let lost = || Error::LeaseLost { id: id.clone(), attempt };
        let Some(lease) = lease else {
            return Err(lost());
        };
        let (progress, line) = match note {
            NoteKind::Progress(v) => {
                if v.len() > MAX_PROGRESS {
                    return Err(Error::ProgressTooLarge {
                        size: v.len(),
                        max: MAX_PROGRESS,
                    });
                }
                (Some(v), None)
            }
            NoteKind::Log(line) => (None, Some(cut(line, MAX_LOG_LINE))),
        };
        let s = &ctx.settings;
        let op = Note {
            id: id.as_str(),
            lease,
            progress,
            line,
            max_lines: s.max_log_lines,
            // Kept past any end of this delivery: the ack shortens it to
            // the result retention, a burial leaves it past the dead letter's.
            ttl: s.result_retention.max(s.dead_letter_retention) + s.handler_timeout.max(s.max_consume_duration),
        };
        // Marked before the write: an ack racing a write still gives it the retention.
        self.noted.store(true, Ordering::Release);
        match ctx.store(&desk.shared.keys).run(&op).await? {
            Noted::Written => {
                if let Some(v) = progress {
                    events::emit(&ctx.events, || Event::Progress {
                        id: id.clone(),
                        value: v.to_string(),
                    });
                }
                Ok(())
            }
            Noted::LeaseLost => Err(lost()),
        }
    }
}

/// What a handler writes.
pub(crate) enum NoteKind<'a> {
    /// Progress as JSON text.
    Progress(&'a str),
    Log(&'a str),
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
