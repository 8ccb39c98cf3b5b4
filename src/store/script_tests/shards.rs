//! shards.lua: the shard count a queue records once.

use std::time::Duration;

use crate::store::ops::purge::Purge;
use crate::store::ops::send::{Outgoing, SendBatch};
use crate::store::ops::shards::ShardRecord;
use crate::store::stored::{encode_stored, ValueParts};
use crate::Error;

use super::Env;

#[tokio::test]
async fn a_shard_count_is_recorded_once_and_refuses_other_counts_and_unsharded_sends() {
    let env = Env::new().await;
    let k = env.k().clone();
    assert_eq!(env.run(&ShardRecord::Read).await, None);
    assert_eq!(
        env.run(&ShardRecord::Claim(1)).await,
        None,
        "an ordinary queue records nothing"
    );
    assert!(!env.exists(&k.totals));
    assert_eq!(env.run(&ShardRecord::Claim(3)).await, Some(3));
    assert_eq!(env.raw(&["HGET", &k.totals, "shards"]), "3");
    assert_eq!(env.run(&ShardRecord::Claim(3)).await, Some(3), "idempotent");
    assert_eq!(env.run(&ShardRecord::Read).await, Some(3));

    let before = (env.snapshot(), env.lines(&["HGETALL", &k.totals]));
    let expect_refused = |what: &str, res: Result<(), Error>, uses: usize| match res {
        Err(Error::ShardCount { queue, found, expected }) => {
            assert_eq!((queue.as_str(), found, expected), ("q", 3, uses), "{what}")
        }
        other => panic!("{what}: expected ShardCount, got {other:?}"),
    };
    let store = env.store();
    for n in [1, 2, 4] {
        expect_refused("another count", store.run(&ShardRecord::Claim(n)).await.map(drop), n);
    }
    let outgoing = Outgoing {
        stage: None,
        mode: None,
        id: "new".into(),
        value: encode_stored(&ValueParts::new(3, b"x")).into(),
        delay: Duration::ZERO,
        expire_after: None,
        own_id: true,
        wait: false,
    };
    let send = SendBatch { msgs: vec![outgoing] };
    expect_refused("a send to the unsharded layout", store.run(&send).await.map(drop), 1);
    assert_eq!(
        (env.snapshot(), env.lines(&["HGETALL", &k.totals])),
        before,
        "nothing written"
    );
    let err = env
        .run_with_arg(&ShardRecord::Read, 1, "1025".into())
        .await
        .unwrap_err();
    assert!(err.details().contains("shard count must be"), "{err:?}");

    // Purge keeps the record: it names the queue, not its messages.
    env.raw(&["HSET", &k.totals, "sent", "5", "format", "1"]);
    while env.run(&Purge { limit: 100 }).await > 0 {}
    assert_eq!(
        env.lines(&["HMGET", &k.totals, "format", "shards", "sent"]),
        ["1", "3", "(nil)"]
    );
}
