//! `timeout`: takes back deliveries whose lease ran out (`lua/timeout.lua`).

use std::time::Duration;

use fred::prelude::Value;

use super::{array, count, ms, number, unexpected, Op};
use crate::store::keys::Keys;
use crate::store::scripts::{self, LuaScript};
use crate::{Error, MessageId};

/// Takes back at most `limit` deliveries past their lease: to retry, or to
/// the dead letters when they have no deliveries left.
pub(crate) struct Timeout {
    pub limit: usize,
    /// Retries of a message whose stored value does not say.
    pub default_retry_count: u32,
    /// How long a dead message is kept.
    pub dead_letter_retention: Duration,
}

/// What one timeout took back.
#[derive(Debug)]
pub(crate) struct TimedOut {
    /// Deliveries taken back, `dead` included.
    pub count: u64,
    /// Each message moved to the dead letters, with its delivery count.
    pub dead: Vec<(MessageId, u32)>,
    /// The messages aborted while processing, ended as aborted (not in `count`).
    pub aborted: Vec<MessageId>,
}

impl Op for Timeout {
    type Reply = TimedOut;
    const KEYS: &'static [&'static str] = &["processing", "attempts", "retry", "dead", "totals"];

    fn script() -> &'static LuaScript {
        &scripts::TIMEOUT
    }

    fn keys(&self, k: &Keys) -> Vec<String> {
        vec![
            k.processing.clone(),
            k.attempts.clone(),
            k.retry.clone(),
            k.dead.clone(),
            k.totals.clone(),
        ]
    }

    fn args(&self, k: &Keys) -> Vec<Value> {
        vec![
            k.msg_prefix.as_str().into(),
            count(self.limit as u64),
            count(self.default_retry_count.into()),
            k.wake.as_str().into(),
            ms(self.dead_letter_retention),
            k.group_prefix.as_str().into(),
            k.marker_prefix.as_str().into(),
        ]
    }

    fn reply(&self, v: Value) -> Result<Self::Reply, Error> {
        let reply = array::<Self>(v)?;
        let bad = || unexpected::<Self>(format!("{reply:?}"));
        let (head, rest) = reply.split_at_checked(3).ok_or_else(bad)?;
        let [count, dead, aborted] = [0, 1, 2].map(|i| number::<Self>(&head[i]));
        let (count, dead, aborted) = (count?, dead?, aborted?);
        if rest.len() as u64 != 2 * dead + aborted || dead > count {
            return Err(bad());
        }
        let (buried, ended) = rest.split_at(2 * dead as usize);
        let aborted = ended
            .iter()
            .map(|id| id.as_string().map(MessageId::from).ok_or_else(bad))
            .collect::<Result<_, Error>>()?;
        let dead = buried
            .chunks_exact(2)
            .map(|pair| {
                let id = pair[0].as_string().ok_or_else(bad)?;
                let attempt = u32::try_from(number::<Self>(&pair[1])?).map_err(|_| bad())?;
                Ok((MessageId::from(id), attempt))
            })
            .collect::<Result<_, Error>>()?;
        Ok(TimedOut { count, dead, aborted })
    }
}
