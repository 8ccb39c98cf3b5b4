//! `groups list|pause|resume`: a queue's groups (docs/groups.md), one page
//! at a time, and pausing or resuming one for every consumer.

use serde_json::{json, Value};

use super::Ctx;
use crate::args::{GroupTarget, GroupsCommand, PageArgs};
use crate::failure::Failure;
use crate::output::{self, Table};
use delayqueue::{GroupInfo, GroupPage, RateLimit};

fn rate_json(r: Option<RateLimit>) -> Value {
    r.map_or(
        Value::Null,
        |r| json!({"limit": r.limit, "per_ms": u64::try_from(r.per.as_millis()).unwrap_or(u64::MAX)}),
    )
}

fn group_json(g: &GroupInfo) -> Value {
    json!({
        "name": g.name,
        "ready": g.ready,
        "processing": g.processing,
        "paused": g.paused,
        "concurrency": g.concurrency,
        "rate": rate_json(g.rate),
        "waiting_until": g.waiting_until.map(output::timestamp),
    })
}

/// A limit's cell: the group's own, else the default marked so, else `-`.
fn limit_text<T>(own: Option<T>, default: Option<T>, text: impl Fn(T) -> String) -> String {
    match (own, default) {
        (Some(v), _) => text(v),
        (None, Some(v)) => format!("{} (default)", text(v)),
        (None, None) => "-".into(),
    }
}

fn rate_text(r: RateLimit) -> String {
    format!("{}/{}", r.limit, output::duration(r.per))
}

fn page_text(page: &GroupPage, offset: usize) -> String {
    let mut t = Table::new(["GROUP", "READY", "PROCESSING", "PAUSED", "CONCURRENCY", "RATE"]);
    for g in &page.groups {
        t.row([
            g.name.clone(),
            g.ready.to_string(),
            g.processing.to_string(),
            if g.paused { "yes" } else { "no" }.into(),
            limit_text(g.concurrency, page.default_concurrency, |c| c.to_string()),
            limit_text(g.rate, page.default_rate, rate_text),
        ]);
    }
    if page.groups.is_empty() {
        return format!("no groups from offset {offset} ({} in all)\n", page.total);
    }
    let (from, to) = (offset + 1, offset + page.groups.len());
    let mut text = t.render() + &format!("\n{from}-{to} of {} groups", page.total);
    if (to as u64) < page.total {
        text += &format!("; next page: --offset {to}");
    }
    text + "\n"
}

impl Ctx {
    pub(super) async fn groups(&self, cmd: GroupsCommand) -> Result<u8, Failure> {
        match cmd {
            GroupsCommand::List {
                queue,
                page: PageArgs { limit, offset },
            } => {
                let page = self.existing(&queue).await?.groups(offset as u64, limit).await?;
                let value = json!({
                    "queue": queue,
                    "total": page.total,
                    "default_concurrency": page.default_concurrency,
                    "default_rate": rate_json(page.default_rate),
                    "groups": page.groups.iter().map(group_json).collect::<Vec<_>>(),
                });
                self.print(value, || page_text(&page, offset))?;
                Ok(0)
            }
            GroupsCommand::Pause(t) => self.pause_group(t, true).await,
            GroupsCommand::Resume(t) => self.pause_group(t, false).await,
        }
    }

    async fn pause_group(&self, t: GroupTarget, pause: bool) -> Result<u8, Failure> {
        let queue = self.existing(&t.queue).await?;
        let changed = if pause {
            queue.pause_group(&t.group).await?
        } else {
            queue.resume_group(&t.group).await?
        };
        let word = if pause { "paused" } else { "resumed" };
        let value = json!({"queue": t.queue, "group": t.group, "paused": pause, "changed": changed});
        self.print(value, || {
            let already = if changed { "" } else { " (it already was)" };
            format!("{word} group {}{already}\n", t.group)
        })?;
        Ok(0)
    }
}
