//! Priorities: promote.lua moves them to their zset, claim.lua takes them first.

use crate::store::stored::{encode_stored, ValueParts};

use super::{Env, NEVER, RETRY};
use crate::store::ops::claim::Held;

/// 2^42, the span of one priority's scores (PRIO_SPAN in lua/include/priorities.lua).
const PRIO_SPAN: i64 = 1 << 42;

/// Sends each (id, priority), due now, its payload its id.
async fn send_due(env: &Env, sends: &[(&str, u8)]) {
    for &(id, p) in sends {
        let value = encode_stored(&ValueParts {
            retry_count: 3,
            priority: p,
            payload: id.as_bytes(),
            ..Default::default()
        });
        assert_eq!(env.send_values(&[(id, value, 0, NEVER, false)]).await, vec![1]);
    }
}

#[tokio::test]
async fn priorities_go_to_the_priority_zset_and_claim_takes_them_first() {
    let env = Env::new().await;
    let k = env.k().clone();
    // A queue that never used priorities: promote reads no header, and
    // neither the 'prios' field nor the zset exist.
    assert_eq!(env.send("plain", "p", 0, NEVER, RETRY).await, 1);
    env.reset_command_stats();
    assert_eq!(env.promote(1000).await[0], 1);
    assert_eq!(env.command_calls("getrange"), 0);
    assert_eq!(env.command_calls("zadd"), 0);
    assert!(!env.exists(&k.prio));
    assert_eq!(env.raw(&["HEXISTS", &k.totals, "prios"]), "0");

    // (id, priority, ms before now it is due) sent in this order.
    let sends = [
        ("a0", 0, 50),
        ("b7", 7, 20),
        ("c9", 9, 30),
        ("d7", 7, 40),
        ("e0", 0, 10),
    ];
    let now = env.now_ms();
    for (id, p, ago) in sends {
        send_due(&env, &[(id, p)]).await;
        env.raw(&["ZADD", &k.pending, "XX", &(now - ago).to_string(), id]);
    }
    assert_eq!(env.stored("b7").as_deref(), Some("3!7:b7"));
    assert_eq!(env.stored("a0").as_deref(), Some("3:a0"));
    assert_eq!(env.hget(&k.totals, "prios"), "1");
    let due: Vec<(String, i64)> = env.zset(&k.pending);
    assert_eq!(env.promote(1000).await[0], 5);
    assert_eq!(env.list(&k.ready), vec!["plain", "a0", "e0"]);
    assert_eq!(env.command_calls("getrange"), 5, "one header read per moved id");
    let score = |id: &str, p: i64| (10 - p) * PRIO_SPAN + due.iter().find(|(i, _)| i == id).unwrap().1;
    assert_eq!(
        env.zset(&k.prio),
        vec![
            ("c9".to_string(), score("c9", 9)),
            ("d7".to_string(), score("d7", 7)),
            ("b7".to_string(), score("b7", 7)),
        ]
    );
    assert_eq!(env.stats().await, vec![0, 6, 0, 0, 0], "ready counts both");

    // A retry still comes first; then priority high to low, due order
    // within one; then the ready list.
    env.raw(&["RPUSH", &k.retry, "plain"]);
    env.raw(&["LREM", &k.ready, "0", "plain"]);
    let got = env.claim(4).await;
    let ids: Vec<&str> = got.got.iter().map(|g| g.0.as_str()).collect();
    assert_eq!(ids, ["plain", "c9", "d7", "b7"]);
    assert!(!env.exists(&k.prio), "emptied");
    let got = env.claim(10).await;
    let ids: Vec<&str> = got.got.iter().map(|g| g.0.as_str()).collect();
    assert_eq!(ids, ["a0", "e0"]);
    assert_eq!(env.stats().await, vec![0, 0, 6, 0, 0]);
}

#[tokio::test]
async fn a_cancelled_priority_message_is_skipped_and_stale_cleared_when_all_are_empty() {
    let env = Env::new().await;
    let k = env.k().clone();
    send_due(&env, &[("x", 5), ("y", 5)]).await;
    assert_eq!(env.promote(1000).await[0], 2);
    assert_eq!(env.cancel("x").await, 1);
    assert!(env.stale());
    let got = env.claim(1).await;
    assert_eq!((got.popped, got.expired, got.got.len()), (1, 0, 0), "x skipped");
    assert!(env.stale(), "y still waits in the zset");
    let got = env.claim(1).await;
    assert_eq!(got.got[0].0, "y");
    assert!(!env.stale());
    assert!(!env.exists(&k.prio));
    assert!(env.dead().is_empty());
}

#[tokio::test]
async fn a_cancelled_priority_message_never_lets_a_lower_priority_go_first() {
    let env = Env::new().await;
    let k = env.k().clone();
    send_due(&env, &[("gone9", 9), ("hi7", 7), ("hi5", 5), ("lo0", 0)]).await;
    assert_eq!(env.promote(1000).await[0], 4);
    assert_eq!(env.cancel("gone9").await, 1);
    // The zset's head is the cancelled entry: skipped, it leaves the claim
    // short, and the ready list waits for the next claim rather than
    // giving "lo0" ahead of "hi5" (a full page of the zset was popped).
    let got = env.claim(2).await;
    assert_eq!((got.popped, got.ids()), (2, vec!["hi7"]), "gone9 skipped");
    assert_eq!(got.held, Some(Held::Cut), "cut short: claim again at once");
    let got = env.claim(2).await;
    assert_eq!((got.ids(), got.held), (vec!["hi5", "lo0"], None));

    // The same behind retries: the zset's heads, fewer than a page, not
    // all taken.
    send_due(&env, &[("gone9b", 9), ("hi7b", 7), ("hi5b", 5), ("lo0b", 0)]).await;
    assert_eq!(env.promote(1000).await[0], 4);
    assert_eq!(env.cancel("gone9b").await, 1);
    env.seed("r1", Some("1"));
    env.seed("r2", Some("1"));
    env.raw(&["RPUSH", &k.retry, "r1", "r2"]);
    let got = env.claim(4).await;
    assert_eq!((got.popped, got.ids()), (4, vec!["r1", "r2", "hi7b"]));
    assert_eq!(got.held, Some(Held::Cut));
    let got = env.claim(4).await;
    assert_eq!(got.ids(), vec!["hi5b", "lo0b"]);
}
