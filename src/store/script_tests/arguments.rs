//! The argument checks every batch script shares.

use std::time::Duration;

use fred::prelude::Value;

use crate::store::ops::gc::Gc;
use crate::store::ops::list::List;
use crate::store::ops::promote::Promote;
use crate::store::ops::purge::Purge;
use crate::store::ops::requeue::Requeue;
use crate::store::ops::scan::{Scan, Scanned};
use crate::store::ops::timeout::Timeout;
use crate::store::ops::IdKey;
use crate::MessageState;

use super::{ms, with_arg, Env};

#[tokio::test]
async fn every_limit_below_1_is_refused_before_a_range_read() {
    let env = Env::new().await;
    let k = env.k().clone();
    for i in 0..5 {
        let id = format!("m{i}");
        env.seed(&id, Some("1"));
        env.raw(&["RPUSH", &k.ready, &id]);
        env.raw(&["ZADD", &k.pending, "1", &id]);
        env.raw(&["ZADD", &k.processing, "1", &id]);
        env.raw(&["ZADD", &k.dead, "1", &id]);
    }
    let before = env.snapshot();
    for text in ["0", "-1", "1.5", "1001", "x"] {
        let limit = Value::from(text);
        let timeout = Timeout {
            limit: 1,
            default_retry_count: 3,
            dead_letter_retention: ms(1000),
        };
        let gc = Gc {
            limit: 1,
            dead_letter_retention: Duration::ZERO,
            max_kept: 0,
            ids: vec![],
        };
        let list = |limit| List {
            state: MessageState::Ready,
            offset: 0,
            limit,
            preview: 36,
        };
        let scan = Scan {
            of: Scanned::Ids(IdKey::Ready),
            cursor: "0",
            page: 1,
        };
        // Each with its limit (ARGV[i]) replaced.
        let calls = vec![
            with_arg(&Promote { limit: 1, room: 1 }, &k, 1, limit.clone()),
            with_arg(&timeout, &k, 2, limit.clone()),
            with_arg(&gc, &k, 2, limit.clone()),
            with_arg(&Requeue { limit: 1, ids: vec![] }, &k, 2, limit.clone()),
            with_arg(&Purge { limit: 1 }, &k, 2, limit.clone()),
            with_arg(&list(1), &k, 3, limit.clone()),
            // The bytes of each value to return.
            with_arg(&list(10), &k, 5, limit.clone()),
            with_arg(&scan, &k, 3, limit.clone()),
        ];
        for (script, keys, args) in calls {
            env.reset_command_stats();
            let res = script.call::<Value>(&env.client, keys, args).await;
            let err = res.expect_err(&format!("{} with limit {text}", script.name));
            assert!(err.details().contains("limit"), "{}: {err:?}", script.name);
            for cmd in ["lrange", "zrange", "zrangebyscore", "getrange"] {
                assert_eq!(env.command_calls(cmd), 0, "{} read with {cmd}", script.name);
            }
        }
    }
    assert_eq!(env.snapshot(), before);
}
