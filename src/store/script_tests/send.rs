//! send.lua: storing messages, duplicates, replacing dead and expired ones.

use crate::store::ops::nack::NackMode;
use crate::store::stored::{decode_stored, encode_stored, ValueParts};
use crate::Error;
use fred::prelude::KeysInterface;

use super::{fail, Env, Ids, Msg, NEVER, RETRY};

#[tokio::test]
async fn send_stores_payload_and_pending_entry_together() {
    let env = Env::new().await;
    let k = env.k().clone();
    let delay = 1_500;
    let before = env.now_ms();
    assert_eq!(env.send("a", "hello", delay, NEVER, 5).await, 1);
    let after = env.now_ms();

    let due = env.zscore(&k.pending, "a").expect("a pending");
    assert!(
        (before + delay..=after + delay).contains(&due),
        "due {due} not Redis TIME + delay ({before}..{after} + {delay})"
    );
    assert_eq!(env.zset(&k.pending), vec![("a".to_string(), due)]);
    assert_eq!(
        env.stored("a").as_deref(),
        Some("5:hello"),
        "retry count travels in the value"
    );
    assert_eq!(env.payload("a").as_deref(), Some("hello"));
    assert!(env.record("a").is_none(), "no attempt record until the first claim");
    assert_eq!(
        env.pttl("a"),
        -1,
        "a live payload has no TTL: it never expires undelivered"
    );
    // Nothing else was written: no record, and no STALE mark for a generated id.
    for key in [&k.ready, &k.retry, &k.processing, &k.dead, &k.attempts] {
        assert!(!env.exists(key), "{key} written");
    }
    assert_eq!(env.int(&["DBSIZE"]), 3, "payload, pending, totals");

    // The first claim creates the record: one delivery so far.
    env.raw(&["ZADD", &k.pending, "XX", "0", "a"]);
    assert_eq!(env.promote(10).await[0], 1);
    let c = env.claim(10).await;
    assert_eq!(c.got, vec![("a".into(), "hello".into(), 1)]);
    assert_eq!(env.record("a").as_deref(), Some("1"));
    assert_eq!(
        env.stored("a").as_deref(),
        Some("5:hello"),
        "the header stays in the value"
    );

    // Binary payloads are stored byte for byte.
    let bytes = vec![0u8, 255, b'\n', b' ', b':', 1];
    let value = encode_stored(&ValueParts::new(3, &bytes));
    assert_eq!(
        env.send_values(&[("bin", value.clone(), 0, NEVER, false)]).await,
        vec![1]
    );
    let stored: Vec<u8> = env.client.get(k.msg("bin")).await.unwrap();
    assert!(
        stored.ends_with(&value[1..]),
        "only the send times are added to the header"
    );
    assert_eq!(decode_stored(&stored).map(|s| s.payload), Some(&bytes[..]));
    assert_eq!(env.pttl("bin"), -1);
}

#[tokio::test]
async fn send_records_when_it_stored_each_message() {
    let env = Env::new().await;
    let before = env.now_ms();
    let statuses = env
        .send_batch(Ids::Own, &[("now", "x", 0, NEVER, 3), ("later", "y", 90_000, 5_000, 2)])
        .await;
    let after = env.now_ms();
    assert_eq!(statuses, vec![1, 1]);
    for (id, delay, payload) in [("now", 0, "x"), ("later", 90_000, "y")] {
        let whole = env.stored_whole(id).unwrap();
        let stored = decode_stored(whole.as_bytes()).unwrap();
        let times = stored.times.expect("send writes the times");
        let sent = times.sent_at_ms as i64;
        assert!((before..=after).contains(&sent), "{whole}");
        assert_eq!(times.due_at_ms as i64 - sent, delay, "{whole}");
        assert_eq!(
            env.zscore(&env.k().pending, id),
            Some(sent + delay),
            "the pending score is the due time"
        );
        assert_eq!(stored.payload, payload.as_bytes());
        let deadline = stored.expires_at_ms.map(|at| format!("@{at}")).unwrap_or_default();
        let retry = stored.retry_count;
        assert_eq!(whole, format!("{retry}/{sent}+{delay}{deadline}:{payload}"));
    }
}

