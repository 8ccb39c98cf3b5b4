//! The relay of flows (docs/workflows.md): moves a shard's outbox entries
//! to the parents' slots, at least once; those of parents in the same
//! slot within the call that reads the outbox (lua/relay.lua). A child's
//! ack, death or cancel records its completion in its own queue's outbox
//! in the same script; `flow_complete` on the parent's slot is
//! idempotent, so no script ever spans two slots. Run by a consumer's
//! relay task (one per shard) when its acks acked children or its loop's
//! probe finds entries, and after a cancel.

use std::collections::BTreeMap;
use std::time::Duration;

use fred::prelude::Client;

use crate::flow::wire::ChildRef;
use crate::store::ops::cancel::Cancel;
use crate::store::ops::flow_complete::{complete, Completion};
use crate::store::ops::outbox::OutboxDrop;
use crate::store::ops::relay::{OutboxEntry, Relay};
use crate::store::{Keys, Shard};
use crate::Error;

/// Entries the relay takes per `relay` call (and at most
/// [`OUTBOX_BYTES`](crate::store::ops::relay::OUTBOX_BYTES) of results).
pub(crate) const RELAY_BATCH: usize = 1000;
/// Most `relay` calls of one relay run: the rest waits for the next.
const RELAY_ROUNDS: usize = 8;

/// Delivers the outbox of the shard with keys `k` to the parents' slots.
/// Each round's `relay` call applies and drops the completions of
/// parents in this same slot, and returns the rest: completions go to
/// `flow_complete` on their parents' slots, a cancelled parent's children
/// to `cancel` (which records their own completions, and cascades to
/// their children, through their queues' outboxes), then `outbox` drops
/// them. At least once: a relay that fails or dies half-way leaves the
/// entries it did not drop for the next, and a re-delivered entry changes
/// nothing. `retention`: the dead-letter retention of a parent a dead
/// child fails. Returns how many entries it dropped.
pub(crate) async fn relay(client: &Client, k: &Keys, retention: Duration) -> Result<u64, Error> {
    let name = Keys::name_of_base(&k.base);
    let shard = Shard::new(client, k, name);
    let mut dropped = 0;
    for _ in 0..RELAY_ROUNDS {
        let taken = shard
            .run(&Relay {
                limit: RELAY_BATCH,
                dead_letter_retention: retention,
            })
            .await?;
        dropped += taken.applied;
        if !taken.left.is_empty() {
            dropped += deliver(client, k, &taken.left, retention).await?;
        }
        if !taken.more {
            break;
        }
    }
    Ok(dropped)
}

/// Delivers `entries` of the outbox of the shard with keys `k` (which
/// `relay` left, or an ack just recorded) to the parents' slots, then
/// drops them; returns how many it dropped.
pub(crate) async fn deliver(
    client: &Client,
    k: &Keys,
    entries: &[OutboxEntry],
    retention: Duration,
) -> Result<u64, Error> {
    let name = Keys::name_of_base(&k.base);
    let shard = Shard::new(client, k, name);
    let mut by_parent: BTreeMap<String, Vec<Completion>> = BTreeMap::new();
    let mut done: Vec<(String, Vec<String>)> = Vec::with_capacity(entries.len());
    for e in entries {
        match e {
            OutboxEntry::Done {
                outcome,
                child,
                parent,
                result,
                ..
            } => {
                by_parent.entry(parent.base.clone()).or_default().push(Completion {
                    parent: parent.id.clone(),
                    child: ChildRef::new(&k.base, child),
                    outcome: *outcome,
                    policy: parent.policy,
                    result: result.clone(),
                });
                done.push((e.entry().to_string(), Vec::new()));
            }
            OutboxEntry::Cancelled { children, .. } => {
                for member in children {
                    if let Some((base, id)) = ChildRef::parse(member.as_bytes()) {
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
    shard.run(&OutboxDrop { entries: &done }).await
}
