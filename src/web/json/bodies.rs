//! The bodies the API takes: actions' and the producer API's.

use serde::Deserialize;

/// The body of `POST .../groups/{group}/limits`: a key left out keeps
/// that limit, `null` drops the group's own (the default applies).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct GroupLimitsBody {
    #[serde(default, deserialize_with = "present")]
    pub concurrency: Option<Option<u64>>,
    #[serde(default, deserialize_with = "present")]
    pub rate: Option<Option<RateBody>>,
}

/// A rate in a body: at most `limit` starts in any window of `per_ms`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RateBody {
    pub limit: u64,
    pub per_ms: u64,
}

/// A key that is present, its value `null` or not: `Some` (a missing one
/// is `None` by `default`).
fn present<'de, D: serde::Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

/// The body of `POST .../messages`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SendBody {
    pub payload: String,
    pub delay_ms: Option<u64>,
    pub at_ms: Option<u64>,
    pub id: Option<String>,
    pub retry_count: Option<u32>,
}

/// The body of `POST .../reschedule`: one of the two.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct WhenBody {
    pub delay_ms: Option<u64>,
    pub at_ms: Option<u64>,
}

/// The body of `POST .../dead/requeue` and `.../dead/delete`: some ids or all.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DeadBody {
    pub ids: Option<Vec<String>>,
    #[serde(default)]
    pub all: bool,
}
/// One message of the producer API (`POST /api/v1/queues/{name}/messages`
/// and each item of a batch): the payload as text or base64.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ProduceBody {
    pub payload: Option<String>,
    pub payload_base64: Option<String>,
    pub delay_ms: Option<u64>,
    pub at_ms: Option<u64>,
    pub id: Option<String>,
    pub retry_count: Option<u32>,
    pub priority: Option<u8>,
    /// The message's group (docs/groups.md).
    pub group: Option<String>,
    /// Message headers; set in name order (a JSON object has none of its own).
    pub headers: Option<std::collections::BTreeMap<String, String>>,
    /// `NewMessage::unique_for`, `throttle`, `debounce` (docs/dedup.md).
    pub unique_for_ms: Option<u64>,
    pub throttle_ms: Option<u64>,
    pub debounce_ms: Option<u64>,
    /// `NewMessage::replacing`: replaces the pending message `id`.
    pub replace: Option<bool>,
    /// `NewMessage::after`: the messages it waits for (docs/workflows.md).
    pub after: Option<Vec<AfterRef>>,
    /// `NewMessage::on_dead_child`.
    pub on_dead_child: Option<OnDeadChild>,
}

/// One message a parent waits for: an id of the parent's queue, or
/// `{"queue": .., "id": ..}` (`queue` left out: the parent's).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub(crate) enum AfterRef {
    Id(String),
    Ref(QueuedRef),
}

/// `{"queue": .., "id": ..}` of [`AfterRef`].
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct QueuedRef {
    pub queue: Option<String>,
    pub id: String,
}

/// [`ChildPolicy`](crate::ChildPolicy) as the API spells it.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum OnDeadChild {
    Fail,
    Ignore,
    Wait,
    Remove,
}

impl From<OnDeadChild> for crate::ChildPolicy {
    fn from(p: OnDeadChild) -> Self {
        match p {
            OnDeadChild::Fail => crate::ChildPolicy::Fail,
            OnDeadChild::Ignore => crate::ChildPolicy::Ignore,
            OnDeadChild::Wait => crate::ChildPolicy::Wait,
            OnDeadChild::Remove => crate::ChildPolicy::Remove,
        }
    }
}

/// The body of `POST /api/v1/queues/{name}/batch`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct BatchBody {
    pub messages: Vec<ProduceBody>,
}
