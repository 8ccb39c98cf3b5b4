//! timeout.lua: taking back overdue deliveries.

use super::{assert_pttl_near, Env, RETENTION};

#[tokio::test]
async fn timeout_takes_back_only_overdue_deliveries() {
    let env = Env::new().await;
    let k = env.k().clone();
    let now = env.now_us();
    let zadd = |id: &str, score: i64| env.raw(&["ZADD", &k.processing, &score.to_string(), id]);
    env.seed("late1", Some("1"));
    zadd("late1", now - 3_000);
    env.seed("dead", Some("4"));
    zadd("dead", now - 2_000);
    env.seed("late2", None); // no record: delivery 1 of default
    zadd("late2", now - 1_000);
    env.seed("ontime", Some("1"));
    zadd("ontime", now + 60_000_000);

    // Each buried id comes back with its delivery count.
    let reply = env.timed_out(1000).await;
    assert_eq!((reply.count, reply.dead), (3, vec![("dead".into(), 4)]));
    assert_eq!(env.list(&k.retry), vec!["late1", "late2"], "in deadline order");
    assert_eq!(env.dead(), vec!["dead"]);
    assert_eq!(env.zset(&k.processing), vec![("ontime".to_string(), now + 60_000_000)]);
    // Counts untouched (the claim counted the delivery), the reason
    // recorded, a retried one due now.
    assert_eq!(env.record("late1").as_deref(), Some("1@:timeout"));
    assert_eq!(env.record("dead").as_deref(), Some("4:timeout"));
    let due = env.record_due("late1").expect("due");
    assert!((now / 1000..=env.now_ms()).contains(&due), "due {due}");
    assert_eq!(
        env.record("late2").as_deref(),
        Some("1@:timeout"),
        "no record: delivery 1"
    );
    // A retried payload stays without TTL; a buried one gets the retention.
    assert_eq!((env.pttl("late1"), env.pttl("late2")), (-1, -1));
    assert_eq!(env.payload("dead").as_deref(), Some("payload-dead"));
    assert_pttl_near(env.pttl("dead"), RETENTION);

    // Idempotent.
    let state = env.snapshot();
    assert_eq!(env.timeout(1000).await, vec![0, 0]);
    assert_eq!(env.snapshot(), state);
}

#[tokio::test]
async fn timeout_is_bounded_by_limit() {
    let env = Env::new().await;
    let k = env.k().clone();
    let now = env.now_us();
    for i in 0..5i64 {
        let id = format!("t{i}");
        env.seed(&id, Some(if i == 1 { "9" } else { "1" }));
        env.raw(&["ZADD", &k.processing, &(now - 10_000 + i).to_string(), &id]);
    }
    assert_eq!(env.timeout(2).await, vec![2, 1]);
    assert_eq!(env.list(&k.retry), vec!["t0"]);
    assert_eq!(env.dead(), vec!["t1"]);
    assert_eq!(env.int(&["ZCARD", &k.processing]), 3);
    assert_eq!(env.timeout(2).await, vec![2, 0]);
    assert_eq!(env.timeout(2).await, vec![1, 0]);
    assert_eq!(env.list(&k.retry), vec!["t0", "t2", "t3", "t4"]);
    assert!(!env.exists(&k.processing));
}
