//! `list_groups`: one page of a shard's known groups (`lua/list_groups.lua`).

use std::time::{Duration, UNIX_EPOCH};

use fred::prelude::Value;

use super::{array, count, number, unexpected, Op};
use crate::store::keys::Keys;
use crate::store::scripts::{self, LuaScript};
use crate::{Error, GroupInfo, RateLimit};

/// Reads up to `limit` groups of a shard from `offset` on, in name order;
/// with `only`, that group alone (if the shard knows it).
pub(crate) struct ListGroups<'a> {
    pub offset: u64,
    pub limit: usize,
    pub only: Option<&'a str>,
}

/// One page of a shard's groups.
#[derive(Debug)]
pub(crate) struct GroupsOfShard {
    /// Known groups of the shard in all.
    pub total: u64,
    pub default_concurrency: Option<u64>,
    pub default_rate: Option<RateLimit>,
    pub groups: Vec<GroupInfo>,
}

/// A concurrency as the script returns it ('' none).
fn concurrency(v: &Value) -> Option<u64> {
    v.as_str()?.parse().ok()
}

/// A rate "<n> <period ms>" as the script returns it ('' none).
fn rate(v: &Value) -> Option<RateLimit> {
    let s = v.as_str()?;
    let (n, per) = s.split_once(' ')?;
    Some(RateLimit::new(
        n.parse().ok()?,
        Duration::from_millis(per.parse().ok()?),
    ))
}

impl Op for ListGroups<'_> {
    type Reply = GroupsOfShard;
    const KEYS: &'static [&'static str] = &["totals"];

    fn script() -> &'static LuaScript {
        &scripts::LIST_GROUPS
    }

    fn keys(&self, k: &Keys) -> Vec<String> {
        vec![k.totals.clone()]
    }

    fn args(&self, k: &Keys) -> Vec<Value> {
        let mut args = vec![
            k.group_prefix.as_str().into(),
            count(self.offset),
            count(self.limit as u64),
        ];
        args.extend(self.only.map(Value::from));
        args
    }

    fn reply(&self, v: Value) -> Result<Self::Reply, Error> {
        let reply = array::<Self>(v)?;
        let bad = || unexpected::<Self>(format!("{} values", reply.len()));
        let (head, rest) = reply.split_at_checked(3).ok_or_else(bad)?;
        if rest.len() % 7 != 0 {
            return Err(bad());
        }
        let groups = rest
            .chunks_exact(7)
            .map(|g| {
                Ok(GroupInfo {
                    name: g[0].as_string().ok_or_else(bad)?,
                    ready: number::<Self>(&g[1])?,
                    processing: number::<Self>(&g[2])?,
                    paused: number::<Self>(&g[3])? == 1,
                    concurrency: concurrency(&g[4]),
                    rate: rate(&g[5]),
                    waiting_until: g[6]
                        .as_str()
                        .and_then(|s| s.parse::<u64>().ok())
                        .map(|ms| UNIX_EPOCH + Duration::from_millis(ms)),
                })
            })
            .collect::<Result<Vec<_>, Error>>()?;
        Ok(GroupsOfShard {
            total: number::<Self>(&head[0])?,
            default_concurrency: concurrency(&head[1]),
            default_rate: rate(&head[2]),
            groups,
        })
    }
}
