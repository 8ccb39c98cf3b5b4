//! `consumers`: the live consumers of the registry with their entries,
//! each read within a byte bound (`lua/consumers.lua`). Run on the
//! registry's keys ([`Keys::registry`]).

use fred::prelude::Value;

use super::{array, count, number, unexpected, Op};
use crate::registry::RawEntry;
use crate::store::keys::Keys;
use crate::store::scripts::{self, LuaScript};
use crate::Error;

/// Reads up to `limit` live consumers, none of their entries beyond `max_bytes`.
pub(crate) struct ListConsumers {
    pub limit: u64,
    pub max_bytes: u64,
}

/// What [`ListConsumers`] read: the live count, and per consumer read its
/// id and entry.
pub(crate) type Listed = (u64, Vec<(String, RawEntry)>);

impl Op for ListConsumers {
    type Reply = Listed;
    const KEYS: &'static [&'static str] = &["consumers"];

    fn script() -> &'static LuaScript {
        &scripts::CONSUMERS
    }

    fn keys(&self, k: &Keys) -> Vec<String> {
        vec![k.consumers()]
    }

    fn args(&self, k: &Keys) -> Vec<Value> {
        vec![k.consumer("").into(), count(self.limit), count(self.max_bytes)]
    }

    fn reply(&self, v: Value) -> Result<Self::Reply, Error> {
        let mut items = array::<Self>(v)?.into_iter();
        let live = number::<Self>(&items.next().unwrap_or(Value::Null))?;
        let mut listed = Vec::new();
        while let Some(id) = items.next() {
            let id = id.as_string().ok_or_else(|| unexpected::<Self>(format!("id {id:?}")))?;
            let entry = match items.next() {
                Some(Value::Integer(-1)) => RawEntry::NotText,
                Some(Value::Integer(n)) => RawEntry::TooLong(n.unsigned_abs()),
                Some(Value::Bytes(b)) => RawEntry::Text(b.to_vec()),
                Some(Value::String(s)) => RawEntry::Text(s.as_bytes().to_vec()),
                other => return Err(unexpected::<Self>(format!("entry of {id}: {other:?}"))),
            };
            listed.push((id, entry));
        }
        Ok((live, listed))
    }
}
