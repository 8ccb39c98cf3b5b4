//! Sending waiting parents (docs/workflows.md), the one way every path
//! takes (a send with [`after`](crate::NewMessage::after), a [`Flow`](crate::Flow),
//! a cohort's callbacks): each parent's children set filled
//! ([`links::fill`], lua/flow_deps.lua), then the parents stored waiting
//! with the rest of the send (send.lua's mode "w"): [`store_waiting`];
//! then each parent linked to its children ([`Stored::link`],
//! lua/flow_link.lua), once they are sent. A [`Flow`](crate::Flow)'s parent
//! goes with its children and their links in one round trip where one
//! connection carries them: [`send_with_children`]. A child joining
//! parents that are live already (a cohort's member) takes the same
//! steps: [`send_joining`].

use std::future::Future;

use fred::interfaces::ClientLike;

use super::links::{self, Deps};
use crate::flow::wire::ChildRef;
use crate::flow::ChildPolicy;
use crate::maxima::MAX_BATCH_SIZE;
use crate::queue::durability::Durability;
use crate::queue::send::{dispatch, prepare_all, Dispatched, NewMessage, Prepared, Sent};
use crate::store::ops::send::Outgoing;
use crate::store::scripts::noting_resends;
use crate::{DelayQueue, Error, MessageId};

/// Messages stored, the waiting parents among them not linked yet.
pub(crate) struct Stored {
    pub sent: Dispatched,
    /// Per message, the children to link when it is a waiting parent.
    links: Vec<Option<Deps>>,
}

/// Steps one and two: fills each waiting parent's children set, then
/// stores every message of `prepared` (the parents waiting). A parent
/// already live gets no child: a send refused as a duplicate writes
/// nothing (it links only what its set holds, for a re-send).
pub(crate) async fn store_waiting(queue: &DelayQueue, prepared: Vec<Prepared>) -> Result<Stored, Error> {
    // One parent whose set one flow_deps call fills: the two calls go out
    // together, in one round trip on its slot's connection. Should the send
    // run first (an order broken by a script reload), it finds the set
    // empty and stores nothing: it goes again once the set is filled.
    if let [Prepared { msg, deps: Some(deps) }] = prepared.as_slice() {
        if deps.children.len() <= MAX_BATCH_SIZE {
            // Boxed: every send's future would carry this one's size.
            return Box::pin(store_parent(queue, msg, deps)).await;
        }
    }
    let mut links = Vec::with_capacity(prepared.len());
    let mut msgs = Vec::with_capacity(prepared.len());
    for Prepared { msg, deps } in prepared {
        links.push(match deps {
            Some(deps) => Some(links::fill(queue, msg.id.as_str(), &deps, true).await?),
            None => None,
        });
        msgs.push(msg);
    }
    let sent = dispatch(queue, msgs).await?;
    Ok(Stored { sent, links })
}

/// [`store_waiting`] of parent `msg` alone, its set filled by one
/// `flow_deps` call sent with its send.
async fn store_parent(queue: &DelayQueue, msg: &Outgoing, deps: &Deps) -> Result<Stored, Error> {
    let (filled, sent) = futures::join!(
        links::fill(queue, msg.id.as_str(), deps, true),
        dispatch(queue, vec![msg.clone()])
    );
    let (filled, mut sent) = (filled?, sent?);
    if sent.unfilled {
        sent = dispatch(queue, vec![msg.clone()]).await?;
    }
    Ok(Stored {
        sent,
        links: vec![Some(filled)],
    })
}

impl Stored {
    /// Step three: links each parent stored, or found stored (a re-send),
    /// to its children.
    pub(crate) async fn link(&self, queue: &DelayQueue) -> Result<(), Error> {
        for (r, deps) in self.sent.results.iter().zip(&self.links) {
            if let (Ok(Sent::Stored(id) | Sent::Dropped { id, until: None }), Some(deps)) = (r, deps) {
                links::link(queue, id.as_str(), deps, false).await?;
            }
        }
        Ok(())
    }
}

/// A parent stored waiting whose children are still to be sent: link it
/// once they are ([`Unlinked::link_while`]).
pub(crate) struct Unlinked {
    id: MessageId,
    deps: Option<Deps>,
    /// A child linked before the parent was stored finished meanwhile
    /// (send.lua's status 8): its completion waits for a link again.
    overtaken: bool,
}

