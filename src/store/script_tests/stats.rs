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
    assert!(status.latency.unwrap() > Duration::from_secs(60), "p3, due at 1 ms");
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
async fn status_reports_latency_and_dead_ages_and_totals() {
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
    let latency = s.latency.unwrap().as_millis();
    assert!((5_000..6_000).contains(&latency), "{latency}");
    assert!(s.next_due.is_none());
    assert!(s.oldest_dead.unwrap() >= Duration::from_secs(60));
    assert_eq!((s.totals.sent, s.totals.acked, s.totals.failed), (7, 3, 0));
    env.raw(&["ZADD", &k.pending, &(now + 60_000).to_string(), "late"]);
    let s = env.queue.status().await.unwrap();
    assert!(s.latency.is_none() && s.next_due.unwrap() > Duration::from_secs(50));
    assert_eq!((s.counts.pending, s.counts.ready), (1, 0));
}

/// The lists a due message may wait in to start.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Held {
    Pending,
    Ready,
    Retry,
    Priority,
    Group,
}

/// 2^42, the span of one priority's scores (PRIO_SPAN in lua/include/priorities.lua).
const PRIO_SPAN: i64 = 1 << 42;

/// Seeds message `id` due `age_ms` ago in list `held`, as the scripts
/// leave it there. A ready, retry or priority entry comes after the entry
/// of a cancelled message, which is skipped.
fn seed_due(env: &Env, held: Held, id: &str, age_ms: i64) {
    let k = env.k().clone();
    let due = env.now_ms() - age_ms;
    match held {
        Held::Pending => {
            env.seed(id, None);
            env.raw(&["ZADD", &k.pending, &due.to_string(), id]);
        }
        Held::Ready => {
            env.seed_value(id, &format!("3/{due}+0:{id}"), None);
            env.raw(&["RPUSH", &k.ready, "cancelled", id]);
        }
        Held::Retry => {
            // Its retry's due time is in its attempt record, not its header.
            let sent = due - 60_000;
            env.seed_value(id, &format!("3/{sent}+0:{id}"), Some(&format!("1@{due}")));
            env.raw(&["RPUSH", &k.retry, "cancelled", id]);
        }
        Held::Priority => {
            env.seed_value(id, &format!("3!5/{due}+0:{id}"), None);
            let score = 5 * PRIO_SPAN + due;
            // Ahead of it, a cancelled message's entry (which sets STALE).
            let cancelled = format!("cancelled-{id}");
            env.raw(&[
                "ZADD",
                &k.prio,
                &score.to_string(),
                id,
                &(score - 60_000).to_string(),
                &cancelled,
            ]);
            env.mark_stale();
            env.raw(&["HSET", &k.totals, "prios", "1"]);
        }
        Held::Group => {
            let group = format!("g-{id}");
            env.seed_value(id, &format!("3={group}/{due}+0:{id}"), None);
            let score = 10 * PRIO_SPAN + due;
            env.raw(&[
                "ZADD",
                &env.group_key(&format!(":{group}:ready")),
                &score.to_string(),
                id,
            ]);
            let last = env.lines(&["ZRANGE", &env.group_key("ring"), "-1", "-1", "WITHSCORES"]);
            let turn = last.get(1).map_or(1, |s| s.parse::<i64>().unwrap() + 1);
            env.raw(&["ZADD", &env.group_key("ring"), &turn.to_string(), &group]);
            env.raw(&["ZADD", &env.group_key("known"), "0", &group]);
            env.raw(&["INCRBY", &env.group_key("ready"), "1"]);
            env.raw(&["HSET", &k.totals, "groups", "1"]);
        }
    }
}

#[tokio::test]
async fn latency_is_the_wait_of_the_oldest_due_message_whichever_list_holds_it() {
    use Held::*;
    let all = [Pending, Ready, Retry, Priority, Group];
    let mut wrong = Vec::new();
    for oldest in all {
        let env = Env::new().await;
        // A higher priority due later, so the oldest is not the zset's head.
        seed_due(&env, Priority, "urgent", 1_000);
        env.raw(&[
            "ZADD",
            &env.k().prio,
            &(PRIO_SPAN + env.now_ms() - 1_000).to_string(),
            "urgent",
        ]);
        for held in all {
            let (id, age) = if held == oldest {
                ("old", 9_000)
            } else {
                ("young", 2_000)
            };
            seed_due(&env, held, &format!("{id}-{held:?}"), age);
        }
        let state = env.snapshot();
        let s = env.queue.status().await.unwrap();
        let waited = s.latency.map(|d| d.as_millis());
        if !waited.is_some_and(|ms| (9_000..10_000).contains(&ms)) {
            wrong.push(format!("oldest (9 s) in {oldest:?}: {waited:?} ms"));
        }
        assert_eq!(env.snapshot(), state, "read-only");
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}
