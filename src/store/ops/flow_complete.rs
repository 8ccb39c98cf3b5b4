//! `flow_complete` on a parent's slot: applies children's completions to
//! their parents (docs/workflows.md), and [`complete`], which sends any
//! number of them in calls of at most [`MAX_BATCH_SIZE`].

use std::time::Duration;

use fred::bytes::Bytes;
use fred::prelude::{Client, Value};

use super::{counts, ms, unexpected, Op};
use crate::flow::wire::{ChildRef, Outcome};
use crate::flow::ChildPolicy;
use crate::maxima::MAX_BATCH_SIZE;
use crate::store::keys::Keys;
use crate::store::scripts::{self, LuaScript};
use crate::store::Shard;
use crate::Error;

/// One child's completion, for its parent.
#[derive(Debug, Clone)]
pub(crate) struct Completion {
    pub parent: String,
    pub child: ChildRef,
    pub outcome: Outcome,
    /// The policy the parent waits with.
    pub policy: ChildPolicy,
    pub result: Bytes,
}

/// Applies completions to parents of this shard.
pub(crate) struct FlowComplete<'a> {
    pub completions: &'a [Completion],
    pub dead_letter_retention: Duration,
}

/// What [`FlowComplete`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Completed {
    pub applied: u64,
    /// Parents made due: to ready (due now) or pending.
    pub due: u64,
    pub dead: u64,
    pub removed: u64,
}

impl Op for FlowComplete<'_> {
    type Reply = Completed;
    const KEYS: &'static [&'static str] = &["waiting", "pending", "dead", "attempts", "totals"];

    fn script() -> &'static LuaScript {
        &scripts::FLOW_COMPLETE
    }

    fn keys(&self, k: &Keys) -> Vec<String> {
        parents_keys(k).to_vec()
    }

    fn args(&self, k: &Keys) -> Vec<Value> {
        let mut args: Vec<Value> = vec![
            k.msg_prefix.as_str().into(),
            k.wake.as_str().into(),
            ms(self.dead_letter_retention),
        ];
        for c in self.completions {
            args.push(c.parent.as_str().into());
            args.push(c.child.member().into());
            args.push(c.outcome.with(c.policy).into());
            args.push(Value::Bytes(c.result.clone()));
        }
        args
    }

    fn reply(&self, v: Value) -> Result<Self::Reply, Error> {
        match counts::<Self>(v)?[..] {
            [applied, due, dead, removed] => Ok(Completed {
                applied,
                due,
                dead,
                removed,
            }),
            ref other => Err(unexpected::<Self>(format!("{other:?}"))),
        }
    }
}

/// The keys completions change in the parents' shard with keys `k`
/// (`complete_parents` in lua/include/completions.lua): waiting,
/// pending, dead, attempts, totals.
pub(crate) fn parents_keys(k: &Keys) -> [String; 5] {
    [
        k.flow_waiting.clone(),
        k.pending.clone(),
        k.dead.clone(),
        k.attempts.clone(),
        k.totals.clone(),
    ]
}

/// Applies `completions` to parents of the shard with keys `k`;
/// `retention`: the dead-letter retention of a parent a dead child fails.
pub(crate) async fn complete(
    client: &Client,
    k: &Keys,
    completions: &[Completion],
    retention: Duration,
) -> Result<(), Error> {
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
