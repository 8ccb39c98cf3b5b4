//! The JSON the API speaks (docs/web.md lists it): queues, messages,
//! groups and schedules here; the bodies of actions and of the producer
//! API in `bodies.rs`; flows in `flows.rs`. Times are ms since the Unix
//! epoch; ages and delays are ms.

pub(crate) mod bodies;
pub(crate) mod flows;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use serde::Serialize;

use super::sampler::Rates;
use crate::{Counts, GroupInfo, GroupPage, MessageInfo, QueueStatus, RateLimit, ScheduleInfo, Totals};

/// ms since the Unix epoch.
pub(crate) fn epoch_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

pub(crate) fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[derive(Debug, Serialize)]
pub(crate) struct CountsJson {
    pending: u64,
    ready: u64,
    processing: u64,
    retry: u64,
    dead: u64,
}

impl From<Counts> for CountsJson {
    fn from(c: Counts) -> Self {
        CountsJson {
            pending: c.pending,
            ready: c.ready,
            processing: c.processing,
            retry: c.retry,
            dead: c.dead,
        }
    }
}

#[derive(Debug, Serialize)]
pub(crate) struct TotalsJson {
    sent: u64,
    acked: u64,
    failed: u64,
    dead: u64,
    expired: u64,
    aborted: u64,
}

impl From<Totals> for TotalsJson {
    fn from(t: Totals) -> Self {
        TotalsJson {
            sent: t.sent,
            acked: t.acked,
            failed: t.failed,
            dead: t.dead,
            expired: t.expired,
            aborted: t.aborted,
        }
    }
}

#[derive(Debug, Serialize)]
pub(crate) struct RatesJson {
    sent: f64,
    acked: f64,
    failed: f64,
    dead: f64,
}

impl From<Rates> for RatesJson {
    fn from(r: Rates) -> Self {
        RatesJson {
            sent: r.sent,
            acked: r.acked,
            failed: r.failed,
            dead: r.dead,
        }
    }
}

/// What a status says, as the fields of a queue or of one shard.
#[derive(Debug, Serialize)]
pub(crate) struct StatusJson {
    paused: bool,
    counts: CountsJson,
    latency_ms: Option<u64>,
    next_due_ms: Option<u64>,
    oldest_dead_ms: Option<u64>,
    totals: TotalsJson,
}

impl From<&QueueStatus> for StatusJson {
    fn from(s: &QueueStatus) -> Self {
        StatusJson {
            paused: s.paused,
            counts: s.counts.into(),
            latency_ms: s.latency.map(ms),
            next_due_ms: s.next_due.map(ms),
            oldest_dead_ms: s.oldest_dead.map(ms),
            totals: s.totals.into(),
        }
    }
}

/// One shard of `GET /api/queues/{name}?shards=1`.
#[derive(Debug, Serialize)]
pub(crate) struct ShardJson {
    pub shard: usize,
    #[serde(flatten)]
    pub status: StatusJson,
}

/// A queue, in the overview and `GET /api/queues/{name}`.
#[derive(Debug, Serialize)]
pub(crate) struct QueueJson {
    pub name: String,
    pub shards: usize,
    #[serde(flatten)]
    pub status: StatusJson,
    pub rates: RatesJson,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shard_status: Option<Vec<ShardJson>>,
}

/// `GET /api/overview`: the session's fields, then one page of the queues.
#[derive(Debug, Serialize)]
pub(crate) struct OverviewJson {
    pub read_only: bool,
    pub csrf: String,
    pub user: Option<String>,
    pub now_ms: u64,
    /// Queues that match the search (all pages).
    pub total: usize,
    /// Messages in them: the page's as read now, the others' by the listing.
    pub messages: u64,
    /// Age of the listing the page was sorted from.
    pub listed_ms_ago: u64,
    pub search: String,
    pub sort: &'static str,
    pub order: &'static str,
    pub offset: usize,
    pub limit: usize,
    pub queues: Vec<QueueJson>,
}

/// One point of `GET /api/queues/{name}/history`.
#[derive(Debug, Serialize)]
pub(crate) struct PointJson {
    pub t_ms: u64,
    #[serde(flatten)]
    pub rates: RatesJson,
}

