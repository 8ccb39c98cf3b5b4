//! The one place that builds Redis key names. Which keys each script
//! takes is up to its operation in `ops/`.
//!
//! Every key of a queue shares the cluster hash tag `{<name>}`, so a queue
//! lives in one slot and every script touches keys of one slot only. A
//! sharded queue is several such sets of keys, one per shard, tagged
//! `{<name>#<shard>}`: each shard is a queue of its own to the scripts.

use crate::Error;

/// Longest accepted queue name, in bytes.
pub const MAX_QUEUE_NAME_LEN: usize = 128;
/// Most shards one queue may be spread over.
pub const MAX_SHARDS: usize = 1024;
/// Separates a sharded queue's name from the shard number in its hash tag;
/// queue names cannot contain it.
const SHARD_MARK: char = '#';

/// Key names of one queue.
#[derive(Debug, Clone)]
pub(crate) struct Keys {
    pub pending: String,
    pub ready: String,
    /// Due messages of priority 1 to 9, scored by priority and due time
    /// (`prio_score` in lua/include/priorities.lua). Scripts touch it only once the
    /// totals have the field `prios`, so it is passed in ARGV, not KEYS: a
    /// declared key that a queue never creates would make its scripts fail
    /// with TRYAGAIN while a cluster slot migrates.
    pub prio: String,
    /// Messages being processed, scored by their lease (visibility
    /// deadline). Key string `:unack`: key strings are wire format, read by
    /// the producers of other languages and by running deployments, so they
    /// keep their names (docs/wire-format.md maps them).
    pub processing: String,
    pub retry: String,
    /// Dead letters, scored by time of death. Key string `:garbage`.
    pub dead: String,
    /// Each message's attempt record (deliveries so far, due time of a
    /// retry, deferrals, reason of the last failure). Key string `:retries`.
    pub attempts: String,
    /// Running totals (sent, acked, failed, dead, expired) kept by the
    /// scripts, and the paused flag (field `paused`).
    pub totals: String,
    /// Prefix of the per-message payload keys; the id follows it.
    pub msg_prefix: String,
    /// Prefix of every key of the queue's groups (docs/groups.md):
    /// `<prefix>ring`, `wait`, `active`, `paused`, `limits`, and
    /// `<prefix>:<group>:ready` per group. Scripts touch them only once the
    /// queue has groups, so it is passed in ARGV, as `prio` is.
    pub group_prefix: String,
    /// Pub/sub channel (not a key) on which scripts wake sleeping consumers.
    pub wake: String,
    /// Prefix of the window markers of `unique_for` and `throttle` sends
    /// (lua/send.lua, docs/dedup.md); the id follows it.
    pub marker_prefix: String,
    /// Prefix of the receipts that make a consumer's claim requests idempotent.
    claim_prefix: String,
    /// Prefix of the staging strings of staged sends (lua/send.lua): a
    /// value waits there, for the moment between its SET and the script.
    staging_prefix: String,
    /// The shard's schedules: name -> cursor, the fire time (ms) of the
    /// last fire sent (`+inf` while paused).
    pub schedules: String,
    /// Prefix of each schedule's definition hash; the name follows it.
    pub schedule_prefix: String,
    /// `<prefix>{<tag>}:`, the start of every key of the shard: a flow's
    /// references name a message's queue by it (docs/workflows.md).
    pub base: String,
    /// Parents waiting for their children (docs/workflows.md), scored by
    /// their own due time.
    pub flow_waiting: String,
    /// Completions recorded here for parents elsewhere, and cancelled
    /// parents whose children are still to be cancelled; the relay drains it.
    pub outbox: String,
    /// Prefix of the result strings of acked messages (docs/results.md);
    /// the id follows it.
    pub result_prefix: String,
    /// Prefix of each processing message's progress string; the id follows it.
    pub progress_prefix: String,
    /// Prefix of each processing message's log list; the id follows it.
    pub log_prefix: String,
    /// Ids whose result someone waits for (`:waiters` zset, scored by the
    /// wait's deadline): an ack publishes their completion on `done`.
    pub waiters: String,
    /// Pub/sub channel (not a key) on which an ack announces the ids in
    /// `waiting` it finished.
    pub done: String,
}

