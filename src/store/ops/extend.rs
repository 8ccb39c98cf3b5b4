//! `extend`: renews the leases of running deliveries (`lua/extend.lua`).

use fred::prelude::Value;

use super::{ints, unexpected, Op};
use crate::store::keys::Keys;
use crate::store::scripts::{self, LuaScript};
use crate::Error;

/// What `extend` did to one lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Renewed {
    /// Renewed.
    Yes,
    /// Renewed, and the message was aborted: its handler is to be told.
    Aborted,
    /// The lease was lost (taken back); nothing done.
    Lost,
}

/// Renews a batch of leases.
pub(crate) struct Extend<'a> {
    /// Each delivery's id, its current lease and the new one (microseconds
    /// of Redis time; new > current).
    pub renewals: Vec<(&'a str, i64, i64)>,
}

impl Op for Extend<'_> {
    /// Per renewal, in order.
    type Reply = Vec<Renewed>;
    const KEYS: &'static [&'static str] = &["processing"];

    fn script() -> &'static LuaScript {
        &scripts::EXTEND
    }

    fn keys(&self, k: &Keys) -> Vec<String> {
        vec![k.processing.clone()]
    }

    fn args(&self, k: &Keys) -> Vec<Value> {
        let mut args: Vec<Value> = Vec::with_capacity(1 + 3 * self.renewals.len());
        args.push(k.msg_prefix.as_str().into());
        for &(id, current, new) in &self.renewals {
            args.extend([id.into(), current.into(), new.into()]);
        }
        args
    }

    fn reply(&self, v: Value) -> Result<Self::Reply, Error> {
        let reply = ints::<Self>(v)?;
        if reply.len() != self.renewals.len() || reply.iter().any(|&n| !(0..=2).contains(&n)) {
            return Err(unexpected::<Self>(format!(
                "{reply:?} for {} renewals",
                self.renewals.len()
            )));
        }
        Ok(reply
            .into_iter()
            .map(|n| match n {
                1 => Renewed::Yes,
                2 => Renewed::Aborted,
                _ => Renewed::Lost,
            })
            .collect())
    }
}
