//! `ack`: finishes deliveries whose lease is still current (`lua/ack.lua`).

use fred::prelude::Value;

use super::{ints, numbered, unexpected, Op};
use crate::store::keys::Keys;
use crate::store::scripts::{self, LuaScript};
use crate::Error;

/// Acks a batch of deliveries.
pub(crate) struct Ack<'a> {
    /// Each delivery's id and lease.
    pub leases: Vec<(&'a str, i64)>,
}

numbered! {
    /// What the script did with one delivery.
    pub(crate) enum AckOutcome {
        /// The lease ran out: the message is or will be delivered again.
        LeaseLost = 0,
        Acked = 1,
        /// Acked, and its completion recorded for its parent: the relay
        /// has work (docs/workflows.md).
        AckedChild = 3,
        /// Nothing left to ack: finished already, most likely by an earlier
        /// run of this call whose reply was lost.
        Finished = 2,
    }
}

impl Op for Ack<'_> {
    /// One outcome per delivery, in order.
    type Reply = Vec<AckOutcome>;
    const KEYS: &'static [&'static str] = &["processing", "attempts", "totals"];

    fn script() -> &'static LuaScript {
        &scripts::ACK
    }

    fn keys(&self, k: &Keys) -> Vec<String> {
        vec![k.processing.clone(), k.attempts.clone(), k.totals.clone()]
    }

    fn args(&self, k: &Keys) -> Vec<Value> {
        let mut args: Vec<Value> = Vec::with_capacity(3 + 2 * self.leases.len());
        args.push(k.msg_prefix.as_str().into());
        args.push(k.group_prefix.as_str().into());
        args.push(k.marker_prefix.as_str().into());
        for &(id, lease) in &self.leases {
            args.push(id.into());
            args.push(lease.into());
        }
        args
    }

    fn reply(&self, v: Value) -> Result<Self::Reply, Error> {
        let reply = ints::<Self>(v)?;
        if reply.len() != self.leases.len() {
            return Err(unexpected::<Self>(format!("{reply:?} for {} acks", self.leases.len())));
        }
        reply
            .into_iter()
            .map(|n| AckOutcome::from_number(n).ok_or_else(|| unexpected::<Self>(format!("outcome {n}"))))
            .collect()
    }
}