impl Keys {
    /// Builds the key names for queue `name` under `prefix`, after checking both.
    pub(crate) fn new(prefix: &str, name: &str) -> Result<Self, Error> {
        validate_queue_name(name)?;
        if !prefix.chars().all(key_prefix_char) {
            return Err(Error::InvalidArgument(format!(
                "key prefix {prefix:?} must not contain braces, whitespace or control characters"
            )));
        }
        Ok(Self::tagged(prefix, name))
    }

    /// The keys of every shard of queue `name` spread over `shards` hash
    /// tags: `{name}` alone for one shard, else `{name#0}` .. `{name#<shards-1>}`.
    pub(crate) fn shards(prefix: &str, name: &str, shards: usize) -> Result<Vec<Self>, Error> {
        if !(1..=MAX_SHARDS).contains(&shards) {
            return Err(Error::InvalidArgument(format!("shards must be 1 to {MAX_SHARDS}")));
        }
        let one = Self::new(prefix, name)?;
        if shards == 1 {
            return Ok(vec![one]);
        }
        Ok((0..shards).map(|i| Self::shard(prefix, name, i)).collect())
    }

    /// The keys of shard `i` of queue `name`, both already checked by
    /// [`Keys::shards`].
    pub(crate) fn shard(prefix: &str, name: &str, i: usize) -> Self {
        Self::tagged(prefix, &format!("{name}{SHARD_MARK}{i}"))
    }

    fn tagged(prefix: &str, tag: &str) -> Self {
        let base = format!("{prefix}{{{tag}}}");
        Keys {
            pending: format!("{base}:pending"),
            ready: format!("{base}:ready"),
            prio: format!("{base}:ready:prio"),
            processing: format!("{base}:unack"),
            retry: format!("{base}:retry"),
            dead: format!("{base}:garbage"),
            attempts: format!("{base}:retries"),
            totals: format!("{base}:totals"),
            msg_prefix: format!("{base}:m:"),
            group_prefix: format!("{base}:g"),
            wake: format!("{base}:wake"),
            marker_prefix: format!("{base}:uniq:"),
            claim_prefix: format!("{base}:claim:"),
            staging_prefix: format!("{base}:in:"),
            schedules: format!("{base}:schedules"),
            schedule_prefix: format!("{base}:schedule:"),
            flow_waiting: format!("{base}:flow:waiting"),
            outbox: format!("{base}:outbox"),
            base: format!("{base}:"),
            result_prefix: format!("{base}:result:"),
            progress_prefix: format!("{base}:progress:"),
            log_prefix: format!("{base}:log:"),
            waiters: format!("{base}:waiters"),
            done: format!("{base}:done"),
        }
    }

    /// A SCAN pattern matching the totals hash of every queue under
    /// `prefix` (every queue that was ever sent to has one).
    pub(crate) fn totals_pattern(prefix: &str) -> String {
        format!("{}{{*}}:totals", glob_escape(prefix))
    }

