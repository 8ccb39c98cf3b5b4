//! Flows (docs/workflows.md): messages that wait for others. A parent is
//! stored waiting with the set of its children; each child carries a link
//! to it in its own queue, and its ack, death or cancel records a
//! completion in its queue's outbox in the same script. The relay here
//! moves outbox entries to the parents' slots, at least once: the
//! completion script is idempotent, so no script ever spans two slots.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use fred::bytes::Bytes;
use fred::prelude::{Client, ClientLike, Value};
use fred::types::{ClusterHash, CustomCommand};

use crate::maxima::{MAX_BATCH_SIZE, MAX_FLOW_CHILDREN, MAX_FLOW_DEPTH};
use crate::store::ops::cancel::Cancel;
use crate::store::ops::flows::{Completion, FlowComplete, FlowDeps, FlowLink, Linked, Outbox, OutboxEntry};
use crate::store::{Keys, Shard};
use crate::{DelayQueue, Error, MessageId, NewMessage};

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
}

impl ChildPolicy {
    fn letter(self) -> char {
        match self {
            ChildPolicy::Fail => 'f',
            ChildPolicy::Ignore => 'i',
            ChildPolicy::Wait => 'w',
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
    base: Option<String>,
    id: MessageId,
}

impl MessageRef {
    /// Message `id` of `queue`.
    pub fn new(queue: &DelayQueue, id: impl Into<MessageId>) -> Self {
        let id = id.into();
        MessageRef {
            base: Some(queue.shard_of(id.as_str()).base.clone()),
            id,
        }
    }

    /// The message's id.
    pub fn id(&self) -> &MessageId {
        &self.id
    }

    /// `"<base> <id>"`, the form the scripts keep, with `queue` standing
    /// for a reference without a queue of its own.
    fn resolved(&self, queue: &DelayQueue) -> (String, String) {
        let base = match &self.base {
            Some(base) => base.clone(),
            None => queue.shard_of(self.id.as_str()).base.clone(),
        };
        (base, self.id.as_str().to_string())
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

impl DelayQueue {
    /// One page of the finished children of parent `id`, with their
    /// outcomes and results; start with `cursor` `None`, then pass the
    /// page's `next` until it is `None` (Redis `HSCAN`: a child may come
    /// twice, none is missed). Readable while the parent is stored: from
    /// its handler, and until it is acked, cancelled or deleted.
    ///
    /// ```no_run
    /// # async fn run(queue: delayqueue::DelayQueue, parent: delayqueue::MessageId) -> Result<(), delayqueue::Error> {
    /// let mut cursor = None;
    /// loop {
    ///     let page = queue.children_results(&parent, cursor.as_deref()).await?;
    ///     for child in &page.children {
    ///         println!("{}/{}: {:?}", child.queue, child.id, child.outcome);
    ///     }
    ///     match page.next {
    ///         Some(next) => cursor = Some(next),
    ///         None => break,
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn children_results(&self, id: impl AsRef<str>, cursor: Option<&str>) -> Result<ChildrenPage, Error> {
        let id = id.as_ref();
        let key = self.shard_of(id).children(id);
        let cursor = cursor.unwrap_or("0");
        let (next, pairs): (String, Vec<(Bytes, Bytes)>) = self
            .inner
            .client
            .custom(
                CustomCommand::new_static(
                    "HSCAN",
                    ClusterHash::Custom(fred::util::redis_keyslot(key.as_bytes())),
                    false,
                ),
                vec![Value::from(key), cursor.into(), "COUNT".into(), 1000.into()],
            )
            .await
            .map(scan_page)
            .map_err(|e| Error::from_redis(&self.inner.name, e))?
            .ok_or_else(|| Error::Internal("HSCAN replied with something else than a page".into()))?;
        let children = pairs.into_iter().filter_map(|(f, v)| child_result(&f, &v)).collect();
        Ok(ChildrenPage {
            children,
            next: (next != "0").then_some(next),
        })
    }
}

/// An HSCAN reply: the next cursor and the field, value pairs.
fn scan_page(v: Value) -> Option<(String, Vec<(Bytes, Bytes)>)> {
    let Value::Array(mut parts) = v else { return None };
    let items = match parts.pop()? {
        Value::Array(items) => items,
        _ => return None,
    };
    let next = parts.pop()?.as_string()?;
    let bytes = |v: &Value| v.as_bytes().map(Bytes::copy_from_slice);
    let pairs = items
        .chunks(2)
        .filter_map(|p| Some((bytes(p.first()?)?, bytes(p.get(1)?)?)))
        .collect();
    Some((next, pairs))
}

/// A children hash's entry: `"<child's base> <child id>"` ->
/// `"<outcome><result>"`.
fn child_result(field: &[u8], value: &[u8]) -> Option<ChildResult> {
    let field = std::str::from_utf8(field).ok()?;
    let (base, id) = field.split_once(' ')?;
    let (&outcome, result) = value.split_first()?;
    let outcome = match outcome {
        b'a' => ChildOutcome::Acked,
        b'd' => ChildOutcome::Dead,
        _ => ChildOutcome::Cancelled,
    };
    Some(ChildResult {
        queue: Keys::name_of_base(base).to_string(),
        id: MessageId::from(id),
        outcome,
        result: (!result.is_empty()).then(|| result.to_vec()),
    })
}

/// The children of one parent about to be sent, resolved.
#[derive(Debug, Clone)]
pub(crate) struct Deps {
    /// `(base, id)` of each child.
    pub children: Vec<(String, String)>,
    pub policy: ChildPolicy,
}

impl Deps {
    /// Resolves `refs` against `queue`, the parent's, and checks them.
    pub(crate) fn new(queue: &DelayQueue, refs: &[MessageRef], policy: ChildPolicy) -> Result<Self, Error> {
        if refs.len() > MAX_FLOW_CHILDREN {
            return Err(Error::InvalidFlow {
                reason: format!(
                    "{} children, more than MAX_FLOW_CHILDREN ({MAX_FLOW_CHILDREN})",
                    refs.len()
                ),
            });
        }
        let mut children = Vec::with_capacity(refs.len());
        for r in refs {
            r.id.validate()?;
            children.push(r.resolved(queue));
        }
        children.sort();
        children.dedup();
        Ok(Deps { children, policy })
    }

    fn members(&self) -> Vec<String> {
        self.children.iter().map(|(b, id)| format!("{b} {id}")).collect()
    }
}

/// Step one of sending parent `id` with `deps`: fills its set of children
/// to wait for, before the parent is stored (lua/flow_deps.lua).
pub(crate) async fn add_deps(queue: &DelayQueue, id: &str, deps: &Deps) -> Result<(), Error> {
    let members = deps.members();
    if members
        .iter()
        .any(|m| m == &format!("{} {id}", queue.shard_of(id).base))
    {
        return Err(Error::InvalidFlow {
            reason: format!("message {id} cannot wait for itself"),
        });
    }
    let k = queue.shard_of(id);
    for chunk in members.chunks(MAX_BATCH_SIZE) {
        queue.store(k).run(&FlowDeps { id, children: chunk }).await?;
    }
    Ok(())
}

/// Step three, after the parent is stored (or found stored: a re-send):
/// links each child to it in the child's queue, and completes at once the
/// children that are no longer stored (taken as acked) or dead under a
/// policy that does not wait.
pub(crate) async fn link(queue: &DelayQueue, id: &str, deps: &Deps) -> Result<(), Error> {
    let k = queue.shard_of(id);
    let link = format!("{} {} {id}", deps.policy.letter(), k.base);
    let mut by_base: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for (base, child) in &deps.children {
        by_base.entry(base.as_str()).or_default().push(child.clone());
    }
    let mut done = Vec::new();
    for (base, ids) in by_base {
        let ck = Keys::from_base(base).ok_or_else(|| Error::Internal(format!("not a queue's keys: {base}")))?;
        let shard = Shard::new(&queue.inner.client, &ck, Keys::name_of_base(base));
        for chunk in ids.chunks(MAX_BATCH_SIZE) {
            let linked = shard
                .run(&FlowLink {
                    link: &link,
                    ids: chunk,
                })
                .await?;
            for (child, status) in chunk.iter().zip(linked) {
                let outcome = match status {
                    Linked::Linked => continue,
                    Linked::Gone => 'a',
                    Linked::Dead => 'd',
                };
                done.push(Completion {
                    parent: id.to_string(),
                    child: format!("{base} {child}"),
                    how: format!("{outcome}{}", deps.policy.letter()),
                    result: Bytes::new(),
                });
            }
        }
    }
    let retention = queue.inner.config.consume.dead_letter_retention;
    complete(&queue.inner.client, k, &done, retention).await?;
    Ok(())
}

/// Applies `completions` to parents of the shard with keys `k`.
async fn complete(client: &Client, k: &Keys, completions: &[Completion], retention: Duration) -> Result<(), Error> {
    let shard = Shard::new(client, k, Keys::name_of_base(&k.base));
    for chunk in completions.chunks(MAX_BATCH_SIZE) {
        shard
            .run(&FlowComplete {
                completions: chunk,
                dead_letter_retention: retention,
            })
            .await?;
    }
    Ok(())
}

/// Entries the relay reads per outbox call.
const RELAY_BATCH: usize = 1000;
/// Most outbox calls of one relay run: the rest waits for the next.
const RELAY_ROUNDS: usize = 8;

/// Delivers the outbox of the shard with keys `k` to the parents' slots:
/// completions to `flow_complete`, a cancelled parent's children to
/// `cancel` (which records their own completions, and cascades to their
/// children, through their queues' outboxes), then drops what it
/// delivered. At least once: a relay that fails or dies half-way leaves
/// the entries for the next, and a re-delivered entry changes nothing.
/// `retention`: the dead-letter retention of a parent a dead child fails.
/// Returns how many entries it dropped.
pub(crate) async fn relay(client: &Client, k: &Keys, retention: Duration) -> Result<u64, Error> {
    let name = Keys::name_of_base(&k.base);
    let shard = Shard::new(client, k, name);
    let mut dropped = 0;
    for _ in 0..RELAY_ROUNDS {
        let (entries, _) = shard.run(&Outbox::Read { limit: RELAY_BATCH }).await?;
        if entries.is_empty() {
            break;
        }
        let full = entries.len() == RELAY_BATCH;
        let mut by_parent: BTreeMap<String, Vec<Completion>> = BTreeMap::new();
        let mut done: Vec<(String, Vec<String>)> = Vec::with_capacity(entries.len());
        for e in &entries {
            match e {
                OutboxEntry::Done {
                    outcome,
                    child,
                    policy,
                    parent_base,
                    parent,
                    result,
                    ..
                } => {
                    by_parent.entry(parent_base.clone()).or_default().push(Completion {
                        parent: parent.clone(),
                        child: format!("{} {child}", k.base),
                        how: format!("{outcome}{policy}"),
                        result: result.clone(),
                    });
                    done.push((e.entry().to_string(), Vec::new()));
                }
                OutboxEntry::Cancelled { children, .. } => {
                    for member in children {
                        if let Some((base, id)) = member.split_once(' ') {
                            if let Some(ck) = Keys::from_base(base) {
                                Shard::new(client, &ck, Keys::name_of_base(base))
                                    .run(&Cancel { id })
                                    .await?;
                            }
                        }
                    }
                    done.push((e.entry().to_string(), children.clone()));
                }
            }
        }
        for (base, completions) in &by_parent {
            match Keys::from_base(base) {
                Some(pk) => complete(client, &pk, completions, retention).await?,
                None => tracing::warn!(queue = name, base, "outbox entry names no queue; dropped"),
            }
        }
        dropped += shard.run(&Outbox::Drop { entries: &done }).await?.1;
        if !full {
            break;
        }
    }
    Ok(dropped)
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
        let id = msg.chosen_id().cloned().unwrap_or_else(MessageId::generate);
        Flow {
            queue: queue.clone(),
            msg: msg.id(id.clone()),
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

    /// Sends every message of the flow: each parent first (waiting), then
    /// its children, then links them. A message whose id is stored
    /// already is left as it is (a re-send). Returns the root's id.
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
            let msg = self.msg.clone_for_flow(deps.is_some());
            if let Some(deps) = &deps {
                add_deps(&self.queue, self.id.as_str(), deps).await?;
            }
            self.queue.send_prepared(msg).await?;
            for child in &self.children {
                child.send_node().await?;
            }
            if let Some(deps) = &deps {
                link(&self.queue, self.id.as_str(), deps).await?;
            }
            Ok(())
        })
    }
}
