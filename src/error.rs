//! The crate's error type.

use crate::MessageId;

/// Everything that can go wrong in `delayqueue`.
///
/// Bad input is reported before anything is written to Redis; errors from
/// Redis keep fred's error as their source.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The queue name is empty, too long or contains characters that would
    /// break key names or the cluster hash tag.
    #[error("invalid queue name {name:?}: {reason}")]
    InvalidQueueName {
        /// The rejected name.
        name: String,
        /// Why it was rejected.
        reason: String,
    },
    /// A caller-given message id is empty, too long or has bad characters.
    #[error("invalid message id {id:?}: {reason}")]
    InvalidMessageId {
        /// The rejected id.
        id: String,
        /// Why it was rejected.
        reason: String,
    },
    /// The payload is larger than the queue's `max_payload_size`.
    #[error("payload of {size} bytes exceeds the maximum of {max} bytes")]
    PayloadTooLarge {
        /// Size of the rejected payload.
        size: usize,
        /// The configured maximum.
        max: usize,
    },
    /// A setting or argument is out of its range.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A message with this id is still pending, ready, being retried or processed.
    #[error("message {0} already exists in the queue")]
    Duplicate(MessageId),
    /// A queue key holds a value of the wrong type: something other than
    /// `delayqueue` wrote to it.
    #[error("a key of queue {queue:?} holds the wrong type of value (written by something else?): {detail}")]
    WrongType {
        /// The queue.
        queue: String,
        /// Redis's message.
        detail: String,
    },
    /// Encoding or decoding a JSON payload failed.
    #[error("JSON payload: {0}")]
    Json(#[from] serde_json::Error),
    /// A script returned something this version does not understand (for
    /// example scripts of another version loaded under the same name).
    #[error("unexpected reply from script {script}: {detail}")]
    UnexpectedReply {
        /// The script's name.
        script: &'static str,
        /// What was wrong.
        detail: String,
    },
    /// A bug in `delayqueue` (a task of ours failed); please report it.
    #[error("internal error: {0}")]
    Internal(String),
    /// Redis or the connection to it failed (unreachable, timeout, out of memory, ...).
    #[error("redis: {0}")]
    Redis(#[from] fred::error::Error),
}

impl Error {
    /// Turns a fred error into `WrongType` when Redis said WRONGTYPE.
    pub(crate) fn from_redis(queue: &str, err: fred::error::Error) -> Self {
        if err.details().contains("WRONGTYPE") {
            Error::WrongType {
                queue: queue.to_string(),
                detail: err.details().to_string(),
            }
        } else {
            Error::Redis(err)
        }
    }
}
