//! `GET /metrics`: Prometheus text format 0.0.4, read from Redis at each
//! scrape: one status script per shard of every queue, at most
//! 64 at once. Ages are in seconds.
//!
//! Per group, gauges for the few groups of each queue with the most due
//! messages (`Dashboard::group_metrics`), found among its first
//! [`GROUP_SCAN`] known groups.
//!
//! These are the queues' own numbers, whoever produces and consumes. The
//! process-side metrics the library records (`describe_metrics`: handler
//! durations, lateness, ...) go to the `metrics` recorder the application
//! installs, and are exported by it.

use std::fmt::Write;
use std::sync::Arc;

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};

use super::api::error::ApiError;
use super::registry::statuses;
use super::state::App;
use crate::info::MAX_PAGE;
use crate::{DelayQueue, Error, GroupInfo, LiveConsumers, QueueStatus};

/// Groups per queue with gauges of their own, unless the dashboard says.
pub(crate) const DEFAULT_GROUP_METRICS: usize = 10;
/// Most known groups of one queue a scrape reads to find its top ones.
const GROUP_SCAN: u64 = 10_000;

/// One metric family: name, type, help, and its value per queue.
struct Family {
    name: &'static str,
    kind: &'static str,
    help: &'static str,
    value: fn(&QueueStatus) -> f64,
}

const fn family(name: &'static str, kind: &'static str, help: &'static str, value: fn(&QueueStatus) -> f64) -> Family {
    Family {
        name,
        kind,
        help,
        value,
    }
}

fn secs(d: Option<std::time::Duration>) -> f64 {
    d.map_or(0.0, |d| d.as_secs_f64())
}

const FAMILIES: &[Family] = &[
    family(
        "delayqueue_queue_latency_seconds",
        "gauge",
        "Seconds the oldest due message has waited to start, wherever it waits (0: none waits).",
        |s| secs(s.latency),
    ),
    family(
        "delayqueue_queue_oldest_dead_seconds",
        "gauge",
        "Seconds since the oldest dead letter died (0: no dead letters).",
        |s| secs(s.oldest_dead),
    ),
    family(
        "delayqueue_queue_paused",
        "gauge",
        "1 while the queue is paused (consumers lease nothing), else 0.",
        |s| f64::from(u8::from(s.paused)),
    ),
    family(
        "delayqueue_queue_sent_total",
        "counter",
        "Messages stored by sends, by every producer (from Redis).",
        |s| s.totals.sent as f64,
    ),
    family(
        "delayqueue_queue_acked_total",
        "counter",
        "Deliveries acked, by every consumer (from Redis).",
        |s| s.totals.acked as f64,
    ),
    family(
        "delayqueue_queue_failed_total",
        "counter",
        "Deliveries that failed: handler errors, panics, time-outs (from Redis).",
        |s| s.totals.failed as f64,
    ),
    family(
        "delayqueue_queue_dead_total",
        "counter",
        "Messages that became dead letters (from Redis).",
        |s| s.totals.dead as f64,
    ),
    family(
        "delayqueue_queue_expired_total",
        "counter",
        "Messages discarded undelivered past their expire_after (from Redis).",
        |s| s.totals.expired as f64,
    ),
];

pub(crate) async fn metrics(State(app): State<Arc<App>>) -> Result<Response, ApiError> {
    // Started here too, so that the listing stays fresh for a scraper alone.
    super::background::start(&app);
    let listing = app.registry.listing().await?;
    let statuses = statuses(app.registry.handles(&listing.queues))
        .await
        .into_iter()
        .map(|(q, s)| Ok::<_, Error>((q, s?)))
        .collect::<Result<Vec<_>, _>>()?;
    let mut groups = Vec::new();
    if app.group_metrics > 0 {
        for (q, _) in &statuses {
            groups.push((q.name().to_string(), top_groups(q, app.group_metrics).await?));
        }
    }
    let statuses: Vec<(String, QueueStatus)> = statuses.into_iter().map(|(q, s)| (q.name().to_string(), s)).collect();
    let live = crate::consumers(&app.client, app.registry.prefix()).await?;
    let mut text = render(&statuses);
    text.push_str(&render_groups(&groups));
    text.push_str(&render_consumers(&statuses, &live));
    if let Some(process) = &app.process_metrics {
        text.push_str(&(process.0)());
    }
    Ok((
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")],
        text,
    )
        .into_response())
}

