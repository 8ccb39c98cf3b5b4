//! `inspect`: where each of a batch of ids lives, taken atomically
//! (`lua/inspect.lua`).

use fred::prelude::Value;

use super::{array, id_keys, unexpected, Op};
use crate::store::keys::Keys;
use crate::store::scripts::{self, LuaScript};
use crate::{Error, MessageState};

/// Where each of `ids` lives.
pub(crate) struct Inspect<'a> {
    pub ids: Vec<&'a str>,
}

/// Where one id was found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Presence {
    pub pending: bool,
    /// Times in the ready list.
    pub ready: u32,
    pub processing: bool,
    /// Times in the retry list.
    pub retry: u32,
    pub dead: bool,
    pub payload: bool,
    /// It has an attempt record.
    pub record: bool,
    /// Its unique_for marker exists without TTL: held for a live message.
    pub marker: bool,
    /// A flow's parent waiting for its children (docs/workflows.md).
    pub waiting: bool,
}

impl Presence {
    /// Every state the id is found in, the zsets' first. `stale`: the
    /// STALE mark is set, so list entries may be left over from cancelled
    /// messages: they count only for an id with a payload and no other
    /// state, and once.
    pub(crate) fn states(&self, stale: bool) -> Vec<MessageState> {
        let mut states: Vec<MessageState> = [
            (self.pending, MessageState::Pending),
            (self.processing, MessageState::Processing),
            (self.dead, MessageState::Dead),
            (self.waiting, MessageState::Waiting),
        ]
        .into_iter()
        .filter_map(|(is, state)| is.then_some(state))
        .collect();
        let listed = std::iter::repeat_n(MessageState::Ready, self.ready as usize)
            .chain(std::iter::repeat_n(MessageState::Retry, self.retry as usize));
        if !stale {
            states.extend(listed);
        } else if states.is_empty() && self.payload {
            states.extend(listed.take(1));
        }
        states
    }
}

/// What one inspect found.
#[derive(Debug)]
pub(crate) struct Inspected {
    /// The STALE mark is set: list entries may be left over from cancelled messages.
    pub stale: bool,
    /// One per id, in order.
    pub found: Vec<Presence>,
}

impl Op for Inspect<'_> {
    type Reply = Inspected;
    const KEYS: &'static [&'static str] = &["pending", "ready", "processing", "retry", "dead", "attempts"];

    fn script() -> &'static LuaScript {
        &scripts::INSPECT
    }

    fn keys(&self, k: &Keys) -> Vec<String> {
        id_keys(k)
    }

    fn args(&self, k: &Keys) -> Vec<Value> {
        let mut args: Vec<Value> = vec![
            k.msg_prefix.as_str().into(),
            k.prio.as_str().into(),
            k.group_prefix.as_str().into(),
            k.marker_prefix.as_str().into(),
        ];
        args.extend(self.ids.iter().map(|&id| Value::from(id)));
        args
    }

    fn reply(&self, v: Value) -> Result<Self::Reply, Error> {
        let reply = array::<Self>(v)?;
        let bad = || unexpected::<Self>(format!("{} values for {} ids", reply.len(), self.ids.len()));
        let (stale, rest) = reply.split_first().ok_or_else(bad)?;
        if rest.len() != 9 * self.ids.len() {
            return Err(bad());
        }
        let present = |v: &Value| v.as_str().is_some_and(|s| !s.is_empty());
        let number = |v: &Value| v.as_u64().unwrap_or(0);
        let found = rest
            .chunks_exact(9)
            .map(|v| Presence {
                pending: present(&v[0]),
                ready: number(&v[1]) as u32,
                processing: present(&v[2]),
                retry: number(&v[3]) as u32,
                dead: number(&v[4]) == 1,
                payload: number(&v[5]) == 1,
                record: present(&v[6]),
                marker: number(&v[7]) == 1,
                waiting: number(&v[8]) == 1,
            })
            .collect();
        Ok(Inspected {
            stale: number(stale) == 1,
            found,
        })
    }
}
