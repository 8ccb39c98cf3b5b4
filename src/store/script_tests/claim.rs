//! claim.lua: leasing retry, then ready, messages; burying, replaying.

use std::time::Duration;

use crate::{Error, MessageState};

use super::{assert_pttl_near, claim_op, count, fail, Env, Msg, NEVER, RETENTION, RETRY, SLACK_MS, VIS};
use crate::store::ops::promote::Promote;

#[tokio::test]
async fn claim_buries_a_delivered_id_whose_payload_vanished_as_a_visible_dead_letter() {
    let env = Env::new().await;
    let k = env.k().clone();
    // A caller-id message nacked with a delay after its first delivery,
    // then its payload was deleted by something else.
    assert_eq!(env.send_own("e", "x", 0, NEVER, RETRY).await, 1);
    env.raw(&["HSET", &k.attempts, "e", "1:boom"]);
    env.raw(&["DEL", &k.msg("e")]);
    env.raw(&["ZADD", &k.pending, "XX", "1", "e"]);
    assert_eq!(env.promote(10).await, vec![1, -1]);
    let c = env.claim(10).await;
    assert_eq!((c.popped, c.expired, c.got.len()), (1, 1, 0));
    assert_eq!(c.expired_ids, vec!["e"]);
    assert!(!env.exists(&k.pending) && !env.exists(&k.ready) && !env.exists(&k.processing));
    assert_eq!(env.dead(), vec!["e"], "a dead letter, not a silent drop");
    assert_eq!(env.record("e").as_deref(), Some("1:expired"), "its count kept");
    let info = env.queue.get("e").await.unwrap().expect("visible to get");
    assert_eq!(info.state, MessageState::Dead);
    assert_eq!(info.last_error.as_deref(), Some("expired"));

    // The same with STALE set (a cancel elsewhere): buried, since its record remained.
    env.raw(&["ZREM", &k.dead, "e"]);
    env.raw(&["HSET", &k.attempts, "e", "1"]);
    env.raw(&["ZADD", &k.pending, "1", "e"]);
    env.mark_stale();
    assert_eq!(env.promote(10).await, vec![1, -1]);
    let c = env.claim(10).await;
    assert_eq!((c.popped, c.expired, c.expired_ids), (1, 1, vec!["e".to_string()]));
    assert_eq!(env.record("e").as_deref(), Some("1:expired"));
    assert!(!env.stale(), "both lists empty: STALE cleared");
    let mut left = vec![k.dead.clone(), k.attempts.clone(), k.totals.clone()];
    left.sort();
    assert_eq!(env.keys(), left);
    assert_eq!(env.lines(&["HMGET", &k.totals, "expired"]), vec!["2"]);
}

#[tokio::test]
async fn claim_buries_a_message_past_its_deadline_with_reason_expired() {
    let env = Env::new().await;
    let k = env.k().clone();
    // Sent with expire_after 1 ms, then held back past its deadline; another
    // with a deadline far ahead, and one without.
    assert_eq!(env.send_own("late", "x", 0, 1, RETRY).await, 1);
    assert_eq!(env.send("far", "y", 0, 3_600_000, RETRY).await, 1);
    assert_eq!(env.send("plain", "z", 0, NEVER, RETRY).await, 1);
    env.raw(&["HSET", &k.attempts, "late", "2:HTTP 503"]);
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(env.promote(10).await[0], 3);
    let c = env.claim(10).await;
    assert_eq!((c.popped, c.expired), (3, 1));
    assert_eq!(c.expired_ids, vec!["late"]);
    let mut ids = c.ids();
    ids.sort();
    assert_eq!(ids, vec!["far", "plain"], "a deadline ahead or none: leased");
    assert!(c.values.iter().any(|v| v.starts_with("3@")), "{:?}", c.values);
    assert_eq!(env.dead(), vec!["late"]);
    assert!(env.zscore(&k.processing, "late").is_none());
    assert_eq!(env.record("late").as_deref(), Some("2:expired"));
    // Its payload stays for the retention, for inspection and requeue.
    assert_pttl_near(env.pttl("late"), RETENTION);
    assert_eq!(env.payload("late").as_deref(), Some("x"));
    assert_eq!(env.lines(&["HMGET", &k.totals, "expired"]), vec!["1"]);
}