#[tokio::test]
async fn send_of_a_live_id_is_a_duplicate_and_changes_nothing() {
    let env = Env::new().await;
    let k = env.k().clone();
    // pending
    assert_eq!(env.send_own("p", "first", 60_000, NEVER, 1).await, 1);
    // ready and retry: payload live, id in a list
    env.seed("rd", Some("0"));
    env.raw(&["RPUSH", &k.ready, "rd"]);
    env.seed("rt", Some("1"));
    env.raw(&["RPUSH", &k.retry, "rt"]);
    // processing
    env.seed("u", Some("1"));
    env.raw(&["ZADD", &k.processing, &(env.now_us() + 5_000_000).to_string(), "u"]);

    let before = env.snapshot();
    for ids in [Ids::Own, Ids::Generated] {
        for id in ["p", "rd", "rt", "u"] {
            let batch = [(id, "second", 0, NEVER, 9)];
            assert_eq!(env.send_batch(ids, &batch).await, vec![0], "{id} {ids:?}");
        }
        // The same as one batch.
        let batch: Vec<Msg> = ["p", "rd", "rt", "u"].map(|id| (id, "second", 0, NEVER, 9)).to_vec();
        assert_eq!(env.send_batch(ids, &batch).await, vec![0, 0, 0, 0], "{ids:?}");
    }
    assert_eq!(env.snapshot(), before);
    assert_eq!(env.stored("p").as_deref(), Some("1:first"));
    assert!(!env.stale(), "a duplicate marked STALE");
}

#[tokio::test]
async fn send_of_an_id_being_processed_is_a_duplicate_even_without_payload() {
    let env = Env::new().await;
    let k = env.k().clone();
    // Being processed while its payload expired: still not replaced.
    env.raw(&["HSET", &k.attempts, "u", "1"]);
    env.raw(&["ZADD", &k.processing, "123", "u"]);
    let before = env.snapshot();
    assert_eq!(env.send_own("u", "new", 0, NEVER, 3).await, 0);
    assert_eq!(env.send("u", "new", 0, NEVER, 3).await, 0);
    assert_eq!(env.snapshot(), before);
    assert!(env.payload("u").is_none());
    assert_eq!(
        env.record("u").as_deref(),
        Some("1"),
        "the running delivery's record is kept"
    );
}

#[tokio::test]
async fn send_replaces_a_dead_message() {
    let env = Env::new().await;
    let k = env.k().clone();
    env.seed("g", Some("4"));
    env.bury(&["g", "other"]);

    assert_eq!(env.send_own("g", "again", 2_000, NEVER, 7).await, 1);
    assert_eq!(env.dead(), vec!["other".to_string()]);
    let due = env.zscore(&k.pending, "g").expect("g pending");
    assert_eq!(env.zset(&k.pending), vec![("g".to_string(), due)]);
    assert_eq!(env.stored("g").as_deref(), Some("7:again"));
    assert!(env.record("g").is_none(), "the dead message's record is gone");
    assert!(!env.stale(), "a dead message has no list entry left: no STALE mark");
    assert_eq!(env.pttl("g"), -1, "the dead payload's TTL is gone");

    // Attempts start again at 1; the new message's retry count is in its value.
    env.raw(&["ZADD", &k.pending, "XX", "0", "g"]);
    assert_eq!(env.promote(10).await[0], 1);
    let c = env.claim(10).await;
    assert_eq!(c.got, vec![("g".into(), "again".into(), 1)]);
    assert_eq!(c.values, vec!["7:again".to_string()]);
    assert_eq!(env.record("g").as_deref(), Some("1"), "attempts reset");
    assert!(!env.stale(), "the claim emptied both lists: STALE cleared");
}

#[tokio::test]
async fn a_re_sent_send_leaves_its_dead_message_dead() {
    // fred re-sends a script whose reply was lost; in between, the first
    // run's message may have been delivered and died. A generated id has
    // no other past, so the re-run must not bring it back.
    let env = Env::new().await;
    let k = env.k().clone();
    assert_eq!(env.send("m", "p", 0, NEVER, 0).await, 1);
    assert_eq!(env.promote(10).await[0], 1);
    let c = env.claim(10).await;
    assert_eq!(c.got, vec![("m".into(), "p".into(), 1)]);
    assert_eq!(env.nack("m", c.lease, NackMode::Dead).await, 2);
    assert_eq!(env.dead(), vec!["m".to_string()]);
    let before = env.snapshot();

    assert_eq!(env.send("m", "p", 0, NEVER, 0).await, 0, "found as this call's own");
    assert_eq!(env.snapshot(), before);
    assert!(env.zset(&k.pending).is_empty(), "not delivered again");
}

