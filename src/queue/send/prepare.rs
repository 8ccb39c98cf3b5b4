//! Preparing a send: each message checked against the queue's limits and
//! encoded as send.lua stores it, before anything is written.

use std::time::Duration;

use super::builder::{Dedup, Due, NewMessage};
use super::ids::{generate_for, group_shard};
use crate::maxima::{
    check_group, header_name_char, MAX_DELAY, MAX_HEADERS, MAX_HEADERS_BYTES, MAX_HEADER_NAME_LEN, MAX_PRIORITY,
    MAX_RETRY_COUNT, MAX_WINDOW,
};
use crate::queue::builder::check_expire_after;
use crate::queue::flows::links::Deps;
use crate::queue::{delay_until, shard_of, Config};
use crate::store::ops::send::{Outgoing, SendMode};
use crate::store::stored::{encode_staged, encode_stored, ValueParts, STAGE_BYTES};
use crate::{DelayQueue, Error, MessageId};

/// A message checked and encoded, with the children it waits for.
pub(crate) struct Prepared {
    pub msg: Outgoing,
    pub deps: Option<Deps>,
}

/// Checks and encodes every message of a send, resolving the children each
/// waits for: one invalid message fails the whole send before anything is
/// written.
pub(crate) fn prepare_all<Q>(
    queue: &DelayQueue,
    msgs: impl IntoIterator<Item = NewMessage<Q>>,
) -> Result<Vec<Prepared>, Error> {
    msgs.into_iter()
        .map(|mut m| {
            let deps = match m.deps.take() {
                Some(deps) => Some(deps),
                None if m.after.is_empty() => None,
                None => Some(Deps::new(queue, &m.after, m.policy)?),
            };
            let msg = m.prepare(&queue.inner.config, queue.shards(), deps.is_some())?;
            Ok(Prepared { msg, deps })
        })
        .collect()
}

impl<Q> NewMessage<Q> {
    /// Checks the message against the queue's limits and encodes it, for a
    /// queue of `shards` shards; `wait`: it is stored waiting for children.
    pub(super) fn prepare(self, config: &Config, shards: usize, wait: bool) -> Result<Outgoing, Error> {
        let own_id = self.own_id();
        if wait && self.dedup.is_some() {
            return Err(Error::InvalidFlow {
                reason: "a message that waits for others cannot be sent with unique_for, throttle, debounce or replace"
                    .into(),
            });
        }
        let payload = self.payload?;
        if payload.len() > config.max_payload_size {
            return Err(Error::PayloadTooLarge {
                size: payload.len(),
                max: config.max_payload_size,
            });
        }
        let delay = checked_delay(self.due)?;
        let retry_count = self.retry_count.unwrap_or(config.consume.default_retry_count);
        check_numbers(retry_count, self.priority)?;
        let headers = with_trace_context(self.headers);
        check_headers(&headers)?;
        if let Some(group) = &self.group {
            check_group(group)?;
        }
        let expire_after = self.expire_after.or(config.expire_after);
        if let Some(d) = expire_after {
            check_expire_after(d)?;
        }
        let id = choose_id(self.id, self.group.as_deref(), shards)?;
        let mode = self.dedup.map(|d| send_mode(d, own_id, self.due_given)).transpose()?;
        let backoff = match &self.backoff {
            Some(b) => {
                b.validate()?;
                Some(b.encode()?)
            }
            None => None,
        };
        let parts = ValueParts {
            retry_count,
            backoff: backoff.as_deref(),
            priority: self.priority,
            group: self.group.as_deref(),
            headers: &headers,
            payload: payload.as_bytes(),
        };
        // A big payload stays out of Lua: its value is SET at a staging
        // string and renamed by the script (lua/send.lua).
        let staged = payload.len() > STAGE_BYTES;
        let value = match staged {
            true => encode_staged(
                &parts,
                u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                expire_after.is_some(),
            ),
            false => encode_stored(&parts),
        };
        Ok(Outgoing {
            id,
            value: value.into(),
            delay,
            expire_after,
            own_id,
            stage: staged.then(|| MessageId::generate().as_str().to_string()),
            mode,
            wait,
        })
    }
}

/// The delay `due` stands for, at most [`MAX_DELAY`].
fn checked_delay(due: Due) -> Result<Duration, Error> {
    let delay = match due {
        Due::In(d) => d,
        Due::At(t) => delay_until(t),
    };
    if delay > MAX_DELAY {
        return Err(Error::InvalidArgument(format!(
            "delay {delay:?} is longer than MAX_DELAY"
        )));
    }
    Ok(delay)
}

/// Checks the retry count and the priority against their maxima.
fn check_numbers(retry_count: u32, priority: u8) -> Result<(), Error> {
    if retry_count > MAX_RETRY_COUNT {
        return Err(Error::InvalidArgument(format!(
            "retry_count must be at most {MAX_RETRY_COUNT}"
        )));
    }
    if priority > MAX_PRIORITY {
        return Err(Error::InvalidArgument(format!(
            "priority {priority} is above MAX_PRIORITY ({MAX_PRIORITY})"
        )));
    }
    Ok(())
}

/// The caller's headers with, under the feature `otel`, the trace context
/// added: it is checked with them.
#[cfg_attr(not(feature = "otel"), allow(unused_mut))]
fn with_trace_context(mut headers: Vec<(String, String)>) -> Vec<(String, String)> {
    #[cfg(feature = "otel")]
    crate::otel::inject(&mut headers);
    headers
}

