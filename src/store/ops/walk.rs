//! `walk`: one step of an ordered walk through one state, from a cursor:
//! a browse page or a search batch (`lua/walk.lua`).

use fred::prelude::Value;

use super::list::items;
use super::{array, count, id_keys, number, unexpected, IdKey, Op};
use crate::store::keys::Keys;
use crate::store::scripts::{self, LuaScript};
use crate::store::stored::HEADER_BYTES;
use crate::{Error, MessageInfo, MessageState, Order};

/// Reads at most `read` entries of `state` in `order`, from just after
/// `after` (from the first when `None`), and returns those whose payload
/// holds `text` (every entry when it is empty), at most `limit`, each with
/// the first `preview` bytes of its payload.
pub(crate) struct Walk<'a> {
    pub state: MessageState,
    pub order: Order,
    pub after: Option<&'a Anchor>,
    pub read: usize,
    pub limit: usize,
    pub preview: usize,
    pub text: &'a str,
}

/// Where a walk stopped: the last entry it read, by its score (zsets), its
/// position from the head (lists) or `<group>/<score>` (a group's due
/// messages), and its id; or `<group>/` and no id, past a group (a step
/// over the groups visits a bounded number of them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Anchor {
    pub at: String,
    pub id: String,
}

/// What one step found.
#[derive(Debug)]
pub(crate) struct Walked {
    /// Entries in the state.
    pub total: u64,
    /// Entries read.
    pub read: u64,
    /// Where the next step starts after; `None`: the state's end was reached.
    pub next: Option<Anchor>,
    pub items: Vec<MessageInfo>,
}

impl Op for Walk<'_> {
    type Reply = Walked;
    const KEYS: &'static [&'static str] = &["pending", "ready", "processing", "retry", "dead", "attempts", "totals"];

    fn script() -> &'static LuaScript {
        &scripts::WALK
    }

    fn keys(&self, k: &Keys) -> Vec<String> {
        let mut keys = id_keys(k);
        keys.push(k.totals.clone());
        keys
    }

    fn args(&self, k: &Keys) -> Vec<Value> {
        let (at, id) = self.after.map_or(("", ""), |a| (a.at.as_str(), a.id.as_str()));
        vec![
            (IdKey::of(self.state) as i64).into(),
            i64::from(self.order == Order::Asc).into(),
            at.into(),
            id.into(),
            count(self.read as u64),
            count(self.limit as u64),
            k.msg_prefix.as_str().into(),
            count((self.preview + HEADER_BYTES) as u64),
            self.text.into(),
            k.prio.as_str().into(),
            k.group_prefix.as_str().into(),
        ]
    }

    fn reply(&self, v: Value) -> Result<Self::Reply, Error> {
        let reply = array::<Self>(v)?;
        let (head, rest) = reply
            .split_at_checked(4)
            .ok_or_else(|| unexpected::<Self>("short reply"))?;
        let at = head[2].as_string().unwrap_or_default();
        let next = (!at.is_empty()).then(|| Anchor {
            at,
            id: head[3].as_string().unwrap_or_default(),
        });
        Ok(Walked {
            total: number::<Self>(&head[0])?,
            read: number::<Self>(&head[1])?,
            next,
            items: items::<Self>(rest, self.state, self.preview)?,
        })
    }
}
