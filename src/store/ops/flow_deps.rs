//! `flow_deps` on a parent's slot: adds children to the set the parent
//! waits for (docs/workflows.md), before the parent is stored waiting.

use fred::prelude::Value;

use super::{ints, unexpected, Op};
use crate::flow::wire::ChildRef;
use crate::store::keys::Keys;
use crate::store::scripts::{self, LuaScript};
use crate::Error;

/// Adds `children` to the set parent `id` waits for.
pub(crate) struct FlowDeps<'a> {
    pub id: &'a str,
    pub children: &'a [ChildRef],
    /// Adds none to a live parent (a send's, which send.lua will refuse
    /// as a duplicate); false for a batch's member joining its callbacks.
    pub unless_live: bool,
}

/// What [`FlowDeps`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DepsAdded {
    /// How many children were new to the set.
    Added(u64),
    /// The parent is live: none added; per child, whether its set holds it.
    Live(Vec<bool>),
}

impl Op for FlowDeps<'_> {
    type Reply = DepsAdded;
    const KEYS: &'static [&'static str] = &["deps", "msg.."];

    fn script() -> &'static LuaScript {
        &scripts::FLOW_DEPS
    }

    fn keys(&self, k: &Keys) -> Vec<String> {
        let mut keys = vec![k.deps(self.id)];
        if self.unless_live {
            keys.push(k.msg(self.id));
        }
        keys
    }

    fn args(&self, _k: &Keys) -> Vec<Value> {
        self.children.iter().map(|c| Value::from(c.member())).collect()
    }

    fn reply(&self, v: Value) -> Result<Self::Reply, Error> {
        match ints::<Self>(v)?[..] {
            [-1, ref held @ ..] if held.len() == self.children.len() => {
                Ok(DepsAdded::Live(held.iter().map(|&h| h == 1).collect()))
            }
            [added] if added >= 0 => Ok(DepsAdded::Added(added as u64)),
            ref other => Err(unexpected::<Self>(format!("{other:?}"))),
        }
    }
}
