//! The value stored per message: a short header, then the payload.

use crate::message::SendTimes;
use crate::{Backoff, MAX_PRIORITY};

/// The wire format version this crate reads and writes
/// (docs/wire-format.md): passed to the scripts that store or deliver
/// messages, which refuse a queue whose totals hash names another and write
/// it to a queue that names none. Raise it with any change a client of the
/// previous version would misread.
pub(crate) const FORMAT_VERSION: u32 = 1;

/// Longest header of a stored value ("<retry count>;<backoff>!<priority>=<group>#<headers
/// bytes>/<sent at>+<delay>@<expires at>:"), `HEADER_BYTES` in lua/include/header.lua too:
/// 104 bytes without the group, and "=" and [`MAX_GROUP_LEN`](crate::MAX_GROUP_LEN)
/// bytes. The headers themselves follow the ':', so this holds with any headers.
pub(crate) const HEADER_BYTES: usize = 169;

/// What a message's stored value is made of, before the send script adds
/// its times. `..Default::default()` leaves out what a message does not
/// have: no backoff of its own, priority 0, no headers.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct ValueParts<'a> {
    pub retry_count: u32,
    /// An encoded [`Backoff`] of the message's own.
    pub backoff: Option<&'a str>,
    pub priority: u8,
    /// Its group (docs/groups.md), checked already.
    pub group: Option<&'a str>,
    pub headers: &'a [(String, String)],
    pub payload: &'a [u8],
}

impl<'a> ValueParts<'a> {
    /// A message with neither a backoff of its own, a priority nor headers.
    pub(crate) fn new(retry_count: u32, payload: &'a [u8]) -> Self {
        ValueParts {
            retry_count,
            payload,
            ..Default::default()
        }
    }
}

/// How a message is stored in Redis: `"<retry count>:"`, or
/// `"<retry count>;<backoff>:"` when it has a backoff of its own, then the
/// payload's bytes. Keeping these here rather than in the attempts hash saves
/// a hash entry per pending message (see `lua/send.lua`). The send script
/// adds, from Redis's clock, `"/<sent at ms>+<delay ms>"` (when it stored
/// the message, and how long after that it is due; reschedule rewrites the
/// delay) and, for a message sent with an expiry, `"@<expires at ms>"`,
/// before the `':'`. Backoffs encode to digits, letters and `','` only, so
/// none of `'!'`, `'/'`, `'@'` and `':'` can occur before it.
///
/// The priority is `"!<priority>"` after the backoff, written only when it
/// is not the default 0 (so a value without it has priority 0). The group,
/// when there is one, is `"=<group>"` after it (group names hold none of
/// the header's marks). Headers,
/// when there are any, are a section right after the `':'`, before the
/// payload, and `"#<section bytes>"` after the priority says how long it
/// is: the header before the `':'` stays within [`HEADER_BYTES`] however
/// many headers there are, and a message without headers is stored as if
/// headers did not exist. The section is `"<name>=<value bytes>:<value>"`
/// per header; names hold no `'='` (see [`crate::NewMessage::header`]).
pub(crate) fn encode_stored(parts: &ValueParts) -> Vec<u8> {
    encode(parts, None)
}

/// Payloads longer than this are staged ([`encode_staged`]): `BIG_VALUE`
/// in lua/include/header.lua, the size past which a value is big.
pub(crate) const STAGE_BYTES: usize = 4096;

/// The send times as the send script finds them in a staged value: 13
/// zeros it writes each time over.
const PLACEHOLDER: &str = "0000000000000";

/// [`encode_stored`] for a staged send (lua/send.lua): the value the
/// producer SETs at a staging key before the script renames it to the
/// message's key, with the send times already in the header as
/// placeholders, `"/<13 zeros>+<delay ms, 12 digits>"` and, when the message
/// `expires`, `"@<13 zeros>"`, which the script overwrites in place. The
/// payload is then never copied through Lua.
pub(crate) fn encode_staged(parts: &ValueParts, delay_ms: u64, expires: bool) -> Vec<u8> {
    encode(parts, Some((delay_ms, expires)))
}

