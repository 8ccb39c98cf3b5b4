//! What the commands print: tables and text for people, JSON for scripts.
//!
//! JSON output is one object per line. Field names are stable; new fields
//! may be added. Durations are whole milliseconds in fields ending in `_ms`
//! (`null` when there is none); points in time are RFC 3339 UTC strings
//! with milliseconds, by Redis's clock (`time` of `stats --watch`: this
//! host's). A state is one of `pending`, `ready`, `processing`, `retry`,
//! `dead`.
//!
//! - counts: `{pending, ready, processing, retry, dead}`
//! - `queues`: `{queues: [{name, shards, paused, counts}], total, next}`
//! - `stats`: `{queue, counts, paused, limits: {rate, global_concurrency},
//!   next_due_ms, latency_ms, oldest_dead_ms, totals: {sent, acked,
//!   failed, dead, expired}}`;
//!   with `--watch` also `time` and `rates: {sent, acked, failed}` (per
//!   second since the previous line; `null` on the first)
//! - message: `{id, state, priority, headers ({name: value}), attempts, deferrals, retry_count, deliveries_left, backoff, last_error,
//!   due, first_due, lease_until, dead_since, expires_in_ms (a dead letter's payload
//!   TTL), expires_at (the `expire_after` deadline), payload_len, payload,
//!   payload_encoding ("utf8" or "hex"), payload_truncated}`; `list`
//!   shows the first 256 bytes of a payload, `show` all of it, and
//!   `result` (`{text}` or `{hex}`, `null`: none), `progress`, `log`
//! - `list`, `dead list`: `{queue, state, total, offset, next, items:
//!   [message]}` (`next`: offset of the next page, `null` on the last)
//! - `show`: `{queue, message}`; of an acked message whose result is kept
//!   `{queue, finished: {id, result}}`
//! - `send`: `{queue, id, delay_ms}`; `cancel`: `{queue, id, cancelled}`;
//!   `abort`: `{queue, id, outcome}` (`cancelled` or `aborting`)
//! - `pause`, `resume`: `{queue, paused, changed}`
//! - `dead requeue`: `{queue, requeued}`; `dead delete`: `{queue, deleted}`
//! - `purge`: `{queue, removed}`
//! - `check`: `{queue, scanned, clean, anomalies: [{kind, id, state?,
//!   states?}]}`, kind one of `many_states`, `missing_payload`,
//!   `orphan_payload`, `orphan_retry_record`, or `{kind, group}` with kind
//!   `idle_group` or `unknown_group`

use std::fmt::Write as _;
use std::time::{Duration, SystemTime};

use delayqueue::{Anomaly, Counts, MessageId, MessageInfo, MessageState, QueueStatus, Totals};
use serde_json::{json, Value};

/// `d` in at most two units: `350ms`, `5s`, `12.3s`, `4m 12s`, `1h 5m`, `7d 3h`.
pub fn duration(d: Duration) -> String {
    let s = d.as_secs();
    if s == 0 {
        format!("{}ms", d.subsec_millis())
    } else if s < 60 {
        match d.subsec_millis() / 100 {
            0 => format!("{s}s"),
            tenths => format!("{s}.{tenths}s"),
        }
    } else if s < 3600 {
        format!("{}m {}s", s / 60, s % 60)
    } else if s < 86400 {
        format!("{}h {}m", s / 3600, s % 3600 / 60)
    } else {
        format!("{}d {}h", s / 86400, s % 86400 / 3600)
    }
}

/// `at` relative to `now`: `in 4m 12s` or `12.3s ago`.
pub fn relative(at: SystemTime, now: SystemTime) -> String {
    match at.duration_since(now) {
        Ok(ahead) => format!("in {}", duration(ahead)),
        Err(e) => format!("{} ago", duration(e.duration())),
    }
}

/// RFC 3339 UTC with milliseconds.
pub fn timestamp(at: SystemTime) -> String {
    humantime::format_rfc3339_millis(at).to_string()
}

fn ms(d: Option<Duration>) -> Value {
    d.map_or(Value::Null, |d| json!(d.as_millis() as u64))
}

/// The payload as text when it is UTF-8 (a preview cut inside a character
/// still counts), else `None`.
fn utf8(payload: &[u8], truncated: bool) -> Option<&str> {
    match std::str::from_utf8(payload) {
        Ok(s) => Some(s),
        // The cut fell inside a multi-byte character: show the whole ones.
        Err(e) if truncated && e.error_len().is_none() => std::str::from_utf8(&payload[..e.valid_up_to()]).ok(),
        Err(_) => None,
    }
}

