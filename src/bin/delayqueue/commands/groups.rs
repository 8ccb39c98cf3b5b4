//! `groups list|show|pause|resume|limit`: a queue's groups (docs/groups.md),
//! one page at a time or one by name, pausing or resuming one for every
//! consumer, and setting its limits.

use serde_json::{json, Value};

use super::Ctx;
use crate::args::{GroupLimitArgs, GroupTarget, GroupsCommand, PageArgs};
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

/// A limit's cell: the group's own, else the default marked so (`none`
/// while the queue has none).
fn limit_text<T>(own: Option<T>, default: Option<T>, text: impl Fn(T) -> String) -> String {
    match (own, default) {
        (Some(v), _) => text(v),
        (None, v) => format!("{} (default)", v.map_or("none".into(), text)),
    }
}

fn rate_text(r: RateLimit) -> String {
    format!("{}/{}", r.limit, output::duration(r.per))
}

fn page_text(page: &GroupPage, offset: usize) -> String {
    let mut t = Table::new(["GROUP", "READY", "PROCESSING", "PAUSED", "CONCURRENCY", "RATE"]);
    for g in &page.items {
        t.row([
            g.name.clone(),
            g.ready.to_string(),
            g.processing.to_string(),
            if g.paused { "yes" } else { "no" }.into(),
            limit_text(g.concurrency, page.default_concurrency, |c| c.to_string()),
            limit_text(g.rate, page.default_rate, rate_text),
        ]);
    }
    if page.items.is_empty() {
        return format!("no groups from offset {offset} ({} in all)\n", page.total);
    }
    let (from, to) = (offset + 1, offset + page.items.len());
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
                    "groups": page.items.iter().map(group_json).collect::<Vec<_>>(),
                });
                self.print(value, || page_text(&page, offset))?;
                Ok(0)
            }
            GroupsCommand::Pause(t) => self.pause_group(t, true).await,
            GroupsCommand::Resume(t) => self.pause_group(t, false).await,
            GroupsCommand::Show(t) => self.show_group(t).await,
            GroupsCommand::Limit(a) => self.limit_group(a).await,
        }
    }

    async fn show_group(&self, t: GroupTarget) -> Result<u8, Failure> {
        let queue = self.existing(&t.queue).await?;
        let g = queue
            .group(&t.group)
            .await?
            .ok_or_else(|| Failure::not_found(format!("no group {:?} in queue {:?}", t.group, t.queue)))?;
        // The defaults come with any page; one row is the cheapest.
        let defaults = queue.groups(0, 1).await?;
        let mut value = group_json(&g);
        value["queue"] = json!(t.queue);
        value["default_concurrency"] = json!(defaults.default_concurrency);
        value["default_rate"] = rate_json(defaults.default_rate);
        self.print(value, || {
            let mut t = Table::new(["FIELD", "VALUE"]);
            t.row(["group".into(), g.name.clone()]);
            t.row(["ready".into(), g.ready.to_string()]);
            t.row(["processing".into(), g.processing.to_string()]);
            t.row(["paused".into(), if g.paused { "yes" } else { "no" }.into()]);
            t.row([
                "concurrency".into(),
                limit_text(g.concurrency, defaults.default_concurrency, |c| c.to_string()),
            ]);
            t.row(["rate".into(), limit_text(g.rate, defaults.default_rate, rate_text)]);
            let wait = g.waiting_until.map_or("-".into(), output::timestamp);
            t.row(["waiting until".into(), wait]);
            t.render()
        })?;
        Ok(0)
    }

    async fn limit_group(&self, a: GroupLimitArgs) -> Result<u8, Failure> {
        let queue = self.existing(&a.target.queue).await?;
        let group = &a.target.group;
        let mut value = json!({"queue": a.target.queue, "group": group});
        let (mut changed, mut said) = (false, Vec::new());
        if a.concurrency.is_some() || a.no_concurrency {
            changed |= queue.set_group_concurrency(group, a.concurrency).await?;
            value["concurrency"] = json!(a.concurrency);
            said.push(
                a.concurrency
                    .map_or("concurrency: the default".into(), |c| format!("concurrency {c}")),
            );
        }
        if a.rate.is_some() || a.no_rate {
            changed |= queue.set_group_rate(group, a.rate).await?;
            value["rate"] = rate_json(a.rate);
            said.push(
                a.rate
                    .map_or("rate: the default".into(), |r| format!("rate {}", rate_text(r))),
            );
        }
        value["changed"] = json!(changed);
        self.print(value, || {
            let already = if changed { "" } else { " (it already was)" };
            format!("group {group}: {}{already}\n", said.join(", "))
        })?;
        Ok(0)
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
