//! `flow show`: the flow a message is part of (docs/workflows.md), as a
//! tree from its root, read by `DelayQueue::flow` within its bounds.

use serde_json::{json, Value};

use super::Ctx;
use crate::args::FlowCommand;
use crate::failure::Failure;
use crate::output::Table;
use delayqueue::{FlowNode, FlowParent, FlowTree};

/// Where a node is: its state while stored, else how it ended, else
/// `gone` (acked, cancelled or deleted, and no parent keeps its outcome).
fn where_is(n: &FlowNode) -> &'static str {
    match (n.state, n.outcome) {
        (Some(state), _) => state.as_str(),
        (None, Some(outcome)) => outcome.as_str(),
        (None, None) => "gone",
    }
}

fn parent_json(p: &FlowParent) -> Value {
    json!({"queue": p.queue, "id": p.id.as_str(), "policy": p.policy.as_str()})
}

fn node_json(n: &FlowNode) -> Value {
    json!({
        "queue": n.queue,
        "id": n.id.as_str(),
        "state": n.state.map(|s| s.as_str()),
        "outcome": n.outcome.map(|o| o.as_str()),
        "has_result": n.has_result,
        "unfinished": n.unfinished,
        "finished": n.finished,
        "more": n.more(),
        "next": n.next,
        "children": n.children.iter().map(node_json).collect::<Vec<_>>(),
    })
}

fn tree_json(t: &FlowTree) -> Value {
    json!({
        "queue": t.queue,
        "id": t.id.as_str(),
        "parents": t.parents.iter().map(parent_json).collect::<Vec<_>>(),
        "path": t.path.iter().map(parent_json).collect::<Vec<_>>(),
        "truncated": t.truncated,
        "root": node_json(&t.root),
    })
}

/// One row per node, indented by its depth under the root; the message
/// asked for marked.
fn rows(t: &FlowTree, n: &FlowNode, depth: usize, table: &mut Table) {
    let indent = "  ".repeat(depth);
    let mut notes = Vec::new();
    if n.unfinished + n.finished > 0 {
        notes.push(format!(
            "{} of {} children finished",
            n.finished,
            n.unfinished + n.finished
        ));
    }
    if n.has_result {
        notes.push("result kept".into());
    }
    if n.queue == t.queue && n.id == t.id {
        notes.push("<- asked for".into());
    }
    table.row([
        where_is(n).to_string(),
        format!("{indent}{}/{}", n.queue, n.id),
        notes.join(", "),
    ]);
    for c in &n.children {
        rows(t, c, depth + 1, table);
    }
    if n.more() > 0 {
        table.row([String::new(), format!("{indent}  ... {} more", n.more()), String::new()]);
    }
}

fn tree_text(t: &FlowTree) -> String {
    let mut table = Table::new(["STATE", "MESSAGE", ""]);
    rows(t, &t.root, 0, &mut table);
    let mut text = table.render();
    if t.parents.len() > 1 {
        let others: Vec<String> = t.parents[1..].iter().map(|p| format!("{}/{}", p.queue, p.id)).collect();
        text += &format!("\n{} is also a child of {}\n", t.id, others.join(", "));
    }
    if t.truncated {
        text += "\nmore nodes than one read shows: the deepest are listed without their children\n";
    }
    text
}

impl Ctx {
    pub(super) async fn flow(&self, cmd: FlowCommand) -> Result<u8, Failure> {
        let FlowCommand::Show { queue, id } = cmd;
        let Some(tree) = self.existing(&queue).await?.flow(&id).await? else {
            return Err(Failure::not_found(format!(
                "no message {id:?} in queue {queue:?}, nor a flow of it"
            )));
        };
        self.print(tree_json(&tree), || tree_text(&tree))?;
        Ok(0)
    }
}