    /// The queue name in a key that `totals_pattern` matched, and the
    /// shard number when the key is of a sharded queue's shard.
    pub(crate) fn name_of_totals<'a>(prefix: &str, key: &'a str) -> Option<(&'a str, Option<usize>)> {
        let tag = key.strip_prefix(prefix)?.strip_prefix('{')?.strip_suffix("}:totals")?;
        Some(match tag.split_once(SHARD_MARK) {
            Some((name, shard)) => (name, Some(shard.parse().ok()?)),
            None => (tag, None),
        })
    }

    /// The keys of the shard whose [`base`](Self::base) is `base`, as a
    /// flow's reference names it; `None` for a string that is no base.
    pub(crate) fn from_base(base: &str) -> Option<Self> {
        let (prefix, rest) = base.split_once('{')?;
        let tag = rest.strip_suffix("}:")?;
        let name = tag.split_once(SHARD_MARK).map_or(tag, |(name, _)| name);
        Self::new(prefix, name).ok()?;
        Some(Self::tagged(prefix, tag))
    }

    /// The queue name in a [`base`](Self::base) (a shard's without its
    /// shard number).
    pub(crate) fn name_of_base(base: &str) -> &str {
        let tag = base.split_once('{').map_or(base, |(_, rest)| rest);
        let tag = tag.strip_suffix("}:").unwrap_or(tag);
        tag.split_once(SHARD_MARK).map_or(tag, |(name, _)| name)
    }

    /// The set of children parent `id` still waits for.
    pub(crate) fn deps(&self, id: &str) -> String {
        format!("{}deps:{id}", self.base)
    }

    /// The finished children of parent `id`, with their outcomes and results.
    pub(crate) fn children(&self, id: &str) -> String {
        format!("{}children:{id}", self.base)
    }

    /// The member of a cohort callback's `deps` set that keeps it waiting
    /// while its cohort is open (docs/workflows.md): the shard's own base
    /// and an empty id, which no message has.
    pub(crate) fn open_cohort_member(&self) -> crate::flow::wire::ChildRef {
        crate::flow::wire::ChildRef::cohort_open(&self.base)
    }

    /// The links of the shard's children to their parents.
    pub(crate) fn parents(&self) -> String {
        format!("{}parents", self.base)
    }

    /// The payload key of message `id`.
    pub(crate) fn msg(&self, id: &str) -> String {
        format!("{}{id}", self.msg_prefix)
    }

    /// The result string of message `id` (docs/results.md).
    pub(crate) fn result(&self, id: &str) -> String {
        format!("{}{id}", self.result_prefix)
    }

    /// The progress string of message `id`.
    pub(crate) fn progress(&self, id: &str) -> String {
        format!("{}{id}", self.progress_prefix)
    }

    /// The log list of message `id`.
    pub(crate) fn log(&self, id: &str) -> String {
        format!("{}{id}", self.log_prefix)
    }

    /// The window marker of message id `id` (docs/dedup.md).
    pub(crate) fn marker(&self, id: &str) -> String {
        format!("{}{id}", self.marker_prefix)
    }

    /// The definition hash of schedule `name`.
    pub(crate) fn schedule(&self, name: &str) -> String {
        format!("{}{name}", self.schedule_prefix)
    }

    /// The claim receipt key of consumer `consumer`.
    pub(crate) fn claim(&self, consumer: &str) -> String {
        format!("{}{consumer}", self.claim_prefix)
    }

    /// The staging string of one staged send, named by a token unique to it.
    pub(crate) fn staging(&self, token: &str) -> String {
        format!("{}{token}", self.staging_prefix)
    }
}

/// Queue names become part of key names and of a cluster hash tag: keep them
/// short, printable and free of the characters that would break the tag.
fn validate_queue_name(name: &str) -> Result<(), Error> {
    let reason = if name.is_empty() {
        Some("must not be empty".to_string())
    } else if name.len() > MAX_QUEUE_NAME_LEN {
        Some(format!("must be at most {MAX_QUEUE_NAME_LEN} bytes"))
    } else {
        name.chars()
            .find(|&c| !queue_name_char(c))
            .map(|c| format!("contains {c:?}; allowed are ASCII letters, digits and - _ . : / @"))
    };
    match reason {
        Some(reason) => Err(Error::InvalidQueueName {
            name: name.to_string(),
            reason,
        }),
        None => Ok(()),
    }
}

/// Whether `c` may be part of a queue name: ASCII letters, digits and
/// `- _ . : / @`, never a brace (the hash tag), `#` (the shard mark) or
/// whitespace.
pub(crate) fn queue_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':' | '/' | '@')
}

/// Whether `c` may be part of a key prefix: what an id may hold, but a
/// brace, which would end the hash tag early.
pub(crate) fn key_prefix_char(c: char) -> bool {
    crate::id::id_char(c) && !matches!(c, '{' | '}')
}