#[tokio::test]
async fn claim_with_limit_0_reads_no_list_and_deletes_the_receipt() {
    let env = Env::new().await;
    let k = env.k().clone();
    let batch: Vec<String> = (0..10_000).map(|i| format!("m{i}")).collect();
    for chunk in batch.chunks(1000) {
        let mut cmd = vec!["RPUSH", k.ready.as_str()];
        cmd.extend(chunk.iter().map(String::as_str));
        env.raw(&cmd);
    }
    env.raw(&["SET", &k.claim("w"), "7 123", "PX", "60000"]);
    env.reset_command_stats();
    let c = env.claim_with("w", 0, VIS, 8).await;
    assert_eq!((c.popped, c.expired, c.got.len()), (0, 0, 0));
    assert_eq!(env.command_calls("lrange"), 0, "a list was read");
    assert!(!env.exists(&k.claim("w")), "receipt left");
    assert_eq!(env.int(&["LLEN", &k.ready]), 10_000);
    // A negative limit is refused before anything is read or written.
    let receipt = k.claim("w");
    let err = env
        .run_with_arg(&claim_op(&receipt, 0, VIS, 9), 2, (-1).into())
        .await
        .unwrap_err();
    assert!(err.details().contains("limit"), "{err:?}");
    assert_eq!(env.command_calls("lrange"), 0);
    // With both lists empty it clears the STALE mark too.
    env.raw(&["DEL", &k.ready]);
    env.mark_stale();
    let c = env.claim_with("w", 0, VIS, 10).await;
    assert_eq!((c.popped, c.expired), (0, 0));
    assert!(!env.stale());
}

#[tokio::test]
async fn claim_takes_retry_first_then_ready_and_leases_them() {
    let env = Env::new().await;
    let k = env.k().clone();
    env.seed("r1", Some("1"));
    env.seed_value("r2", "5:payload-r2", Some("2"));
    env.seed("a", Some("0"));
    env.seed_value("b", "0:payload-b", Some("0"));
    env.raw(&["RPUSH", &k.retry, "r1", "r2"]);
    env.raw(&["RPUSH", &k.ready, "a", "b"]);

    let before = env.now_us();
    let c = env.claim(10).await;
    let after = env.now_us();

    assert_eq!((c.popped, c.expired), (4, 0));
    assert!(
        c.lease > after && (before + VIS * 1000..=after + VIS * 1000).contains(&c.lease),
        "lease {} is not now ({before}..{after}) + {VIS} ms in µs",
        c.lease
    );
    assert_eq!(c.left_ms, VIS);
    assert_eq!(
        c.got,
        vec![
            ("r1".into(), "payload-r1".into(), 2),
            ("r2".into(), "payload-r2".into(), 3),
            ("a".into(), "payload-a".into(), 1),
            ("b".into(), "payload-b".into(), 1),
        ]
    );
    assert_eq!(c.values[1], "5:payload-r2", "values as stored, header included");
    let mut processing = env.zset(&k.processing);
    processing.sort();
    assert_eq!(
        processing,
        ["a", "b", "r1", "r2"].map(|id| (id.to_string(), c.lease)).to_vec()
    );
    // Records count deliveries, whatever the retry count in the value.
    assert_eq!(env.record("r1").as_deref(), Some("2"));
    assert_eq!(env.record("r2").as_deref(), Some("3"));
    assert_eq!(env.record("a").as_deref(), Some("1"));
    assert_eq!(env.record("b").as_deref(), Some("1"));
    assert!(!env.exists(&k.ready) && !env.exists(&k.retry));
    // Payloads stay until ack, without TTL.
    assert_eq!(env.payload("a").as_deref(), Some("payload-a"));
    for id in ["a", "b", "r1", "r2"] {
        assert_eq!(env.pttl(id), -1, "{id}");
    }

    // Nothing left: nothing popped or leased.
    let empty = env.claim(10).await;
    assert_eq!((empty.popped, empty.expired, empty.got.len()), (0, 0, 0));
}

#[tokio::test]
async fn claim_is_bounded_by_limit() {
    let env = Env::new().await;
    let k = env.k().clone();
    for id in ["r1", "r2", "a", "b", "c"] {
        env.seed(id, Some("0"));
    }
    env.raw(&["RPUSH", &k.retry, "r1", "r2"]);
    env.raw(&["RPUSH", &k.ready, "a", "b", "c"]);

    let c = env.claim(3).await;
    assert_eq!(c.ids(), vec!["r1", "r2", "a"]);
    assert_eq!(c.popped, 3);
    assert_eq!(env.list(&k.ready), vec!["b", "c"]);
    assert_eq!(env.zset(&k.processing).len(), 3);

    let c = env.claim(1).await;
    assert_eq!(c.ids(), vec!["b"]);
    assert_eq!(env.list(&k.ready), vec!["c"]);
    assert_eq!(env.record("c").as_deref(), Some("0"), "unclaimed id untouched");
}