/// `GET /api/queues/{name}/history`.
#[derive(Debug, Serialize)]
pub(crate) struct HistoryJson {
    pub step_ms: u64,
    pub points: Vec<PointJson>,
}

/// A message: whole from `GET .../messages/{id}`, with a preview of its
/// payload in lists and search results.
#[derive(Debug, Serialize)]
pub(crate) struct MessageJson {
    id: String,
    state: &'static str,
    attempts: u32,
    /// Deliveries deferred by an uncounted `RetryAfter`, not in `attempts`.
    deferrals: u32,
    retry_count: Option<u32>,
    deliveries_left: Option<u32>,
    /// The message's own backoff, for people; `None`: the consumer's default.
    backoff: Option<String>,
    /// 0 (default, lowest) to 9.
    priority: u8,
    /// Its group (docs/groups.md), if any.
    group: Option<String>,
    /// Header names and values, by name.
    headers: std::collections::BTreeMap<String, String>,
    last_error: Option<String>,
    due_ms: Option<u64>,
    /// When its first delivery was due (its send's, or a reschedule's).
    first_due_ms: Option<u64>,
    sent_ms: Option<u64>,
    lease_until_ms: Option<u64>,
    dead_since_ms: Option<u64>,
    expires_at_ms: Option<u64>,
    payload_len: usize,
    /// The payload (or preview) when it is UTF-8.
    payload_text: Option<String>,
    payload_base64: String,
    /// Whether the payload (or preview) parses as JSON.
    payload_json: bool,
    /// The result kept under its id (docs/results.md), from `GET
    /// .../messages/{id}` only, as the next two, and only when there is one.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    result: Option<ResultJson>,
    /// The last progress its handler reported (JSON text).
    #[serde(skip_serializing_if = "Option::is_none")]
    progress: Option<String>,
    /// Its last log lines, oldest first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    log: Vec<String>,
}

/// A handler's result: as text when it is UTF-8, always as base64.
#[derive(Debug, Serialize)]
pub(crate) struct ResultJson {
    result_text: Option<String>,
    result_base64: String,
}

impl ResultJson {
    pub(crate) fn of(bytes: &[u8]) -> Self {
        ResultJson {
            result_text: std::str::from_utf8(bytes).ok().map(str::to_string),
            result_base64: base64::engine::general_purpose::STANDARD.encode(bytes),
        }
    }
}

/// `GET .../messages/{id}` of a message that is no longer stored but
/// whose result is kept: it was acked.
#[derive(Debug, Serialize)]
pub(crate) struct FinishedJson {
    pub id: String,
    /// Always true: acked, and gone but for its result.
    pub finished: bool,
    #[serde(flatten)]
    pub result: ResultJson,
}

/// `GET .../messages/{id}`: the message, or its result once it finished.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub(crate) enum OneJson {
    Stored(Box<MessageJson>),
    Finished(FinishedJson),
}

impl From<&MessageInfo> for MessageJson {
    fn from(m: &MessageInfo) -> Self {
        let text = std::str::from_utf8(&m.payload).ok();
        MessageJson {
            id: m.id.to_string(),
            state: m.state.as_str(),
            attempts: m.attempts,
            deferrals: m.deferrals,
            retry_count: m.retry_count,
            deliveries_left: m.deliveries_left(),
            backoff: m.backoff.as_ref().map(ToString::to_string),
            priority: m.priority,
            group: m.group.clone(),
            headers: m.headers.iter().cloned().collect(),
            last_error: m.last_error.clone(),
            due_ms: m.due.map(epoch_ms),
            first_due_ms: m.first_due.map(epoch_ms),
            sent_ms: m.sent_at.map(epoch_ms),
            lease_until_ms: m.lease_until.map(epoch_ms),
            dead_since_ms: m.dead_since.map(epoch_ms),
            expires_at_ms: m.expires_at.map(epoch_ms),
            payload_len: m.payload_len,
            payload_json: serde_json::from_slice::<serde::de::IgnoredAny>(&m.payload).is_ok(),
            payload_text: text.map(str::to_string),
            payload_base64: base64::engine::general_purpose::STANDARD.encode(&m.payload),
            result: m.result.as_deref().map(ResultJson::of),
            progress: m.progress.clone(),
            log: m.log.clone(),
        }
    }
}

