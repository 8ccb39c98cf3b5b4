//! `stats`: the counts, ages and totals of a queue, taken atomically
//! (`lua/stats.lua`).

use std::time::Duration;

use fred::prelude::Value;

use super::{ints, state_keys, unexpected, Op};
use crate::store::keys::Keys;
use crate::store::scripts::{self, LuaScript};
use crate::{Counts, Error, QueueStatus, RateLimit, Totals};

/// Reads the status of one shard.
pub(crate) struct Stats;

impl Op for Stats {
    type Reply = QueueStatus;
    const KEYS: &'static [&'static str] = &["pending", "ready", "processing", "retry", "dead", "totals", "attempts"];

    fn script() -> &'static LuaScript {
        &scripts::STATS
    }

    fn keys(&self, k: &Keys) -> Vec<String> {
        let mut keys = state_keys(k);
        keys.push(k.totals.clone());
        keys.push(k.attempts.clone());
        keys
    }

    fn args(&self, k: &Keys) -> Vec<Value> {
        vec![
            k.prio.as_str().into(),
            k.group_prefix.as_str().into(),
            k.flow_waiting.as_str().into(),
            k.msg_prefix.as_str().into(),
        ]
    }

    fn reply(&self, v: Value) -> Result<Self::Reply, Error> {
        let v = ints::<Self>(v)?;
        let [pending, ready, processing, retry, dead_letters, now, oldest_due, oldest_dead, sent, acked, failed, dead, expired, paused, concurrency, rate, per, next, waiting, aborted] =
            v[..]
        else {
            return Err(unexpected::<Self>(format!("{v:?}")));
        };
        let n = |x: i64| u64::try_from(x).unwrap_or(0);
        let ms = |x: i64| Duration::from_millis(n(x));
        Ok(QueueStatus {
            counts: Counts {
                pending: n(pending),
                ready: n(ready),
                processing: n(processing),
                retry: n(retry),
                dead: n(dead_letters),
                waiting: n(waiting),
            },
            latency: (oldest_due >= 0).then(|| ms(now - oldest_due)),
            next_due: (next >= 0).then(|| ms(next - now)),
            oldest_dead: (oldest_dead >= 0).then(|| ms(now - oldest_dead)),
            totals: Totals {
                sent: n(sent),
                acked: n(acked),
                failed: n(failed),
                dead: n(dead),
                expired: n(expired),
                aborted: n(aborted),
            },
            paused: paused == 1,
            rate_limit: (rate > 0).then(|| RateLimit::new(n(rate), ms(per))),
            global_concurrency: (concurrency > 0).then(|| n(concurrency)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_of_another_length_is_unexpected() {
        let reply = Value::Array(vec![Value::Integer(1), Value::Integer(2)]);
        assert!(matches!(
            Stats.reply(reply),
            Err(Error::UnexpectedReply { script: "stats", .. })
        ));
    }
}
