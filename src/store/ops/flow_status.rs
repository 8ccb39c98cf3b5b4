//! `flow_status` on a parent's slot: where a parent's children stand (a
//! batch's status).

use fred::prelude::Value;

use super::{counts, unexpected, Op};
use crate::flow::wire::ChildRef;
use crate::store::keys::Keys;
use crate::store::scripts::{self, LuaScript};
use crate::Error;

/// Where parent `id`'s children stand.
pub(crate) struct FlowStatus<'a> {
    pub id: &'a str,
    /// The member that keeps a batch open, if it is a batch's callback.
    pub open_member: Option<&'a ChildRef>,
}

/// What [`FlowStatus`] read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct FlowCounts {
    pub waiting: bool,
    pub stored: bool,
    pub left: u64,
    pub acked: u64,
    pub dead: u64,
    pub cancelled: u64,
    pub open: bool,
}

impl Op for FlowStatus<'_> {
    type Reply = FlowCounts;
    const KEYS: &'static [&'static str] = &["waiting"];

    fn script() -> &'static LuaScript {
        &scripts::FLOW_STATUS
    }

    fn keys(&self, k: &Keys) -> Vec<String> {
        vec![k.flow_waiting.clone()]
    }

    fn args(&self, k: &Keys) -> Vec<Value> {
        vec![
            k.msg_prefix.as_str().into(),
            self.id.into(),
            self.open_member.map(ChildRef::member).unwrap_or_default().into(),
        ]
    }

    fn reply(&self, v: Value) -> Result<Self::Reply, Error> {
        match counts::<Self>(v)?[..] {
            [waiting, stored, left, acked, dead, cancelled, open] => Ok(FlowCounts {
                waiting: waiting == 1,
                stored: stored == 1,
                left,
                acked,
                dead,
                cancelled,
                open: open == 1,
            }),
            ref other => Err(unexpected::<Self>(format!("{other:?}"))),
        }
    }
}
