//! `consumers`: the live consumers under the prefix (the registry of
//! docs/operations.md, "Live consumers"), with what each runs now.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::json;

use super::Ctx;
use crate::failure::Failure;
use crate::output::{self, Table};
use delayqueue::{ConsumerInfo, LiveConsumers};

/// Running messages shown per consumer in text; `--json` gives all read.
const RUNNING_SHOWN: usize = 10;

impl Ctx {
    pub(super) async fn consumers(&self, queue: Option<String>) -> Result<u8, Failure> {
        let mut all = delayqueue::consumers(&self.client, &self.prefix).await?;
        if let Some(queue) = &queue {
            all.consumers.retain(|c| c.queues.iter().any(|q| &q.name == queue));
        }
        let now = self.redis_now().await?;
        self.print(json!(all), || consumers_text(&all, now))?;
        Ok(0)
    }
}

/// Ms since the epoch as a time.
fn at(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

/// A string another process wrote, made one safe line.
fn clean(s: &str, max: usize) -> String {
    output::preview(s.as_bytes(), false, max)
}

/// A table of the consumers, then each one's running messages, then the
/// entries skipped with their reasons.
fn consumers_text(all: &LiveConsumers, now: SystemTime) -> String {
    if all.consumers.is_empty() && all.skipped.is_empty() {
        return "no live consumers\n".into();
    }
    let mut t = Table::new([
        "CONSUMER",
        "HOST",
        "PID",
        "VERSION",
        "QUEUES",
        "SLOTS",
        "RUNNING",
        "UP",
        "HEARTBEAT",
    ]);
    for c in &all.consumers {
        t.row([
            clean(&c.id, 40),
            clean(&c.host, 40),
            c.pid.to_string(),
            clean(&c.version, 20),
            queues_cell(c),
            c.concurrency.to_string(),
            c.running_total.to_string(),
            output::duration(now.duration_since(at(c.started_ms)).unwrap_or_default()),
            output::relative(at(c.heartbeat_ms), now),
        ]);
    }
    let mut text = t.render();
    for c in all.consumers.iter().filter(|c| c.running_total > 0) {
        text += &format!("\n{} runs {}:\n", clean(&c.id, 40), c.running_total);
        for m in c.running.iter().take(RUNNING_SHOWN) {
            let since = output::relative(at(m.since_ms), now);
            text += &format!(
                "  {} {} attempt {} since {since}\n",
                clean(&m.queue, 128),
                clean(&m.id, 200),
                m.attempt
            );
        }
        if c.running_total > RUNNING_SHOWN.min(c.running.len()) {
            text += &format!("  ... {} more\n", c.running_total - RUNNING_SHOWN.min(c.running.len()));
        }
    }
    for s in &all.skipped {
        text += &format!("skipped entry {}: {}\n", clean(&s.id, 40), clean(&s.reason, 200));
    }
    text
}

/// A consumer's queues, `name×weight` when weighted, cut after three.
fn queues_cell(c: &ConsumerInfo) -> String {
    let mut names: Vec<String> = c
        .queues
        .iter()
        .take(3)
        .map(|q| match q.weight {
            1 => clean(&q.name, 40),
            w => format!("{}×{w}", clean(&q.name, 40)),
        })
        .collect();
    if c.queues_total > names.len() {
        names.push(format!("+{}", c.queues_total - names.len()));
    }
    names.join(",")
}
