//! The integrity check: scans a queue's keys page by page, then confirms
//! each inconsistency it saw with one atomic look at the ids involved, so
//! messages moving between states during the scan are not reported.

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use crate::store::ops::inspect::{Inspect, Presence};
use crate::store::ops::scan::{Scan, Scanned};
use crate::store::ops::IdKey;
use crate::store::Keys;
use crate::{DelayQueue, Error, MessageId, MessageState};

/// Ids per scan page.
const PAGE: usize = 1000;
/// Most ids confirmed per `inspect` call.
const CONFIRM_BATCH: usize = 100;
/// List entries `inspect` may compare per call (it scans the lists per id).
const CONFIRM_BUDGET: usize = 100_000;
/// An outbox entry older than this is [`Anomaly::StuckOutbox`]: a relay
/// runs on every consumer tick that finds the outbox non-empty.
pub(crate) const OUTBOX_STUCK_AFTER: Duration = Duration::from_secs(300);

/// One inconsistency between a queue's keys.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Anomaly {
    /// The id is in more than one state at once.
    ManyStates {
        /// The message.
        id: MessageId,
        /// Every state it was found in.
        states: Vec<MessageState>,
    },
    /// The id is in a state, but its payload is gone.
    MissingPayload {
        /// The message.
        id: MessageId,
        /// Where the id was found.
        state: MessageState,
    },
    /// A payload whose id is in no state.
    OrphanPayload {
        /// The message.
        id: MessageId,
    },
    /// A delivery count whose message is gone.
    OrphanRetryRecord {
        /// The message.
        id: MessageId,
    },
    /// A [`unique_for`](crate::NewMessage::unique_for) marker without TTL
    /// whose message is gone: its window never started, so the id stays
    /// refused until the marker is deleted (docs/dedup.md).
    OrphanMarker {
        /// The message.
        id: MessageId,
    },
    /// A result, progress or log key without TTL: every script that
    /// writes one sets a TTL, so something else wrote it, and it would
    /// never go (docs/results.md).
    KeptForever {
        /// The message it belongs to.
        id: MessageId,
        /// Which: `"result"`, `"progress"` or `"log"`.
        key: &'static str,
    },
    /// A known group (listed by [`groups`](crate::DelayQueue::groups))
    /// with nothing in it: no due message, none processing, no wait and no
    /// setting of its own. It stays listed until something of it comes
    /// back (docs/groups.md).
    IdleGroup {
        /// The group.
        group: String,
    },
    /// A group with due messages or messages in processing that is not
    /// known: `groups` does not list it.
    UnknownGroup {
        /// The group.
        group: String,
    },
    /// A flow key of a parent that is gone (docs/workflows.md): its set of
    /// children to wait for (`"deps"`) while it is not waiting, no cancel
    /// of it is being relayed and the set has no TTL (a parent's set gets
    /// one until its send stores it, so that of a parent never sent goes
    /// an hour after it was filled), or its finished children's results
    /// (`"children"`) while it is neither stored nor dead. Nothing deletes
    /// it.
    OrphanFlowKey {
        /// The parent.
        parent: MessageId,
        /// Which: `"deps"` or `"children"`.
        key: &'static str,
    },
    /// A child's links to its parents while the child is neither stored
    /// nor dead: its completion will never be recorded, so those parents
    /// wait until cancelled.
    OrphanParentLink {
        /// The child.
        child: MessageId,
    },
    /// An outbox entry (a child's completion, or a cancelled parent) no
    /// relay delivered for over 5 minutes: no consumer of the queue ran,
    /// or its relay fails (docs/workflows.md).
    StuckOutbox {
        /// The entry as stored: `"<outcome> <child id> <link>"` or
        /// `"x <parent id>"`.
        entry: String,
        /// How long ago it was recorded.
        age: Duration,
    },
}

/// What [`DelayQueue::check_integrity`](crate::DelayQueue::check_integrity) found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct IntegrityReport {
    /// Distinct ids looked at.
    pub scanned: u64,
    /// Inconsistencies still present when checked again, one by one.
    pub anomalies: Vec<Anomaly>,
}

impl IntegrityReport {
    /// True when no anomaly was found.
    pub fn is_clean(&self) -> bool {
        self.anomalies.is_empty()
    }
}

impl fmt::Display for IntegrityReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ids scanned, {} anomalies", self.scanned, self.anomalies.len())?;
        for a in &self.anomalies {
            write!(f, "\n  {a:?}")?;
        }
        Ok(())
    }
}

