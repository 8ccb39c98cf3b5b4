//! reschedule.lua: changing a pending message's due time.

use crate::store::stored::decode_stored;

use super::{seed_processing, Env, NEVER, RETRY, SLACK_MS};

#[tokio::test]
async fn reschedule_rewrites_the_due_time_in_the_header() {
    let env = Env::new().await;
    let k = env.k().clone();
    assert_eq!(env.send_own("a", "pa:yload", 0, 60_000, 4).await, 1);
    let times = |id: &str| {
        let whole = env.stored_whole(id).unwrap();
        let stored = decode_stored(whole.as_bytes()).unwrap();
        let t = stored.times.unwrap();
        assert_eq!((stored.retry_count, stored.payload), (4, &b"pa:yload"[..]), "{whole}");
        (t.sent_at_ms as i64, t.due_at_ms as i64, stored.expires_at_ms)
    };
    let (sent, due, expires) = times("a");
    assert_eq!(due, sent);
    // From "+0" to five digits: the value is rewritten.
    assert_eq!(env.reschedule("a", 50_000).await, 1);
    let score = env.zscore(&k.pending, "a").unwrap();
    assert_eq!(times("a"), (sent, score, expires), "due time follows the pending score");
    assert!(score - sent >= 50_000 && score - sent < 50_000 + SLACK_MS);
    // Five digits again: written in place.
    assert_eq!(env.reschedule("a", 40_000).await, 1);
    let score = env.zscore(&k.pending, "a").unwrap();
    assert_eq!(times("a"), (sent, score, expires));
    assert_eq!(env.pttl("a"), -1, "a live payload stays without TTL");
    // A value without send times (not written by send) is left alone.
    env.seed_value("bare", "3:x", None);
    env.raw(&["ZADD", &k.pending, "99999999999999", "bare"]);
    assert_eq!(env.reschedule("bare", 1_000).await, 1);
    assert_eq!(env.stored_whole("bare").as_deref(), Some("3:x"));
    // A retry waiting in pending: its record's due time follows too, the
    // rest of the record kept; a record without one gets none.
    env.raw(&["HSET", &k.attempts, "a", "2@1700000000000~1:boom"]);
    assert_eq!(env.reschedule("a", 20_000).await, 1);
    let score = env.zscore(&k.pending, "a").unwrap();
    assert_eq!(env.record_due("a"), Some(score));
    assert_eq!(env.record("a").as_deref(), Some("2@~1:boom"));
    env.raw(&["HSET", &k.attempts, "bare", "1:boom"]);
    assert_eq!(env.reschedule("bare", 1_000).await, 1);
    assert_eq!(env.raw_record("bare").as_deref(), Some("1:boom"));
}

#[tokio::test]
async fn reschedule_moves_only_pending_messages_and_leaves_their_payload_alone() {
    let env = Env::new().await;
    let k = env.k().clone();
    assert_eq!(env.send("a", "x", 1_000, NEVER, RETRY).await, 1);
    let before = env.now_ms();
    assert_eq!(env.reschedule("a", 600_000).await, 1);
    let due = env.zscore(&k.pending, "a").unwrap();
    assert!(
        due >= before + 600_000 && due < before + 600_000 + SLACK_MS,
        "due {due}"
    );
    assert_eq!(env.pttl("a"), -1);
    // Earlier again: the due time moves.
    assert_eq!(env.reschedule("a", 0).await, 1);
    assert!(env.zscore(&k.pending, "a").unwrap() < before + SLACK_MS);
    assert_eq!(env.pttl("a"), -1);

    // Not pending: due (ready), processing, dead, unknown, expired payload.
    env.promote(10).await;
    let state = env.snapshot();
    assert_eq!(env.reschedule("a", 5_000).await, 0, "ready");
    let lease = seed_processing(&env, "u", "1");
    env.seed("g", Some("4"));
    env.bury(&["g"]);
    env.raw(&["ZADD", &k.pending, "1", "expired"]);
    let state_all = env.snapshot();
    for id in ["u", "g", "nope", "expired"] {
        assert_eq!(env.reschedule(id, 5_000).await, 0, "{id}");
    }
    assert_eq!(env.snapshot(), state_all);
    assert_ne!(state, state_all);
    assert_eq!(env.ack(&[("u", lease)]).await, vec![1]);
}

#[tokio::test]
async fn reschedule_wakes_consumers_only_when_it_brings_the_head_forward() {
    let env = Env::new().await;
    let mut wakes = env.subscribe().await;
    assert_eq!(env.send("a", "x", 60_000, NEVER, RETRY).await, 1);
    assert_eq!(wakes.next().await, "60000");
    assert_eq!(env.send("b", "x", 90_000, NEVER, RETRY).await, 1);
    wakes.assert_quiet(&env, "send after the head").await;
    assert_eq!(env.reschedule("b", 120_000).await, 1);
    wakes.assert_quiet(&env, "reschedule later").await;
    assert_eq!(env.reschedule("b", 1_000).await, 1);
    assert_eq!(wakes.next().await, "1000");
}
