//! Message ids.

use std::fmt;

/// Longest accepted caller-given id, in bytes.
pub const MAX_ID_LEN: usize = 200;

/// Whether `c` may be part of an id (or a key prefix): anything but
/// whitespace and control characters, which would make a key name
/// ambiguous in logs, the CLI and `redis-cli`.
pub(crate) fn id_char(c: char) -> bool {
    !(c.is_whitespace() || c.is_control())
}

/// Why an id was refused; it becomes [`Error::InvalidMessageId`](crate::Error::InvalidMessageId).
#[derive(Debug)]
pub(crate) struct InvalidId {
    pub(crate) id: String,
    pub(crate) reason: String,
}

/// The id of a message, unique within its queue.
///
/// Generated ids are UUIDv7 (time-ordered) written in base62: 21
/// characters (`0-9A-Za-z`) that sort by creation time. Short ids keep
/// Redis memory low: each id is stored twice per message (key name and zset
/// member). A caller-given id (see [`NewMessage::id`](crate::NewMessage::id))
/// makes a send idempotent.
///
/// It compares with the strings it is made of, either way round:
///
/// ```
/// use delayqueue::MessageId;
/// let id = MessageId::from("order-42");
/// assert_eq!(id, "order-42");
/// assert!("order-42" == id && id == "order-42".to_string());
/// assert_eq!(id.as_str(), "order-42");
/// assert_eq!(id.to_string(), "order-42");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct MessageId(String);

impl MessageId {
    /// A new time-ordered UUIDv7 id, in base62.
    ///
    /// ```
    /// let a = delayqueue::MessageId::generate();
    /// let b = delayqueue::MessageId::generate();
    /// assert_eq!(a.as_str().len(), 21);
    /// assert!(a < b);
    /// ```
    pub fn generate() -> Self {
        MessageId(base62::encode(uuid::Uuid::now_v7().as_u128()))
    }

    /// The id as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Checks that the id can be used as part of a key name.
    pub(crate) fn validate(&self) -> Result<(), InvalidId> {
        Self::check(&self.0)
    }

    /// Checks that `id` can be used as part of a key name: what every call
    /// that takes an id checks before it touches Redis.
    pub(crate) fn check(id: &str) -> Result<(), InvalidId> {
        let reason = if id.is_empty() {
            Some("must not be empty".to_string())
        } else if id.len() > MAX_ID_LEN {
            Some(format!("must be at most {MAX_ID_LEN} bytes"))
        } else {
            id.chars()
                .find(|&c| !id_char(c))
                .map(|c| format!("contains {c:?}; whitespace and control characters are not allowed"))
        };
        match reason {
            Some(reason) => Err(InvalidId {
                id: id.to_string(),
                reason,
            }),
            None => Ok(()),
        }
    }
}

impl fmt::Display for MessageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<String> for MessageId {
    fn from(s: String) -> Self {
        MessageId(s)
    }
}

impl From<&str> for MessageId {
    fn from(s: &str) -> Self {
        MessageId(s.to_string())
    }
}

impl From<&MessageId> for MessageId {
    fn from(id: &MessageId) -> Self {
        id.clone()
    }
}

impl AsRef<str> for MessageId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// `id == "row-7"`, `id == *s`, `id == string` and the same the other way
/// round: an id is equal to the text it is made of.
macro_rules! eq_text {
    ($($text:ty),*) => {$(
        impl PartialEq<$text> for MessageId {
            fn eq(&self, other: &$text) -> bool {
                self.0 == *other
            }
        }

        impl PartialEq<MessageId> for $text {
            fn eq(&self, other: &MessageId) -> bool {
                *self == other.0
            }
        }
    )*};
}

eq_text!(str, &str, String);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validation_cases::{assert_rust_agrees, forbidden_chars, text};
    use crate::Error;

    #[test]
    fn generated_ids_are_time_ordered_uuids() {
        let a = MessageId::generate();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = MessageId::generate();
        assert!(a < b);
        assert_eq!(a.as_str().len(), 21);
        let uuid = uuid::Uuid::from_u128(base62::decode(a.as_str()).unwrap());
        assert_eq!(uuid.get_version_num(), 7);
    }

    #[test]
    fn bad_ids_are_rejected() {
        for bad in ["", "a b", "x\n", &"y".repeat(201)] {
            assert!(MessageId::from(bad).validate().is_err(), "{bad:?}");
        }
        assert!(MessageId::from("order-42/é{}").validate().is_ok());
    }

    #[test]
    fn ids_are_judged_as_the_shared_table_says() {
        assert_rust_agrees("ids", |v| Some(MessageId::check(&text(v)?).map_err(Error::from)));
    }

    /// The table's list of whitespace and control characters is Rust's,
    /// checked over every code point.
    #[test]
    fn the_table_lists_exactly_the_characters_ids_refuse() {
        let ranges = forbidden_chars();
        let listed = |c: char| ranges.iter().any(|&(lo, hi)| (lo..=hi).contains(&u32::from(c)));
        let wrong: Vec<String> = (0..=u32::from(char::MAX))
            .filter_map(char::from_u32)
            .filter(|&c| MessageId::check(&format!("a{c}b")).is_ok() == listed(c))
            .map(|c| format!("U+{:04X}", u32::from(c)))
            .collect();
        assert!(wrong.is_empty(), "judged otherwise than the table: {wrong:?}");
    }
}
