//! Reading flows (docs/workflows.md): a parent's finished children with
//! their results (`{q}:children:<parent>`, written by `flow_complete.lua`),
//! and what a flow's tree shows of one node: its counts, its links to its
//! parents, a page of its children and their states.
//!
//! Plain reads, no script: each command reads one key, and a display needs
//! no snapshot of several. A child only ever moves from its parent's
//! `deps` set to its `children` hash, so a page that reads the set before
//! the hash never misses one (it may show one twice); and a tree spans
//! queues, so one script could not read it anyway.

use std::fmt;

use fred::bytes::Bytes;
use fred::prelude::{ClientLike, HashesInterface, SetsInterface, Value};
use fred::types::{ClusterHash, CustomCommand};

use crate::flow::wire::{ChildRef, ParentLink};
use crate::flow::{ChildOutcome, ChildResult, ChildrenPage};
use crate::maxima::MAX_BATCH_SIZE;
use crate::store::ops::inspect::Inspect;
use crate::store::{Keys, Shard};
use crate::{Error, MessageId, MessageState};

/// Scan calls one page of a node's children makes at most: a sparse
/// set or hash can answer a call with nothing, and a page must end.
const MAX_SCAN_CALLS: usize = 16;

/// The fields of a children hash that count its finished children
/// (acked, dead, cancelled), as `flow_complete.lua` writes them.
const COUNT_FIELDS: [&str; 3] = [" a", " d", " c"];

/// Where a page of a node's children starts: in the set of those it waits
/// for, or after it in the hash of the finished ones; the scan cursor
/// there, and how many entries of that scan call's reply earlier pages
/// took. Written `u<scan>.<skip>` or `f<scan>.<skip>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ChildCursor {
    finished: bool,
    scan: String,
    skip: usize,
}

impl ChildCursor {
    /// The first page.
    pub(crate) fn start() -> Self {
        ChildCursor {
            finished: false,
            scan: "0".into(),
            skip: 0,
        }
    }

    /// A cursor as [`fmt::Display`] wrote it.
    pub(crate) fn parse(s: &str) -> Result<Self, Error> {
        let bad = || Error::InvalidArgument(format!("{s:?} is not a cursor of a flow's children"));
        let finished = match s.as_bytes().first() {
            Some(b'u') => false,
            Some(b'f') => true,
            _ => return Err(bad()),
        };
        let (scan, skip) = s[1..].split_once('.').ok_or_else(bad)?;
        // A scan cursor is an unsigned 64-bit number (Redis refuses others).
        if scan.is_empty() || !scan.bytes().all(|b| b.is_ascii_digit()) || scan.parse::<u64>().is_err() {
            return Err(bad());
        }
        let skip = skip.parse().map_err(|_| bad())?;
        Ok(ChildCursor {
            finished,
            scan: scan.to_string(),
            skip,
        })
    }
}

impl fmt::Display for ChildCursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let phase = if self.finished { 'f' } else { 'u' };
        write!(f, "{phase}{}.{}", self.scan, self.skip)
    }
}

/// A child as its parent's set or hash names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ChildEntry {
    /// The base of the child's shard keys.
    pub base: String,
    pub id: String,
    /// `None` while the parent waits for it.
    pub outcome: Option<ChildOutcome>,
    /// The parent keeps a copy of its result.
    pub result: bool,
}

