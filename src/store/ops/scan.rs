//! `scan`: one page of the ids one key holds, for the integrity check
//! (`lua/scan.lua`).

use fred::prelude::Value;

use super::{array, count, id_keys, unexpected, IdKey, Op};
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
        let of = match self.of {
            Scanned::Ids(key) => key as i64,
            Scanned::IdleGroups => 9,
            Scanned::UnknownGroups => 10,
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