/// One line of printable text, at most `max` characters (`…` marks a cut):
/// control characters and, for binary payloads, non-ASCII bytes escaped.
pub fn preview(bytes: &[u8], truncated: bool, max: usize) -> String {
    let text: String = match utf8(bytes, truncated) {
        Some(s) => s
            .chars()
            .map(|c| match c.is_control() {
                true => c.escape_default().to_string(),
                false => c.to_string(),
            })
            .collect(),
        None => bytes.escape_ascii().to_string(),
    };
    clip(&text, max, truncated)
}

/// `s` cut to `max` characters, with `…` when cut (or when `more` says the
/// source was already cut).
fn clip(s: &str, max: usize, more: bool) -> String {
    if s.chars().count() > max {
        let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
        out.push('…');
        out
    } else if more {
        format!("{s}…")
    } else {
        s.to_string()
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

pub fn counts_json(c: &Counts) -> Value {
    json!({
        "pending": c.pending,
        "ready": c.ready,
        "processing": c.processing,
        "retry": c.retry,
        "dead": c.dead,
    })
}

fn totals_json(t: &Totals) -> Value {
    json!({"sent": t.sent, "acked": t.acked, "failed": t.failed, "dead": t.dead, "expired": t.expired})
}

pub fn status_json(queue: &str, s: &QueueStatus) -> Value {
    json!({
        "queue": queue,
        "paused": s.paused,
        "counts": counts_json(&s.counts),
        "next_due_ms": ms(s.next_due),
        "latency_ms": ms(s.latency),
        "oldest_dead_ms": ms(s.oldest_dead),
        "totals": totals_json(&s.totals),
        "limits": limits_json(s),
    })
}

/// The queue-wide limits; `null` for one not set.
fn limits_json(s: &QueueStatus) -> Value {
    json!({
        "rate": s.rate_limit.map(|r| json!({"limit": r.limit, "per_ms": r.per.as_millis() as u64})),
        "global_concurrency": s.global_concurrency,
    })
}

/// Deliveries acked, failed and sent per second between two snapshots.
#[derive(Debug, Clone, Copy)]
pub struct Rates {
    pub sent: f64,
    pub acked: f64,
    pub failed: f64,
}

impl Rates {
    pub fn between(before: &Totals, after: &Totals, elapsed: Duration) -> Rates {
        let secs = elapsed.as_secs_f64().max(1e-3);
        // Totals restart from zero after a purge: no negative rates.
        let per_sec = |a: u64, b: u64| b.saturating_sub(a) as f64 / secs;
        Rates {
            sent: per_sec(before.sent, after.sent),
            acked: per_sec(before.acked, after.acked),
            failed: per_sec(before.failed, after.failed),
        }
    }
}

pub fn rates_json(r: Option<Rates>) -> Value {
    let round = |x: f64| (x * 100.0).round() / 100.0;
    r.map_or(
        Value::Null,
        |r| json!({"sent": round(r.sent), "acked": round(r.acked), "failed": round(r.failed)}),
    )
}

/// The stats view. `rates`: `Some` in watch mode (`None` inside on the
/// first refresh).
pub fn status_text(queue: &str, s: &QueueStatus, rates: Option<Option<Rates>>) -> String {
    let c = &s.counts;
    let t = &s.totals;
    let mut rows = Table::new(["STATE", "COUNT"]);
    for (name, n) in [
        ("pending", c.pending),
        ("ready", c.ready),
        ("processing", c.processing),
        ("retry", c.retry),
        ("dead", c.dead),
    ] {
        rows.row([name.to_string(), n.to_string()]);
    }
    let or_none = |d: Option<Duration>, f: &dyn Fn(String) -> String| d.map_or("-".to_string(), |d| f(duration(d)));
    let paused = if s.paused {
        " (paused: consumers lease nothing)"
    } else {
        ""
    };
    let mut out = format!("queue {queue}{paused}\n\n{}\n", rows.render());
    let _ = writeln!(out, "next due        {}", or_none(s.next_due, &|d| format!("in {d}")));
    let _ = writeln!(out, "latency         {}", or_none(s.latency, &|d| d));
    let _ = writeln!(
        out,
        "oldest dead     {}",
        or_none(s.oldest_dead, &|d| format!("died {d} ago"))
    );
    let _ = writeln!(
        out,
        "totals          sent {}  acked {}  failed {}  dead {}  expired {}",
        t.sent, t.acked, t.failed, t.dead, t.expired
    );
    if s.rate_limit.is_some() || s.global_concurrency.is_some() {
        let rate = s
            .rate_limit
            .map_or("-".to_string(), |r| format!("{} per {}", r.limit, duration(r.per)));
        let most = s.global_concurrency.map_or("-".to_string(), |n| n.to_string());
        let _ = writeln!(out, "limits          rate {rate}  processing at most {most}");
    }
    if let Some(rates) = rates {
        let line = rates.map_or("- (from the next refresh)".to_string(), |r| {
            format!("sent {:.1}  acked {:.1}  failed {:.1}", r.sent, r.acked, r.failed)
        });
        let _ = writeln!(out, "per second      {line}");
    }
    out
}

/// A message as JSON; `full`: the payload is whole (from `get`).
pub fn message_json(m: &MessageInfo, full: bool) -> Value {
    let truncated = !full && m.payload.len() < m.payload_len;
    let (payload, encoding) = match utf8(&m.payload, truncated) {
        Some(s) => (s.to_string(), "utf8"),
        None => (hex(&m.payload), "hex"),
    };
    let time = |t: Option<SystemTime>| t.map_or(Value::Null, |t| json!(timestamp(t)));
    let mut v = json!({
        "id": m.id.as_str(),
        "state": m.state.as_str(),
        "priority": m.priority,
        "headers": m.headers.iter().map(|(k, v)| (k.clone(), json!(v))).collect::<serde_json::Map<_, _>>(),
        "attempts": m.attempts,
        "deferrals": m.deferrals,
        "retry_count": m.retry_count,
        "deliveries_left": m.deliveries_left(),
        "backoff": m.backoff.as_ref().map(ToString::to_string),
        "last_error": m.last_error,
        "due": time(m.due),
        "first_due": time(m.first_due),
        "lease_until": time(m.lease_until),
        "dead_since": time(m.dead_since),
        "expires_in_ms": ms(m.expires_in),
        "expires_at": time(m.expires_at),
        "payload_len": m.payload_len,
        "payload": payload,
        "payload_encoding": encoding,
        "payload_truncated": truncated,
    });
    // Read by `get` only: `show` has them, `list` not.
    if full {
        v["result"] = m.result.as_deref().map_or(Value::Null, bytes_json);
        v["progress"] = json!(m.progress);
        v["log"] = json!(m.log);
    }
    v
}

/// Bytes as JSON: the text when UTF-8, else hex.
fn bytes_json(b: &[u8]) -> Value {
    match std::str::from_utf8(b) {
        Ok(s) => json!({"text": s}),
        Err(_) => json!({"hex": hex(b)}),
    }
}

/// An acked message's kept result, as JSON.
pub fn result_json(id: &MessageId, result: &[u8]) -> Value {
    json!({"id": id.as_str(), "result": bytes_json(result)})
}

/// An acked message's kept result, for people.
pub fn result_text(id: &MessageId, result: &[u8]) -> String {
    format!("{id} finished (acked); its result, {}", bytes_text(result))
}

/// `len` bytes, then the bytes as text or escaped.
fn bytes_text(b: &[u8]) -> String {
    match std::str::from_utf8(b) {
        Ok(s) => format!("{} bytes, UTF-8:\n{s}\n", b.len()),
        Err(_) => format!("{} bytes, binary (escaped):\n{}\n", b.len(), b.escape_ascii()),
    }
}

/// The state-specific time column of `list`: its header and value.
fn time_column(state: MessageState) -> &'static str {
    match state {
        MessageState::Pending => "DUE",
        MessageState::Processing => "LEASE LEFT",
        MessageState::Dead => "DIED",
        _ => "EXPIRES IN",
    }
}

fn time_cell(m: &MessageInfo, now: SystemTime) -> String {
    let left = |t: SystemTime| t.duration_since(now).map_or("0ms".to_string(), duration);
    match m.state {
        MessageState::Pending => m.due.map(|t| relative(t, now)),
        MessageState::Processing => m.lease_until.map(left),
        MessageState::Dead => m.dead_since.map(|t| relative(t, now)),
        _ => m.expires_at.map(left),
    }
    .unwrap_or_else(|| "-".into())
}

/// The `list` table.
pub fn list_text(state: MessageState, items: &[MessageInfo], now: SystemTime) -> String {
    let mut t = Table::new(["ID", time_column(state), "ATTEMPTS", "LAST ERROR", "PAYLOAD"]);
    for m in items {
        let truncated = m.payload.len() < m.payload_len;
        t.row([
            m.id.to_string(),
            time_cell(m, now),
            m.attempts.to_string(),
            m.last_error
                .as_deref()
                .map_or("-".into(), |e| preview(e.as_bytes(), false, 30)),
            preview(&m.payload, truncated, 40),
        ]);
    }
    t.render()
}

/// The `show` view: every field, then the whole payload.
pub fn show_text(m: &MessageInfo, now: SystemTime) -> String {
    let when = |t: Option<SystemTime>| t.map_or("-".into(), |t| format!("{} ({})", timestamp(t), relative(t, now)));
    let retries = match (m.retry_count, m.deliveries_left()) {
        (Some(n), Some(left)) => format!("{n} ({left} deliveries left)"),
        _ => "- (payload gone)".into(),
    };
    let mut out = String::new();
    for (k, v) in [
        ("id", m.id.to_string()),
        ("state", m.state.as_str().to_string()),
        ("priority", m.priority.to_string()),
        (
            "attempts",
            match m.deferrals {
                0 => m.attempts.to_string(),
                n => format!("{} (and {n} deferred, uncounted)", m.attempts),
            },
        ),
        ("retry count", retries),
        (
            "backoff",
            m.backoff.as_ref().map_or("the consumer's".into(), ToString::to_string),
        ),
        ("last error", m.last_error.clone().unwrap_or_else(|| "-".into())),
        ("due", when(m.due)),
        ("lease until", when(m.lease_until)),
        ("dead since", when(m.dead_since)),
        ("expires in", m.expires_in.map_or("-".into(), duration)),
        ("expires at", when(m.expires_at)),
    ] {
        let _ = writeln!(out, "{k:<12} {v}");
    }
    if m.headers.is_empty() {
        let _ = writeln!(out, "{:<12} -", "headers");
    }
    for (i, (name, value)) in m.headers.iter().enumerate() {
        let _ = writeln!(out, "{:<12} {name}: {value}", if i == 0 { "headers" } else { "" });
    }
    let _ = writeln!(out, "{:<12} {}", "progress", m.progress.as_deref().unwrap_or("-"));
    if m.log.is_empty() {
        let _ = writeln!(out, "{:<12} -", "log");
    }
    for (i, line) in m.log.iter().enumerate() {
        let _ = writeln!(out, "{:<12} {line}", if i == 0 { "log" } else { "" });
    }
    if let Some(r) = &m.result {
        let _ = write!(out, "result       {}", bytes_text(r));
    }
    match std::str::from_utf8(&m.payload) {
        Ok(s) => {
            let _ = writeln!(out, "payload      {} bytes, UTF-8:\n{s}", m.payload_len);
        }
        Err(_) => {
            let _ = writeln!(
                out,
                "payload      {} bytes, binary (escaped):\n{}",
                m.payload_len,
                m.payload.escape_ascii()
            );
        }
    }
    out
}

pub fn anomaly_json(a: &Anomaly) -> Value {
    match a {
        Anomaly::ManyStates { id, states } => json!({
            "kind": "many_states",
            "id": id.as_str(),
            "states": states.iter().map(|s| s.as_str()).collect::<Vec<_>>(),
        }),
        Anomaly::MissingPayload { id, state } => {
            json!({"kind": "missing_payload", "id": id.as_str(), "state": state.as_str()})
        }
        Anomaly::OrphanPayload { id } => json!({"kind": "orphan_payload", "id": id.as_str()}),
        Anomaly::OrphanRetryRecord { id } => json!({"kind": "orphan_retry_record", "id": id.as_str()}),
        Anomaly::KeptForever { id, key } => json!({"kind": "kept_forever", "id": id.as_str(), "state": key}),
        Anomaly::IdleGroup { group } => json!({"kind": "idle_group", "group": group}),
        Anomaly::UnknownGroup { group } => json!({"kind": "unknown_group", "group": group}),
        Anomaly::OrphanFlowKey { parent, key } => {
            json!({"kind": "orphan_flow_key", "id": parent.as_str(), "state": key})
        }
        Anomaly::OrphanParentLink { child } => json!({"kind": "orphan_parent_link", "id": child.as_str()}),
        Anomaly::StuckOutbox { entry, age } => {
            json!({"kind": "stuck_outbox", "id": entry, "state": format!("{} s old", age.as_secs())})
        }
        other => json!({"kind": "other", "detail": format!("{other:?}")}),
    }
}

/// An anomaly for people: what, which id, where.
pub fn anomaly_row(a: &Anomaly) -> [String; 3] {
    let v = anomaly_json(a);
    let text = |k: &str| v[k].as_str().unwrap_or("").to_string();
    let where_ = match (&v["state"], &v["states"]) {
        (Value::String(s), _) => s.clone(),
        (_, Value::Array(all)) => all.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(", "),
        _ => "-".into(),
    };
    let id = match (&v["id"], &v["group"]) {
        (Value::String(id), _) => id.clone(),
        (_, Value::String(group)) => format!("group {group}"),
        _ => text("detail"),
    };
    [text("kind").replace('_', " "), id, where_]
}

/// A plain table: left-aligned columns two spaces apart.
pub struct Table {
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new<const N: usize>(header: [&str; N]) -> Table {
        Table {
            rows: vec![header.iter().map(|h| h.to_string()).collect()],
        }
    }

    pub fn row<const N: usize>(&mut self, cells: [String; N]) {
        self.rows.push(cells.into());
    }

    pub fn render(&self) -> String {
        let cols = self.rows[0].len();
        let width = |c: usize| self.rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0);
        let widths: Vec<usize> = (0..cols).map(width).collect();
        let mut out = String::new();
        for row in &self.rows {
            let mut line = String::new();
            for (c, cell) in row.iter().enumerate() {
                let pad = if c + 1 == cols { 0 } else { widths[c] + 2 };
                let _ = write!(line, "{cell:<pad$}");
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// `schedules list`: a line per schedule.
pub fn schedules_text(list: &[delayqueue::ScheduleInfo], now: SystemTime) -> String {
    if list.is_empty() {
        return "no schedules\n".to_string();
    }
    let mut t = Table::new(["NAME", "SPEC", "TZ", "NEXT", "LAST", "FIRED", "STATE"]);
    for s in list {
        let when = |at: Option<SystemTime>| at.map_or("-".to_string(), |at| relative(at, now));
        t.row([
            s.name.clone(),
            s.spec.clone(),
            s.timezone.clone(),
            when(s.next_fire),
            when(s.last_fire),
            s.fired.to_string(),
            if s.paused { "paused" } else { "active" }.to_string(),
        ]);
    }
    t.render()
}

/// `schedules show`: every field of one schedule.
pub fn schedule_text(s: &delayqueue::ScheduleInfo, now: SystemTime) -> String {
    let when = |at: Option<SystemTime>| {
        at.map_or("-".to_string(), |at| {
            format!("{} ({})", timestamp(at), relative(at, now))
        })
    };
    format!(
        "name:        {}\nspec:        {}\ntimezone:    {}\nstate:       {}\nnext fire:   {}\nlast fire:   {}\nfired:       {}\nmisfire:     {} (grace {:?})\nretry count: {}\npayload:     {}\n",
        s.name,
        s.spec,
        s.timezone,
        if s.paused { "paused" } else { "active" },
        when(s.next_fire),
        when(s.last_fire),
        s.fired,
        s.misfire.as_str(),
        s.misfire_grace,
        s.retry_count,
        String::from_utf8_lossy(s.payload.as_bytes()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_in_two_units() {
        let s = Duration::from_secs;
        assert_eq!(duration(Duration::from_millis(350)), "350ms");
        assert_eq!(duration(Duration::from_millis(12_345)), "12.3s");
        assert_eq!(duration(s(252)), "4m 12s");
        assert_eq!(duration(s(3900)), "1h 5m");
        assert_eq!(duration(s(7 * 86400 + 3 * 3600)), "7d 3h");
        let now = SystemTime::UNIX_EPOCH + s(1000);
        assert_eq!(duration(s(5)), "5s");
        assert_eq!(relative(now + s(5), now), "in 5s");
        assert_eq!(relative(now - Duration::from_millis(5500), now), "5.5s ago");
    }

    #[test]
    fn previews_are_printable_one_liners() {
        assert_eq!(preview(b"a\nb", false, 10), "a\\nb");
        assert_eq!(preview(b"\x00\xffz", false, 10), "\\x00\\xffz");
        assert_eq!(preview("héllo wörld".as_bytes(), false, 5), "héll…");
        // A preview cut inside a character is still text.
        assert_eq!(preview(&"é".as_bytes()[..1], true, 5), "…");
        assert_eq!(preview(b"abc", true, 10), "abc…");
    }

    #[test]
    fn tables_align_and_trim() {
        let mut t = Table::new(["A", "LONG"]);
        t.row(["xyz".into(), "1".into()]);
        assert_eq!(t.render(), "A    LONG\nxyz  1\n");
    }
}