impl Shard<'_> {
    /// One page of the finished children of parent `id` (HSCAN from `cursor`).
    pub(crate) async fn children(&self, id: &str, cursor: Option<&str>) -> Result<ChildrenPage, Error> {
        let (next, fields) = self
            .scan("HSCAN", self.keys.children(id), cursor.unwrap_or("0"), MAX_BATCH_SIZE)
            .await?;
        let items = fields
            .chunks(2)
            .filter_map(|p| child_result(p.first()?, p.get(1)?))
            .collect();
        Ok(ChildrenPage {
            items,
            next: (next != "0").then_some(next),
        })
    }

    /// How many children node `id` still waits for, and how many finished.
    /// An open cohort's callback also waits for the cohort's close (a member
    /// with its own base and an empty id): that one is no child.
    pub(crate) async fn flow_counts(&self, id: &str) -> Result<(u64, u64), Error> {
        let deps = self.keys.deps(id);
        let close = self.keys.open_cohort_member();
        let (waits, open, counts) = futures::try_join!(
            self.client.scard::<u64, _>(&deps),
            self.client.sismember::<bool, _, _>(&deps, close.member()),
            self.client
                .hmget::<Vec<Option<u64>>, _, _>(self.keys.children(id), COUNT_FIELDS.to_vec()),
        )
        .map_err(|e| Error::from_redis(self.queue, e))?;
        Ok((waits - u64::from(open), counts.into_iter().flatten().sum()))
    }

    /// The parents message `id` is linked to, as long as it has not
    /// finished (its completion removes its links).
    pub(crate) async fn parent_links(&self, id: &str) -> Result<Vec<ParentLink>, Error> {
        let links: Option<String> = self
            .client
            .hget(self.keys.parents(), id)
            .await
            .map_err(|e| Error::from_redis(self.queue, e))?;
        Ok(links
            .iter()
            .flat_map(|l| l.lines())
            .filter_map(ParentLink::parse)
            .collect())
    }

    /// At most `n` children of node `id` from `cursor`, and where the next
    /// page starts (`None` after the last): those it waits for (SSCAN of
    /// its set), then the finished ones (HSCAN of its hash); in a page,
    /// each part by queue and id.
    pub(crate) async fn child_page(
        &self,
        id: &str,
        cursor: ChildCursor,
        n: usize,
    ) -> Result<(Vec<ChildEntry>, Option<ChildCursor>), Error> {
        let (out, next) = self.scan_children(id, cursor, n).await?;
        Ok((sorted(out), next))
    }

    async fn scan_children(
        &self,
        id: &str,
        cursor: ChildCursor,
        n: usize,
    ) -> Result<(Vec<ChildEntry>, Option<ChildCursor>), Error> {
        let mut out = Vec::new();
        let mut at = cursor;
        for _ in 0..MAX_SCAN_CALLS {
            let (next, entries) = if at.finished {
                let (next, items) = self.scan("HSCAN", self.keys.children(id), &at.scan, n).await?;
                let entries: Vec<_> = items.chunks(2).map(finished_entry).collect();
                (next, entries)
            } else {
                let (next, items) = self.scan("SSCAN", self.keys.deps(id), &at.scan, n).await?;
                (next, items.iter().map(|m| waited_entry(m)).collect())
            };
            for (taken, entry) in entries.into_iter().enumerate().skip(at.skip) {
                if out.len() == n {
                    return Ok((out, Some(ChildCursor { skip: taken, ..at })));
                }
                out.extend(entry);
            }
            at = match (next == "0", at.finished) {
                (false, finished) => ChildCursor {
                    finished,
                    scan: next,
                    skip: 0,
                },
                (true, false) => ChildCursor {
                    finished: true,
                    ..ChildCursor::start()
                },
                (true, true) => return Ok((out, None)),
            };
            if out.len() == n {
                break;
            }
        }
        Ok((out, Some(at)))
    }

    /// The state of each of `ids` (inspect.lua, 1000 ids a call); `None`
    /// for an id the shard does not store.
    pub(crate) async fn states(&self, ids: &[&str]) -> Result<Vec<Option<MessageState>>, Error> {
        let mut states = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(MAX_BATCH_SIZE) {
            let found = self.run(&Inspect { ids: chunk.to_vec() }).await?;
            states.extend(found.found.iter().map(|p| p.states(found.stale).first().copied()));
        }
        Ok(states)
    }

    /// One `cmd` (SSCAN or HSCAN) call on `key` from `cursor`: the next
    /// cursor and the reply's items (a hash's as field, value, ...).
    async fn scan(
        &self,
        cmd: &'static str,
        key: String,
        cursor: &str,
        count: usize,
    ) -> Result<(String, Vec<Bytes>), Error> {
        let slot = ClusterHash::Custom(fred::util::redis_keyslot(key.as_bytes()));
        self.client
            .custom(
                CustomCommand::new_static(cmd, slot, false),
                vec![Value::from(key), cursor.into(), "COUNT".into(), (count as i64).into()],
            )
            .await
            .map(scan_page)
            .map_err(|e| Error::from_redis(self.queue, e))?
            .ok_or_else(|| Error::Internal(format!("{cmd} replied with something else than a page")))
    }
}

