//! stats.lua: counts per state and the status built on them.

use std::time::Duration;

use crate::Counts;

use super::Env;

#[tokio::test]
async fn stats_counts_every_state() {
    let env = Env::new().await;
    let k = env.k().clone();
    assert_eq!(env.stats().await, vec![0, 0, 0, 0, 0]);
    // Two pending messages not due yet, one due (so counted as ready).
    let later = (env.now_ms() + 3_600_000).to_string();
    env.raw(&["ZADD", &k.pending, &later, "p1", &later, "p2", "1", "p3"]);
    env.raw(&["RPUSH", &k.ready, "r1", "r2", "r3"]);
    env.raw(&["ZADD", &k.processing, "1", "u1"]);
    env.raw(&["RPUSH", &k.retry, "t1", "t2", "t3", "t4"]);
    env.bury(&["g1", "g2", "g3", "g4", "g5"]);
    let state = env.snapshot();
    assert_eq!(env.stats().await, vec![2, 4, 1, 4, 5]);
    let status = env.queue.status().await.unwrap();
    assert!(
        status.oldest_overdue.unwrap() > Duration::from_secs(60),
        "p3, due at 1 ms"
    );
    assert!(status.next_due.unwrap() > Duration::from_secs(3000), "p1");
    assert_eq!(
        env.queue.counts().await.unwrap(),
        Counts {
            pending: 2,
            ready: 4,
            processing: 1,
            retry: 4,
            dead: 5,
            waiting: 0,
        }
    );
    assert_eq!(env.snapshot(), state, "read-only");
}

#[tokio::test]
async fn status_reports_overdue_and_dead_ages_and_totals() {
    let env = Env::new().await;
    let k = env.k().clone();
    let now = env.now_ms();
    env.raw(&["ZADD", &k.pending, &(now - 5_000).to_string(), "late"]);
    env.raw(&["ZADD", &k.dead, &(now - 60_000).to_string(), "old"]);
    env.raw(&["HSET", &k.totals, "sent", "7", "acked", "3"]);
    let s = env.queue.status().await.unwrap();
    assert_eq!(
        (s.counts.pending, s.counts.ready, s.counts.dead),
        (0, 1, 1),
        "due: ready"
    );
    let overdue = s.oldest_overdue.unwrap().as_millis();
    assert!((5_000..6_000).contains(&overdue), "{overdue}");
    assert!(s.next_due.is_none());
    assert!(s.oldest_dead.unwrap() >= Duration::from_secs(60));
    assert_eq!((s.totals.sent, s.totals.acked, s.totals.failed), (7, 3, 0));
    env.raw(&["ZADD", &k.pending, &(now + 60_000).to_string(), "late"]);
    let s = env.queue.status().await.unwrap();
    assert!(s.oldest_overdue.is_none() && s.next_due.unwrap() > Duration::from_secs(50));
    assert_eq!((s.counts.pending, s.counts.ready), (1, 0));
}