/// `s` with the characters SCAN's MATCH treats specially escaped.
pub(crate) fn glob_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validation_cases::{assert_rust_agrees, text};

    #[test]
    fn keys_share_one_hash_tag() {
        let k = Keys::new("dq:", "orders").unwrap();
        for key in [
            &k.pending,
            &k.ready,
            &k.prio,
            &k.processing,
            &k.retry,
            &k.dead,
            &k.attempts,
            &k.totals,
            &k.msg("x"),
            &k.marker("x"),
            &k.claim("r"),
            &k.staging("t"),
            &k.schedules,
            &k.schedule("daily"),
            &k.flow_waiting,
            &k.outbox,
            &k.deps("x"),
            &k.children("x"),
            &k.parents(),
            &k.result("x"),
            &k.progress("x"),
            &k.log("x"),
            &k.waiters,
        ] {
            assert!(key.starts_with("dq:{orders}:"), "{key}");
        }
    }

    #[test]
    fn queue_names_are_read_back_from_totals_keys() {
        let k = Keys::new("dq:", "orders").unwrap();
        assert_eq!(Keys::name_of_totals("dq:", &k.totals), Some(("orders", None)));
        let shards = Keys::shards("dq:", "orders", 3).unwrap();
        assert_eq!(
            Keys::name_of_totals("dq:", &shards[2].totals),
            Some(("orders", Some(2)))
        );
        assert_eq!(Keys::name_of_totals("dq:", "dq:{orders}:pending"), None);
        assert_eq!(Keys::name_of_totals("x:", &k.totals), None);
        assert_eq!(Keys::totals_pattern("a*"), "a\\*{*}:totals");
        assert_eq!(glob_escape("dq:{a*b}:m:"), "dq:{a\\*b}:m:");
    }

    #[test]
    fn shards_have_a_hash_tag_each() {
        let one = Keys::shards("dq:", "orders", 1).unwrap();
        assert_eq!(one[0].pending, "dq:{orders}:pending");
        let four = Keys::shards("dq:", "orders", 4).unwrap();
        let pending: Vec<&str> = four.iter().map(|k| k.pending.as_str()).collect();
        assert_eq!(
            pending,
            [
                "dq:{orders#0}:pending",
                "dq:{orders#1}:pending",
                "dq:{orders#2}:pending",
                "dq:{orders#3}:pending"
            ]
        );
        assert_eq!(four[3].msg("x"), "dq:{orders#3}:m:x");
        let back = Keys::from_base(&four[3].base).unwrap();
        assert_eq!(back.msg("x"), "dq:{orders#3}:m:x");
        assert_eq!(Keys::name_of_base(&four[3].base), "orders");
        assert!(Keys::from_base("dq:orders:").is_none());
        for bad in [0, MAX_SHARDS + 1] {
            assert!(matches!(
                Keys::shards("dq:", "orders", bad),
                Err(Error::InvalidArgument(_))
            ));
        }
        assert!(matches!(
            Keys::shards("dq:", "a#1", 2),
            Err(Error::InvalidQueueName { .. })
        ));
    }

    #[test]
    fn bad_names_are_rejected() {
        for name in ["", "a b", "a{b", "a}b", "tab\t", "nl\n", &"x".repeat(129), "é"] {
            assert!(
                matches!(Keys::new("dq:", name), Err(Error::InvalidQueueName { .. })),
                "{name:?} accepted"
            );
        }
        assert!(Keys::new("dq:", &"x".repeat(128)).is_ok());
        assert!(matches!(Keys::new("d{q", "a"), Err(Error::InvalidArgument(_))));
    }

    #[test]
    fn names_and_prefixes_are_judged_as_the_shared_table_says() {
        assert_rust_agrees("queue_names", |v| Some(Keys::new("dq:", &text(v)?).map(drop)));
        assert_rust_agrees("key_prefixes", |v| Some(Keys::new(&text(v)?, "orders").map(drop)));
    }
}
