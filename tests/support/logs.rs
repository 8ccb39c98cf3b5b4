//! Log capture for the tests that check what a queue logged.
//!
//! Every event of the test binary goes, through one global subscriber, to one
//! global buffer: a thread-local subscriber (`set_default`) misses events
//! whose callsite another test thread hit first, because the callsite's
//! interest is cached then. A [`Logs`] sees the events of its own queue that
//! were logged after [`Logs::capture`]: those with the field `queue=<name>`,
//! and those that name one of the queue's keys or its wake-up channel (the
//! hash tag `{<name>}`; queue names cannot contain braces).
//!
//! The subscriber logs at DEBUG and above, so tests can check what is
//! logged at DEBUG rather than at a level that needs attention.

use std::io::Write;
use std::sync::{Mutex, MutexGuard, Once};

use tracing::{Level, Metadata};
use tracing_subscriber::fmt::MakeWriter;

/// Every event formatted so far, with its level, in the order logged.
static EVENTS: Mutex<Vec<(Level, String)>> = Mutex::new(Vec::new());

/// The buffer, even after a panic while it was held (it stays consistent).
fn events() -> MutexGuard<'static, Vec<(Level, String)>> {
    EVENTS.lock().unwrap_or_else(|e| e.into_inner())
}

/// The log lines of one queue; see the module docs.
pub struct Logs {
    /// `queue=<name>`, the field the crate's events carry.
    field: String,
    /// `{<name>}`, the hash tag of the queue's keys and wake-up channel.
    tag: String,
    /// Events before this index were logged before the capture.
    from: usize,
}

impl Logs {
    /// Installs the global subscriber (once per test binary) and starts
    /// capturing the events of queue `queue`.
    pub fn capture(queue: &str) -> Logs {
        static INSTALLED: Once = Once::new();
        INSTALLED.call_once(|| {
            let subscriber = tracing_subscriber::fmt()
                .with_max_level(Level::DEBUG)
                .with_writer(Sink)
                .with_ansi(false)
                .finish();
            tracing::subscriber::set_global_default(subscriber)
                .expect("support::logs: another global tracing subscriber was set already");
        });
        Logs {
            field: format!("queue={queue}"),
            tag: format!("{{{queue}}}"),
            from: events().len(),
        }
    }

    /// This queue's events at `min` or more severe (ERROR is the most severe).
    fn lines_at_least(&self, min: Level) -> Vec<String> {
        events()
            .iter()
            .skip(self.from)
            .filter(|(level, text)| *level <= min && self.names_queue(text))
            .map(|(_, text)| text.trim_end().to_string())
            .collect()
    }

    fn names_queue(&self, text: &str) -> bool {
        text.split_whitespace().any(|w| w == self.field) || text.contains(&self.tag)
    }

    /// This queue's log lines, each ending in `'\n'`.
    pub fn text(&self) -> String {
        self.lines_at_least(Level::TRACE)
            .into_iter()
            .map(|l| format!("{l}\n"))
            .collect()
    }

    /// Every line logged since the capture, of any queue: also those
    /// without a queue (e.g. the script loader's), and other tests'.
    pub fn all_text(&self) -> String {
        events().iter().skip(self.from).map(|(_, text)| text.as_str()).collect()
    }

    /// This queue's lines at WARN or ERROR level.
    pub fn warnings(&self) -> Vec<String> {
        self.lines_at_least(Level::WARN)
    }
}

/// Makes one [`EventWriter`] per event, tagged with the event's level.
struct Sink;

impl<'a> MakeWriter<'a> for Sink {
    type Writer = EventWriter;

    fn make_writer(&'a self) -> EventWriter {
        // Not used by `fmt` for events; counted as INFO.
        EventWriter {
            level: Level::INFO,
            text: Vec::new(),
        }
    }

    fn make_writer_for(&'a self, meta: &Metadata<'_>) -> EventWriter {
        EventWriter {
            level: *meta.level(),
            text: Vec::new(),
        }
    }
}

/// Collects one formatted event and stores it in [`EVENTS`] when dropped.
struct EventWriter {
    level: Level,
    text: Vec<u8>,
}

impl Write for EventWriter {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.text.extend_from_slice(b);
        Ok(b.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for EventWriter {
    fn drop(&mut self) {
        if !self.text.is_empty() {
            let text = String::from_utf8_lossy(&self.text).into_owned();
            events().push((self.level, text));
        }
    }
}
