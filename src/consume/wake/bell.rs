//! A loop's bell: where the wake-ups of its channel go, and whether they
//! reach it at all.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use tokio::sync::Notify;
use tokio::time::Instant;

/// What the wake-ups of a loop since it last looked ask of it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rung {
    /// The earliest instant asked for: a loop needs no other, as it
    /// promotes at the earliest and claims when that is now.
    pub at: Instant,
    /// Wake-ups may have been lost (the subscriber reconnected): probe now.
    pub probe: bool,
}

/// Where the wake-ups of one loop go, and whether they reach it at all.
/// Far smaller than a channel, which an idle loop would hold all along.
#[derive(Debug, Default)]
pub(crate) struct Bell {
    due: Mutex<Option<Rung>>,
    rang: Notify,
    /// Its channel is not subscribed (at start, or since a failed
    /// resubscribe): wake-ups are lost, so its loop polls.
    deaf: AtomicBool,
}

impl Bell {
    pub(super) fn ring(&self, at: Instant, probe: bool) {
        let mut due = self.due.lock().unwrap_or_else(|e| e.into_inner());
        *due = Some(match *due {
            Some(was) => Rung {
                at: was.at.min(at),
                probe: was.probe || probe,
            },
            None => Rung { at, probe },
        });
        drop(due);
        self.rang.notify_one();
    }

    /// What was asked since the last look, if anything.
    pub(crate) fn take(&self) -> Option<Rung> {
        self.due.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    /// The next wake-up.
    pub(crate) async fn rung(&self) -> Rung {
        loop {
            if let Some(at) = self.take() {
                return at;
            }
            self.rang.notified().await;
        }
    }

    /// Whether wake-ups reach its loop, so it may sleep until its idle probe.
    pub(crate) fn subscribed(&self) -> bool {
        !self.deaf.load(Ordering::Relaxed)
    }

    pub(super) fn set_deaf(&self, deaf: bool) {
        self.deaf.store(deaf, Ordering::Relaxed);
    }
}