/// Sends parent `msg` alone, waiting for the children it carries, and
/// confirms it as a send does (a live message of its id taken as sent
/// already: a re-send); its children are linked by [`Unlinked::link`].
pub(crate) async fn send_unlinked(queue: &DelayQueue, msg: NewMessage) -> Result<Unlinked, Error> {
    let prepared = prepare_all(queue, [msg])?;
    let id = prepared
        .first()
        .map(|p| p.msg.id.clone())
        .ok_or_else(|| Error::Internal("send of one message prepared nothing".into()))?;
    let mut stored = store_waiting(queue, prepared).await?;
    stored.sent.confirm(queue).await?;
    let overtaken = stored.sent.overtaken;
    let deps = stored.links.pop().flatten();
    stored
        .sent
        .results
        .pop()
        .unwrap_or_else(|| Err(Error::Internal("send of one message returned nothing".into())))?;
    Ok(Unlinked { id, deps, overtaken })
}

/// Sends parent `msg` (of id `id`), waiting for `deps` when it has
/// children, while `sending` sends those of its children not sent yet,
/// and links them. In one round trip where one connection carries it all
/// (a client that is not a cluster's, durability `Memory`, at most
/// [`MAX_BATCH_SIZE`] children): Redis runs the parent's set and send,
/// then the children's send and links, in the order they go out. Where
/// that order broke (a call sent again as `EVAL`, or a parent whose send
/// ran behind the links and found a child finished: [`Unlinked::overtaken`])
/// every child is linked again once all returned, which completes those
/// that finished; a child whose send ran after its link is linked again
/// alone. Otherwise in two: the parent, then the children with their links.
pub(crate) async fn send_with_children(
    queue: &DelayQueue,
    id: &MessageId,
    msg: &NewMessage,
    deps: Option<Deps>,
    sending: impl Future<Output = Result<(), Error>>,
) -> Result<(), Error> {
    let inner = &queue.inner;
    let deps = match deps {
        Some(deps)
            if !inner.client.is_clustered()
                && inner.config.durability == Durability::Memory
                && deps.children.len() <= MAX_BATCH_SIZE =>
        {
            deps
        }
        deps => {
            let parent = send_unlinked(queue, msg.clone_for_flow(deps)).await?;
            return parent.link_while(queue, sending).await;
        }
    };
    let ((parent, sent, left), resent) = noting_resends(async {
        futures::join!(
            send_unlinked(queue, msg.clone_for_flow(Some(deps.clone()))),
            sending,
            links::link(queue, id.as_str(), &deps, true)
        )
    })
    .await;
    let (parent, left) = (parent?, left?);
    sent?;
    let Some(filled) = &parent.deps else {
        return Ok(());
    };
    let again = if resent || parent.overtaken { filled } else { &left };
    if !again.children.is_empty() {
        links::link(queue, id.as_str(), again, false).await?;
    }
    Ok(())
}

impl Unlinked {
    /// Step three: links the parent to its children while `sending` sends
    /// those not sent yet, in the same round trip (each link call goes out
    /// behind its queue's send); a child whose send had not run when its
    /// link did is linked again once `sending` returned.
    pub(crate) async fn link_while(
        &self,
        queue: &DelayQueue,
        sending: impl Future<Output = Result<(), Error>>,
    ) -> Result<(), Error> {
        let Some(deps) = &self.deps else {
            return sending.await;
        };
        let (sent, left) = futures::join!(sending, links::link(queue, self.id.as_str(), deps, true));
        sent?;
        let left = left?;
        if !left.children.is_empty() {
            links::link(queue, self.id.as_str(), &left, false).await?;
        }
        Ok(())
    }
}

/// Sends `msg` to `queue` as a child of `parents` of `parents_queue`, live
/// already (a cohort's member joining its callbacks): each parent's set
/// gets it, then it is sent (a live message of its id joins as it is),
/// then it is linked to each. Returns its id.
pub(crate) async fn send_joining(
    parents_queue: &DelayQueue,
    parents: &[(MessageId, ChildPolicy)],
    queue: &DelayQueue,
    msg: NewMessage,
) -> Result<MessageId, Error> {
    let (id, msg) = msg.identified(queue.shards());
    let child = ChildRef::new(&queue.shard_of(id.as_str()).base, id.as_str());
    let deps: Vec<Deps> = parents
        .iter()
        .map(|&(_, policy)| Deps {
            children: vec![child.clone()],
            policy,
        })
        .collect();
    for ((parent, _), d) in parents.iter().zip(&deps) {
        links::fill(parents_queue, parent.as_str(), d, false).await?;
    }
    queue.send_prepared(msg).await?;
    for ((parent, _), d) in parents.iter().zip(&deps) {
        links::link(parents_queue, parent.as_str(), d, false).await?;
    }
    Ok(id)
}