/// `GET .../messages`.
#[derive(Debug, Serialize)]
pub(crate) struct PageJson {
    pub state: &'static str,
    pub total: u64,
    pub items: Vec<MessageJson>,
    pub next: Option<String>,
}

/// `GET .../search`.
#[derive(Debug, Serialize)]
pub(crate) struct FoundJson {
    pub items: Vec<MessageJson>,
    pub scanned: u64,
    pub next: Option<String>,
    pub id_match: bool,
}

/// A rate limit: `limit` starts per `per_ms`.
#[derive(Debug, Serialize)]
pub(crate) struct RateJson {
    limit: u64,
    per_ms: u64,
}

impl From<RateLimit> for RateJson {
    fn from(r: RateLimit) -> Self {
        RateJson {
            limit: r.limit,
            per_ms: ms(r.per),
        }
    }
}

/// One group of `GET .../groups`; `None` limits: the page's defaults.
#[derive(Debug, Serialize)]
pub(crate) struct GroupJson {
    name: String,
    ready: u64,
    processing: u64,
    paused: bool,
    concurrency: Option<u64>,
    rate: Option<RateJson>,
    waiting_until_ms: Option<u64>,
}

impl From<&GroupInfo> for GroupJson {
    fn from(g: &GroupInfo) -> Self {
        GroupJson {
            name: g.name.clone(),
            ready: g.ready,
            processing: g.processing,
            paused: g.paused,
            concurrency: g.concurrency,
            rate: g.rate.map(Into::into),
            waiting_until_ms: g.waiting_until.map(epoch_ms),
        }
    }
}

/// `GET .../groups`: one page of the groups, in name order.
#[derive(Debug, Serialize)]
pub(crate) struct GroupsJson {
    total: u64,
    offset: u64,
    limit: usize,
    default_concurrency: Option<u64>,
    default_rate: Option<RateJson>,
    items: Vec<GroupJson>,
}

impl GroupsJson {
    pub(crate) fn new(page: &GroupPage, offset: u64, limit: usize) -> Self {
        GroupsJson {
            total: page.total,
            offset,
            limit,
            default_concurrency: page.default_concurrency,
            default_rate: page.default_rate.map(Into::into),
            items: page.items.iter().map(Into::into).collect(),
        }
    }
}

/// `GET .../groups/{group}`: one group, with the queue's defaults.
#[derive(Debug, Serialize)]
pub(crate) struct OneGroupJson {
    #[serde(flatten)]
    group: GroupJson,
    default_concurrency: Option<u64>,
    default_rate: Option<RateJson>,
}

impl OneGroupJson {
    pub(crate) fn new(g: &GroupInfo, defaults: &GroupPage) -> Self {
        OneGroupJson {
            group: g.into(),
            default_concurrency: defaults.default_concurrency,
            default_rate: defaults.default_rate.map(Into::into),
        }
    }
}

/// One schedule of a queue, as `GET /api/queues/{name}/schedules` lists it.
#[derive(Debug, Serialize)]
pub(crate) struct ScheduleJson {
    name: String,
    spec: String,
    timezone: String,
    paused: bool,
    next_fire_ms: Option<u64>,
    last_fire_ms: Option<u64>,
    fired: u64,
    misfire: &'static str,
    misfire_grace_ms: u64,
    retry_count: u32,
    payload_len: usize,
}

impl From<&ScheduleInfo> for ScheduleJson {
    fn from(s: &ScheduleInfo) -> Self {
        ScheduleJson {
            name: s.name.clone(),
            spec: s.spec.clone(),
            timezone: s.timezone.clone(),
            paused: s.paused,
            next_fire_ms: s.next_fire.map(epoch_ms),
            last_fire_ms: s.last_fire.map(epoch_ms),
            fired: s.fired,
            misfire: s.misfire.as_str(),
            misfire_grace_ms: ms(s.misfire_grace),
            retry_count: s.retry_count,
            payload_len: s.payload.len(),
        }
    }
}

/// `GET /api/queues/{name}/schedules`.
#[derive(Debug, Serialize)]
pub(crate) struct SchedulesJson {
    pub now_ms: u64,
    pub items: Vec<ScheduleJson>,
}