impl Presence {
    /// The anomalies of `id`. `stale`: the STALE mark is set, so list
    /// entries may be left over from cancelled messages; claim then checks
    /// where a popped id lives and skips such entries, so they are no
    /// anomaly.
    fn anomalies(&self, id: &str, stale: bool) -> Vec<Anomaly> {
        let id = || MessageId::from(id.to_string());
        let states = self.states(stale);
        let mut found = Vec::new();
        if states.len() > 1 {
            found.push(Anomaly::ManyStates {
                id: id(),
                states: states.clone(),
            });
        }
        match (states.first(), self.payload) {
            (Some(&state), false) => found.push(Anomaly::MissingPayload { id: id(), state }),
            (None, true) => found.push(Anomaly::OrphanPayload { id: id() }),
            (None, false) if self.record => found.push(Anomaly::OrphanRetryRecord { id: id() }),
            _ => {}
        }
        if states.is_empty() && self.marker {
            found.push(Anomaly::OrphanMarker { id: id() });
        }
        found
    }
}

/// Runs the check, shard by shard; see [`DelayQueue::check_integrity`].
pub(crate) async fn check(queue: &DelayQueue) -> Result<IntegrityReport, Error> {
    let mut report = IntegrityReport {
        scanned: 0,
        anomalies: Vec::new(),
    };
    for k in queue.inner.shards.iter() {
        let shard = check_shard(queue, k).await?;
        report.scanned += shard.scanned;
        report.anomalies.extend(shard.anomalies);
    }
    Ok(report)
}

async fn check_shard(queue: &DelayQueue, k: &Keys) -> Result<IntegrityReport, Error> {
    let mut seen: HashMap<String, Presence> = HashMap::new();
    let mut listed = 0usize;
    // Never confirmed: no script writes one of these without a TTL.
    let mut forever = Vec::new();
    for what in IdKey::ALL {
        let ids = scan(queue, k, Scanned::Ids(what)).await?;
        if matches!(what, IdKey::Ready | IdKey::Retry) {
            listed += ids.len();
        }
        let key = match what {
            IdKey::Results => Some("result"),
            IdKey::Progress => Some("progress"),
            IdKey::Logs => Some("log"),
            _ => None,
        };
        if let Some(key) = key {
            forever.extend(ids.into_iter().map(|id| Anomaly::KeptForever { id: id.into(), key }));
            continue;
        }
        for id in ids {
            let p = seen.entry(id).or_default();
            match what {
                IdKey::Pending => p.pending = true,
                IdKey::Ready => p.ready += 1,
                IdKey::Processing => p.processing = true,
                IdKey::Retry => p.retry += 1,
                IdKey::Dead => p.dead = true,
                IdKey::Attempts => p.record = true,
                IdKey::Payloads => p.payload = true,
                IdKey::Markers => p.marker = true,
                IdKey::Results | IdKey::Progress | IdKey::Logs => {}
            }
        }
    }
    // The STALE mark is a field of the attempts hash, not an id.
    seen.remove(" stale");
    // Without the mark more counts as an anomaly, so this finds every suspect.
    let suspects: Vec<&String> = seen
        .iter()
        .filter(|(id, p)| !p.anomalies(id, false).is_empty())
        .map(|(id, _)| id)
        .collect();
    let batch = (CONFIRM_BUDGET / (listed + 1)).clamp(1, CONFIRM_BATCH);
    let mut anomalies = Vec::new();
    for chunk in suspects.chunks(batch) {
        let (stale, found) = inspect(queue, k, chunk).await?;
        for (id, p) in chunk.iter().zip(found) {
            anomalies.extend(p.anomalies(id, stale));
        }
    }
    // Each group is judged in the call that reads it, atomically: no
    // confirming look is needed.
    for group in scan(queue, k, Scanned::IdleGroups).await? {
        anomalies.push(Anomaly::IdleGroup { group });
    }
    let mut unknown = scan(queue, k, Scanned::UnknownGroups).await?;
    // A group with both a zset and a count in processing is named twice.
    unknown.sort();
    unknown.dedup();
    anomalies.extend(unknown.into_iter().map(|group| Anomaly::UnknownGroup { group }));
    anomalies.extend(flow_anomalies(queue, k).await?);
    anomalies.extend(forever);
    Ok(IntegrityReport {
        scanned: seen.len() as u64,
        anomalies,
    })
}

/// The flow keys left behind, each judged in the call that reads it.
async fn flow_anomalies(queue: &DelayQueue, k: &Keys) -> Result<Vec<Anomaly>, Error> {
    let mut found = Vec::new();
    for (of, key) in [(Scanned::OrphanDeps, "deps"), (Scanned::OrphanChildren, "children")] {
        for parent in scan(queue, k, of).await? {
            found.push(Anomaly::OrphanFlowKey {
                parent: parent.into(),
                key,
            });
        }
    }
    for child in scan(queue, k, Scanned::OrphanLinks).await? {
        found.push(Anomaly::OrphanParentLink { child: child.into() });
    }
    for aged in scan(queue, k, Scanned::OldOutbox(OUTBOX_STUCK_AFTER)).await? {
        let parsed = aged
            .split_once(' ')
            .and_then(|(age, entry)| Some((age.parse().ok()?, entry)));
        let Some((age, entry)) = parsed else {
            return Err(Error::UnexpectedReply {
                script: "scan",
                detail: format!("an outbox entry without its age: {aged:?}"),
            });
        };
        found.push(Anomaly::StuckOutbox {
            entry: entry.to_string(),
            age: Duration::from_millis(age),
        });
    }
    Ok(found)
}