fn encode(parts: &ValueParts, staged: Option<(u64, bool)>) -> Vec<u8> {
    let ValueParts {
        retry_count,
        backoff,
        priority,
        group,
        headers,
        payload,
    } = *parts;
    let section: Vec<u8> = headers
        .iter()
        .flat_map(|(name, value)| {
            [
                name.as_bytes(),
                b"=",
                value.len().to_string().as_bytes(),
                b":",
                value.as_bytes(),
            ]
            .concat()
        })
        .collect();
    let mut value = Vec::with_capacity(payload.len() + section.len() + 48 + backoff.map_or(0, |b| b.len() + 1));
    value.extend_from_slice(retry_count.to_string().as_bytes());
    if let Some(backoff) = backoff {
        value.push(b';');
        value.extend_from_slice(backoff.as_bytes());
    }
    if priority > 0 {
        value.push(b'!');
        value.extend_from_slice(priority.to_string().as_bytes());
    }
    if let Some(group) = group {
        value.push(b'=');
        value.extend_from_slice(group.as_bytes());
    }
    if !section.is_empty() {
        value.push(b'#');
        value.extend_from_slice(section.len().to_string().as_bytes());
    }
    if let Some((delay_ms, expires)) = staged {
        // 12 digits hold MAX_DELAY: reschedule rewrites the delay in place.
        value.extend_from_slice(format!("/{PLACEHOLDER}+{delay_ms:012}").as_bytes());
        if expires {
            value.extend_from_slice(format!("@{PLACEHOLDER}").as_bytes());
        }
    }
    value.push(b':');
    value.extend_from_slice(&section);
    value.extend_from_slice(payload);
    value
}

/// The headers of a section (see [`encode_stored`]); `None`
/// when it is not one.
fn decode_headers(mut section: &[u8]) -> Option<Vec<(String, String)>> {
    let mut headers = Vec::new();
    while !section.is_empty() {
        let eq = section.iter().position(|&b| b == b'=')?;
        let colon = eq + section[eq..].iter().position(|&b| b == b':')?;
        let len: usize = std::str::from_utf8(&section[eq + 1..colon]).ok()?.parse().ok()?;
        let end = colon.checked_add(1)?.checked_add(len)?;
        let value = section.get(colon + 1..end)?;
        headers.push((
            String::from_utf8(section[..eq].to_vec()).ok()?,
            String::from_utf8(value.to_vec()).ok()?,
        ));
        section = &section[end..];
    }
    Some(headers)
}

/// A stored value, read.
#[derive(Debug)]
pub(crate) struct Stored<'a> {
    pub(crate) retry_count: u32,
    pub(crate) backoff: Option<Backoff>,
    /// When the send script stored it and when it is due, ms of Redis
    /// time; `None` in a value the send script did not write.
    pub(crate) times: Option<SendTimes>,
    /// The expiry deadline, ms of Redis time; `None`: never expires.
    pub(crate) expires_at_ms: Option<u64>,
    /// 0 (the default) to [`MAX_PRIORITY`].
    pub(crate) priority: u8,
    /// Its group, if it has one.
    pub(crate) group: Option<String>,
    /// Name and value pairs, in the order the send set them.
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) payload: &'a [u8],
}

