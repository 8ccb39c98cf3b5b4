//! Flows at the queue (docs/workflows.md): [`Flow`], a parent sent with
//! its children in one call, and reading a parent's finished children
//! (here); sending waiting parents (`waiting.rs`), their children sets and
//! links (`links.rs`), cohorts with callbacks (`cohorts.rs`) and a flow
//! read as a tree (`tree.rs`).

pub(crate) mod cohorts;
pub(crate) mod links;
mod tree;
pub(crate) mod waiting;

use std::future::Future;
use std::pin::Pin;

use crate::flow::{ChildPolicy, ChildrenPage, MessageRef};
use crate::maxima::MAX_FLOW_DEPTH;
use crate::{DelayQueue, Error, MessageId, NewMessage};
use links::Deps;
use waiting::send_with_children;

impl DelayQueue {
    /// One page of the finished children of parent `id`, with their
    /// outcomes and results; start with `cursor` `None`, then pass the
    /// page's `next` back as it came until it is `None` (Redis `HSCAN`: a
    /// child may come twice, none is missed). Readable while the parent is
    /// stored: from its handler, and until it is acked, cancelled or deleted.
    ///
    /// ```no_run
    /// # async fn run(queue: delayqueue::DelayQueue, parent: delayqueue::MessageId) -> Result<(), delayqueue::Error> {
    /// let mut page = queue.children_results(&parent, None).await?;
    /// loop {
    ///     for child in &page.items {
    ///         println!("{}/{}: {:?}", child.queue, child.id, child.outcome);
    ///     }
    ///     if page.next.is_none() {
    ///         break;
    ///     }
    ///     page = queue.children_results(&parent, page.next).await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn children_results(
        &self,
        id: impl AsRef<str>,
        cursor: impl Into<Option<String>>,
    ) -> Result<ChildrenPage, Error> {
        let id = id.as_ref();
        self.store(self.shard_of(id))
            .children(id, cursor.into().as_deref())
            .await
    }
}

/// A parent with its children, sent in one call ([`Flow::send`]); each
/// child may be a flow itself. Every message's id is chosen when it is
/// added (given, or generated then), so sending the same `Flow` again
/// after an error or a lost reply sends nothing twice that is still
/// stored, and completes what the first call left half-done.
///
/// ```no_run
/// # async fn run(orders: delayqueue::DelayQueue, mail: delayqueue::DelayQueue) -> Result<(), delayqueue::Error> {
/// use delayqueue::{Flow, NewMessage};
/// let flow = Flow::new(&orders, NewMessage::new("close order 42"))
///     .child(Flow::new(&orders, NewMessage::new("charge card")))
///     .child(
///         Flow::new(&mail, NewMessage::new("email receipt"))
///             .child(Flow::new(&mail, NewMessage::new("render receipt"))),
///     );
/// let parent = flow.id().clone();
/// flow.send().await?;
/// # let _ = parent;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Flow {
    queue: DelayQueue,
    msg: NewMessage,
    id: MessageId,
    children: Vec<Flow>,
    policy: ChildPolicy,
}

impl Flow {
    /// A flow whose root is `msg`, sent to `queue`; its id is `msg`'s if
    /// it has one, else generated now.
    pub fn new(queue: &DelayQueue, msg: NewMessage) -> Self {
        let (id, msg) = msg.identified(queue.shards());
        Flow {
            queue: queue.clone(),
            msg,
            id,
            children: Vec::new(),
            policy: ChildPolicy::default(),
        }
    }

    /// Adds a child (a message or a flow of its own) that the root waits for.
    pub fn child(mut self, child: Flow) -> Self {
        self.children.push(child);
        self
    }

    /// What becomes of the root when a child becomes a dead letter.
    pub fn on_dead_child(mut self, policy: ChildPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// The root's id.
    pub fn id(&self) -> &MessageId {
        &self.id
    }

    /// Sends every message of the flow: the children that are flows
    /// themselves first, then this parent (waiting, its set of children
    /// filled in the same call) with its other children and their links
    /// to it, in one round trip where one connection carries them all
    /// (docs/workflows.md). A message whose id is stored already is left
    /// as it is (a re-send). Returns the root's id.
    pub async fn send(&self) -> Result<MessageId, Error> {
        self.check(1)?;
        self.send_node().await?;
        Ok(self.id.clone())
    }

    fn check(&self, depth: usize) -> Result<(), Error> {
        if depth > MAX_FLOW_DEPTH {
            return Err(Error::InvalidFlow {
                reason: format!("deeper than MAX_FLOW_DEPTH ({MAX_FLOW_DEPTH})"),
            });
        }
        self.msg.check_dedup()?;
        self.children.iter().try_for_each(|c| c.check(depth + 1))
    }

    fn send_node(&self) -> Pin<Box<dyn Future<Output = Result<(), Error>> + Send + '_>> {
        Box::pin(async move {
            let refs: Vec<MessageRef> = self
                .children
                .iter()
                .map(|c| MessageRef::new(&c.queue, c.id.clone()))
                .collect();
            let deps = (!refs.is_empty())
                .then(|| Deps::new(&self.queue, &refs, self.policy))
                .transpose()?;
            // Leaves go in one send_batch per queue (a parent of 100,000
            // children: 100 script calls, not 100,000 round trips).
            let mut leaves: Vec<(&DelayQueue, Vec<NewMessage>)> = Vec::new();
            for child in &self.children {
                if !child.children.is_empty() {
                    child.send_node().await?;
                    continue;
                }
                let msg = child.msg.clone_for_flow(None);
                match leaves.iter_mut().find(|(q, _)| q.same_queue(&child.queue)) {
                    Some((_, msgs)) => msgs.push(msg),
                    None => leaves.push((&child.queue, vec![msg])),
                }
            }
            // Every queue's leaves go out at once, each ahead of its links.
            let sending = futures::future::try_join_all(leaves.into_iter().map(|(queue, msgs)| async move {
                for sent in queue.send_batch(msgs).await? {
                    match sent {
                        Ok(_) | Err(Error::Duplicate { until: None, .. }) => {}
                        Err(e) => return Err(e),
                    }
                }
                Ok(())
            }));
            let sending = async move { sending.await.map(drop) };
            send_with_children(&self.queue, &self.id, &self.msg, deps, sending).await
        })
    }
}