/// The text of one scrape.
fn render(statuses: &[(String, QueueStatus)]) -> String {
    let mut out = String::new();
    out.push_str("# HELP delayqueue_queue_messages Messages in each state (ready counts due messages not yet moved, and list entries).\n");
    out.push_str("# TYPE delayqueue_queue_messages gauge\n");
    for (name, s) in statuses {
        let c = s.counts;
        let states = [
            ("pending", c.pending),
            ("ready", c.ready),
            ("processing", c.processing),
            ("retry", c.retry),
            ("dead", c.dead),
        ];
        for (state, n) in states {
            let _ = writeln!(
                out,
                "delayqueue_queue_messages{{queue=\"{}\",state=\"{state}\"}} {n}",
                escape(name)
            );
        }
    }
    for f in FAMILIES {
        let _ = writeln!(out, "# HELP {} {}", f.name, f.help);
        let _ = writeln!(out, "# TYPE {} {}", f.name, f.kind);
        for (name, s) in statuses {
            let _ = writeln!(out, "{}{{queue=\"{}\"}} {}", f.name, escape(name), (f.value)(s));
        }
    }
    out
}

/// The `top` groups of `q` with the most due messages (ties by name),
/// among its first [`GROUP_SCAN`] known groups.
async fn top_groups(q: &DelayQueue, top: usize) -> Result<Vec<GroupInfo>, Error> {
    let mut best: Vec<GroupInfo> = Vec::new();
    let mut offset = 0;
    while offset < GROUP_SCAN {
        let page = q.groups(offset, MAX_PAGE).await?;
        let n = page.items.len() as u64;
        best.extend(page.items);
        best.sort_by(|a, b| b.ready.cmp(&a.ready).then_with(|| a.name.cmp(&b.name)));
        best.truncate(top);
        offset += n;
        if n < MAX_PAGE as u64 {
            break;
        }
    }
    Ok(best)
}

/// The per-group families: each queue's top groups.
fn render_groups(groups: &[(String, Vec<GroupInfo>)]) -> String {
    let mut out = String::new();
    if groups.iter().all(|(_, g)| g.is_empty()) {
        return out;
    }
    out.push_str("# HELP delayqueue_group_messages Messages of a group due (ready) and in processing, for the groups of each queue with the most due messages.\n");
    out.push_str("# TYPE delayqueue_group_messages gauge\n");
    for (queue, gs) in groups {
        for g in gs {
            for (state, n) in [("ready", g.ready), ("processing", g.processing)] {
                let _ = writeln!(
                    out,
                    "delayqueue_group_messages{{queue=\"{}\",group=\"{}\",state=\"{state}\"}} {n}",
                    escape(queue),
                    escape(&g.name)
                );
            }
        }
    }
    out.push_str("# HELP delayqueue_group_paused 1 while the group is paused, else 0 (the same groups).\n");
    out.push_str("# TYPE delayqueue_group_paused gauge\n");
    for (queue, gs) in groups {
        for g in gs {
            let _ = writeln!(
                out,
                "delayqueue_group_paused{{queue=\"{}\",group=\"{}\"}} {}",
                escape(queue),
                escape(&g.name),
                u8::from(g.paused)
            );
        }
    }
    out
}

/// The live consumers: in all, per queue shown, and entries skipped.
fn render_consumers(statuses: &[(String, QueueStatus)], live: &LiveConsumers) -> String {
    let mut out = String::new();
    out.push_str("# HELP delayqueue_consumers Live consumers (heartbeat within its TTL) under the prefix.\n");
    out.push_str("# TYPE delayqueue_consumers gauge\n");
    let _ = writeln!(out, "delayqueue_consumers {}", live.live);
    out.push_str("# HELP delayqueue_consumer_entries_skipped Live registry entries this version cannot read.\n");
    out.push_str("# TYPE delayqueue_consumer_entries_skipped gauge\n");
    let _ = writeln!(out, "delayqueue_consumer_entries_skipped {}", live.skipped.len());
    out.push_str("# HELP delayqueue_queue_consumers Live consumers that read the queue.\n");
    out.push_str("# TYPE delayqueue_queue_consumers gauge\n");
    for (name, _) in statuses {
        let n = live
            .consumers
            .iter()
            .filter(|c| c.queues.iter().any(|q| &q.name == name))
            .count();
        let _ = writeln!(out, "delayqueue_queue_consumers{{queue=\"{}\"}} {n}", escape(name));
    }
    out
}

/// A label value as the text format wants it.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_format_has_help_type_and_one_line_per_queue() {
        let mut s = QueueStatus::default();
        s.counts.pending = 3;
        s.totals.sent = 7;
        s.latency = Some(std::time::Duration::from_millis(1500));
        let text = render(&[("a\"b".into(), s)]);
        assert!(text.contains("# TYPE delayqueue_queue_messages gauge\n"), "{text}");
        assert!(
            text.contains("delayqueue_queue_messages{queue=\"a\\\"b\",state=\"pending\"} 3\n"),
            "{text}"
        );
        assert!(
            text.contains("delayqueue_queue_sent_total{queue=\"a\\\"b\"} 7\n"),
            "{text}"
        );
        assert!(
            text.contains("delayqueue_queue_latency_seconds{queue=\"a\\\"b\"} 1.5\n"),
            "{text}"
        );
        assert_eq!(text.matches("# HELP").count(), 1 + FAMILIES.len());
    }
}
