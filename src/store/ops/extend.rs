//! `extend`: renews the leases of running deliveries (`lua/extend.lua`).

use fred::prelude::Value;

use super::{ints, unexpected, Op};
use crate::store::keys::Keys;
use crate::store::scripts::{self, LuaScript};
use crate::Error;

/// Renews a batch of leases.
pub(crate) struct Extend<'a> {
    /// Each delivery's id, its current lease and the new one (microseconds
    /// of Redis time; new > current).
    pub renewals: Vec<(&'a str, i64, i64)>,
}

impl Op for Extend<'_> {
    /// Per renewal, in order: renewed (`false`: the lease was lost).
    type Reply = Vec<bool>;
    const KEYS: &'static [&'static str] = &["processing"];

    fn script() -> &'static LuaScript {
        &scripts::EXTEND
    }

    fn keys(&self, k: &Keys) -> Vec<String> {
        vec![k.processing.clone()]
    }

    fn args(&self, _: &Keys) -> Vec<Value> {
        let mut args: Vec<Value> = Vec::with_capacity(3 * self.renewals.len());
        for &(id, current, new) in &self.renewals {
            args.extend([id.into(), current.into(), new.into()]);
        }
        args
    }

    fn reply(&self, v: Value) -> Result<Self::Reply, Error> {
        let reply = ints::<Self>(v)?;
        if reply.len() != self.renewals.len() || reply.iter().any(|&n| n != 0 && n != 1) {
            return Err(unexpected::<Self>(format!(
                "{reply:?} for {} renewals",
                self.renewals.len()
            )));
        }
        Ok(reply.into_iter().map(|n| n == 1).collect())
    }
}
