//! purge.lua: deleting a queue's messages in bounded calls.

use crate::store::ops::limits::{Limit, SetLimit};
use crate::store::ops::pause::Pause;
use crate::store::ops::purge::Purge;
use crate::store::ops::stats::Stats;

use super::{seed_processing, Env, Msg, NEVER, RETRY};

#[tokio::test]
async fn purge_keeps_a_paused_queue_paused_and_drops_its_counts() {
    let env = Env::new().await;
    let k = env.k().clone();
    env.send_many(&[("a", "x", 0, NEVER, RETRY)]).await;
    env.run(&Pause { paused: true }).await;
    while env.run(&Purge { limit: 10 }).await != 0 {}
    assert_eq!(env.keys(), vec![k.totals.clone()]);
    // The setting stays in the format it was written in.
    assert_eq!(env.lines(&["HKEYS", &k.totals]), vec!["format", "paused"]);
    assert!(env.run(&Stats).await.paused);
}

#[tokio::test]
async fn purge_keeps_the_limits_and_drops_the_rate_count() {
    let env = Env::new().await;
    let k = env.k().clone();
    env.send_many(&[("a", "x", 0, NEVER, RETRY)]).await;
    env.promote(10).await;
    let rate = SetLimit {
        limit: Limit::Rate(Some((10, 1000))),
    };
    env.run(&rate).await;
    env.run(&SetLimit {
        limit: Limit::Concurrency(Some(2)),
    })
    .await;
    assert_eq!(env.claim(10).await.ids(), vec!["a"]);
    assert_eq!(env.int(&["HEXISTS", &k.totals, "rate_used"]), 1);
    while env.run(&Purge { limit: 10 }).await != 0 {}
    let mut fields = env.lines(&["HKEYS", &k.totals]);
    fields.sort();
    assert_eq!(fields, vec!["concurrency", "format", "rate"]);
}

#[tokio::test]
async fn purge_deletes_every_message_in_bounded_calls() {
    let env = Env::new().await;
    let k = env.k().clone();
    let ids: Vec<String> = (0..30).map(|i| format!("p{i}")).collect();
    let batch: Vec<Msg> = ids.iter().map(|id| (id.as_str(), "x", 60_000, NEVER, RETRY)).collect();
    env.send_many(&batch).await;
    env.seed("rd", None);
    env.raw(&["RPUSH", &k.ready, "rd", "stale"]);
    seed_processing(&env, "u", "1");
    env.seed("g", Some("4"));
    env.bury(&["g"]);
    let purge = || env.run(&Purge { limit: 10 });
    let mut removed = Vec::new();
    loop {
        let n = purge().await;
        removed.push(n);
        if n == 0 {
            break;
        }
    }
    assert_eq!(
        removed,
        vec![10, 10, 10, 4, 0],
        "30 pending, processing, dead, 2 ready entries"
    );
    assert!(env.keys().is_empty(), "left: {:?}", env.keys());
}
