//! [`Event`]: what happens to messages, as a stream for code that reacts to
//! it (alerting on dead letters, counting failures per customer, ...).

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::sync::broadcast;

use crate::MessageId;

/// Events buffered per subscriber before the slowest one starts missing
/// some (it then gets `RecvError::Lagged`).
pub(crate) const CAPACITY: usize = 4096;

/// Something that happened to a queue's messages, seen by this process
/// (its producers and consumers), from
/// [`DelayQueue::events`](crate::DelayQueue::events).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event {
    /// A message was stored.
    Sent {
        /// The message.
        id: MessageId,
    },
    /// A handler started on a message.
    Delivered {
        /// The message.
        id: MessageId,
        /// Which delivery: 1 for the first.
        attempt: u32,
    },
    /// A handler succeeded, its ack took effect and the message is gone:
    /// one per message acked, never for a late ack (that is
    /// [`Event::LeaseLost`]).
    Acked {
        /// The message.
        id: MessageId,
    },
    /// A running handler reported its progress
    /// ([`Message::progress`](crate::Message::progress)).
    Progress {
        /// The message.
        id: MessageId,
        /// The value it reported: a number's digits or JSON text.
        value: String,
    },
    /// A delivery failed and the message will be delivered again.
    Failed {
        /// The message.
        id: MessageId,
        /// The delivery that failed.
        attempt: u32,
        /// The handler's error, the panic or the time-out.
        reason: String,
        /// How long until the next delivery.
        retry_in: Duration,
    },
    /// A handler deferred its message with an uncounted
    /// [`RetryAfter`](crate::RetryAfter::uncounted): not a failure, and the
    /// delivery is not counted, so the next delivery has the same
    /// attempt number.
    Deferred {
        /// The message.
        id: MessageId,
        /// The delivery that deferred (not counted: the next has this number too).
        attempt: u32,
        /// The reason the handler gave.
        reason: String,
        /// How long until the next delivery.
        retry_in: Duration,
    },
    /// A delivery failed and the message is now a dead letter. Also sent
    /// for a message whose lease ran out on its last delivery (after
    /// [`Event::TimedOut`]), with reason `"timeout"`.
    Dead {
        /// The message.
        id: MessageId,
        /// The delivery that failed.
        attempt: u32,
        /// The handler's error, the panic or the time-out.
        reason: String,
    },
    /// Deliveries whose lease ran out without an ack (a consumer died or
    /// hung) were taken back; `dead` of them had no deliveries left (each
    /// of those also gets an [`Event::Dead`]).
    TimedOut {
        /// Deliveries taken back.
        count: u64,
        /// Of those, moved to the dead letters.
        dead: u64,
    },
    /// A message was discarded instead of delivered: its `expire_after`
    /// deadline had passed, or its payload was gone (deleted by something
    /// other than this crate). It is now a dead letter with reason
    /// `"expired"`, counted in [`Totals::expired`](crate::Totals).
    Expired {
        /// The message.
        id: MessageId,
    },
    /// An ack or nack came after the lease ran out: the message was or
    /// will be delivered again, and this ack or nack took no effect. Also
    /// when the redelivery has finished already (acked by another
    /// consumer): the late ack is this event, not a second
    /// [`Event::Acked`].
    LeaseLost {
        /// The message.
        id: MessageId,
    },
    /// A message aborted while its handler ran
    /// ([`DelayQueue::abort`](crate::DelayQueue::abort)) has ended as
    /// aborted: its handler returned (whatever it returned), or its lease
    /// ran out (the consumer died holding it). Not retried, not a dead
    /// letter; counted in [`Totals::aborted`](crate::Totals).
    Aborted {
        /// The message.
        id: MessageId,
    },
    /// This process's scheduler sent a fire of schedule `schedule`, due
    /// at `at`, as message `id` (instead of an [`Event::Sent`]). Every
    /// fire is sent by one process only.
    Fired {
        /// The schedule's name.
        schedule: String,
        /// The fire's message.
        id: MessageId,
        /// The fire time.
        at: std::time::SystemTime,
    },
    /// An operator changed the queue; sent only when something changed.
    Changed {
        /// What was done.
        action: Action,
        /// The message acted on, for an action on one message.
        id: Option<MessageId>,
        /// How many messages it moved or deleted (0 for pause and resume
        /// and for changes of a schedule, 1 for a trigger).
        count: u64,
        /// The schedule acted on, for an action on a schedule.
        schedule: Option<String>,
        /// The group acted on, for an action on a group (docs/groups.md).
        group: Option<String>,
    },
}

/// What an operator (code, the CLI or the dashboard, through this
/// process's queue handle) did to a queue, in [`Event::Changed`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Action {
    /// The queue was paused.
    Paused,
    /// The queue was resumed.
    Resumed,
    /// A waiting message was cancelled.
    Cancelled,
    /// A message being processed was aborted: its handler is told, and it
    /// ends as aborted ([`Event::Aborted`]).
    Aborted,
    /// A pending message got a new due time.
    Rescheduled,
    /// Dead letters were moved back to ready.
    Requeued,
    /// Dead letters were deleted.
    Deleted,
    /// Every message of the queue was deleted.
    Purged,
    /// A rate limit or global concurrency limit was set or cleared.
    LimitsChanged,
    /// A group was paused ([`DelayQueue::pause_group`](crate::DelayQueue::pause_group)).
    GroupPaused,
    /// A group was resumed.
    GroupResumed,
    /// A group's concurrency, or the default of every group, was set or
    /// cleared (`group` is `None` for the default).
    GroupLimitsChanged,
    /// A schedule was created or its definition changed.
    ScheduleSet,
    /// A schedule was removed.
    ScheduleRemoved,
    /// A schedule was paused.
    SchedulePaused,
    /// A schedule was resumed.
    ScheduleResumed,
    /// A schedule was triggered: one fire sent now, message `id`.
    ScheduleTriggered,
}

/// A queue's event channel, shared by its handles and consumers. Its
/// buffer (`CAPACITY` slots, some 370 KiB) is allocated by the first
/// subscriber: a handle nobody listens to costs a pointer.
#[derive(Debug, Clone, Default)]
pub(crate) struct Events(Arc<OnceLock<broadcast::Sender<Event>>>);

impl Events {
    /// A receiver of every event from now on.
    pub(crate) fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.0.get_or_init(|| broadcast::channel(CAPACITY).0).subscribe()
    }
}

/// Sends what `event` builds, only when someone listens.
pub(crate) fn emit(events: &Events, event: impl FnOnce() -> Event) {
    if let Some(tx) = events.0.get().filter(|tx| tx.receiver_count() > 0) {
        let _ = tx.send(event());
    }
}