#[tokio::test]
async fn send_through_the_api_reports_wrongtype() {
    let env = Env::new().await;
    env.raw(&["SET", &env.k().pending, "not a zset"]);
    let err = env
        .queue
        .send("x")
        .id("w")
        .await
        .expect_err("send onto a string must fail");
    match err {
        Error::WrongType { queue, detail } => {
            assert_eq!(queue, "q");
            assert!(detail.contains("WRONGTYPE"), "{detail}");
        }
        other => panic!("expected WrongType, got {other:?}"),
    }
    assert!(matches!(env.queue.counts().await, Err(Error::WrongType { .. })));
}

#[tokio::test]
async fn send_that_fails_on_wrongtype_writes_nothing() {
    let env = Env::new().await;
    let k = env.k().clone();
    env.raw(&["SET", &k.pending, "not a zset"]);
    let res = env.queue.send("x").id("w").await;
    assert!(matches!(res, Err(Error::WrongType { .. })), "{res:?}");
    assert!(env.payload("w").is_none(), "payload written by a failed send");
    assert!(
        !env.exists(&k.attempts),
        "attempt record or STALE mark written by a failed send"
    );
    // Once the key is fixed, the same id must be accepted.
    env.raw(&["DEL", &k.pending]);
    let id = env.queue.send("x").id("w").await;
    assert!(id.is_ok(), "re-send after a failed send: {id:?}");
}

#[tokio::test]
async fn send_batch_gives_each_message_its_own_status_and_deadline() {
    let env = Env::new().await;
    let k = env.k().clone();
    // A msg key of another type: that message gets 2, the others are stored.
    env.raw(&["RPUSH", &k.msg("w"), "foreign"]);
    let before = env.now_ms();
    let statuses = env
        .send_many(&[
            ("a", "pa", 1_000, NEVER, 2),
            ("b", "pb", 0, NEVER, 0),
            ("a", "dup", 0, NEVER, 9),
            ("w", "pw", 0, NEVER, 3),
            ("c", "pc", 30_000, 5_000, 1),
        ])
        .await;
    let after = env.now_ms();
    assert_eq!(statuses, vec![1, 1, 0, 2, 1], "in order; duplicate in the batch gets 0");

    let pending = env.zset(&k.pending);
    let ids: Vec<&str> = pending.iter().map(|p| p.0.as_str()).collect();
    assert_eq!(ids, vec!["b", "a", "c"], "due order");
    for (id, delay) in [("a", 1_000), ("b", 0), ("c", 30_000)] {
        let due = env.zscore(&k.pending, id).unwrap();
        assert!((before + delay..=after + delay).contains(&due), "{id} due {due}");
    }
    // The first of two same-id messages wins; the duplicate wrote nothing.
    assert_eq!(env.stored("a").as_deref(), Some("2:pa"));
    assert_eq!(env.stored("b").as_deref(), Some("0:pb"));
    // c's deadline: Redis now + delay + expire_after, in its header.
    let c = env.stored("c").unwrap();
    let stored = decode_stored(c.as_bytes()).unwrap();
    let at = stored.expires_at_ms.expect("c has a deadline") as i64;
    assert!((before + 35_000..=after + 35_000).contains(&at), "{c}");
    assert_eq!((stored.retry_count, stored.payload), (1, &b"pc"[..]));
    assert_eq!(c, format!("1@{at}:pc"));
    // No payload gets a TTL, with or without a deadline.
    for id in ["a", "b", "c"] {
        assert_eq!(env.pttl(id), -1, "{id}");
    }
    // Nothing written for the wrong-type one, and no attempt records at all.
    assert_eq!(env.raw(&["TYPE", &k.msg("w")]), "list");
    assert_eq!(env.list(&k.msg("w")), vec!["foreign"]);
    assert_eq!(env.int(&["PTTL", &k.msg("w")]), -1);
    assert!(env.zscore(&k.pending, "w").is_none());
    assert!(!env.exists(&k.attempts));
    assert_eq!(
        env.int(&["DBSIZE"]),
        6,
        "pending, 3 payloads, the foreign list, the totals"
    );

    // Idempotent: the same batch again changes nothing.
    let state = env.snapshot();
    let again = env
        .send_many(&[
            ("a", "pa", 1_000, NEVER, 2),
            ("b", "pb", 0, NEVER, 0),
            ("a", "dup", 0, NEVER, 9),
            ("w", "pw", 0, NEVER, 3),
            ("c", "pc", 30_000, 5_000, 1),
        ])
        .await;
    assert_eq!(again, vec![0, 0, 0, 2, 0]);
    assert_eq!(env.snapshot(), state);

    // An empty batch is valid and writes nothing.
    assert_eq!(env.send_many(&[]).await, Vec::<i64>::new());
    assert_eq!(env.snapshot(), state);
}