#[tokio::test]
async fn claim_skips_stale_entries() {
    let env = Env::new().await;
    let k = env.k().clone();
    let lease_u = env.now_us() + 9_000_000;
    // cancelled: entry left in ready, payload and record gone
    env.raw(&["RPUSH", &k.ready, "cancelled"]);
    // live elsewhere: pending (re-sent), processing (being processed), dead (dead)
    env.seed("p", Some("0"));
    env.raw(&["ZADD", &k.pending, &(env.now_ms() + 60_000).to_string(), "p"]);
    env.seed("u", Some("1"));
    env.raw(&["ZADD", &k.processing, &lease_u.to_string(), "u"]);
    env.seed("g", Some("4"));
    env.bury(&["g"]);
    env.raw(&["RPUSH", &k.retry, "u", "g"]);
    env.raw(&["RPUSH", &k.ready, "p", "ok"]);
    env.seed("ok", Some("0"));
    // The cancel and the re-send that leave such entries mark the hash.
    env.mark_stale();

    let c = env.claim(10).await;
    assert_eq!((c.popped, c.expired), (5, 0));
    assert_eq!(c.ids(), vec!["ok"], "only the valid id is leased");
    // Stale entries are gone from the lists, and nothing else changed for them.
    assert!(!env.exists(&k.ready) && !env.exists(&k.retry));
    assert_eq!(env.zscore(&k.processing, "u"), Some(lease_u));
    assert_eq!(env.zscore(&k.processing, "ok"), Some(c.lease));
    assert!(env.zscore(&k.pending, "p").is_some());
    assert_eq!(env.dead(), vec!["g"]);
    assert_eq!(env.record("p").as_deref(), Some("0"));
    assert_eq!(env.record("u").as_deref(), Some("1"));
    assert_eq!(env.record("g").as_deref(), Some("4"));
    assert_eq!(env.record("ok").as_deref(), Some("1"));
    for id in ["p", "u", "g"] {
        assert_eq!(env.payload(id), Some(format!("payload-{id}")));
        assert_eq!(env.pttl(id), -1);
    }
    assert!(env.record("cancelled").is_none());
    assert!(!env.stale(), "both lists emptied: STALE cleared");
}

#[tokio::test]
async fn claim_pops_each_list_once_so_stale_entries_use_up_the_pop() {
    let env = Env::new().await;
    let k = env.k().clone();
    let batch: Vec<Msg> = ["gone1", "gone2", "a", "b"]
        .map(|id| (id, "x", 0, NEVER, RETRY))
        .to_vec();
    assert_eq!(env.send_many(&batch).await, vec![1; 4]);
    // Due in this order (ids due at the same ms would be promoted by name).
    env.raw(&["ZADD", &k.pending, "XX", "1", "gone1", "2", "gone2", "3", "a", "4", "b"]);
    assert_eq!(env.promote(10).await[0], 4);
    assert_eq!(env.cancel("gone1").await, 1);
    assert_eq!(env.cancel("gone2").await, 1);
    assert_eq!(env.list(&k.ready), vec!["gone1", "gone2", "a", "b"]);
    // One take of `limit` per list: the stale id is popped, nothing leased;
    // popped == limit tells the consumer to claim again at once.
    let c = env.claim(1).await;
    assert_eq!((c.popped, c.expired, c.got.len()), (1, 0, 0));
    assert_eq!(env.list(&k.ready), vec!["gone2", "a", "b"]);
    assert!(env.stale(), "entries left: STALE stays");
    let c = env.claim(10).await;
    assert_eq!((c.popped, c.expired, c.ids()), (3, 0, vec!["a", "b"]));
    assert!(!env.stale());
}