/// Everything `of` pages through, page by page.
async fn scan(queue: &DelayQueue, k: &Keys, of: Scanned) -> Result<Vec<String>, Error> {
    let (mut cursor, mut ids) = ("0".to_string(), Vec::new());
    loop {
        let page = queue
            .store(k)
            .run(&Scan {
                of,
                cursor: &cursor,
                page: PAGE,
            })
            .await?;
        ids.extend(page.ids);
        match page.next {
            Some(next) => cursor = next,
            None => return Ok(ids),
        }
    }
}

/// Where each id lives, taken atomically; and whether the STALE mark is set.
async fn inspect(queue: &DelayQueue, k: &Keys, ids: &[&String]) -> Result<(bool, Vec<Presence>), Error> {
    let ids = ids.iter().map(|id| id.as_str()).collect();
    let reply = queue.store(k).run(&Inspect { ids }).await?;
    Ok((reply.stale, reply.found))
}

impl DelayQueue {
    /// Scans the queue's keys and reports inconsistencies: ids in two
    /// states, ids without payload, payloads and delivery counts without a
    /// message, known groups with nothing in them and groups with messages
    /// that are not known, flow keys and links left by a parent or child
    /// that is gone, and outbox entries no relay delivered for 5 minutes.
    /// A clean queue gives an empty list; anything else means lost
    /// or duplicate deliveries, or keys written by something other than
    /// `delayqueue` (an id without payload, its payload deleted or evicted
    /// by something else, is reported until a claim buries it as an
    /// `expired` dead letter).
    ///
    /// Safe on a live queue: every script call reads one page of at most
    /// 1000 ids, and each suspect is confirmed by an atomic look at it
    /// before it is reported, so messages moving meanwhile are not
    /// reported. Holds every id in memory while it runs; the confirming
    /// calls scan the ready and retry lists, so on a queue with long lists
    /// and many suspects it takes a while.
    ///
    /// ```no_run
    /// # async fn run(queue: delayqueue::DelayQueue) -> Result<(), delayqueue::Error> {
    /// let report = queue.check_integrity().await?;
    /// if !report.is_clean() {
    ///     eprintln!("{report}");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn check_integrity(&self) -> Result<crate::IntegrityReport, Error> {
        check(self).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use MessageState::*;

    fn live(p: Presence) -> Presence {
        Presence { payload: true, ..p }
    }

    #[test]
    fn one_state_with_its_payload_is_clean() {
        for p in [
            Presence {
                pending: true,
                ..Default::default()
            },
            Presence {
                ready: 1,
                ..Default::default()
            },
            Presence {
                processing: true,
                record: true,
                ..Default::default()
            },
            Presence {
                retry: 1,
                record: true,
                ..Default::default()
            },
            Presence {
                dead: true,
                record: true,
                ..Default::default()
            },
        ] {
            assert_eq!(live(p.clone()).anomalies("a", false), vec![], "{p:?}");
            assert_eq!(live(p.clone()).anomalies("a", true), vec![], "{p:?}");
        }
    }

    #[test]
    fn two_states_are_an_anomaly_unless_a_list_entry_may_be_stale() {
        let p = live(Presence {
            pending: true,
            ready: 1,
            ..Default::default()
        });
        assert_eq!(
            p.anomalies("a", false),
            vec![Anomaly::ManyStates {
                id: "a".into(),
                states: vec![Pending, Ready]
            }]
        );
        assert_eq!(p.anomalies("a", true), vec![]);
        let p = live(Presence {
            pending: true,
            processing: true,
            ..Default::default()
        });
        assert_eq!(p.anomalies("a", true).len(), 1, "pending and processing is never fine");
        let twice = live(Presence {
            retry: 2,
            ..Default::default()
        });
        assert_eq!(twice.anomalies("a", false).len(), 1);
        assert_eq!(twice.anomalies("a", true), vec![]);
    }

    #[test]
    fn missing_and_orphan_parts() {
        let p = Presence {
            pending: true,
            ..Default::default()
        };
        assert_eq!(
            p.anomalies("a", true),
            vec![Anomaly::MissingPayload {
                id: "a".into(),
                state: Pending
            }]
        );
        let stale_entry = Presence {
            ready: 1,
            ..Default::default()
        };
        assert_eq!(stale_entry.anomalies("a", true), vec![]);
        assert_eq!(stale_entry.anomalies("a", false).len(), 1);
        let p = Presence {
            payload: true,
            record: true,
            ..Default::default()
        };
        assert_eq!(p.anomalies("a", false), vec![Anomaly::OrphanPayload { id: "a".into() }]);
        let p = Presence {
            record: true,
            ..Default::default()
        };
        assert_eq!(
            p.anomalies("a", false),
            vec![Anomaly::OrphanRetryRecord { id: "a".into() }]
        );
    }
}