#[tokio::test]
async fn send_marks_stale_only_when_an_old_list_entry_may_remain() {
    // A live payload never expires, so a send can store a caller-chosen id
    // only when no list entry of it remains (or cancel, which marks STALE
    // itself, left one), or when something else deleted its payload.
    let env = Env::new().await;
    let k = env.k().clone();
    env.raw(&["RPUSH", &k.msg("w"), "foreign"]);
    env.seed("live", None);
    env.raw(&["RPUSH", &k.ready, "live"]);
    env.seed("g", Some("4:boom"));
    env.bury(&["g"]);
    let batch: Vec<Msg> = vec![
        ("live", "x", 0, NEVER, 3),
        ("w", "x", 0, NEVER, 3),
        ("mine", "y", 0, NEVER, 3),
    ];
    assert_eq!(env.send_batch(Ids::Own, &batch).await, vec![0, 2, 1]);
    assert_eq!(env.send("gen", "x", 0, NEVER, 3).await, 1);
    assert_eq!(env.send_own("g", "again", 0, NEVER, 3).await, 1);
    assert!(!env.stale(), "a send marked STALE");
    assert!(!env.exists(&k.attempts), "{:?}", env.records());
    assert_eq!(env.stats().await, vec![0, 4, 0, 0, 0], "sent due at once: ready");
    // Delivered before (an attempt record), not dead, payload deleted: marks.
    env.raw(&["HSET", &k.attempts, "lost", "2"]);
    assert_eq!(env.send_own("lost", "z", 0, NEVER, 3).await, 1);
    assert!(env.stale());
    assert!(env.records().is_empty(), "{:?}", env.records());
}

#[tokio::test]
async fn send_never_writes_a_record_and_the_stored_retry_count_bounds_deliveries() {
    let env = Env::new().await;
    let k = env.k().clone();
    assert_eq!(env.send("seven", "p7", 0, NEVER, 7).await, 1);
    assert_eq!(env.send("one", "p1", 0, NEVER, 1).await, 1);
    assert_eq!(env.send("zero", "p0", 0, NEVER, 0).await, 1);
    // Through the public API too (a caller-chosen id: no record).
    let api = env.queue.send("pa").retry_count(2).id("api").await.unwrap();
    assert_eq!(env.stored(api.as_str()).as_deref(), Some("2:pa"));
    // A value without header (not written by send): nack and timeout use
    // the default retry count they are given.
    env.seed_value("bare", "no header", None);
    env.raw(&["ZADD", &k.pending, "0", "bare"]);
    assert!(env.records().is_empty(), "send wrote an attempt record");

    assert_eq!(env.promote(10).await, vec![5, -1]);
    assert!(env.records().is_empty(), "promote wrote an attempt record");
    // The bare value has no header, so the Claimed helper would reject it.
    let (lease, got) = env.claim_undecoded(10).await;
    // Each delivery's value is the stored value, header included.
    assert_eq!(
        got,
        vec![
            ("api".to_string(), "2:pa".to_string(), 1),
            ("bare".to_string(), "no header".to_string(), 1),
            ("one".to_string(), "1:p1".to_string(), 1),
            ("seven".to_string(), "7:p7".to_string(), 1),
            ("zero".to_string(), "0:p0".to_string(), 1),
        ]
    );
    // The record counts deliveries only; the retry count stays in the value.
    let ones = ["api", "bare", "one", "seven", "zero"].map(|id| (id.to_string(), "1".to_string()));
    assert_eq!(env.records(), ones.to_vec());
    assert_eq!(env.stored("seven").as_deref(), Some("7:p7"));
    assert_eq!(env.ack(&[("api", lease)]).await, vec![1]);

    // Fail every delivery: each message is delivered exactly retry count + 1
    // times, attempts 1, 2, ..., then moves to the dead zset.
    let max = |id: &str| match id {
        "zero" => 0,
        "one" => 1,
        "seven" => 7,
        "bare" => RETRY,
        other => panic!("unexpected delivery of {other}"),
    };
    let mut deliveries: std::collections::BTreeMap<String, i64> = Default::default();
    let mut batch = got
        .iter()
        .map(|d| (d.0.clone(), d.2))
        .filter(|d| d.0 != "api")
        .collect::<Vec<_>>();
    let mut lease = lease;
    for round in 0.. {
        assert!(round < 20, "still delivering after {round} rounds: {deliveries:?}");
        if batch.is_empty() {
            break;
        }
        for (id, attempt) in &batch {
            let seen = deliveries.entry(id.clone()).or_default();
            *seen += 1;
            assert_eq!(*attempt, *seen, "{id}: attempt numbers count deliveries");
            let want = if *attempt > max(id) { 2 } else { 1 };
            assert_eq!(env.nack(id, lease, fail(0)).await, want, "{id} attempt {attempt}");
        }
        let (next_lease, got) = env.claim_undecoded(10).await;
        lease = next_lease;
        batch = got.into_iter().map(|d| (d.0, d.2)).collect();
    }
    let expected: Vec<(String, i64)> = [("bare", 4), ("one", 2), ("seven", 8), ("zero", 1)]
        .map(|(id, n)| (id.to_string(), n))
        .to_vec();
    assert_eq!(deliveries.into_iter().collect::<Vec<_>>(), expected);
    assert_eq!(env.dead(), vec!["bare", "one", "seven", "zero"]);
    let records: Vec<(String, String)> = expected.iter().map(|(id, n)| (id.clone(), n.to_string())).collect();
    assert_eq!(env.records(), records, "dead keeps the records until gc");
    assert!(!env.exists(&k.retry) && !env.exists(&k.processing) && !env.exists(&k.pending));
}

