//! The public types of flows (docs/workflows.md): what a parent waits
//! for ([`MessageRef`]), what a dead child does to it ([`ChildPolicy`]),
//! and what it reads of its finished children ([`ChildResult`]). Sending
//! flows is `queue/flows.rs`; the relay that completes them is
//! `consume/relay.rs`.

use crate::MessageId;

/// What becomes of a parent when one of its children becomes a dead letter
/// (or is cancelled); set per parent with
/// [`NewMessage::on_dead_child`](crate::NewMessage::on_dead_child).
///
/// ```
/// use delayqueue::ChildPolicy;
/// assert_eq!(ChildPolicy::default(), ChildPolicy::Fail);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ChildPolicy {
    /// The parent becomes a dead letter, its reason naming the child.
    #[default]
    Fail,
    /// The parent runs once its other children finished.
    Ignore,
    /// The parent keeps waiting: a requeued child that then succeeds still
    /// lets it run. A cancelled or deleted child fails it (nothing can
    /// finish that child any more).
    Wait,
    /// The parent is deleted, not kept as a dead letter: it was to run
    /// only if every child succeeded (a batch's
    /// [`on_success`](crate::BatchBuilder::on_success)).
    Remove,
}

impl ChildPolicy {
    /// The letter the scripts keep it as.
    pub(crate) fn letter(self) -> char {
        match self {
            ChildPolicy::Fail => 'f',
            ChildPolicy::Ignore => 'i',
            ChildPolicy::Wait => 'w',
            ChildPolicy::Remove => 'r',
        }
    }
}

/// A message a parent waits for: an id in the parent's own queue (from a
/// `&str`, `String` or [`MessageId`]) or in another queue
/// ([`MessageRef::new`]).
///
/// ```no_run
/// # async fn run(orders: delayqueue::DelayQueue, mail: delayqueue::DelayQueue) -> Result<(), delayqueue::Error> {
/// use delayqueue::MessageRef;
/// let charge = orders.send("charge card").await?;
/// let receipt = mail.send("email receipt").await?;
/// orders
///     .send("close order")
///     .after([MessageRef::from(charge), MessageRef::new(&mail, receipt)])
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageRef {
    /// The base of the child's shard keys; `None`: the parent's queue.
    pub(crate) base: Option<String>,
    pub(crate) id: MessageId,
}

impl MessageRef {
    /// The message's id.
    pub fn id(&self) -> &MessageId {
        &self.id
    }
}

impl<T: Into<MessageId>> From<T> for MessageRef {
    fn from(id: T) -> Self {
        MessageRef {
            base: None,
            id: id.into(),
        }
    }
}

/// How a finished child ended, as its parent sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ChildOutcome {
    /// Acked; also a child that was no longer stored when the parent was
    /// sent (finished long ago, or never sent: the two cannot be told apart).
    Acked,
    /// Became a dead letter.
    Dead,
    /// Cancelled, or deleted as a dead letter.
    Cancelled,
}

/// One finished child of a parent, from
/// [`DelayQueue::children_results`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildResult {
    /// The child's queue.
    pub queue: String,
    /// The child's id.
    pub id: MessageId,
    /// How it ended.
    pub outcome: ChildOutcome,
    /// The result its handler returned, when it returned one and it was
    /// still kept when the child's completion was relayed.
    pub result: Option<Vec<u8>>,
}

/// One page of a parent's finished children.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ChildrenPage {
    /// The children of this page, in no particular order.
    pub children: Vec<ChildResult>,
    /// Where the next page starts; `None` after the last one.
    pub next: Option<String>,
}
