//! `get`: one message by id, with its state (`lua/get.lua`).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fred::prelude::Value;

use super::{array, id_keys, list::info, unexpected, IdKey, Op};
use crate::store::keys::Keys;
use crate::store::scripts::{self, LuaScript};
use crate::{Error, MessageId, MessageInfo, MessageState};

/// Message `id`, whole.
pub(crate) struct Get<'a> {
    pub id: &'a str,
}

/// get.lua's state number of a parent waiting for its children.
const WAITING: i64 = 9;

impl Op for Get<'_> {
    /// The message and Redis's clock when it was read; `None` when the
    /// queue does not hold it.
    type Reply = Option<(MessageInfo, SystemTime)>;
    const KEYS: &'static [&'static str] = &[
        "pending",
        "ready",
        "processing",
        "retry",
        "dead",
        "attempts",
        "msg",
        "result",
        "progress",
        "log",
    ];

    fn script() -> &'static LuaScript {
        &scripts::GET
    }

    fn keys(&self, k: &Keys) -> Vec<String> {
        let mut keys = id_keys(k);
        keys.extend([k.msg(self.id), k.result(self.id), k.progress(self.id), k.log(self.id)]);
        keys
    }

    fn args(&self, k: &Keys) -> Vec<Value> {
        vec![
            self.id.into(),
            k.prio.as_str().into(),
            k.group_prefix.as_str().into(),
            k.flow_waiting.as_str().into(),
        ]
    }

    fn reply(&self, v: Value) -> Result<Self::Reply, Error> {
        let reply = array::<Self>(v)?;
        if reply.len() != 9 {
            return Err(unexpected::<Self>(format!("{} values", reply.len())));
        }
        // 0: in no state; 9: waiting for its children (docs/workflows.md).
        let state = match reply[0].as_i64() {
            Some(WAITING) => Some(MessageState::Waiting),
            n => n.and_then(IdKey::from_number).and_then(IdKey::state),
        };
        let Some(state) = state else {
            return Ok(None);
        };
        let len = reply[3].as_bytes().map_or(0, <[u8]>::len) as i64;
        let values = [reply[1].clone(), reply[2].clone(), reply[3].clone(), reply[4].clone()];
        let now = UNIX_EPOCH + Duration::from_millis(reply[5].as_u64().unwrap_or_default());
        let mut info = info(MessageId::from(self.id), state, &values, len, None);
        let text = |v: &Value| v.as_bytes().filter(|b| !b.is_empty()).map(<[u8]>::to_vec);
        info.result = text(&reply[6]);
        info.progress = text(&reply[7]).map(|p| String::from_utf8_lossy(&p).into_owned());
        info.log = match &reply[8] {
            Value::Array(lines) => lines.iter().filter_map(Value::as_string).collect(),
            _ => Vec::new(),
        };
        Ok(Some((info, now)))
    }
}
