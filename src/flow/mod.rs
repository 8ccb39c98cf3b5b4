//! The public types of flows (docs/workflows.md): what a parent waits
//! for ([`MessageRef`]), what a dead child does to it ([`ChildPolicy`]),
//! what it reads of its finished children ([`ChildResult`]), and a flow
//! read as a tree ([`FlowTree`]); and, in `wire.rs`, the protocol's
//! values as the scripts keep them. Sending flows is `queue/flows/`,
//! reading them and relaying completions `store/flows/`, one operation
//! per flow script in `store/ops/`.

pub(crate) mod wire;

use crate::{MessageId, MessageState};

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
    /// only if every child succeeded (a cohort's
    /// [`on_success`](crate::CohortBuilder::on_success)).
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

    /// The policy a script's letter stands for.
    pub(crate) fn of_letter(letter: &str) -> Option<Self> {
        [
            ChildPolicy::Fail,
            ChildPolicy::Ignore,
            ChildPolicy::Wait,
            ChildPolicy::Remove,
        ]
        .into_iter()
        .find(|p| letter.len() == 1 && letter.starts_with(p.letter()))
    }

    /// Its name, as the CLI and the dashboard spell it.
    ///
    /// ```
    /// assert_eq!(delayqueue::ChildPolicy::Wait.as_str(), "wait");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            ChildPolicy::Fail => "fail",
            ChildPolicy::Ignore => "ignore",
            ChildPolicy::Wait => "wait",
            ChildPolicy::Remove => "remove",
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

impl ChildOutcome {
    /// Its name, as the CLI and the dashboard spell it.
    ///
    /// ```
    /// assert_eq!(delayqueue::ChildOutcome::Acked.as_str(), "acked");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            ChildOutcome::Acked => "acked",
            ChildOutcome::Dead => "dead",
            ChildOutcome::Cancelled => "cancelled",
        }
    }
}

/// One finished child of a parent, from
/// [`DelayQueue::children_results`](crate::DelayQueue::children_results).
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
    pub items: Vec<ChildResult>,
    /// Where the next page starts; `None` after the last one.
    pub next: Option<String>,
}

/// Most children of one node a [`FlowTree`] lists, and one
/// [`DelayQueue::flow_children`](crate::DelayQueue::flow_children) page holds.
pub const FLOW_PAGE: usize = 50;
/// Most nodes one [`DelayQueue::flow`](crate::DelayQueue::flow) reads:
/// past them, nodes are listed without their children.
pub const FLOW_TREE_NODES: usize = 500;

/// A flow read from one of its messages by
/// [`DelayQueue::flow`](crate::DelayQueue::flow): the way up from that
/// message to its root, and the tree below the root, bounded
/// (docs/workflows.md, "Reading a flow").
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FlowTree {
    /// The queue of the message asked for.
    pub queue: String,
    /// The message asked for; somewhere in the tree.
    pub id: MessageId,
    /// Its parents, as its links name them: none for a root, several for
    /// a child of several parents (a cohort's member).
    pub parents: Vec<FlowParent>,
    /// The way up: its first parent, that parent's first parent, and so
    /// on to the root (the last); at most [`MAX_FLOW_DEPTH`](crate::MAX_FLOW_DEPTH).
    pub path: Vec<FlowParent>,
    /// The root: the last of `path`, or the message asked for when it
    /// has no parent.
    pub root: FlowNode,
    /// Whether [`FLOW_TREE_NODES`] or
    /// [`MAX_FLOW_DEPTH`](crate::MAX_FLOW_DEPTH) left some node's children
    /// unlisted (their [`FlowNode::next`] then says where they start).
    pub truncated: bool,
}

/// A parent a message is linked to (its queue, id and the policy it
/// waits with).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FlowParent {
    /// The parent's queue.
    pub queue: String,
    /// The parent's id.
    pub id: MessageId,
    /// What a dead child does to it.
    pub policy: ChildPolicy,
}

/// One message of a [`FlowTree`], with a page of its children.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FlowNode {
    /// Its queue.
    pub queue: String,
    /// Its id.
    pub id: MessageId,
    /// Where it is; `None` when its queue no longer stores it (acked,
    /// cancelled or deleted) or never did.
    pub state: Option<MessageState>,
    /// How it ended, as its parent recorded it; `None` while its parent
    /// still waits for it (and for the root).
    pub outcome: Option<ChildOutcome>,
    /// Whether its parent keeps a copy of its result
    /// ([`DelayQueue::children_results`](crate::DelayQueue::children_results)).
    pub has_result: bool,
    /// Children it still waits for.
    pub unfinished: u64,
    /// Children that finished (acked, dead or cancelled).
    pub finished: u64,
    /// Its children listed: those it waits for first, then the finished
    /// ones; at most [`FLOW_PAGE`].
    pub children: Vec<FlowNode>,
    /// Where the page of its children after `children` starts
    /// ([`DelayQueue::flow_children`](crate::DelayQueue::flow_children));
    /// `None` when every child is listed.
    pub next: Option<String>,
}

impl FlowNode {
    /// Children not listed in `children`.
    ///
    /// ```no_run
    /// # async fn run(queue: delayqueue::DelayQueue) -> Result<(), delayqueue::Error> {
    /// if let Some(tree) = queue.flow("close-42").await? {
    ///     println!("{} children, {} more", tree.root.children.len(), tree.root.more());
    /// }
    /// # Ok(()) }
    /// ```
    pub fn more(&self) -> u64 {
        (self.unfinished + self.finished).saturating_sub(self.children.len() as u64)
    }
}

/// One page of a node's children, from
/// [`DelayQueue::flow_children`](crate::DelayQueue::flow_children): each
/// with its counts, none with children listed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct FlowPage {
    /// At most [`FLOW_PAGE`] children.
    pub items: Vec<FlowNode>,
    /// Where the next page starts; `None` after the last one.
    pub next: Option<String>,
}