#[tokio::test]
async fn claim_buries_ids_without_payload_unless_stale_says_cancelled() {
    let env = Env::new().await;
    let k = env.k().clone();
    // Without STALE every list entry is a live message, so a missing payload
    // was lost: buried as expired whether a record remained (e1, e2) or not
    // (norec: lost before its first delivery).
    env.raw(&["HSET", &k.attempts, "e1", "0", "e2", "2"]);
    env.raw(&["RPUSH", &k.ready, "e1", "norec"]);
    env.raw(&["RPUSH", &k.retry, "e2"]);
    let c = env.claim(10).await;
    assert_eq!((c.popped, c.expired, c.got.len()), (3, 3, 0));
    assert_eq!(c.expired_ids, vec!["e2", "e1", "norec"], "retry list first");
    assert_eq!(env.dead(), vec!["e1", "e2", "norec"]);
    let expired = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
        pairs.iter().map(|(id, r)| (id.to_string(), r.to_string())).collect()
    };
    assert_eq!(
        env.records(),
        expired(&[("e1", "0:expired"), ("e2", "2:expired"), ("norec", "0:expired")])
    );
    assert!(!env.exists(&k.ready) && !env.exists(&k.retry));

    // With STALE a missing payload without record is a cancelled message's
    // leftover entry (cancel deletes both): skipped silently (c1). One whose
    // record remained (e3) is buried. An entry of an id being processed is
    // not ours to bury, even with its payload gone (its delivery decides),
    // nor one of an id already dead (e1).
    env.mark_stale();
    env.raw(&["HSET", &k.attempts, "e3", "1", "u", "1"]);
    env.raw(&["ZADD", &k.processing, "1", "u"]);
    env.raw(&["RPUSH", &k.ready, "c1", "e1", "e3", "u"]);
    let c = env.claim(10).await;
    assert_eq!((c.popped, c.expired, c.got.len()), (4, 1, 0));
    assert_eq!(c.expired_ids, vec!["e3"]);
    assert_eq!(env.record("e3").as_deref(), Some("1:expired"));
    assert!(env.record("c1").is_none() && !env.dead().contains(&"c1".to_string()));
    assert_eq!(env.zset(&k.processing), vec![("u".to_string(), 1)]);
    assert!(!env.stale());
    // A re-claim finds nothing more to bury.
    env.mark_stale();
    env.raw(&["RPUSH", &k.ready, "e3"]);
    let c = env.claim(10).await;
    assert_eq!((c.popped, c.expired), (1, 0));
    assert_eq!(env.lines(&["HMGET", &k.totals, "expired"]), vec!["4"]);
}

#[tokio::test]
async fn claim_buries_an_id_whose_payload_key_has_another_type_instead_of_failing() {
    let env = Env::new().await;
    let k = env.k().clone();
    assert_eq!(env.send("ok", "x", 0, NEVER, RETRY).await, 1);
    assert_eq!(env.promote(10).await[0], 1);
    env.raw(&["HSET", &k.attempts, "odd", "0"]);
    env.raw(&["HSET", &k.msg("odd"), "f", "v"]);
    env.raw(&["LPUSH", &k.ready, "odd"]);
    let c = env.claim(10).await;
    assert_eq!((c.popped, c.expired, c.ids()), (2, 1, vec!["ok"]));
    assert_eq!(c.expired_ids, vec!["odd"]);
    assert_eq!(env.record("odd").as_deref(), Some("0:expired"));
    assert_eq!(env.dead(), vec!["odd"]);
    assert_eq!(
        env.raw(&["TYPE", &k.msg("odd")]),
        "hash",
        "the foreign key is left alone"
    );
    assert_eq!(env.int(&["PTTL", &k.msg("odd")]), -1, "and gets no TTL");
}

#[tokio::test]
async fn claim_without_or_with_malformed_record_counts_no_deliveries_so_far() {
    let env = Env::new().await;
    let k = env.k().clone();
    // "2:" and "2:5" are records "<deliveries>:<last failure reason>".
    let ids = ["none", "junk", "half", "neg", "old"];
    for (id, record) in ids
        .into_iter()
        .zip([None, Some("junk"), Some("2:"), Some("-1:3"), Some("2:5")])
    {
        env.seed_value(id, &format!("6:payload-{id}"), record);
    }
    env.raw(&["RPUSH", &k.ready, "none", "junk", "half", "neg", "old"]);

    let c = env.claim(10).await;
    let attempts: Vec<(&str, i64)> = c.got.iter().map(|d| (d.0.as_str(), d.2)).collect();
    assert_eq!(
        attempts,
        vec![("none", 1), ("junk", 1), ("half", 3), ("neg", 1), ("old", 3)]
    );
    for (id, want) in ids.into_iter().zip(["1", "1", "3:", "1", "3:5"]) {
        assert_eq!(env.record(id).as_deref(), Some(want), "{id}");
    }
}

/// Only a plain count is a delivery count; anything else is malformed.
#[tokio::test]
async fn claim_treats_a_record_that_is_not_a_delivery_count_as_malformed() {
    let env = Env::new().await;
    let k = env.k().clone();
    let ids = ["neg", "exp", "hex", "frac"];
    for (id, record) in ids.into_iter().zip(["-3", "1e3", "0x10", "2.5"]) {
        env.seed(id, Some(record));
    }
    env.raw(&["RPUSH", &k.ready, "neg", "exp", "hex", "frac"]);
    let reply = env.claim_with("c", 10, VIS, 1).await;
    let attempts: Vec<i64> = reply.got.iter().map(|d| d.2).collect();
    assert_eq!(
        attempts,
        vec![1, 1, 1, 1],
        "malformed records count no deliveries so far"
    );
    for id in ids {
        assert_eq!(env.record(id).as_deref(), Some("1"), "{id}");
    }
}

