//! Reading a parent's finished children (`{q}:children:<parent>`, written
//! by `flow_complete.lua`): a plain HSCAN, read-only, so no script.

use fred::bytes::Bytes;
use fred::prelude::{ClientLike, Value};
use fred::types::{ClusterHash, CustomCommand};

use super::{Keys, Shard};
use crate::flow::{ChildOutcome, ChildResult, ChildrenPage};
use crate::{Error, MessageId};

impl Shard<'_> {
    /// One page of the finished children of parent `id` (HSCAN from `cursor`).
    pub(crate) async fn children(&self, id: &str, cursor: Option<&str>) -> Result<ChildrenPage, Error> {
        let key = self.keys.children(id);
        let cursor = cursor.unwrap_or("0");
        let (next, pairs): (String, Vec<(Bytes, Bytes)>) = self
            .client
            .custom(
                CustomCommand::new_static(
                    "HSCAN",
                    ClusterHash::Custom(fred::util::redis_keyslot(key.as_bytes())),
                    false,
                ),
                vec![Value::from(key), cursor.into(), "COUNT".into(), 1000.into()],
            )
            .await
            .map(scan_page)
            .map_err(|e| Error::from_redis(self.queue, e))?
            .ok_or_else(|| Error::Internal("HSCAN replied with something else than a page".into()))?;
        let children = pairs.into_iter().filter_map(|(f, v)| child_result(&f, &v)).collect();
        Ok(ChildrenPage {
            children,
            next: (next != "0").then_some(next),
        })
    }
}

/// An HSCAN reply: the next cursor and the field, value pairs.
fn scan_page(v: Value) -> Option<(String, Vec<(Bytes, Bytes)>)> {
    let Value::Array(mut parts) = v else { return None };
    let items = match parts.pop()? {
        Value::Array(items) => items,
        _ => return None,
    };
    let next = parts.pop()?.as_string()?;
    let bytes = |v: &Value| v.as_bytes().map(Bytes::copy_from_slice);
    let pairs = items
        .chunks(2)
        .filter_map(|p| Some((bytes(p.first()?)?, bytes(p.get(1)?)?)))
        .collect();
    Some((next, pairs))
}

/// A children hash's entry: `"<child's base> <child id>"` ->
/// `"<outcome><result>"`.
fn child_result(field: &[u8], value: &[u8]) -> Option<ChildResult> {
    let field = std::str::from_utf8(field).ok()?;
    // Fields that start with a space are the counts (" a", " d", " c").
    let (base, id) = field.split_once(' ').filter(|(base, _)| !base.is_empty())?;
    let (&outcome, result) = value.split_first()?;
    let outcome = match outcome {
        b'a' => ChildOutcome::Acked,
        b'd' => ChildOutcome::Dead,
        _ => ChildOutcome::Cancelled,
    };
    Some(ChildResult {
        queue: Keys::name_of_base(base).to_string(),
        id: MessageId::from(id),
        outcome,
        result: (!result.is_empty()).then(|| result.to_vec()),
    })
}
