//! The JSON of flows: a flow read as a tree, a page of a node's children.

use serde::Serialize;

use crate::{FlowNode, FlowParent, FlowTree};

/// A parent a message is linked to (docs/workflows.md).
#[derive(Debug, Serialize)]
pub(crate) struct FlowParentJson {
    queue: String,
    id: String,
    /// fail, ignore, wait or remove.
    policy: &'static str,
}

impl From<&FlowParent> for FlowParentJson {
    fn from(p: &FlowParent) -> Self {
        FlowParentJson {
            queue: p.queue.clone(),
            id: p.id.to_string(),
            policy: p.policy.as_str(),
        }
    }
}

/// One node of a flow's tree, with its children listed.
#[derive(Debug, Serialize)]
pub(crate) struct FlowNodeJson {
    queue: String,
    id: String,
    /// `None` once its queue no longer stores it.
    state: Option<&'static str>,
    /// acked, dead or cancelled, once its parent recorded it finished.
    outcome: Option<&'static str>,
    has_result: bool,
    unfinished: u64,
    finished: u64,
    /// Children not listed.
    more: u64,
    /// The cursor of `.../flow/children` after the listed ones.
    next: Option<String>,
    children: Vec<FlowNodeJson>,
}

impl From<&FlowNode> for FlowNodeJson {
    fn from(n: &FlowNode) -> Self {
        FlowNodeJson {
            queue: n.queue.clone(),
            id: n.id.to_string(),
            state: n.state.map(|s| s.as_str()),
            outcome: n.outcome.map(|o| o.as_str()),
            has_result: n.has_result,
            unfinished: n.unfinished,
            finished: n.finished,
            more: n.more(),
            next: n.next.clone(),
            children: n.children.iter().map(FlowNodeJson::from).collect(),
        }
    }
}

/// `GET .../messages/{id}/flow`: the flow a message is part of.
#[derive(Debug, Serialize)]
pub(crate) struct FlowJson {
    queue: String,
    id: String,
    parents: Vec<FlowParentJson>,
    /// The way up to the root, nearest first.
    path: Vec<FlowParentJson>,
    truncated: bool,
    root: FlowNodeJson,
}

impl From<&FlowTree> for FlowJson {
    fn from(t: &FlowTree) -> Self {
        FlowJson {
            queue: t.queue.clone(),
            id: t.id.to_string(),
            parents: t.parents.iter().map(FlowParentJson::from).collect(),
            path: t.path.iter().map(FlowParentJson::from).collect(),
            truncated: t.truncated,
            root: FlowNodeJson::from(&t.root),
        }
    }
}

/// `GET .../messages/{id}/flow/children`: one page of a node's children.
#[derive(Debug, Serialize)]
pub(crate) struct FlowPageJson {
    pub children: Vec<FlowNodeJson>,
    pub next: Option<String>,
}