#[tokio::test]
async fn send_replaces_a_dead_message_whose_payload_expired() {
    let env = Env::new().await;
    let k = env.k().clone();
    // Dead, and its payload expired before gc ran (cancel's test has the same state).
    env.raw(&["HSET", &k.attempts, "g", "4"]);
    env.bury(&["g"]);

    assert_eq!(env.send_own("g", "again", 0, NEVER, 7).await, 1);
    assert!(env.dead().is_empty(), "dead entry left: {:?}", env.dead());
    assert!(env.record("g").is_none(), "old record left: {:?}", env.record("g"));
    assert_eq!(env.promote(10).await[0], 1);
    let c = env.claim(10).await;
    assert_eq!(
        c.got,
        vec![("g".into(), "again".into(), 1)],
        "the new message is delivered"
    );
    assert_eq!(env.record("g").as_deref(), Some("1"));
    // Its own retry count bounds it: 8 deliveries in all.
    assert_eq!(c.values, vec!["7:again".to_string()]);
}

#[tokio::test]
async fn send_over_an_expired_message_starts_a_fresh_retry_record() {
    let env = Env::new().await;
    let k = env.k().clone();
    // Delivered twice, nacked to retry, then its payload expired before a claim.
    env.raw(&["HSET", &k.attempts, "x", "2"]);
    env.raw(&["RPUSH", &k.retry, "x"]);

    assert_eq!(env.send_own("x", "new", 0, NEVER, 7).await, 1);
    assert!(env.record("x").is_none(), "stale record kept: {:?}", env.record("x"));
    assert!(env.stale(), "the old retry entry is now stale");
    // Not promoted yet: the old retry entry is skipped, the new message stays pending.
    let c = env.claim(10).await;
    assert_eq!((c.popped, c.expired, c.got.len()), (1, 0, 0));
    assert!(env.zscore(&k.pending, "x").is_some());
    assert_eq!(env.stored("x").as_deref(), Some("7:new"));
    assert!(env.record("x").is_none());
    assert!(!env.stale(), "both lists empty: STALE cleared");

    assert_eq!(env.promote(10).await[0], 1);
    let c = env.claim(10).await;
    assert_eq!(c.got, vec![("x".into(), "new".into(), 1)]);
    assert_eq!(env.record("x").as_deref(), Some("1"));
}

// The same, promoted before any claim: the old retry entry and the new
// ready entry name the same live message, which is delivered once.
#[tokio::test]
async fn send_over_an_expired_message_in_retry_is_delivered_once() {
    let env = Env::new().await;
    let k = env.k().clone();
    env.raw(&["HSET", &k.attempts, "x", "2"]);
    env.raw(&["RPUSH", &k.retry, "x"]);
    assert_eq!(env.send_own("x", "new", 0, NEVER, 7).await, 1);
    assert_eq!(env.promote(10).await[0], 1);
    assert_eq!(
        (env.list(&k.retry), env.list(&k.ready)),
        (vec!["x".into()], vec!["x".into()])
    );
    let c = env.claim(10).await;
    assert_eq!((c.popped, c.expired), (2, 0));
    assert_eq!(c.got, vec![("x".into(), "new".into(), 1)]);
    assert_eq!(env.zset(&k.processing), vec![("x".to_string(), c.lease)]);
    assert_eq!(env.record("x").as_deref(), Some("1"));
    assert!(!env.stale());
}
