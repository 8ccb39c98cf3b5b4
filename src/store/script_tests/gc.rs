//! gc.lua: deleting dead messages by age and count.

use super::Env;

#[tokio::test]
async fn gc_deletes_up_to_limit_dead_messages() {
    let env = Env::new().await;
    let k = env.k().clone();
    let dead = ["d1", "d2", "d3", "d4", "d5"];
    for id in dead {
        env.seed(id, Some("4"));
        env.bury(&[id]);
    }
    env.seed("live", Some("1"));
    env.raw(&["RPUSH", &k.retry, "live"]);

    assert_eq!(env.gc(3).await, 3);
    let left = env.dead();
    assert_eq!(left.len(), 2);
    for id in dead {
        let kept = left.iter().any(|l| l == id);
        assert_eq!(env.payload(id).is_some(), kept, "{id} payload");
        assert_eq!(env.record(id).is_some(), kept, "{id} record");
    }
    assert_eq!(env.gc(10).await, 2);
    assert_eq!(env.gc(10).await, 0);
    assert!(!env.exists(&k.dead));
    assert_eq!(env.payload("live").as_deref(), Some("payload-live"));
    assert_eq!(env.record("live").as_deref(), Some("1"));
    assert_eq!(env.list(&k.retry), vec!["live"]);
    assert_eq!(env.int(&["DBSIZE"]), 3, "live payload, attempts hash, retry list");
}

#[tokio::test]
async fn gc_deletes_by_age_then_the_oldest_beyond_the_cap() {
    let env = Env::new().await;
    let k = env.k().clone();
    let now = env.now_ms();
    // Died 10 s, 5 s, 3 s, 2 s and 1 s ago.
    for (id, ago) in [
        ("d10", 10_000),
        ("d5", 5_000),
        ("d3", 3_000),
        ("d2", 2_000),
        ("d1", 1_000),
    ] {
        env.seed(id, Some("4"));
        env.raw(&["ZADD", &k.dead, &(now - ago).to_string(), id]);
    }
    // Retention 4 s, at most 10 kept: only d10 and d5 go.
    assert_eq!(env.gc_with(100, 4_000, 10, &[]).await, 2);
    assert_eq!(env.dead(), vec!["d1", "d2", "d3"]);
    assert!(env.payload("d10").is_none() && env.record("d10").is_none());
    // At most 1 kept: the oldest two beyond it go, within the limit.
    assert_eq!(env.gc_with(1, 4_000, 1, &[]).await, 1);
    assert_eq!(env.dead(), vec!["d1", "d2"]);
    assert_eq!(env.gc_with(100, 4_000, 1, &[]).await, 1);
    assert_eq!(env.dead(), vec!["d1"]);
    assert_eq!(env.gc_with(100, 4_000, 1, &[]).await, 0, "idempotent");
    // By id: only dead letters are deleted.
    env.seed("live", None);
    env.raw(&["ZADD", &k.pending, "1", "live"]);
    assert_eq!(env.gc_with(100, 4_000, 10, &["live", "d1", "nope"]).await, 1);
    assert!(env.dead().is_empty());
    assert_eq!(env.payload("live").as_deref(), Some("payload-live"));
}
