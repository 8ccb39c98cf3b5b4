//! The crate's error type.

use crate::id::InvalidId;
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
    /// A message header breaks a limit: its name is empty, too long
    /// ([`MAX_HEADER_NAME_LEN`](crate::MAX_HEADER_NAME_LEN)) or has a
    /// character other than ASCII letters, digits, `-`, `_` and `.`; or the
    /// message has more than [`MAX_HEADERS`](crate::MAX_HEADERS) headers or
    /// more than [`MAX_HEADERS_BYTES`](crate::MAX_HEADERS_BYTES) of them.
    #[error("invalid header {name:?}: {reason}")]
    InvalidHeader {
        /// The header's name.
        name: String,
        /// Which limit it breaks.
        reason: String,
    },
    /// A group name ([`NewMessage::group`](crate::NewMessage::group) and the
    /// group calls of [`DelayQueue`](crate::DelayQueue)) is empty, longer
    /// than [`MAX_GROUP_LEN`](crate::MAX_GROUP_LEN) or holds a character
    /// other than ASCII letters, digits, `-`, `_` and `.`.
    #[error("invalid group {group:?}: {reason}")]
    InvalidGroup {
        /// The group name.
        group: String,
        /// Which rule it breaks.
        reason: String,
    },
    /// A flow breaks a rule of docs/workflows.md: more children than
    /// [`MAX_FLOW_CHILDREN`](crate::MAX_FLOW_CHILDREN) for one parent, deeper
    /// than [`MAX_FLOW_DEPTH`](crate::MAX_FLOW_DEPTH), a parent sent with
    /// `unique_for`, `throttle`, `debounce` or `replace`, or a child that is
    /// its own parent. Nothing was written.
    #[error("invalid flow: {reason}")]
    InvalidFlow {
        /// Which rule it breaks.
        reason: String,
    },
    /// A setting or argument is out of its range.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A message with this id is still pending, ready, being retried or
    /// processed, or a [`unique_for`](crate::NewMessage::unique_for) or
    /// [`throttle`](crate::NewMessage::throttle) window of the id holds
    /// (docs/dedup.md). Nothing was written.
    #[error("message {id} already exists in queue {queue:?}{}", until_text(.until))]
    Duplicate {
        /// The queue.
        queue: String,
        /// The caller-given id.
        id: MessageId,
        /// When the window that refused it ends, by Redis's clock; `None`
        /// when a live message with this id refused it (its window, if it
        /// has one, starts when it finishes).
        until: Option<std::time::SystemTime>,
    },
    /// [`DelayQueue::replace`](crate::DelayQueue::replace) found no
    /// pending message with this id. Nothing was written.
    #[error("message {id} of queue {queue:?} is not pending: {}", if *.live { "it is due or being processed" } else { "there is no such message" })]
    NotPending {
        /// The queue.
        queue: String,
        /// The id.
        id: MessageId,
        /// `true`: the message is due (its due time passed: ready, retry) or
        /// being processed;
        /// `false`: no message with this id is live.
        live: bool,
    },
    /// A handler's result is larger than the queue's
    /// [`max_result_size`](crate::DelayQueueBuilder::max_result_size): its
    /// delivery fails with this as its reason.
    #[error("result of {size} bytes exceeds max_result_size ({max} bytes)")]
    ResultTooLarge {
        /// Size of the result.
        size: usize,
        /// The configured maximum.
        max: usize,
    },
    /// A [`Message::progress`](crate::Message::progress) value is larger
    /// than [`MAX_PROGRESS`](crate::MAX_PROGRESS).
    #[error("progress of {size} bytes exceeds MAX_PROGRESS ({max} bytes)")]
    ProgressTooLarge {
        /// Size of the value.
        size: usize,
        /// The maximum.
        max: usize,
    },
    /// A [`Message::progress`](crate::Message::progress) or
    /// [`Message::log`](crate::Message::log) came from a delivery that no
    /// longer holds its message's lease (it ran out and the message was
    /// taken back, or the delivery has ended); nothing was written.
    #[error("delivery {attempt} of message {id} no longer holds its lease; nothing written")]
    LeaseLost {
        /// The message.
        id: MessageId,
        /// The delivery.
        attempt: u32,
    },
    /// No message with this id is stored and no result of one is kept
    /// ([`DelayQueue::wait_result`](crate::DelayQueue::wait_result)).
    #[error("no message {id} in queue {queue:?} and no result of one")]
    NoSuchMessage {
        /// The queue.
        queue: String,
        /// The id.
        id: MessageId,
    },
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
    /// Redis refused a write because it reached `maxmemory` (with the
    /// `noeviction` policy). Nothing of the refused call was written; retry
    /// once consumers or an operator have freed memory.
    #[error("redis is out of memory (maxmemory reached) while writing to queue {queue:?}: {detail}")]
    OutOfMemory {
        /// The queue.
        queue: String,
        /// Redis's message.
        detail: String,
    },
    /// A send stored its message on the primary, but the confirmation that
    /// [`Durability`](crate::Durability) asks for did not come in time: it
    /// may be lost if the primary fails now. Send again with the same
    /// caller-given id to be sure: `Ok` or [`Error::Duplicate`] then means
    /// stored and confirmed.
    #[error("queue {queue:?}: sent, but only {confirmed} of {wanted} replicas confirmed it (primary's AOF: {local})")]
    NotDurable {
        /// The queue.
        queue: String,
        /// Replicas that confirmed.
        confirmed: u32,
        /// Replicas asked for.
        wanted: u32,
        /// Whether the primary's own AOF confirmed it, where asked for.
        local: bool,
    },
    /// A send's outcome is unknown: the connection to Redis failed (or was
    /// re-established) after the messages were sent and before Redis
    /// confirmed them, so each message may be stored or not. Send each
    /// again with its id (`ids`, generated ones too), which is safe: `Ok` or
    /// [`Error::Duplicate`] then means it is stored (docs/reliability.md).
    #[error("queue {queue:?}: {} may or may not be stored: the connection failed before Redis confirmed the send ({source}); send again with the same id, which is safe", describe_ids(ids))]
    Unconfirmed {
        /// The queue.
        queue: String,
        /// The messages whose outcome is unknown, in the order sent.
        ids: Vec<MessageId>,
        /// What failed: the connection's error.
        source: fred::error::Error,
    },
    /// The queue's [`Durability::Aof`](crate::Durability::Aof) needs the
    /// `WAITAOF` command, which the server lacks: Redis before 7.2. Nothing
    /// was written. Use Redis 7.2 or later (or Valkey), or another
    /// durability.
    #[error("queue {queue:?}: Durability::Aof needs WAITAOF, which {server} lacks: use Redis 7.2 or later, or Valkey (nothing was sent)")]
    WaitAofUnsupported {
        /// The queue.
        queue: String,
        /// The server as its `INFO server` names it, e.g. "Redis 7.0.15".
        server: String,
    },
    /// The queue has no schedule of this name.
    #[error("queue {queue:?} has no schedule {name:?}")]
    NoSuchSchedule {
        /// The queue.
        queue: String,
        /// The schedule's name.
        name: String,
    },
    /// The queue's data is in a wire format version this version of
    /// `delayqueue` does not speak (docs/wire-format.md), written by a newer
    /// (or foreign) client. Nothing was read or written; upgrade this client.
    #[error("queue {queue:?} is in wire format {found}, this version of delayqueue speaks format {supported} (see docs/wire-format.md)")]
    FormatVersion {
        /// The queue.
        queue: String,
        /// The version the queue's totals hash names, as stored.
        found: String,
        /// The version this crate speaks.
        supported: u32,
    },
    /// The queue records another shard count than this handle's
    /// ([`shards`](crate::DelayQueueBuilder::shards)): using it would put
    /// messages where the queue's consumers do not read, or read where its
    /// producers do not write. Nothing was written; build the handle with
    /// the recorded count (docs/scaling.md).
    #[error("queue {queue:?} is spread over {found} shards, this handle over {expected}: every producer and consumer must use shards({found}) (see docs/scaling.md)")]
    ShardCount {
        /// The queue.
        queue: String,
        /// The count the queue records.
        found: usize,
        /// This handle's count.
        expected: usize,
    },
    /// The server does not run Lua scripts, and every queue operation is
    /// one: a Valkey 9 started without its `lua` module (or after `MODULE
    /// UNLOAD lua`), or a server or proxy without `EVAL`. Nothing was
    /// written. Run a server with Lua: Redis 7, or Valkey with its `lua`
    /// module (loaded by default).
    #[error("{server} does not run Lua scripts, and every queue operation is one ({detail}): use Redis 7, or Valkey with its lua module loaded (the default)")]
    ScriptingUnavailable {
        /// The server as its `INFO server` names it, e.g. "Valkey 9.1.2".
        server: String,
        /// The server's message.
        detail: String,
    },
    /// Redis or the connection to it failed (unreachable, timeout, ...).
    #[error("redis: {0}")]
    Redis(#[from] fred::error::Error),
}

