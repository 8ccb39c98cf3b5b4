//! `list`: one page of the messages in one state (`lua/list.lua`).

use std::time::{Duration, UNIX_EPOCH};

use fred::prelude::Value;

use super::{array, count, id_keys, unexpected, IdKey, Op};
use crate::store::keys::Keys;
use crate::store::scripts::{self, LuaScript};
use crate::store::stored::{decode_stored, HEADER_BYTES};
use crate::{Error, MessageId, MessageInfo, MessageState, Page};

/// At most `limit` messages in `state` from position `offset`, each with
/// the first `preview` bytes of its payload.
pub(crate) struct List {
    pub state: MessageState,
    pub offset: usize,
    pub limit: usize,
    pub preview: usize,
}

impl Op for List {
    type Reply = Page;
    const KEYS: &'static [&'static str] = &["pending", "ready", "unack", "retry", "garbage", "retries", "totals"];

    fn script() -> &'static LuaScript {
        &scripts::LIST
    }

    fn keys(&self, k: &Keys) -> Vec<String> {
        let mut keys = id_keys(k);
        keys.push(k.totals.clone());
        keys
    }

    fn args(&self, k: &Keys) -> Vec<Value> {
        vec![
            (IdKey::of(self.state) as i64).into(),
            count(self.offset as u64),
            count(self.limit as u64),
            k.msg_prefix.as_str().into(),
            count((self.preview + HEADER_BYTES) as u64),
            k.prio.as_str().into(),
        ]
    }

    fn reply(&self, v: Value) -> Result<Self::Reply, Error> {
        let reply = array::<Self>(v)?;
        let (head, rest) = reply
            .split_at_checked(3)
            .ok_or_else(|| unexpected::<Self>("short reply"))?;
        Ok(Page {
            items: items::<Self>(rest, self.state, self.preview)?,
            total: head[0].as_u64().unwrap_or(0),
            next: head[2].as_i64().and_then(|n| usize::try_from(n).ok()),
            cursor: None,
        })
    }
}

/// The messages of a `list` or `walk` reply: 6 values each (id, score,
/// record, stored value's head, its full length, TTL), payloads cut to
/// `preview` bytes.
pub(super) fn items<O: Op>(values: &[Value], state: MessageState, preview: usize) -> Result<Vec<MessageInfo>, Error> {
    if !values.len().is_multiple_of(6) {
        return Err(unexpected::<O>("malformed reply"));
    }
    let items = values
        .chunks_exact(6)
        .map(|v| {
            let id = MessageId::from(v[0].as_string().unwrap_or_default());
            let values = [v[1].clone(), v[2].clone(), v[3].clone(), v[5].clone()];
            info(id, state, &values, v[4].as_i64().unwrap_or(0), Some(preview))
        })
        .collect();
    Ok(items)
}

/// Builds a [`MessageInfo`] from the script values: score, record, stored
/// value (whole or its head), payload length, TTL. The payload is cut to
/// `preview` bytes when given.
pub(super) fn info(
    id: MessageId,
    state: MessageState,
    v: &[Value],
    stored_len: i64,
    preview: Option<usize>,
) -> MessageInfo {
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
    if let Some(preview) = preview {
        payload.truncate(preview);
    }
    let time = |unit_ms: f64| score.map(|s| UNIX_EPOCH + Duration::from_micros((s * 1000.0 / unit_ms).round() as u64));
    let ttl = v[3].as_i64().unwrap_or(-2);
    MessageInfo {
        id,
        state,
        attempts: count.parse().unwrap_or(0),
        retry_count: stored.as_ref().map(|s| s.retry_count),
        backoff: stored.as_ref().and_then(|s| s.backoff.clone()),
        priority: stored.as_ref().map_or(0, |s| s.priority),
        headers: stored.as_ref().map(|s| s.headers.clone()).unwrap_or_default(),
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