#[tokio::test]
async fn claim_receipt_replays_a_resent_request() {
    let env = Env::new().await;
    let k = env.k().clone();
    for id in ["a", "b", "c"] {
        env.seed(id, Some("0"));
    }
    env.raw(&["RPUSH", &k.ready, "a", "b", "c"]);
    let receipt = k.claim("worker");

    let first = env.claim_with("worker", 2, VIS, 7).await;
    assert_eq!(first.ids(), vec!["a", "b"]);
    assert_eq!(first.left_ms, VIS, "a new lease has the whole visibility timeout left");
    assert_eq!(env.raw(&["GET", &receipt]), format!("7 {} a b", first.lease));
    let ttl = env.int(&["PTTL", &receipt]);
    assert!(ttl <= VIS && ttl > VIS - SLACK_MS, "receipt PTTL {ttl}");

    // The same request again (its reply was lost): same deliveries, nothing more leased.
    let state = env.snapshot();
    let again = env.claim_with("worker", 2, VIS, 7).await;
    assert_eq!((again.popped, again.expired, again.lease), (0, 0, first.lease));
    assert_eq!(again.got, first.got);
    assert_eq!(again.values, first.values);
    assert!(
        again.left_ms <= VIS && again.left_ms > VIS - SLACK_MS,
        "left {}",
        again.left_ms
    );
    assert_eq!(env.snapshot(), state, "a replay writes nothing");
    assert_eq!(env.list(&k.ready), vec!["c"]);
    assert_eq!(env.record("a").as_deref(), Some("1"), "attempt not counted twice");

    // A replay leaves out deliveries that ended since.
    assert_eq!(env.ack(&[("a", first.lease)]).await, vec![1]);
    let replay = env.claim_with("worker", 2, VIS, 7).await;
    assert_eq!(replay.ids(), vec!["b"]);

    // Another consumer's receipt is its own.
    let other = env.claim_with("other", 5, VIS, 7).await;
    assert_eq!(other.ids(), vec!["c"]);

    // A new request that leases nothing deletes the receipt.
    let next = env.claim_with("worker", 2, VIS, 8).await;
    assert_eq!((next.popped, next.got.len()), (0, 0));
    assert!(!env.exists(&receipt));
    // The shutdown claim (limit 0) deletes it too.
    assert!(env.exists(&k.claim("other")));
    let stop = env.claim_with("other", 0, VIS, 8).await;
    assert_eq!(stop.popped, 0);
    assert!(!env.exists(&k.claim("other")));
}

#[tokio::test]
async fn claim_returns_and_keeps_the_due_time_and_deferrals_of_the_retry_record() {
    let env = Env::new().await;
    let k = env.k().clone();
    env.seed("r", Some("2@1700000000123~3:boom"));
    env.seed("old", Some("1:boom"));
    env.seed("new", None);
    env.raw(&["RPUSH", &k.retry, "r", "old", "new"]);
    let receipt = k.claim("c");
    // (id, attempt, due ms, deferrals) of each delivery of a claim.
    let claim = || async {
        let c = env.run(&claim_op(&receipt, 10, VIS, 1)).await;
        let got: Vec<_> = c
            .deliveries
            .iter()
            .map(|d| (d.id.clone().unwrap(), d.attempt, d.due_ms, d.deferrals))
            .collect();
        got
    };
    let want = vec![
        ("r".into(), 3, 1700000000123, 3),
        // A record of the scripts before due times, and none: the send's.
        ("old".into(), 2, 0, 0),
        ("new".into(), 1, 0, 0),
    ];
    assert_eq!(claim().await, want);
    assert_eq!(env.raw_record("r").as_deref(), Some("3@1700000000123~3:boom"));
    assert_eq!(env.raw_record("old").as_deref(), Some("2:boom"));
    assert_eq!(claim().await, want, "a replayed request returns the same");
}

#[tokio::test]
async fn claim_after_timeout_gets_a_larger_lease() {
    let env = Env::new().await;
    let k = env.k().clone();
    env.seed("a", Some("0"));
    env.raw(&["RPUSH", &k.ready, "a"]);
    let first = env.claim_with("c", 10, 10, 1).await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(env.timeout(10).await, vec![1, 0]);
    let second = env.claim_with("c", 10, 10, 2).await;
    assert_eq!(second.got, vec![("a".into(), "payload-a".into(), 2)]);
    assert!(second.lease > first.lease);
    assert_eq!(
        env.record("a").as_deref(),
        Some("2@:timeout"),
        "the claim kept the reason and the due time"
    );
}