/// The message's id: the one it has, else one generated now. A group
/// lives in one shard, so its limits are exact: with shards, a grouped
/// message's id must hash to its group's shard, since every call that
/// takes an id finds the shard from it.
fn choose_id(id: Option<MessageId>, group: Option<&str>, shards: usize) -> Result<MessageId, Error> {
    let Some(id) = id else {
        return Ok(generate_for(group, shards));
    };
    id.validate()?;
    if let Some(shard) = group_shard(group, shards).filter(|&s| s != shard_of(id.as_str(), shards)) {
        return Err(Error::InvalidGroup {
            group: group.unwrap_or_default().to_string(),
            reason: format!(
                "with shards, a message of this group needs an id of its shard ({shard}): \
                 leave the id to be generated"
            ),
        });
    }
    Ok(id)
}

impl NewMessage {
    /// Fails as its send would on a dedup mode it cannot have (one needs
    /// an id the caller chose, and a window in range): checked for every
    /// message of a flow before the flow writes anything.
    pub(crate) fn check_dedup(&self) -> Result<(), Error> {
        self.dedup
            .map_or(Ok(()), |d| send_mode(d, self.own_id(), self.due_given).map(drop))
    }
}

/// The script's mode for `dedup`, after checking its window; `own_id`: the
/// message has a caller-chosen id, which every mode needs; `due_given`: a
/// replace moves the due time.
fn send_mode(dedup: Dedup, own_id: bool, due_given: bool) -> Result<SendMode, Error> {
    let (name, window) = match dedup {
        Dedup::Unique(d) => ("unique_for", Some(d)),
        Dedup::Throttle(d) => ("throttle", Some(d)),
        Dedup::Debounce(d) => ("debounce", Some(d)),
        Dedup::Replace => ("replace", None),
    };
    if !own_id {
        return Err(Error::InvalidArgument(format!("{name} needs an id (.id(..))")));
    }
    if let Some(d) = window {
        if d.as_millis() == 0 || d > MAX_WINDOW {
            return Err(Error::InvalidArgument(format!(
                "{name} window {d:?} must be 1 ms to MAX_WINDOW ({MAX_WINDOW:?})"
            )));
        }
    }
    Ok(match dedup {
        Dedup::Unique(d) => SendMode::Unique(d),
        Dedup::Throttle(d) => SendMode::Throttle(d),
        Dedup::Debounce(_) => SendMode::Debounce,
        Dedup::Replace => SendMode::Replace { move_due: due_given },
    })
}

/// Checks headers against the limits on their names, count and size.
fn check_headers(headers: &[(String, String)]) -> Result<(), Error> {
    let invalid = |name: &str, reason: String| Error::InvalidHeader {
        name: name.to_string(),
        reason,
    };
    if headers.len() > MAX_HEADERS {
        let name = &headers[MAX_HEADERS].0;
        return Err(invalid(name, format!("more than MAX_HEADERS ({MAX_HEADERS}) headers")));
    }
    let mut bytes = 0;
    for (name, value) in headers {
        if name.is_empty() || name.len() > MAX_HEADER_NAME_LEN {
            return Err(invalid(
                name,
                format!("a name is 1 to MAX_HEADER_NAME_LEN ({MAX_HEADER_NAME_LEN}) bytes"),
            ));
        }
        if let Some(c) = name.chars().find(|&c| !header_name_char(c)) {
            return Err(invalid(
                name,
                format!("{c:?} in a name (ASCII letters, digits, '-', '_' and '.' only)"),
            ));
        }
        bytes += name.len() + value.len();
        if bytes > MAX_HEADERS_BYTES {
            return Err(invalid(
                name,
                format!("names and values exceed MAX_HEADERS_BYTES ({MAX_HEADERS_BYTES}) bytes"),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use serde_json::Value;

    use super::*;
    use crate::validation_cases::{assert_rust_agrees, text};

    /// The message a case of the table describes; `None` when Rust cannot
    /// represent it (a negative or fractional number, a lone surrogate).
    fn message(v: &Value) -> Option<NewMessage> {
        let mut m = NewMessage::new(v.get("payload").map_or(Some(String::new()), text)?);
        if let Some(id) = v.get("id") {
            m = m.id(text(id)?);
        }
        if let Some(ms) = v.get("delay_ms") {
            m = m.delay(Duration::from_millis(ms.as_u64()?));
        }
        if let Some(ms) = v.get("at_ms_from_now") {
            let ms = ms.as_i64()?;
            let span = Duration::from_millis(ms.unsigned_abs());
            let now = SystemTime::now();
            m = m.at(if ms < 0 { now - span } else { now + span });
        }
        if let Some(n) = v.get("retry_count") {
            m = m.retry_count(u32::try_from(n.as_u64()?).ok()?);
        }
        if let Some(p) = v.get("priority") {
            m = m.priority(u8::try_from(p.as_u64()?).ok()?);
        }
        if let Some(g) = v.get("group") {
            m = m.group(text(g)?);
        }
        for pair in v.get("headers").and_then(Value::as_array).into_iter().flatten() {
            m = m.header(text(&pair[0])?, text(&pair[1])?);
        }
        Some(m)
    }

    #[test]
    fn messages_are_judged_as_the_shared_table_says() {
        assert_rust_agrees("messages", |v| {
            Some(message(v)?.prepare(&Config::default(), 1, false).map(drop))
        });
    }
}