impl From<InvalidId> for Error {
    fn from(e: InvalidId) -> Self {
        Error::InvalidMessageId {
            id: e.id,
            reason: e.reason,
        }
    }
}

impl Error {
    /// Turns a fred error into `WrongType`, `OutOfMemory`, `FormatVersion`
    /// or `ShardCount` when Redis said WRONGTYPE or OOM, or a script
    /// DQFORMAT or DQSHARDS.
    pub(crate) fn from_redis(queue: &str, err: fred::error::Error) -> Self {
        let details = err.details();
        let (queue, detail) = (queue.to_string(), details.to_string());
        if let Some((found, supported)) = format_versions(details) {
            Error::FormatVersion {
                queue,
                found,
                supported,
            }
        } else if let Some((found, expected)) = shard_counts(details) {
            Error::ShardCount { queue, found, expected }
        } else if details.contains("WRONGTYPE") {
            Error::WrongType { queue, detail }
        } else if details.starts_with("OOM ") || details.contains("maxmemory") {
            Error::OutOfMemory { queue, detail }
        } else {
            Error::Redis(err)
        }
    }
}

impl Error {
    /// This error again, for each other caller whose item went in the one
    /// script call that failed (batched notes): Redis's and the scripts'
    /// errors as they are, any other as its text.
    pub(crate) fn again(&self) -> Error {
        match self {
            Error::Redis(e) => Error::Redis(e.clone()),
            Error::WrongType { queue, detail } => Error::WrongType {
                queue: queue.clone(),
                detail: detail.clone(),
            },
            Error::OutOfMemory { queue, detail } => Error::OutOfMemory {
                queue: queue.clone(),
                detail: detail.clone(),
            },
            Error::FormatVersion {
                queue,
                found,
                supported,
            } => Error::FormatVersion {
                queue: queue.clone(),
                found: found.clone(),
                supported: *supported,
            },
            Error::ShardCount { queue, found, expected } => Error::ShardCount {
                queue: queue.clone(),
                found: *found,
                expected: *expected,
            },
            Error::UnexpectedReply { script, detail } => Error::UnexpectedReply {
                script,
                detail: detail.clone(),
            },
            Error::ScriptingUnavailable { server, detail } => Error::ScriptingUnavailable {
                server: server.clone(),
                detail: detail.clone(),
            },
            other => Error::Internal(other.to_string()),
        }
    }
}