#[tokio::test]
async fn claim_does_not_lease_an_id_twice() {
    let env = Env::new().await;
    let k = env.k().clone();
    env.seed("a", None);
    env.seed("b", None);
    // A second entry for the same id (stale, e.g. after a cancel and re-send,
    // which mark the hash), in the same list and in retry.
    env.raw(&["RPUSH", &k.retry, "a"]);
    env.raw(&["RPUSH", &k.ready, "a", "b", "a"]);
    env.mark_stale();

    let c = env.claim(10).await;
    assert_eq!((c.popped, c.expired), (4, 0));
    assert_eq!(c.ids(), vec!["a", "b"], "each id leased once");
    assert_eq!(c.got[0], ("a".into(), "payload-a".into(), 1));
    assert_eq!(env.record("a").as_deref(), Some("1"), "one delivery counted");
    assert_eq!(env.zset(&k.processing).len(), 2);
    assert!(!env.exists(&k.ready) && !env.exists(&k.retry));

    // A stale entry popped while the id is being processed leaves its lease alone.
    env.raw(&["RPUSH", &k.ready, "a"]);
    env.mark_stale();
    let state = env.zset(&k.processing);
    let d = env.claim(10).await;
    assert_eq!((d.popped, d.expired, d.got.len()), (1, 0, 0));
    assert_eq!(env.zset(&k.processing), state, "lease not replaced");
    assert_eq!(env.zscore(&k.processing, "a"), Some(c.lease));
    assert_eq!(env.record("a").as_deref(), Some("1"));
    // The first lease still fences: ack with it works.
    assert_eq!(env.ack(&[("a", c.lease), ("b", c.lease)]).await, vec![1, 1]);
}

#[tokio::test]
async fn claim_leases_an_id_duplicated_within_one_popped_batch_once() {
    let env = Env::new().await;
    let k = env.k().clone();
    // Made by the scripts: "a" cancelled while ready, sent again under the
    // same id and promoted behind the old entry.
    assert_eq!(env.send_own("a", "one", 0, NEVER, RETRY).await, 1);
    assert_eq!(env.send("b", "pb", 0, NEVER, RETRY).await, 1);
    env.raw(&["ZADD", &k.pending, "XX", "0", "a"]);
    assert_eq!(env.promote(10).await[0], 2);
    assert_eq!(env.cancel("a").await, 1);
    assert_eq!(env.send_own("a", "two", 0, NEVER, RETRY).await, 1);
    assert_eq!(env.promote(10).await[0], 1);
    assert_eq!(env.list(&k.ready), vec!["a", "b", "a"]);
    assert!(env.stale());

    let c = env.claim(10).await;
    assert_eq!((c.popped, c.expired), (3, 0));
    assert_eq!(c.got, vec![("a".into(), "two".into(), 1), ("b".into(), "pb".into(), 1)]);
    assert_eq!(
        env.zset(&k.processing),
        vec![("a".to_string(), c.lease), ("b".to_string(), c.lease)]
    );
    assert_eq!(env.records(), vec![("a".into(), "1".into()), ("b".into(), "1".into())]);
    assert!(!env.stale());

    // Not a state the scripts make without STALE, but the batch is deduplicated anyway.
    env.seed("x", None);
    env.seed("y", None);
    env.raw(&["RPUSH", &k.ready, "x", "y", "x", "x"]);
    let c = env.claim(10).await;
    assert_eq!((c.popped, c.expired, c.ids()), (4, 0, vec!["x", "y"]));
    assert_eq!(env.record("x").as_deref(), Some("1"));
    assert_eq!(env.zscore(&k.processing, "x"), Some(c.lease));
}

