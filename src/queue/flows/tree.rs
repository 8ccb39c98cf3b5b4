//! [`DelayQueue::flow`] and [`DelayQueue::flow_children`]: a flow read as
//! a tree from any of its messages (docs/workflows.md, "Reading a flow"):
//! up its links to the root, then down from the root breadth first, within
//! [`FLOW_PAGE`] children a node, [`FLOW_TREE_NODES`] nodes and
//! [`MAX_FLOW_DEPTH`] levels. Children in other queues are read through
//! this handle's client, at the keys their references name.

use std::collections::{HashSet, VecDeque};

use futures::{StreamExt, TryStreamExt};

use crate::flow::wire::ParentLink;
use crate::flow::{FlowNode, FlowPage, FlowParent, FlowTree, FLOW_PAGE, FLOW_TREE_NODES};
use crate::maxima::MAX_FLOW_DEPTH;
use crate::store::flows::reads::{ChildCursor, ChildEntry};
use crate::store::{Keys, Shard};
use crate::{DelayQueue, Error, MessageId};

/// Nodes whose counts are read at once.
const CONCURRENCY: usize = 16;

impl DelayQueue {
    /// The flow message `id` is part of, as a tree: the way up from it to
    /// its root (its first parent, that one's first parent, ...) and the
    /// tree below the root, each node with its state, its outcome once
    /// finished, and at most [`FLOW_PAGE`] of its children; at most
    /// [`FLOW_TREE_NODES`] nodes and [`MAX_FLOW_DEPTH`] levels. A message
    /// in no flow is a root without children. `None` when the queue
    /// neither stores the message nor keeps a flow key of it. A finished
    /// child no longer knows its parents: opened from it, the tree is
    /// itself alone.
    ///
    /// Plain reads, no script: about three calls per node. Not one
    /// snapshot: a child that finishes while the tree is read may show
    /// twice, never not at all.
    ///
    /// ```no_run
    /// # async fn run(queue: delayqueue::DelayQueue) -> Result<(), delayqueue::Error> {
    /// use delayqueue::FlowNode;
    /// fn print(node: &FlowNode, depth: usize) {
    ///     let state = node.state.map_or("finished", |s| s.as_str());
    ///     println!("{:depth$}{}/{} {state}", "", node.queue, node.id, depth = depth * 2);
    ///     node.children.iter().for_each(|c| print(c, depth + 1));
    ///     if node.more() > 0 {
    ///         println!("{:depth$}... {} more", "", node.more(), depth = depth * 2 + 2);
    ///     }
    /// }
    /// if let Some(tree) = queue.flow("close-42").await? {
    ///     print(&tree.root, 0);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn flow(&self, id: impl AsRef<str>) -> Result<Option<FlowTree>, Error> {
        let id = id.as_ref();
        MessageId::check(id)?;
        let base = self.shard_of(id).base.clone();
        let links = self.at(&base)?.shard().parent_links(id).await?;
        let path = self.way_up(&base, id, links.first().cloned()).await?;
        let (root_base, root_id) = match path.last() {
            Some((base, link)) => (base.clone(), link.id.to_string()),
            None => (base.clone(), id.to_string()),
        };
        let root = self.node(&root_base, &root_id).await?;
        if path.is_empty() && root.state.is_none() && root.unfinished + root.finished == 0 {
            return Ok(None);
        }
        let (root, truncated) = self.tree_below(root, root_base).await?;
        Ok(Some(FlowTree {
            queue: self.name().to_string(),
            id: MessageId::from(id),
            parents: links.into_iter().map(parent).collect(),
            path: path.into_iter().map(|(_, p)| p).collect(),
            root,
            truncated,
        }))
    }

    /// One page of the children of flow node `id`, each with its state and
    /// counts: start with `cursor` `None` (or a [`FlowNode::next`]), then
    /// pass the page's `next` until it is `None`. The children it waits for
    /// come first, then the finished ones; one that finishes between
    /// pages may show twice. An invalid cursor is
    /// [`Error::InvalidArgument`].
    ///
    /// ```no_run
    /// # async fn run(queue: delayqueue::DelayQueue) -> Result<(), delayqueue::Error> {
    /// let mut cursor = None;
    /// loop {
    ///     let page = queue.flow_children("close-42", cursor).await?;
    ///     for child in &page.items {
    ///         println!("{}/{}: {:?} {:?}", child.queue, child.id, child.state, child.outcome);
    ///     }
    ///     cursor = page.next;
    ///     if cursor.is_none() {
    ///         break;
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn flow_children(
        &self,
        id: impl AsRef<str>,
        cursor: impl Into<Option<String>>,
    ) -> Result<FlowPage, Error> {
        let id = id.as_ref();
        MessageId::check(id)?;
        let cursor = cursor
            .into()
            .as_deref()
            .map_or(Ok(ChildCursor::start()), ChildCursor::parse)?;
        let base = self.shard_of(id).base.clone();
        let (entries, next) = self.at(&base)?.shard().child_page(id, cursor, FLOW_PAGE).await?;
        Ok(FlowPage {
            items: self.nodes(entries).await?.into_iter().map(|(node, _)| node).collect(),
            next: next.map(|c| c.to_string()),
        })
    }

    /// Runs reads on the shard whose keys start with `base`, through this
    /// handle's client.
    fn at(&self, base: &str) -> Result<Reader, Error> {
        let keys = Keys::from_base(base).ok_or_else(|| Error::Internal(format!("not a queue's keys: {base}")))?;
        Ok(Reader {
            client: self.inner.client.clone(),
            name: Keys::name_of_base(base).to_string(),
            keys,
        })
    }

    /// From `first`, the first parent of message `id` of shard `base`, up
    /// to the root, each with the base of its keys; a loop of links ends it.
    async fn way_up(
        &self,
        base: &str,
        id: &str,
        first: Option<ParentLink>,
    ) -> Result<Vec<(String, FlowParent)>, Error> {
        let mut seen = HashSet::from([(base.to_string(), id.to_string())]);
        let mut path = Vec::new();
        let mut next = first;
        while let Some(link) = next.take() {
            if path.len() == MAX_FLOW_DEPTH || !seen.insert((link.base.clone(), link.id.clone())) {
                break;
            }
            next = self
                .at(&link.base)?
                .shard()
                .parent_links(&link.id)
                .await?
                .into_iter()
                .next();
            path.push((link.base.clone(), parent(link)));
        }
        Ok(path)
    }

    /// Node `id` of shard `base`, with its state and counts, no children.
    async fn node(&self, base: &str, id: &str) -> Result<FlowNode, Error> {
        let entry = ChildEntry {
            base: base.to_string(),
            id: id.to_string(),
            outcome: None,
            result: false,
        };
        let mut nodes = self.nodes(vec![entry]).await?;
        nodes
            .pop()
            .map(|(node, _)| node)
            .ok_or_else(|| Error::Internal("a node read as none".into()))
    }

    /// The nodes of `entries`, in order, each with the base of its keys:
    /// the states one inspect call per shard, the counts
    /// [`CONCURRENCY`] nodes at a time.
    async fn nodes(&self, entries: Vec<ChildEntry>) -> Result<Vec<(FlowNode, String)>, Error> {
        let mut states = vec![None; entries.len()];
        let mut bases: Vec<&str> = entries.iter().map(|e| e.base.as_str()).collect();
        bases.sort_unstable();
        bases.dedup();
        for base in bases {
            let at: Vec<usize> = (0..entries.len()).filter(|&i| entries[i].base == base).collect();
            let ids: Vec<&str> = at.iter().map(|&i| entries[i].id.as_str()).collect();
            let found = self.at(base)?.shard().states(&ids).await?;
            for (i, state) in at.into_iter().zip(found) {
                states[i] = state;
            }
        }
        futures::stream::iter(entries.into_iter().zip(states))
            .map(|(e, state)| async move {
                let (unfinished, finished) = self.at(&e.base)?.shard().flow_counts(&e.id).await?;
                let node = FlowNode {
                    queue: Keys::name_of_base(&e.base).to_string(),
                    id: MessageId::from(e.id),
                    state,
                    outcome: e.outcome,
                    has_result: e.result,
                    unfinished,
                    finished,
                    children: Vec::new(),
                    next: (unfinished + finished > 0).then(|| ChildCursor::start().to_string()),
                };
                Ok::<_, Error>((node, e.base))
            })
            .buffered(CONCURRENCY)
            .try_collect()
            .await
    }

    /// `root` with the tree below it, breadth first within the bounds;
    /// `true` when they left a node's children unlisted. A node met twice
    /// (a child of two parents in the tree) lists its children once.
    async fn tree_below(&self, root: FlowNode, base: String) -> Result<(FlowNode, bool), Error> {
        let mut seen = HashSet::from([(base.clone(), root.id.to_string())]);
        let mut nodes = vec![Some(root)];
        let mut info = vec![(base, 0usize, Vec::<usize>::new())];
        let mut todo = VecDeque::from([0]);
        let mut truncated = false;
        while let Some(i) = todo.pop_front() {
            let Some(node) = nodes[i].as_ref() else { continue };
            if node.next.is_none() {
                continue;
            }
            let depth = info[i].1;
            if depth + 1 >= MAX_FLOW_DEPTH || nodes.len() >= FLOW_TREE_NODES {
                truncated = true;
                continue;
            }
            let room = FLOW_PAGE.min(FLOW_TREE_NODES - nodes.len());
            let id = node.id.to_string();
            let (entries, next) = self
                .at(&info[i].0)?
                .shard()
                .child_page(&id, ChildCursor::start(), room)
                .await?;
            if let Some(node) = nodes[i].as_mut() {
                node.next = next.map(|c| c.to_string());
            }
            for (child, base) in self.nodes(entries).await? {
                let j = nodes.len();
                if seen.insert((base.clone(), child.id.to_string())) {
                    todo.push_back(j);
                }
                nodes.push(Some(child));
                info.push((base, depth + 1, Vec::new()));
                info[i].2.push(j);
            }
        }
        // Children come after their parent: fill them in from the last.
        for i in (0..nodes.len()).rev() {
            let kids: Vec<FlowNode> = info[i].2.iter().filter_map(|&j| nodes[j].take()).collect();
            if let Some(node) = nodes[i].as_mut() {
                node.children = kids;
            }
        }
        let root = nodes
            .first_mut()
            .and_then(Option::take)
            .ok_or_else(|| Error::Internal("a flow's root went missing".into()))?;
        Ok((root, truncated))
    }
}

/// A shard of any queue, read through one client: owns what a [`Shard`]
/// borrows.
struct Reader {
    client: fred::prelude::Client,
    name: String,
    keys: Keys,
}

impl Reader {
    fn shard(&self) -> Shard<'_> {
        Shard::new(&self.client, &self.keys, &self.name)
    }
}

fn parent(link: ParentLink) -> FlowParent {
    FlowParent {
        queue: Keys::name_of_base(&link.base).to_string(),
        id: MessageId::from(link.id),
        policy: link.policy,
    }
}
