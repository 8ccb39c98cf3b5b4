//! The input maxima every layer checks against: sizes, counts and
//! durations a message or a call may not exceed (rate and concurrency limits
//! are `queue::limits`).

use std::time::Duration;

/// Most deliveries a message may be retried.
pub const MAX_RETRY_COUNT: u32 = 1000;
/// Most ids one script call moves, so no call blocks Redis for long.
pub const MAX_BATCH_SIZE: usize = 1000;
/// Longest delay a message may be sent with (about 10 years).
pub const MAX_DELAY: Duration = Duration::from_secs(10 * 366 * 24 * 3600);

/// Longest window of [`unique_for`](crate::NewMessage::unique_for),
/// [`throttle`](crate::NewMessage::throttle) and
/// [`debounce`](crate::NewMessage::debounce) (366 days): a marker lives
/// at most this long after its message finished (docs/dedup.md).
pub const MAX_WINDOW: Duration = Duration::from_secs(366 * 24 * 3600);

/// Highest message priority ([`NewMessage::priority`](crate::NewMessage::priority));
/// 0, the default, is the lowest. Among due messages a higher priority is
/// claimed first (docs/priorities.md).
pub const MAX_PRIORITY: u8 = 9;

/// Most headers one message may carry ([`NewMessage::header`](crate::NewMessage::header)).
pub const MAX_HEADERS: usize = 16;
/// Longest header name, in bytes. Names are 1 to this many ASCII letters,
/// digits, `-`, `_` and `.`.
pub const MAX_HEADER_NAME_LEN: usize = 64;
/// Most bytes of header names and values together, per message.
pub const MAX_HEADERS_BYTES: usize = 4096;

/// Most children one parent of a flow may wait for
/// ([`NewMessage::after`](crate::NewMessage::after), [`Flow`](crate::Flow);
/// docs/workflows.md). Completion costs O(1) per child, so this bounds
/// only the memory of one parent's sets.
pub const MAX_FLOW_CHILDREN: usize = 1_000_000;
/// Most levels of a [`Flow`](crate::Flow): a parent and its children are
/// two.
pub const MAX_FLOW_DEPTH: usize = 16;
/// Largest [`max_result_size`](crate::DelayQueueBuilder::max_result_size):
/// a handler's result is one Redis string written by the ack (16 MiB).
pub const MAX_RESULT_SIZE: usize = 16 * 1024 * 1024;
/// Largest [`max_log_lines`](crate::DelayQueueBuilder::max_log_lines): the
/// lines of [`Message::log`](crate::Message::log) a message keeps.
pub const MAX_LOG_LINES: usize = 10_000;
/// Longest line of [`Message::log`](crate::Message::log), in bytes; a
/// longer one is cut on a character boundary.
pub const MAX_LOG_LINE: usize = 2048;
/// Largest value of [`Message::progress`](crate::Message::progress), in bytes.
pub const MAX_PROGRESS: usize = 4096;

/// Longest group name, in bytes ([`NewMessage::group`](crate::NewMessage::group)).
/// Names are 1 to this many ASCII letters, digits, `-`, `_` and `.`, the
/// characters of header names.
pub const MAX_GROUP_LEN: usize = 64;

/// Checks a group name against [`MAX_GROUP_LEN`] and its characters.
pub(crate) fn check_group(group: &str) -> Result<(), crate::Error> {
    let invalid = |reason: String| crate::Error::InvalidGroup {
        group: group.to_string(),
        reason,
    };
    if group.is_empty() || group.len() > MAX_GROUP_LEN {
        return Err(invalid(format!(
            "a group is 1 to MAX_GROUP_LEN ({MAX_GROUP_LEN}) bytes"
        )));
    }
    match group.chars().find(|&c| !header_name_char(c)) {
        Some(c) => Err(invalid(format!(
            "{c:?} in a group (ASCII letters, digits, '-', '_' and '.' only)"
        ))),
        None => Ok(()),
    }
}

/// Whether `c` may be part of a header name: ASCII letters, digits, `-`,
/// `_` and `.`.
pub(crate) fn header_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')
}
