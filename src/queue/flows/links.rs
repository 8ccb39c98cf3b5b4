//! A parent's children (docs/workflows.md), in the order a send takes them:
//! the parent's children set filled ([`fill`], flow_deps.lua) before the
//! parent is stored waiting (send.lua's mode "w"; `waiting.rs` drives the
//! two), then each child linked in its own queue ([`link`],
//! flow_link.lua), the children no longer stored completed at once. A
//! cohort's member joins its live callbacks by the same two steps.

use std::collections::BTreeMap;

use fred::bytes::Bytes;

use crate::flow::wire::{ChildRef, Outcome, ParentLink};
use crate::flow::{ChildPolicy, MessageRef};
use crate::maxima::{MAX_BATCH_SIZE, MAX_FLOW_CHILDREN};
use crate::store::flows::relay::relay;
use crate::store::ops::flow_complete::{complete, Completion};
use crate::store::ops::flow_deps::{DepsAdded, FlowDeps};
use crate::store::ops::flow_link::{FlowLink, LinkStatus};
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

    /// The child it names, with `queue` standing for a reference without
    /// a queue of its own.
    pub(crate) fn resolved(&self, queue: &DelayQueue) -> ChildRef {
        let base = match &self.base {
            Some(base) => base.clone(),
            None => queue.shard_of(self.id.as_str()).base.clone(),
        };
        ChildRef::new(base, self.id.as_str())
    }
}

/// The children of one parent about to be sent, resolved.
#[derive(Debug, Clone)]
pub(crate) struct Deps {
    pub children: Vec<ChildRef>,
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
}

/// Step one of sending parent `id` with `deps`: fills its set of children
/// to wait for, before the parent is stored (lua/flow_deps.lua). Returns
/// the children to link in step three: all of them, but for a parent
/// already live (`unless_live`: a send, refused as a duplicate, writes
/// nothing) only those its set holds, which the first send may not have
/// linked yet. `unless_live` false: a cohort's member joins its live
/// callbacks.
pub(crate) async fn fill(queue: &DelayQueue, id: &str, deps: &Deps, unless_live: bool) -> Result<Deps, Error> {
    let k = queue.shard_of(id);
    if deps.children.iter().any(|c| c.base == k.base && c.id == id) {
        return Err(Error::InvalidFlow {
            reason: format!("message {id} cannot wait for itself"),
        });
    }
    let mut held = Vec::with_capacity(deps.children.len());
    for chunk in deps.children.chunks(MAX_BATCH_SIZE) {
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
/// A cohort's open member is no message: its cohort's close completes it.
/// `new`: the children's send is pipelined with this link, which leaves
/// (and returns) those not stored yet, to link again once it returned.
pub(crate) async fn link(queue: &DelayQueue, id: &str, deps: &Deps, new: bool) -> Result<Deps, Error> {
    let k = queue.shard_of(id);
    let parent = ParentLink {
        policy: deps.policy,
        base: k.base.clone(),
        id: id.to_string(),
    };
    let mut by_base: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for child in deps.children.iter().filter(|c| !c.is_cohort_open()) {
        by_base.entry(child.base.as_str()).or_default().push(child.id.clone());
    }
    let retention = queue.inner.config.consume.dead_letter_retention;
    let (mut done, mut left) = (Vec::new(), Vec::new());
    for (base, ids) in by_base {
        let ck = Keys::from_base(base).ok_or_else(|| Error::Internal(format!("not a queue's keys: {base}")))?;
        let mut recorded = false;
        let shard = Shard::new(&queue.inner.client, &ck, Keys::name_of_base(base));
        for chunk in ids.chunks(MAX_BATCH_SIZE) {
            let linked = shard
                .run(&FlowLink {
                    parent: &parent,
                    ids: chunk,
                    new,
                })
                .await?;
            for (child, status) in chunk.iter().zip(linked) {
                let outcome = match status {
                    LinkStatus::Linked => continue,
                    LinkStatus::NotYet => {
                        left.push(ChildRef::new(base, child.as_str()));
                        continue;
                    }
                    LinkStatus::Recorded => {
                        recorded = true;
                        continue;
                    }
                    LinkStatus::Gone => Outcome::Acked,
                    LinkStatus::Dead => Outcome::Dead,
                };
                done.push(Completion {
                    parent: id.to_string(),
                    child: ChildRef::new(base, child.as_str()),
                    outcome,
                    policy: deps.policy,
                    result: Bytes::new(),
                });
            }
        }
        if recorded {
            relay(&queue.inner.client, &ck, retention).await?;
        }
    }
    complete(&queue.inner.client, k, &done, retention).await?;
    Ok(Deps {
        children: left,
        policy: deps.policy,
    })
}