/// Reads a stored value; `None` when it is not one.
pub(crate) fn decode_stored(value: &[u8]) -> Option<Stored<'_>> {
    let colon = value.iter().position(|&b| b == b':')?;
    let header = std::str::from_utf8(&value[..colon]).ok()?;
    let digits = |s: &str| -> Option<u64> {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        s.parse().ok()
    };
    let (header, expires_at_ms) = match header.split_once('@') {
        Some((header, at)) => (header, Some(digits(at)?)),
        None => (header, None),
    };
    let (header, times) = match header.split_once('/') {
        Some((header, times)) => {
            let (sent, delay) = times.split_once('+')?;
            let sent_at_ms = digits(sent)?;
            let due_at_ms = sent_at_ms.checked_add(digits(delay)?)?;
            (header, Some(SendTimes { sent_at_ms, due_at_ms }))
        }
        None => (header, None),
    };
    let (header, section_len) = match header.split_once('#') {
        Some((header, len)) => (header, usize::try_from(digits(len)?).ok()?),
        None => (header, 0),
    };
    let (header, group) = match header.split_once('=') {
        Some((header, group)) => {
            crate::maxima::check_group(group).ok()?;
            (header, Some(group.to_string()))
        }
        None => (header, None),
    };
    let (header, priority) = match header.split_once('!') {
        Some((header, p)) => match u8::try_from(digits(p)?) {
            Ok(p) if (1..=MAX_PRIORITY).contains(&p) => (header, p),
            _ => return None,
        },
        None => (header, 0),
    };
    let (count, backoff) = match header.split_once(';') {
        Some((count, backoff)) => (count, Some(Backoff::decode(backoff)?)),
        None => (header, None),
    };
    let body = &value[colon + 1..];
    let section = body.get(..section_len)?;
    let headers = decode_headers(section)?;
    Some(Stored {
        retry_count: u32::try_from(digits(count)?).ok()?,
        backoff,
        times,
        expires_at_ms,
        priority,
        group,
        headers,
        payload: &body[section_len..],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_value_round_trips() {
        for payload in [&b""[..], b"x", b"12:34", b"\x00\xff:"] {
            for backoff in [None, Some("f1500"), Some("e1000,60000,250")] {
                let value = encode_stored(&ValueParts {
                    retry_count: 7,
                    backoff,
                    payload,
                    ..Default::default()
                });
                let stored = decode_stored(&value).unwrap();
                assert_eq!((stored.retry_count, stored.payload), (7, payload));
                assert_eq!(stored.backoff.map(|b| b.encode().unwrap()).as_deref(), backoff);
            }
        }
        assert_eq!(encode_stored(&ValueParts::new(3, b"hi")), b"3:hi");
        assert_eq!(
            encode_stored(&ValueParts {
                retry_count: 3,
                backoff: Some("f5"),
                payload: b"hi",
                ..Default::default()
            }),
            b"3;f5:hi"
        );
        // The deadline send.lua adds before the ':'.
        for (value, backoff) in [
            (&b"3@1700000000000:hi"[..], None),
            (b"3;e1,2,3@1700000000000:hi", Some("e1,2,3")),
        ] {
            let stored = decode_stored(value).unwrap();
            assert_eq!(
                (stored.retry_count, stored.expires_at_ms, stored.payload),
                (3, Some(1_700_000_000_000), &b"hi"[..])
            );
            assert_eq!(stored.backoff.map(|b| b.encode().unwrap()).as_deref(), backoff);
        }
        assert_eq!(decode_stored(b"3:hi").unwrap().expires_at_ms, None);
        // The send times send.lua adds before the deadline.
        for value in [
            &b"3/1700000000000+1500@1700000061500:hi"[..],
            b"3;f5/1700000000000+1500:hi",
        ] {
            let stored = decode_stored(value).unwrap();
            let times = SendTimes {
                sent_at_ms: 1_700_000_000_000,
                due_at_ms: 1_700_000_001_500,
            };
            assert_eq!((stored.times, stored.payload), (Some(times), &b"hi"[..]));
        }
        assert_eq!(decode_stored(b"3:hi").unwrap().times, None);
        // The priority, before the send times.
        assert_eq!(
            encode_stored(&ValueParts {
                retry_count: 3,
                backoff: Some("f5"),
                priority: 7,
                payload: b"hi",
                ..Default::default()
            }),
            b"3;f5!7:hi"
        );
        assert_eq!(encode_stored(&ValueParts::new(3, b"hi")), b"3:hi");
        for (value, priority) in [
            (&b"3!9/1700000000000+1500@1700000061500:hi"[..], 9),
            (b"3;f5!1/1700000000000+1500:hi", 1),
            (b"3/1700000000000+1500:hi", 0),
        ] {
            let stored = decode_stored(value).unwrap();
            assert_eq!(
                (stored.priority, stored.retry_count, stored.payload),
                (priority, 3, &b"hi"[..])
            );
        }
        // The longest header fits HEADER_BYTES.
        let longest = format!(
            "{};{}!{MAX_PRIORITY}#{}/{}+{}@{}:",
            crate::MAX_RETRY_COUNT,
            Backoff::exponential(crate::MAX_DELAY, crate::MAX_DELAY)
                .encode()
                .unwrap(),
            crate::MAX_HEADERS_BYTES + crate::MAX_HEADERS * (1 + 1 + 4 + 1),
            u64::MAX,
            crate::MAX_DELAY.as_millis(),
            u64::MAX
        );
        assert!(longest.len() <= HEADER_BYTES, "{longest}");
        for bad in [
            &b"no header"[..],
            b":x",
            b"3;:x",
            b"3;q1:x",
            b";f1:x",
            b"99999999999:x",
            b"3@:x",
            b"3@x1:x",
            b"3@1@2:x",
            b"3/:x",
            b"3/1:x",
            b"3/1+:x",
            b"3/+1:x",
            b"3/1+x:x",
            b"3/18446744073709551615+1:x",
            b"4294967296:x",
            b"3!:x",
            b"3!0:x",
            b"3!10:x",
            b"3!x:x",
            b"3!1!2:x",
            b"3#:x",
            b"3#x:x",
            b"3#9:k=1:v",
            b"3#4:k=9:vvvv",
            b"3#4:k1:v",
            b"3#5:k=x:vv",
            b"3#5:k=1:\xff",
        ] {
            assert!(decode_stored(bad).is_none(), "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn headers_round_trip_in_a_section_after_the_colon() {
        let headers = vec![
            ("traceparent".to_string(), "00-4bf9-00f0-01".to_string()),
            ("k".to_string(), "a=b:c#d\u{e9}".to_string()),
            ("empty".to_string(), String::new()),
        ];
        let value = encode_stored(&ValueParts {
            retry_count: 3,
            backoff: Some("f5"),
            priority: 2,
            group: Some("tenant-1"),
            headers: &headers,
            payload: b"pay:load",
        });
        let section = "traceparent=15:00-4bf9-00f0-01k=9:a=b:c#d\u{e9}empty=0:";
        assert_eq!(
            value,
            format!("3;f5!2=tenant-1#{}:{section}pay:load", section.len()).into_bytes()
        );
        let stored = decode_stored(&value).unwrap();
        assert_eq!((stored.headers, stored.payload), (headers.clone(), &b"pay:load"[..]));
        // Send times and a deadline, as send.lua inserts them before the ':'.
        let colon = value.iter().position(|&b| b == b':').unwrap();
        let timed = [&value[..colon], b"/1700000000000+1500@1700000061500", &value[colon..]].concat();
        let stored = decode_stored(&timed).unwrap();
        assert_eq!(
            (stored.priority, stored.group.as_deref(), stored.expires_at_ms),
            (2, Some("tenant-1"), Some(1_700_000_061_500))
        );
        assert_eq!((stored.headers, stored.payload), (headers, &b"pay:load"[..]));
        // A group name that breaks the rules: not a value this crate stores.
        assert!(decode_stored(b"3=:x").is_none());
        assert!(decode_stored(b"3=a b:x").is_none());
        // The example of docs/wire-format.md, "Headers".
        let doc = decode_stored(b"3#39:tenant=4:acmetraceparent=11:00-ab-cd-01hi").unwrap();
        assert_eq!((doc.retry_count, doc.payload), (3, &b"hi"[..]));
        assert_eq!(
            doc.headers,
            [
                ("tenant".into(), "acme".into()),
                ("traceparent".into(), "00-ab-cd-01".into())
            ]
        );
        // No headers: no section and no '#', byte for byte the value of a
        // message sent without them.
        assert_eq!(encode_stored(&ValueParts::new(3, b"hi")), b"3:hi");
        assert!(decode_stored(b"3:hi").unwrap().headers.is_empty());
    }
}