#[tokio::test]
async fn claim_without_stale_leases_a_clean_ready_list_whole_in_a_few_calls() {
    let env = Env::new().await;
    let k = env.k().clone();
    const N: usize = 50;
    let ids: Vec<String> = (0..N).map(|i| format!("m{i:02}")).collect();
    let batch: Vec<Msg> = ids.iter().map(|id| (id.as_str(), "x", 0, NEVER, RETRY)).collect();
    assert_eq!(env.send_many(&batch).await, vec![1; N]);
    assert_eq!(env.promote(1000).await[0], N as i64);
    assert!(!env.stale());

    env.reset_command_stats();
    let c = env.claim(1000).await;
    assert_eq!((c.popped, c.expired), (N as i64, 0));
    assert_eq!(c.ids(), ids.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(c.got.iter().all(|d| d.1 == "x" && d.2 == 1), "{:?}", c.got);
    // A fixed number of calls for the batch, none per leased id (no TTL
    // to extend); no look at pending or dead without STALE. One HMGET
    // reads the totals' pause flag and limits, one the attempt records; a
    // queue without limits makes no other call for them.
    let calls = |cmd: &str| env.command_calls(cmd);
    assert_eq!(
        [
            "mget",
            "zmscore",
            "smismember",
            "zadd",
            "hmget",
            "hset",
            "pexpire",
            "zcard"
        ]
        .map(calls),
        [1, 1, 0, 1, 2, 1, 0, 0]
    );
    assert_eq!(
        ["get", "zscore", "sismember", "hget"].map(calls),
        [1, 0, 0, 0],
        "per-id calls"
    );
    assert_eq!(env.int(&["ZCARD", &k.processing]), N as i64);
    assert_eq!(env.records().len(), N);
    assert!(env.records().iter().all(|r| r.1 == "1"));
    assert!(!env.exists(&k.ready) && !env.stale());

    // With STALE the same batch also asks pending and dead (ZMSCORE
    // each), once for the batch.
    let more: Vec<String> = (0..N).map(|i| format!("n{i:02}")).collect();
    let batch: Vec<Msg> = more.iter().map(|id| (id.as_str(), "y", 0, NEVER, RETRY)).collect();
    assert_eq!(env.send_many(&batch).await, vec![1; N]);
    assert_eq!(env.promote(1000).await[0], N as i64);
    env.mark_stale();
    env.reset_command_stats();
    let c = env.claim(1000).await;
    assert_eq!((c.popped, c.expired, c.got.len()), (N as i64, 0, N));
    assert_eq!(["mget", "zmscore", "smismember", "zadd"].map(calls), [1, 3, 0, 1]);
    assert!(!env.stale());
}

#[tokio::test]
async fn claim_with_stale_skips_an_entry_whose_id_was_sent_again_and_is_pending() {
    let env = Env::new().await;
    let k = env.k().clone();
    assert_eq!(env.send_own("a", "one", 0, NEVER, RETRY).await, 1);
    assert_eq!(env.promote(10).await[0], 1);
    assert_eq!(env.cancel("a").await, 1);
    // Sent again, due later: the old ready entry now names a pending message.
    assert_eq!(env.send_own("a", "two", 60_000, NEVER, 5).await, 1);
    assert_eq!(env.list(&k.ready), vec!["a"]);
    assert!(env.stale());

    let c = env.claim(10).await;
    assert_eq!((c.popped, c.expired, c.got.len()), (1, 0, 0), "skipped, not counted");
    assert!(!env.exists(&k.ready) && !env.exists(&k.processing));
    assert!(env.zscore(&k.pending, "a").is_some(), "the new message stays pending");
    assert_eq!(env.stored("a").as_deref(), Some("5:two"));
    assert_eq!(env.pttl("a"), -1);
    assert!(env.record("a").is_none());
    assert!(!env.stale());

    // Once due it is delivered once, as a first delivery.
    env.raw(&["ZADD", &k.pending, "XX", "0", "a"]);
    assert_eq!(env.promote(10).await[0], 1);
    let c = env.claim(10).await;
    assert_eq!(c.got, vec![("a".into(), "two".into(), 1)]);
    assert_eq!(env.record("a").as_deref(), Some("1"));
}

#[tokio::test]
async fn stale_is_set_by_cancel_and_caller_id_send_and_cleared_by_a_claim_that_empties_both_lists() {
    let env = Env::new().await;
    let k = env.k().clone();
    let batch: Vec<Msg> = ["a", "b", "c"].map(|id| (id, "x", 0, NEVER, RETRY)).to_vec();
    assert_eq!(env.send_many(&batch).await, vec![1, 1, 1]);
    assert_eq!(env.promote(10).await[0], 3);
    assert!(!env.stale(), "generated ids leave no stale entry");

    // Cancel of a ready message: its entry stays in the list.
    assert_eq!(env.cancel("a").await, 1);
    assert!(env.stale());
    assert_eq!(env.list(&k.ready), vec!["a", "b", "c"]);
    // Claims that leave entries in a list keep the mark.
    let c = env.claim(1).await;
    assert_eq!((c.popped, c.expired, c.got.len()), (1, 0, 0));
    assert!(env.stale());
    let c = env.claim(1).await;
    assert_eq!(c.ids(), vec!["b"]);
    assert!(env.stale(), "c still in ready");
    // The claim that empties both lists clears it.
    let c2 = env.claim(10).await;
    assert_eq!(c2.ids(), vec!["c"]);
    assert!(!env.stale());
    assert_eq!(env.records(), vec![("b".into(), "1".into()), ("c".into(), "1".into())]);

    // Cancels that leave no list entry do not mark: pending, dead,
    // being processed, unknown.
    assert_eq!(env.send("d", "x", 60_000, NEVER, RETRY).await, 1);
    assert_eq!(env.cancel("d").await, 1);
    env.seed("g", Some("4"));
    env.bury(&["g"]);
    assert_eq!(env.cancel("g").await, 1);
    assert_eq!(env.cancel("b").await, 0, "b is being processed");
    assert_eq!(env.cancel("nope").await, 0);
    assert!(!env.stale());

    // Cancel of a message in retry marks it too; the claim drops the entry
    // without counting it (cancel deleted the record) and clears the mark.
    assert_eq!(env.nack("b", c.lease, fail(0)).await, 1);
    assert_eq!(env.list(&k.retry), vec!["b"]);
    assert_eq!(env.cancel("b").await, 1);
    assert!(env.stale());
    let c = env.claim(10).await;
    assert_eq!((c.popped, c.expired, c.got.len()), (1, 0, 0));
    assert!(!env.stale());

    // A send of a caller-chosen id that was delivered and lost its payload
    // marks it; a claim with both lists already empty clears it, even one
    // that pops nothing.
    env.raw(&["HSET", &k.attempts, "e", "1"]);
    assert_eq!(env.send_own("e", "x", 60_000, NEVER, RETRY).await, 1);
    assert!(env.stale());
    let c = env.claim(10).await;
    assert_eq!((c.popped, c.got.len()), (0, 0));
    assert!(!env.stale());
    assert!(env.zscore(&k.pending, "e").is_some());
}

// The replay path reads payloads with pcall, like the new-request path
// (MGET), so a payload key of another type is left out, not an error.
#[tokio::test]
async fn claim_replay_leaves_out_a_payload_key_of_another_type() {
    let env = Env::new().await;
    let k = env.k().clone();
    env.seed("a", None);
    env.seed("b", None);
    env.raw(&["RPUSH", &k.ready, "a", "b"]);
    let first = env.claim_with("w", 10, VIS, 5).await;
    assert_eq!(first.ids(), vec!["a", "b"]);
    env.raw(&["DEL", &k.msg("a")]);
    env.raw(&["HSET", &k.msg("a"), "f", "v"]);
    let receipt = k.claim("w");
    let replay = env.store().eval(&claim_op(&receipt, 10, VIS, 5)).await;
    assert!(replay.is_ok(), "replay failed: {replay:?}");
    let again = env.claim_with("w", 10, VIS, 5).await;
    assert_eq!(again.ids(), vec!["b"]);
}

#[tokio::test]
async fn a_wrong_type_key_fails_a_script_before_it_writes() {
    let env = Env::new().await;
    let k = env.k().clone();
    assert_eq!(env.send("a", "x", 0, NEVER, RETRY).await, 1);
    assert_eq!(env.promote(10).await[0], 1);
    env.raw(&["SET", &k.processing, "not a zset"]);
    let receipt = k.claim("c");
    let err = env.store().run(&claim_op(&receipt, 10, VIS, 0)).await.unwrap_err();
    assert!(matches!(err, Error::WrongType { .. }), "{err:?}");
    assert_eq!(
        env.lines(&["LRANGE", &k.ready, "0", "-1"]),
        vec!["a"],
        "claim popped before failing"
    );
    assert!(env.record("a").is_none(), "claim wrote before failing");
    assert!(!env.exists(&k.claim("c")), "claim wrote its receipt before failing");
}

#[tokio::test]
async fn a_totals_or_receipt_key_of_another_type_fails_claim_and_promote_naming_it() {
    let env = Env::new().await;
    let k = env.k().clone();
    assert_eq!(env.send("a", "x", 0, NEVER, RETRY).await, 1);
    let receipt = k.claim("c");
    // Read before any write, each is checked by that read (no TYPE call).
    for key in [&k.totals, &receipt] {
        env.raw(&["DEL", key]);
        env.raw(&["RPUSH", key, "not", "this"]);
        let state = env.snapshot();
        let err = env.store().run(&claim_op(&receipt, 10, VIS, 0)).await.unwrap_err();
        match &err {
            Error::WrongType { detail, .. } => assert!(detail.contains(key.as_str()), "{detail}"),
            other => panic!("claim with {key} a list: {other:?}"),
        }
        if key == &k.totals {
            let promote = Promote {
                limit: count(10),
                room: count(10),
            };
            let err = env.store().run(&promote).await.unwrap_err();
            match &err {
                Error::WrongType { detail, .. } => assert!(detail.contains(key.as_str()), "{detail}"),
                other => panic!("promote with {key} a list: {other:?}"),
            }
        }
        assert_eq!(env.snapshot(), state, "nothing written");
        env.raw(&["DEL", key]);
    }
}
