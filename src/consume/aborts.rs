//! Aborts reaching running handlers (docs/handlers.md, "Aborting a
//! running handler").
//!
//! Each delivery registers its message's abort token, under its shard's
//! wake-up channel and its id, from its start to its settling. The abort
//! script publishes the abort signal (`"abort <id>"`,
//! lua/include/abort.lua) on that channel; the wake-up hub (`wake.rs`),
//! which already listens there, fires the tokens it names. A lease
//! renewal that finds the message aborted fires them too (`lease.rs`):
//! the fallback when the signal was lost. One registry per process, since
//! a hub serves every consumer of its client.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use tokio_util::sync::CancellationToken;

/// What the abort signal starts with; the id follows.
const SIGNAL: &str = "abort ";

/// A running delivery: its registration's number, its wake-up channel, its token.
type Entry = (u64, String, CancellationToken);

/// The running deliveries by id (an id may run twice at once: a delivery
/// whose lease ran out, and its redelivery).
static RUNNING: Mutex<Option<HashMap<String, Vec<Entry>>>> = Mutex::new(None);

/// Numbers the registrations.
static NEXT: AtomicU64 = AtomicU64::new(0);

/// A delivery's registration: dropping it ends it.
pub(crate) struct Watching {
    id: String,
    n: u64,
}

/// Registers the abort token of delivery `id` whose shard's wake-up
/// channel is `channel`, until the returned guard is dropped.
pub(crate) fn watch(channel: &str, id: &str, token: CancellationToken) -> Watching {
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let mut running = RUNNING.lock().unwrap_or_else(|e| e.into_inner());
    let entry = running
        .get_or_insert_with(HashMap::new)
        .entry(id.to_string())
        .or_default();
    entry.push((n, channel.to_string(), token));
    Watching { id: id.to_string(), n }
}

impl Drop for Watching {
    fn drop(&mut self) {
        let mut running = RUNNING.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(map) = running.as_mut() {
            if let Some(entry) = map.get_mut(&self.id) {
                entry.retain(|(n, _, _)| *n != self.n);
                if entry.is_empty() {
                    map.remove(&self.id);
                }
            }
        }
    }
}

/// Fires the tokens of the deliveries of `id` running here whose wake-up
/// channel is `channel`; how many.
pub(crate) fn fire(channel: &str, id: &str) -> usize {
    let running = RUNNING.lock().unwrap_or_else(|e| e.into_inner());
    let Some(entry) = running.as_ref().and_then(|map| map.get(id)) else {
        return 0;
    };
    let mut fired = 0;
    for (_, c, token) in entry {
        if c == channel {
            token.cancel();
            fired += 1;
        }
    }
    fired
}

/// The id a message on a wake-up channel aborts, when it is an abort
/// signal (else it is a wake-up).
pub(crate) fn signalled(payload: &str) -> Option<&str> {
    payload.strip_prefix(SIGNAL)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signal_fires_the_tokens_of_its_id_on_its_channel_while_registered() {
        let (a, b, other) = (
            CancellationToken::new(),
            CancellationToken::new(),
            CancellationToken::new(),
        );
        let watching = watch("q:wake", "m-1", a.clone());
        let _redelivery = watch("q:wake", "m-1", b.clone());
        let _elsewhere = watch("r:wake", "m-1", other.clone());
        assert_eq!(signalled("abort m-1"), Some("m-1"));
        assert_eq!(signalled("0"), None);
        assert_eq!(fire("q:wake", "m-1"), 2);
        assert!(a.is_cancelled() && b.is_cancelled() && !other.is_cancelled());
        drop(watching);
        assert_eq!(fire("q:wake", "m-1"), 1);
        assert_eq!(fire("q:wake", "unknown"), 0);
    }
}
