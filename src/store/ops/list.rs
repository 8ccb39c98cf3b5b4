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
    const KEYS: &'static [&'static str] = &["pending", "ready", "processing", "retry", "dead", "attempts", "totals"];

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
            k.group_prefix.as_str().into(),
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
    let record = Record::parse(&v[1].as_string().unwrap_or_default());
    let value = v[2].as_bytes().unwrap_or_default();
    let stored = decode_stored(value);
    let header = value.len() - stored.as_ref().map_or(value.len(), |s| s.payload.len());
    let mut payload = stored.as_ref().map(|s| s.payload.to_vec()).unwrap_or_default();
    if let Some(preview) = preview {
        payload.truncate(preview);
    }
    let time = |unit_ms: f64| score.map(|s| UNIX_EPOCH + Duration::from_micros((s * 1000.0 / unit_ms).round() as u64));
    let ttl = v[3].as_i64().unwrap_or(-2);
    let ms_time = |ms: u64| UNIX_EPOCH + Duration::from_millis(ms);
    let first_due_ms = stored.as_ref().and_then(|s| s.times).map(|t| t.due_at_ms);
    MessageInfo {
        id,
        state,
        attempts: record.deliveries,
        deferrals: record.deferrals,
        retry_count: stored.as_ref().map(|s| s.retry_count),
        backoff: stored.as_ref().and_then(|s| s.backoff.clone()),
        priority: stored.as_ref().map_or(0, |s| s.priority),
        group: stored.as_ref().and_then(|s| s.group.clone()),
        headers: stored.as_ref().map(|s| s.headers.clone()).unwrap_or_default(),
        last_error: record.reason,
        due: match state {
            MessageState::Pending => time(1.0),
            MessageState::Dead => None,
            _ => record.due_ms.or(first_due_ms).map(ms_time),
        },
        first_due: first_due_ms.map(ms_time),
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
        result: None,
        progress: None,
        log: Vec::new(),
    }
}

/// An attempt record, `<deliveries>[@<due ms>][~<deferrals>][:<reason>]`
/// (docs/wire-format.md); a malformed one reads as no delivery.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Record {
    pub deliveries: u32,
    /// The due time of the next (or running) delivery, when it is not the send's.
    pub due_ms: Option<u64>,
    pub deferrals: u32,
    pub reason: Option<String>,
}

impl Record {
    pub(crate) fn parse(record: &str) -> Record {
        let (head, reason) = match record.split_once(':') {
            Some((head, reason)) => (head, Some(reason.to_string())),
            None => (record, None),
        };
        let (head, deferrals) = match head.split_once('~') {
            Some((head, n)) => (head, n.parse().ok()),
            None => (head, Some(0)),
        };
        let (deliveries, due_ms) = match head.split_once('@') {
            Some((n, due)) => (n, due.parse().ok().map(Some)),
            None => (head, Some(None)),
        };
        match (deliveries.parse(), due_ms, deferrals) {
            (Ok(deliveries), Some(due_ms), Some(deferrals)) => Record {
                deliveries,
                due_ms,
                deferrals,
                reason,
            },
            _ => Record {
                reason,
                ..Record::default()
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Record;

    #[test]
    fn a_retry_record_decodes_with_and_without_its_optional_parts() {
        let r = |deliveries, due_ms, deferrals, reason: Option<&str>| Record {
            deliveries,
            due_ms,
            deferrals,
            reason: reason.map(String::from),
        };
        // As the scripts before due times and deferrals wrote them.
        assert_eq!(Record::parse("2"), r(2, None, 0, None));
        assert_eq!(Record::parse("3:HTTP 503: a:b"), r(3, None, 0, Some("HTTP 503: a:b")));
        assert_eq!(Record::parse("1@1700000000123"), r(1, Some(1700000000123), 0, None));
        assert_eq!(Record::parse("0~2:429"), r(0, None, 2, Some("429")));
        assert_eq!(Record::parse("4@17~1:x~@y"), r(4, Some(17), 1, Some("x~@y")));
        assert_eq!(Record::parse("x@1"), r(0, None, 0, None));
        assert_eq!(Record::parse(""), r(0, None, 0, None));
    }
}
