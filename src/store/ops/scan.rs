//! `scan`: one page of the ids one key holds, for the integrity check
//! (`lua/scan.lua`).

use std::time::Duration;

use fred::prelude::Value;

use super::{array, count, id_keys, ms, unexpected, IdKey, Op};
use crate::store::keys::{glob_escape, Keys};
use crate::store::scripts::{self, LuaScript};
use crate::Error;

/// At most about `page` ids (or groups) of `of`, from `cursor` ("0" to start).
pub(crate) struct Scan<'a> {
    pub of: Scanned,
    pub cursor: &'a str,
    pub page: usize,
}

/// What a [`Scan`] pages through.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Scanned {
    /// The ids one key holds.
    Ids(IdKey),
    /// The known groups with nothing in them.
    IdleGroups,
    /// The groups named by a group's zset or count in processing that are
    /// not known.
    UnknownGroups,
    /// The parents whose deps set is left: not waiting, and no cancel of
    /// theirs being relayed.
    OrphanDeps,
    /// The parents whose children hash is left: neither stored nor dead.
    OrphanChildren,
    /// The children whose links to parents are left: neither stored nor
    /// dead.
    OrphanLinks,
    /// The outbox entries older than this, each as `"<age ms> <entry>"`.
    OldOutbox(Duration),
}

/// One page of ids.
#[derive(Debug)]
pub(crate) struct ScanPage {
    /// Where the next page starts; `None` after the last.
    pub next: Option<String>,
    /// For the attempts hash its fields; for payload keys the ids they end with.
    pub ids: Vec<String>,
}

impl Op for Scan<'_> {
    type Reply = ScanPage;
    const KEYS: &'static [&'static str] = &["pending", "ready", "processing", "retry", "dead", "attempts"];

    fn script() -> &'static LuaScript {
        &scripts::SCAN
    }

    fn keys(&self, k: &Keys) -> Vec<String> {
        id_keys(k)
    }

    fn args(&self, k: &Keys) -> Vec<Value> {
        let (of, age) = match self.of {
            Scanned::Ids(key) => (key as i64, Duration::ZERO),
            Scanned::IdleGroups => (9, Duration::ZERO),
            Scanned::UnknownGroups => (10, Duration::ZERO),
            Scanned::OrphanDeps => (14, Duration::ZERO),
            Scanned::OrphanChildren => (15, Duration::ZERO),
            Scanned::OrphanLinks => (16, Duration::ZERO),
            Scanned::OldOutbox(age) => (17, age),
        };
        vec![
            of.into(),
            self.cursor.into(),
            count(self.page as u64),
            k.msg_prefix.as_str().into(),
            glob_escape(&k.msg_prefix).into(),
            k.marker_prefix.as_str().into(),
            glob_escape(&k.marker_prefix).into(),
            k.group_prefix.as_str().into(),
            glob_escape(&k.group_prefix).into(),
            k.result_prefix.as_str().into(),
            glob_escape(&k.result_prefix).into(),
            k.progress_prefix.as_str().into(),
            glob_escape(&k.progress_prefix).into(),
            k.log_prefix.as_str().into(),
            glob_escape(&k.log_prefix).into(),
            glob_escape(&k.base).into(),
            ms(age),
        ]
    }

    fn reply(&self, v: Value) -> Result<Self::Reply, Error> {
        let mut reply = array::<Self>(v)?.into_iter().map(|v| v.as_string());
        let next = reply
            .next()
            .flatten()
            .ok_or_else(|| unexpected::<Self>("empty reply"))?;
        let ids = reply
            .collect::<Option<Vec<String>>>()
            .ok_or_else(|| unexpected::<Self>("an id is not text"))?;
        Ok(ScanPage {
            next: (next != "0").then_some(next),
            ids,
        })
    }
}
