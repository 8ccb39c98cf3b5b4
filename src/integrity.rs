//! [`IntegrityReport`]: what `DelayQueue::check_integrity` found.

use std::fmt;

use crate::MessageId;

/// A state a message can be in: the queue key that holds its id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum MessageState {
    /// Waiting for its due time (`pending` zset).
    Pending,
    /// Due, waiting for a consumer (`ready` list).
    Ready,
    /// Delivered to a handler (`unack` zset).
    Processing,
    /// Waiting to be delivered again (`retry` list).
    Retry,
    /// Out of deliveries (`garbage` set).
    Garbage,
}

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
