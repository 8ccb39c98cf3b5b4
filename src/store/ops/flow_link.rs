//! `flow_link` on a child's slot: links children to a parent
//! (docs/workflows.md), after the parent is stored.

use fred::prelude::Value;

use super::{each, numbered, Op};
use crate::flow::wire::ParentLink;
use crate::store::keys::Keys;
use crate::store::scripts::{self, LuaScript};
use crate::Error;

numbered! {
    /// What linking did with one child.
    pub(crate) enum LinkStatus {
        /// Not stored: finished (acked, cancelled, deleted) or never sent.
        Gone = 0,
        /// Linked: its completion will reach the parent.
        Linked = 1,
        /// Dead, and the policy does not wait for it.
        Dead = 2,
        /// Not stored but its result kept (acked): its completion, recorded
        /// in its queue's outbox, reaches the parent through the relay.
        Recorded = 3,
        /// With [`FlowLink::new`]: not stored, or dead; nothing written, as
        /// its send may not have run yet: link it again once it has.
        NotYet = 4,
    }
}

/// Links children `ids` of this shard to `parent`.
pub(crate) struct FlowLink<'a> {
    pub parent: &'a ParentLink,
    pub ids: &'a [String],
    /// The children's send is pipelined with this call and may run after
    /// it: a child not stored or dead is [`LinkStatus::NotYet`], as that
    /// state may be an earlier message's of its id.
    pub new: bool,
}

impl Op for FlowLink<'_> {
    /// One status per child, in order.
    type Reply = Vec<LinkStatus>;
    const KEYS: &'static [&'static str] = &["parents", "dead", "totals"];

    fn script() -> &'static LuaScript {
        &scripts::FLOW_LINK
    }

    fn keys(&self, k: &Keys) -> Vec<String> {
        vec![k.parents(), k.dead.clone(), k.totals.clone()]
    }

    fn args(&self, k: &Keys) -> Vec<Value> {
        let mut link = self.parent.wire();
        if self.new {
            link.push_str(" new");
        }
        let mut args: Vec<Value> = vec![k.msg_prefix.as_str().into(), link.into()];
        args.extend(self.ids.iter().map(|id| Value::from(id.as_str())));
        args
    }

    fn reply(&self, v: Value) -> Result<Self::Reply, Error> {
        each::<Self, _>(v, self.ids.len(), "children", LinkStatus::from_number)
    }
}