/// The counts in a script's "DQSHARDS the queue is spread over <found>
/// shards, this client uses <uses> (...)" error (`check_shards` in
/// lua/include/checks.lua).
fn shard_counts(details: &str) -> Option<(usize, usize)> {
    let rest = details.split_once("DQSHARDS the queue is spread over ")?.1;
    let (found, rest) = rest.split_once(" shards, this client uses ")?;
    let uses = rest.split(' ').next()?.parse().ok()?;
    Some((found.parse().ok()?, uses))
}

/// "message X", or "3 messages (X, ...)" for an error's text.
fn describe_ids(ids: &[MessageId]) -> String {
    match ids {
        [id] => format!("message {id}"),
        [first, ..] => format!("{} messages ({first}, ...)", ids.len()),
        [] => "no message".to_string(),
    }
}

impl Error {
    /// Whether making the same call again may succeed and is safe: sends
    /// with the same ids (for [`Error::Unconfirmed`], the ids it names).
    /// True for [`Error::Unconfirmed`], [`Error::NotDurable`],
    /// [`Error::OutOfMemory`], a moving slot ([`is_slot_moving`](Self::is_slot_moving))
    /// and a connection that failed or timed out; false for bad input and
    /// for what Redis holds ([`Error::Duplicate`], [`Error::WrongType`], ...).
    ///
    /// ```no_run
    /// # async fn run(queue: delayqueue::DelayQueue) -> Result<(), delayqueue::Error> {
    /// use delayqueue::Error;
    /// let mut sent = queue.send("close order 42").id("order-42").await;
    /// for _ in 0..3 {
    ///     match &sent {
    ///         Err(e) if e.is_retryable() => sent = queue.send("close order 42").id("order-42").await,
    ///         _ => break,
    ///     }
    /// }
    /// match sent {
    ///     // Stored by this call or by an earlier one of the loop.
    ///     Ok(_) | Err(Error::Duplicate { .. }) => Ok(()),
    ///     Err(e) => Err(e),
    /// }
    /// # }
    /// ```
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Unconfirmed { .. } | Error::NotDurable { .. } | Error::OutOfMemory { .. } => true,
            Error::Redis(e) => connection_failed(e) || self.is_slot_moving(),
            _ => false,
        }
    }

    /// Whether the call failed because the queue's cluster slot is moving
    /// to another node (`redis-cli --cluster reshard`, a rebalance). Nothing
    /// of the call was written: send it again (with a caller-given id a
    /// repeated send is idempotent); it succeeds once the client follows
    /// the move. Covers `TRYAGAIN` (the call's keys were split between the
    /// two nodes), `ASK`/`MOVED` redirections fred gave up on, and a script
    /// that met a payload already on the other node, in Redis's words and
    /// in Valkey's. The consumer retries such failures by itself.
    pub fn is_slot_moving(&self) -> bool {
        match self {
            Error::Redis(e) => e.kind() == &fred::error::ErrorKind::Routing || slot_moving(e.details()),
            _ => false,
        }
    }
}

