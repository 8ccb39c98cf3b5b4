//! requeue.lua: moving dead messages back to ready.

use std::time::Duration;

use crate::store::ops::requeue::Requeue;

use super::{Env, RETENTION, RETRY};

#[tokio::test]
async fn requeue_moves_dead_letters_to_ready_with_fresh_retries() {
    let env = Env::new().await;
    let k = env.k().clone();
    for id in ["a", "b", "c"] {
        env.seed(id, Some("4:HTTP 503"));
    }
    // b expired: its deadline (long past) is in its header.
    env.seed_value("b", &format!("{RETRY};f5@1000:payload-b"), Some("0:expired"));
    env.bury(&["a", "b", "c"]);
    // Dead letters' payloads carry the retention as TTL.
    for id in ["a", "b"] {
        env.raw(&["PEXPIRE", &k.msg(id), &RETENTION.to_string()]);
    }
    env.raw(&["PEXPIRE", &k.msg("c"), "1"]);
    tokio::time::sleep(Duration::from_millis(5)).await;
    let requeue = |ids: &[&'static str]| {
        let op = Requeue {
            limit: 1000,
            ids: ids.to_vec(),
        };
        let env = &env;
        async move {
            let done = env.run(&op).await;
            vec![done.requeued, done.taken]
        }
    };
    let mut wakes = env.subscribe().await;
    let requeued_from = env.now_ms();
    assert_eq!(requeue(&["a", "unknown"]).await, vec![1, 1]);
    assert_eq!(wakes.next().await, "0");
    assert_eq!(env.list(&k.ready), vec!["a"]);
    assert_eq!(env.record("a").as_deref(), Some("0@"), "count and reason cleared");
    let due = env.record_due("a").expect("due at the requeue");
    assert!((requeued_from..=env.now_ms()).contains(&due), "due {due}");
    assert_eq!(env.pttl("a"), -1, "live again: no TTL");
    // All: b goes back, without its deadline; c, whose payload is gone, is
    // deleted instead.
    assert_eq!(requeue(&[]).await, vec![1, 2]);
    assert_eq!(env.list(&k.ready), vec!["a", "b"]);
    assert_eq!(env.pttl("b"), -1);
    assert_eq!(env.stored("b"), Some(format!("{RETRY};f5:payload-b")));
    assert!(env.dead().is_empty() && env.record("c").is_none());
    assert_eq!(requeue(&["a"]).await, vec![0, 0], "idempotent");
    let c = env.claim(10).await;
    let got: Vec<i64> = c.got.iter().map(|d| d.2).collect();
    assert_eq!(got, vec![1, 1], "first deliveries again");
}