/// A page's children in a fixed order (a scan's is the server's): those
/// its parent waits for first, then by queue and id.
fn sorted(mut page: Vec<ChildEntry>) -> Vec<ChildEntry> {
    page.sort_by(|a, b| (a.outcome.is_some(), &a.base, &a.id).cmp(&(b.outcome.is_some(), &b.base, &b.id)));
    page
}

/// A scan reply: the next cursor and the items.
fn scan_page(v: Value) -> Option<(String, Vec<Bytes>)> {
    let Value::Array(mut parts) = v else { return None };
    let items = match parts.pop()? {
        Value::Array(items) => items,
        _ => return None,
    };
    let next = parts.pop()?.as_string()?;
    let items = items
        .iter()
        .map(|v| v.as_bytes().map(Bytes::copy_from_slice))
        .collect::<Option<_>>()?;
    Some((next, items))
}

/// A member of a parent's set: a child it waits for.
fn waited_entry(member: &[u8]) -> Option<ChildEntry> {
    let (base, id) = ChildRef::parse(member)?;
    Some(ChildEntry {
        base: base.to_string(),
        id: id.to_string(),
        outcome: None,
        result: false,
    })
}

/// A field, value pair of a parent's hash: a finished child.
fn finished_entry(pair: &[Bytes]) -> Option<ChildEntry> {
    let c = child_result(pair.first()?, pair.get(1)?)?;
    let (base, _) = ChildRef::parse(pair.first()?)?;
    Some(ChildEntry {
        base: base.to_string(),
        id: c.id.to_string(),
        outcome: Some(c.outcome),
        result: c.result.is_some(),
    })
}

/// A children hash's entry: `"<child's base> <child id>"` ->
/// `"<outcome><result>"`.
fn child_result(field: &[u8], value: &[u8]) -> Option<ChildResult> {
    let (base, id) = ChildRef::parse(field)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_read_back_and_bad_ones_are_refused() {
        let c = ChildCursor {
            finished: true,
            scan: "123".into(),
            skip: 7,
        };
        assert_eq!(c.to_string(), "f123.7");
        assert_eq!(ChildCursor::parse("f123.7").unwrap(), c);
        assert_eq!(
            ChildCursor::parse(&ChildCursor::start().to_string()).unwrap(),
            ChildCursor::start()
        );
        for bad in [
            "",
            "x0.0",
            "u.0",
            "u0",
            "u0.x",
            "u-1.0",
            "u1 2.0",
            "u+1.0",
            "u18446744073709551616.0",
        ] {
            assert!(
                matches!(ChildCursor::parse(bad), Err(Error::InvalidArgument(_))),
                "{bad:?} accepted"
            );
        }
    }

    #[test]
    fn finished_children_are_read_from_their_wire_form() {
        let e = finished_entry(&[Bytes::from_static(b"dq:{mail}: m-1"), Bytes::from_static(b"dok")]).unwrap();
        assert_eq!((e.base.as_str(), e.id.as_str()), ("dq:{mail}:", "m-1"));
        assert_eq!((e.outcome, e.result), (Some(ChildOutcome::Dead), true));
    }
}
