//! Looking at messages without touching them: [`MessageInfo`], one page of
//! a state ([`DelayQueue::list`]) or one message by id ([`DelayQueue::get`]).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fred::prelude::Value;

use crate::keys::Keys;
use crate::payload::{decode_stored, HEADER_BYTES};
use crate::{scripts, DelayQueue, Error, MessageId, MessageState};

/// Most messages one [`DelayQueue::list`] call returns.
pub const MAX_PAGE: usize = 1000;
/// Payload bytes a listed message shows.
pub const PREVIEW_BYTES: usize = 256;

/// What is known of one message, from [`DelayQueue::list`] or
/// [`DelayQueue::get`]. Times are by Redis's clock.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct MessageInfo {
    /// The message.
    pub id: MessageId,
    /// Where it is.
    pub state: MessageState,
    /// Deliveries so far (a running one included).
    pub attempts: u32,
    /// Retries it was sent with (`None` when its payload is gone).
    pub retry_count: Option<u32>,
    /// Why its last delivery failed: the handler's error, the panic, or
    /// `timeout` (its lease ran out).
    pub last_error: Option<String>,
    /// When it is due (pending only): when it becomes ready, a retry's
    /// backoff included.
    pub due: Option<SystemTime>,
    /// When its send stored it, by Redis's clock (`None` when the payload,
    /// which holds it, is gone).
    pub sent_at: Option<SystemTime>,
    /// When its running delivery's lease runs out (processing only).
    pub lease_until: Option<SystemTime>,
    /// When it died (dead letters only).
    pub dead_since: Option<SystemTime>,
    /// Its payload: whole from `get`, the first [`PREVIEW_BYTES`] from `list`.
    pub payload: Vec<u8>,
    /// The payload's full length in bytes.
    pub payload_len: usize,
    /// How long until its payload is deleted: set for dead letters (their
    /// retention), `None` for a live message (kept until handled) or a
    /// payload that is gone.
    pub expires_in: Option<Duration>,
    /// When it expires undelivered: due time + its `expire_after`, by
    /// Redis's clock (`None`: never, or the payload is gone).
    pub expires_at: Option<SystemTime>,
}

impl MessageInfo {
    /// Deliveries left, counting none for a running delivery: `None` when
    /// the payload (which holds the retry count) is gone.
    pub fn retries_left(&self) -> Option<u32> {
        self.retry_count.map(|n| (n + 1).saturating_sub(self.attempts))
    }
}

/// One page of [`DelayQueue::list`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Page {
    /// The messages, in the state's order: by due time, lease deadline or
    /// time of death for pending, processing and dead; by position for the
    /// ready and retry lists.
    pub items: Vec<MessageInfo>,
    /// Entries in the state (list entries of cancelled messages included).
    pub total: u64,
    /// The offset of the next page; `None` on the last page.
    pub next: Option<usize>,
}

/// The number `list`, `get` and `scan` use for a state: its position in
/// `Keys::for_inspect`, counted from 1.
fn state_number(state: MessageState) -> i64 {
    match state {
        MessageState::Pending => 1,
        MessageState::Ready => 2,
        MessageState::Processing => 3,
        MessageState::Retry => 4,
        MessageState::Dead => 5,
    }
}

fn state_of(n: i64) -> Option<MessageState> {
    [
        MessageState::Pending,
        MessageState::Ready,
        MessageState::Processing,
        MessageState::Retry,
        MessageState::Dead,
    ]
    .get(usize::try_from(n).ok()?.checked_sub(1)?)
    .copied()
}

fn bad(script: &'static str, detail: impl Into<String>) -> Error {
    Error::UnexpectedReply {
        script,
        detail: detail.into(),
    }
}