/// Whether fred gave up on the connection rather than Redis answering: a
/// command that failed so may have run all the same. "Failed to route
/// command" is fred finding no connection for a re-sent command, whose
/// earlier attempt may have run.
pub(crate) fn connection_failed(e: &fred::error::Error) -> bool {
    use fred::error::ErrorKind;
    matches!(e.kind(), ErrorKind::IO | ErrorKind::Canceled | ErrorKind::Timeout)
        || e.details().starts_with("Failed to route command")
}

/// Whether a server's error `details` says the call met a slot on the
/// move; see [`Error::is_slot_moving`].
pub(crate) fn slot_moving(details: &str) -> bool {
    let code = details.split(' ').next().unwrap_or_default();
    matches!(code, "TRYAGAIN" | "ASK" | "MOVED") || script_met_moved_key(details)
}

/// Whether a server's error `details` says a script, let run, met a key it
/// built rather than declared in KEYS on the other side of a slot move
/// (`payloads_here` in lua/include/checks.lua makes that happen before any write).
/// Redis: "Script attempted to access a non local key in a cluster node";
/// Valkey 8: "Unable to execute command '...' in script because undeclared
/// keys were accessed during rehashing of the slot".
pub(crate) fn script_met_moved_key(details: &str) -> bool {
    details.contains("non local key") || details.contains("undeclared keys were accessed during rehashing of the slot")
}

