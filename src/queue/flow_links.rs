//! A parent's children (docs/workflows.md), in the order a send takes them:
//! the parent's children set filled (flow_deps.lua) before the parent is
//! stored waiting (send.lua's mode "w"), then each child linked in its own
//! queue (flow_link.lua), the children no longer stored completed at once.

use std::collections::BTreeMap;

use fred::bytes::Bytes;

use crate::consume::relay::{complete, relay};
use crate::flow::{ChildPolicy, MessageRef};
use crate::maxima::{MAX_BATCH_SIZE, MAX_FLOW_CHILDREN};
use crate::store::ops::flows::{Completion, DepsAdded, FlowDeps, FlowLink, LinkStatus};
use crate::store::{Keys, Shard};
use crate::{DelayQueue, Error, MessageId};

impl MessageRef {
    /// Message `id` of `queue`.
    pub fn new(queue: &DelayQueue, id: impl Into<MessageId>) -> Self {
        let id = id.into();
        MessageRef {
            base: Some(queue.shard_of(id.as_str()).base.clone()),
            id,
        }
    }

    /// `"<base> <id>"`, the form the scripts keep, with `queue` standing
    /// for a reference without a queue of its own.
    pub(crate) fn resolved(&self, queue: &DelayQueue) -> (String, String) {
        let base = match &self.base {
            Some(base) => base.clone(),
            None => queue.shard_of(self.id.as_str()).base.clone(),
        };
        (base, self.id.as_str().to_string())
    }
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
/// to wait for, before the parent is stored (lua/flow_deps.lua). Returns
/// the children to link in step three: all of them, but for a parent
/// already live (`unless_live`: a send, refused as a duplicate, writes
/// nothing) only those its set holds, which the first send may not have
/// linked yet. `unless_live` false: a batch's member joins its live
/// callbacks.
pub(crate) async fn add_deps(queue: &DelayQueue, id: &str, deps: &Deps, unless_live: bool) -> Result<Deps, Error> {
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
    let mut held = Vec::with_capacity(members.len());
    for chunk in members.chunks(MAX_BATCH_SIZE) {
        let op = FlowDeps {
            id,
            children: chunk,
            unless_live,
        };
        match queue.store(k).run(&op).await? {
            DepsAdded::Added(_) => held.extend(std::iter::repeat_n(true, chunk.len())),
            DepsAdded::Live(flags) => held.extend(flags),
        }
    }
    let children = deps
        .children
        .iter()
        .zip(held)
        .filter(|(_, held)| *held)
        .map(|(child, _)| child.clone())
        .collect();
    Ok(Deps {
        children,
        policy: deps.policy,
    })
}

/// Step three, after the parent is stored (or found stored: a re-send):
/// links each child to it in the child's queue, and completes at once the
/// children that are no longer stored (taken as acked) or dead under a
/// policy that does not wait. A child acked whose result is still kept
/// had its completion recorded in its queue's outbox by the link, as its
/// ack would have: the relay of that queue, run here, brings the result.
pub(crate) async fn link(queue: &DelayQueue, id: &str, deps: &Deps) -> Result<(), Error> {
    let k = queue.shard_of(id);
    let link = format!("{} {} {id}", deps.policy.letter(), k.base);
    let mut by_base: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for (base, child) in &deps.children {
        by_base.entry(base.as_str()).or_default().push(child.clone());
    }
    let retention = queue.inner.config.consume.dead_letter_retention;
    let mut done = Vec::new();
    for (base, ids) in by_base {
        let ck = Keys::from_base(base).ok_or_else(|| Error::Internal(format!("not a queue's keys: {base}")))?;
        let mut recorded = false;
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
                    LinkStatus::Linked => continue,
                    LinkStatus::Recorded => {
                        recorded = true;
                        continue;
                    }
                    LinkStatus::Gone => 'a',
                    LinkStatus::Dead => 'd',
                };
                done.push(Completion {
                    parent: id.to_string(),
                    child: format!("{base} {child}"),
                    how: format!("{outcome}{}", deps.policy.letter()),
                    result: Bytes::new(),
                });
            }
        }
        if recorded {
            relay(&queue.inner.client, &ck, retention).await?;
        }
    }
    complete(&queue.inner.client, k, &done, retention).await?;
    Ok(())
}