/// Builds a [`MessageInfo`] from the script values: score, record, stored
/// value (whole or its head), payload length, TTL. `full` says whether the
/// value is whole.
fn info(id: MessageId, state: MessageState, v: &[Value], stored_len: i64, full: bool) -> MessageInfo {
    let score = v[0].as_str().and_then(|s| s.parse::<f64>().ok());
    let record = v[1].as_string().unwrap_or_default();
    let (count, reason) = match record.split_once(':') {
        Some((count, reason)) => (count, Some(reason.to_string())),
        None => (record.as_str(), None),
    };
    let value = v[2].as_bytes().unwrap_or_default();
    let stored = decode_stored(value);
    let header = value.len() - stored.as_ref().map_or(value.len(), |s| s.payload.len());
    let mut payload = stored.as_ref().map(|s| s.payload.to_vec()).unwrap_or_default();
    if !full {
        payload.truncate(PREVIEW_BYTES);
    }
    let time = |unit_ms: f64| score.map(|s| UNIX_EPOCH + Duration::from_micros((s * 1000.0 / unit_ms).round() as u64));
    let ttl = v[3].as_i64().unwrap_or(-2);
    MessageInfo {
        id,
        state,
        attempts: count.parse().unwrap_or(0),
        retry_count: stored.as_ref().map(|s| s.retry_count),
        last_error: reason,
        due: (state == MessageState::Pending).then(|| time(1.0)).flatten(),
        lease_until: (state == MessageState::Processing).then(|| time(1000.0)).flatten(),
        dead_since: (state == MessageState::Dead).then(|| time(1.0)).flatten(),
        sent_at: stored
            .as_ref()
            .and_then(|s| s.times)
            .map(|t| UNIX_EPOCH + Duration::from_millis(t.sent_at_ms)),
        payload,
        payload_len: usize::try_from(stored_len).unwrap_or(0).saturating_sub(header),
        expires_in: u64::try_from(ttl).ok().map(Duration::from_millis),
        expires_at: stored
            .as_ref()
            .and_then(|s| s.expires_at_ms)
            .map(|ms| UNIX_EPOCH + Duration::from_millis(ms)),
    }
}

pub(crate) async fn list(queue: &DelayQueue, state: MessageState, offset: usize, limit: usize) -> Result<Page, Error> {
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(Error::InvalidArgument(format!("limit must be 1 to {MAX_PAGE}")));
    }
    let shards = &queue.inner.shards;
    if let [k] = &shards[..] {
        return list_shard(queue, k, state, offset, limit).await;
    }
    // Shard after shard: positions offset.. of the shards laid end to end.
    let sizes = queue
        .each_shard(|k| async move { Ok::<_, Error>(queue.shard_status(k).await?.counts.of(state)) })
        .await?;
    let mut page = Page {
        total: sizes.iter().sum(),
        ..Page::default()
    };
    let mut start = 0;
    for (k, size) in shards.iter().zip(sizes) {
        let size = position(size);
        if offset >= start + size {
            start += size;
            continue;
        }
        let left = limit - page.items.len();
        if left == 0 {
            page.next = Some(offset.max(start));
            break;
        }
        let part = list_shard(queue, k, state, offset.saturating_sub(start), left).await?;
        page.items.extend(part.items);
        if let Some(next) = part.next {
            page.next = Some(start + next);
            break;
        }
        start += position(part.total);
    }
    Ok(page)
}

/// A count of entries as a position in a page walk (saturating on a
/// 32-bit target, where no page walk gets that far).
fn position(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

/// One page of one shard.
async fn list_shard(
    queue: &DelayQueue,
    k: &Keys,
    state: MessageState,
    offset: usize,
    limit: usize,
) -> Result<Page, Error> {
    let args: Vec<Value> = vec![
        state_number(state).into(),
        (i64::try_from(offset).unwrap_or(i64::MAX)).into(),
        (limit as i64).into(),
        k.msg_prefix.as_str().into(),
        ((PREVIEW_BYTES + HEADER_BYTES) as i64).into(),
    ];
    let reply: Vec<Value> = queue.call(&scripts::LIST, k.for_inspect(), args).await?;
    let (head, rest) = reply.split_at_checked(3).ok_or_else(|| bad("list", "short reply"))?;
    if rest.len() % 6 != 0 {
        return Err(bad("list", "malformed reply"));
    }
    let items = rest
        .chunks_exact(6)
        .map(|v| {
            let id = MessageId::from(v[0].as_string().unwrap_or_default());
            let values = [v[1].clone(), v[2].clone(), v[3].clone(), v[5].clone()];
            info(id, state, &values, v[4].as_i64().unwrap_or(0), false)
        })
        .collect();
    Ok(Page {
        items,
        total: head[0].as_u64().unwrap_or(0),
        next: head[2].as_i64().and_then(|n| usize::try_from(n).ok()),
    })
}

pub(crate) async fn get(queue: &DelayQueue, id: &str) -> Result<Option<MessageInfo>, Error> {
    MessageId::check(id)?;
    let k = queue.shard_of(id);
    let reply: Vec<Value> = queue.call(&scripts::GET, k.for_get(id), vec![id.into()]).await?;
    if reply.len() != 6 {
        return Err(bad("get", format!("{} values", reply.len())));
    }
    let Some(state) = reply[0].as_i64().and_then(state_of) else {
        return Ok(None);
    };
    let len = reply[3].as_bytes().map_or(0, <[u8]>::len) as i64;
    let values = [reply[1].clone(), reply[2].clone(), reply[3].clone(), reply[4].clone()];
    Ok(Some(info(MessageId::from(id), state, &values, len, true)))
}