/// The versions in a script's "DQFORMAT the queue is in wire format <found>,
/// this client speaks format <supported> (...)" error (`check_format` in
/// lua/include/checks.lua).
fn format_versions(details: &str) -> Option<(String, u32)> {
    let rest = details.split_once("DQFORMAT the queue is in wire format ")?.1;
    let (found, rest) = rest.rsplit_once(", this client speaks format ")?;
    let supported = rest.split(' ').next()?.parse().ok()?;
    Some((found.to_string(), supported))
}

/// The end of a [`Error::Duplicate`]'s message: when its window ends.
fn until_text(until: &Option<std::time::SystemTime>) -> String {
    match until.and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok()) {
        Some(t) => format!(
            " (held until {} ms since the Unix epoch, by Redis's clock)",
            t.as_millis()
        ),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fred::error::{Error as FredError, ErrorKind};

    fn redis(kind: ErrorKind, details: &str) -> Error {
        Error::Redis(FredError::new(kind, details.to_string()))
    }

    #[test]
    fn a_moving_slot_is_told_apart_in_redis_and_valkey_words() {
        let moving = [
            // Both servers: the call's keys split between the two nodes.
            "TRYAGAIN Multiple keys request during rehashing of slot",
            "ASK 320 127.0.0.1:7001",
            "MOVED 320 127.0.0.1:7001",
            // Redis 7: a script met a key it built on the other node.
            "ERR Error running script (call to f_9b6c0e2b...): @user_script:44: @user_script: 44: Script attempted to access a non local key in a cluster node",
            // Valkey 8: the same.
            "ERR Unable to execute command 'exists' in script because undeclared keys were accessed during rehashing of the slot script: fe950a5a, on @user_script:44.",
        ];
        for details in moving {
            assert!(redis(ErrorKind::Unknown, details).is_slot_moving(), "{details}");
        }
        // fred giving up on ASK redirections.
        assert!(redis(ErrorKind::Routing, "Too many redirections.").is_slot_moving());
        assert!(script_met_moved_key(moving[3]) && script_met_moved_key(moving[4]));
        assert!(!script_met_moved_key(moving[0]));

        for details in [
            "ERR unknown command 'FOO'",
            "NOSCRIPT No matching script.",
            "CROSSSLOT Keys in request don't hash to the same slot",
            "ERR MOVED is not a thing here",
        ] {
            assert!(!redis(ErrorKind::Unknown, details).is_slot_moving(), "{details}");
        }
        assert!(!Error::Internal("TRYAGAIN".into()).is_slot_moving());
    }

    #[test]
    fn retryable_errors_are_the_transient_ones() {
        let unconfirmed = Error::Unconfirmed {
            queue: "q".into(),
            ids: vec!["a".into(), "b".into()],
            source: FredError::new(ErrorKind::IO, "Connection closed."),
        };
        assert!(unconfirmed.is_retryable());
        assert!(unconfirmed
            .to_string()
            .contains("2 messages (a, ...) may or may not be stored"));
        for kind in [ErrorKind::IO, ErrorKind::Canceled, ErrorKind::Timeout] {
            assert!(redis(kind, "gone").is_retryable());
        }
        assert!(redis(ErrorKind::Unknown, "Failed to route command.").is_retryable());
        assert!(redis(ErrorKind::Unknown, "MOVED 320 127.0.0.1:7001").is_retryable());
        assert!(!redis(ErrorKind::Unknown, "NOPERM this user has no permissions").is_retryable());
        let duplicate = Error::Duplicate {
            queue: "q".into(),
            id: "a".into(),
            until: None,
        };
        assert!(!duplicate.is_retryable());
        let old = Error::WaitAofUnsupported {
            queue: "q".into(),
            server: "Redis 7.0.15".into(),
        };
        assert!(!old.is_retryable() && old.to_string().contains("Redis 7.0.15 lacks"));
    }
}
