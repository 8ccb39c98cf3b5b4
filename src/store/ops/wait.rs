//! `wait`: a message's result, and a wait for it (`lua/wait.lua`).

use std::time::Duration;

use fred::prelude::Value;

use super::{array, int, ms, unexpected, Op};
use crate::store::keys::Keys;
use crate::store::scripts::{self, LuaScript};
use crate::Error;

/// Reads message `id`'s result; registers a wait of `wait` for it when
/// there is none yet (zero: only reads).
pub(crate) struct Wait<'a> {
    pub id: &'a str,
    pub wait: Duration,
}

/// What the script found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Waited {
    /// The kept result.
    Result(Vec<u8>),
    /// No result yet; the message is stored.
    Stored,
    /// Neither a result nor the message.
    Neither,
}

impl Op for Wait<'_> {
    type Reply = Waited;
    const KEYS: &'static [&'static str] = &["result", "msg", "waiters"];

    fn script() -> &'static LuaScript {
        &scripts::WAIT
    }

    fn keys(&self, k: &Keys) -> Vec<String> {
        vec![k.result(self.id), k.msg(self.id), k.waiters.clone()]
    }

    fn args(&self, _: &Keys) -> Vec<Value> {
        vec![self.id.into(), ms(self.wait)]
    }

    fn reply(&self, v: Value) -> Result<Self::Reply, Error> {
        let reply = array::<Self>(v)?;
        let [found, result] = &reply[..] else {
            return Err(unexpected::<Self>(format!("{} values", reply.len())));
        };
        match int::<Self>(found)? {
            1 => Ok(Waited::Result(result.as_bytes().unwrap_or_default().to_vec())),
            2 => Ok(Waited::Stored),
            0 => Ok(Waited::Neither),
            n => Err(unexpected::<Self>(format!("outcome {n}"))),
        }
    }
}
