//! nack.lua: failing, deferring, releasing and burying deliveries.

use std::time::Duration;

use crate::store::ops::nack::NackMode;
use crate::store::ops::nack::NackMode::{Dead, Release};

use super::{
    assert_pttl_near, claim_op, fail, ms, seed_processing, seed_processing_value, Env, RETENTION, RETRY, SLACK_MS, VIS,
};

#[tokio::test]
async fn nack_fail_with_retries_left_goes_to_retry_or_pending() {
    let env = Env::new().await;
    let k = env.k().clone();

    // delay 0: straight to the end of the retry list, payload without TTL.
    env.raw(&["RPUSH", &k.retry, "older"]);
    let la = seed_processing(&env, "a", "1");
    assert_eq!(env.nack("a", la, fail(0)).await, 1);
    assert_eq!(env.list(&k.retry), vec!["older", "a"]);
    assert!(env.zscore(&k.processing, "a").is_none());
    assert_eq!(env.record("a").as_deref(), Some("1@"), "claim counted the delivery");
    assert_eq!(env.pttl("a"), -1);

    // delay > 0: pending at Redis now + delay.
    // Its RETRY-th delivery failed: one more is allowed.
    let delay = 30_000;
    let lb = seed_processing(&env, "b", &RETRY.to_string());
    let before = env.now_ms();
    assert_eq!(env.nack("b", lb, fail(delay)).await, 1);
    let after = env.now_ms();
    let due = env.zscore(&k.pending, "b").expect("b pending");
    assert!((before + delay..=after + delay).contains(&due), "due {due}");
    assert_eq!(env.record_due("b"), Some(due), "the record holds the retry's due time");
    let a_due = env.record_due("a").expect("a retry's due time");
    assert!(a_due <= before, "a retry without delay is due at its nack: {a_due}");
    assert_eq!(env.pttl("b"), -1);
    assert_eq!(env.list(&k.retry), vec!["older", "a"]);
    assert!(!env.exists(&k.processing));
    assert_eq!(env.record("b").as_deref(), Some("3@"));

    // Idempotent: a re-run finds its own work done, answers as the first
    // run did, and changes nothing.
    let state = env.snapshot();
    assert_eq!(env.nack_of("a", la, fail(0), "", 1).await, 1);
    assert_eq!(env.nack_of("b", lb, fail(delay), "", 3).await, 1);
    assert_eq!(env.snapshot(), state);
}

#[tokio::test]
async fn nack_fail_out_of_retries_goes_to_dead_letters() {
    let env = Env::new().await;
    let k = env.k().clone();
    let la = seed_processing(&env, "a", "4");
    let lz = seed_processing_value(&env, "zero", Some("0:payload-zero"), Some("1"));
    let ln = seed_processing_value(&env, "norecord", Some("3:payload-norecord"), None);

    assert_eq!(env.nack("a", la, fail(0)).await, 2);
    assert_eq!(env.nack("zero", lz, fail(5_000)).await, 2);
    // No record: counted as delivery 1 of RETRY + 1, so retried.
    assert_eq!(env.nack("norecord", ln, fail(0)).await, 1);

    assert_eq!(env.dead(), vec!["a", "zero"]);
    assert_eq!(env.list(&k.retry), vec!["norecord"]);
    assert!(!env.exists(&k.pending) && !env.exists(&k.processing));
    // The dead zset keeps payload and record until gc.
    assert_eq!(env.payload("a").as_deref(), Some("payload-a"));
    assert_eq!(env.record("a").as_deref(), Some("4"));
    assert_eq!(env.record("zero").as_deref(), Some("1"));
    assert_eq!(
        env.record("norecord").as_deref(),
        Some("1@"),
        "a fail records its count"
    );
}

#[tokio::test]
async fn nack_and_timeout_take_the_retry_count_from_the_stored_value() {
    let env = Env::new().await;
    let k = env.k().clone();
    // (id, stored value (none: expired), record, expected nack result)
    let cases: [(&str, Option<&str>, Option<&str>, i64); 12] = [
        // The header bounds deliveries, not the default RETRY.
        ("h9", Some("9:p"), Some("5"), 1),
        ("h9last", Some("9:p"), Some("10"), 2),
        ("h0", Some("0:p"), Some("1"), 2),
        ("max", Some("1000:p"), Some("1000"), 1),
        // Without a readable header the default applies: payload expired,
        // a key of another type, a value without header.
        ("gone", None, Some("4"), 2),
        ("gone3", None, Some("3"), 1),
        ("foreign", None, Some("4"), 2),
        ("plain", Some("no header"), Some("4"), 2),
        ("plain3", Some("no header"), Some("3"), 1),
        // A malformed record counts as one delivery; a reason after the
        // count ("4:3") does not change the count.
        ("junk0", Some("0:p"), Some("junk"), 2),
        ("junk3", Some("3:p"), Some("junk"), 1),
        ("reason", Some("3:p"), Some("4:3"), 2),
    ];
    let mut leases = Vec::new();
    for (id, value, record, _) in cases {
        leases.push(seed_processing_value(&env, id, value, record));
    }
    env.raw(&["HSET", &k.msg("foreign"), "f", "v"]);
    for ((id, _, _, want), lease) in cases.iter().zip(&leases) {
        assert_eq!(env.nack(id, *lease, fail(0)).await, *want, "{id}");
    }
    let mut dead: Vec<&str> = cases.iter().filter(|c| c.3 == 2).map(|c| c.0).collect();
    dead.sort();
    assert_eq!(env.dead(), dead);
    let retried: Vec<&str> = cases.iter().filter(|c| c.3 == 1).map(|c| c.0).collect();
    assert_eq!(env.list(&k.retry), retried);
    assert_eq!(
        env.raw(&["TYPE", &k.msg("foreign")]),
        "hash",
        "the foreign key is left alone"
    );
    // A fail writes the count it went by, with its reason (none here).
    assert_eq!(env.record("junk3").as_deref(), Some("1@"));
    assert_eq!(
        env.record("reason").as_deref(),
        Some("4"),
        "dead: no next delivery to be due"
    );

    // Timeout reads it the same way.
    env.raw(&["DEL", &k.retry, &k.dead, &k.attempts]);
    let past = env.now_us() - 1_000;
    let timed: [(&str, Option<&str>, Option<&str>, bool); 6] = [
        ("t9", Some("9:p"), Some("5"), false),
        ("t0", Some("0:p"), Some("1"), true),
        ("tgone", None, Some("4"), true),
        ("tgone3", None, Some("3"), false),
        ("tplain", Some("no header"), Some("4"), true),
        ("tjunk", Some("0:p"), Some("junk"), true),
    ];
    for (i, (id, value, record, _)) in timed.into_iter().enumerate() {
        seed_processing_value(&env, id, value, record);
        env.raw(&["ZADD", &k.processing, &(past + i as i64).to_string(), id]);
    }
    assert_eq!(env.timeout(100).await, vec![6, 4]);
    let mut dead: Vec<&str> = timed.iter().filter(|t| t.3).map(|t| t.0).collect();
    dead.sort();
    assert_eq!(env.dead(), dead);
    assert_eq!(env.list(&k.retry), vec!["t9", "tgone3"]);
    assert!(env.payload("tgone3").is_none(), "timeout does not revive a payload");
}

#[tokio::test]
async fn nack_defer_retries_later_without_counting_even_when_out_of_deliveries() {
    let env = Env::new().await;
    let k = env.k().clone();
    let defer = |delay_ms| NackMode::Defer { delay: ms(delay_ms) };
    // The last delivery by its record (retry count 3, 4 deliveries).
    let la = seed_processing(&env, "a", "4");
    let lb = seed_processing(&env, "b", "2:boom");
    let before = env.now_ms();
    assert_eq!(env.nack_because("a", la, defer(30_000), "429").await, 1);
    assert_eq!(env.nack_because("b", lb, defer(0), "429").await, 1);
    // Not counted: the count goes back down, a deferral is counted.
    assert_eq!(env.record("a").as_deref(), Some("3@~1:429"));
    assert_eq!(env.record("b").as_deref(), Some("1@~1:429"));
    let due = env.zscore(&k.pending, "a").expect("a waits in pending");
    assert_eq!(env.record_due("a"), Some(due));
    assert!((before + 30_000..before + 30_000 + SLACK_MS).contains(&due), "{due}");
    assert_eq!(env.list(&k.retry), vec!["b"]);
    assert!(!env.exists(&k.processing) && !env.exists(&k.dead));
    assert_eq!(env.int(&["HEXISTS", &k.totals, "failed"]), 0, "no failure counted");
    // A re-sent deferral finds its own work and answers as the first did.
    let state = env.snapshot();
    assert_eq!(env.nack_of("a", la, defer(30_000), "429", 4).await, 1);
    assert_eq!(env.snapshot(), state);
    // The next delivery sees the deferral; deferring it again adds one,
    // and a counted failure keeps them.
    let receipt = k.claim("c");
    let c = env.run(&claim_op(&receipt, 10, VIS, 1)).await;
    let got: Vec<_> = c.deliveries.iter().map(|d| (d.attempt, d.deferrals)).collect();
    assert_eq!(got, vec![(2, 1)]);
    assert_eq!(env.nack_because("b", c.lease, defer(0), "429").await, 1);
    assert_eq!(env.record("b").as_deref(), Some("1@~2:429"));
    let c = env.run(&claim_op(&receipt, 10, VIS, 2)).await;
    assert_eq!(env.nack_because("b", c.lease, fail(0), "boom").await, 1);
    assert_eq!(env.record("b").as_deref(), Some("2@~2:boom"));
}

#[tokio::test]
async fn nack_release_uncounts_the_delivery_and_puts_it_where_a_claim_takes_it_next() {
    let env = Env::new().await;
    let k = env.k().clone();
    env.raw(&["RPUSH", &k.retry, "older"]);
    let la = seed_processing_value(&env, "a", Some("5:payload-a"), Some("2"));
    let lb = seed_processing(&env, "b", "0");
    let lc = seed_processing(&env, "c", "4");
    let ld = seed_processing_value(&env, "d", Some("3:payload-d"), None);
    let lj = seed_processing(&env, "j", "junk");
    let le = seed_processing_value(&env, "e", Some("0!7/1000+500:payload-e"), None);
    let lf = seed_processing_value(&env, "f", Some("0!7/1000+400:payload-f"), Some("1"));

    assert_eq!(env.release_with_delay("a", la, 30_000).await, 1);
    assert_eq!(env.nack("b", lb, Release).await, 1);
    // Out of retries by the record, but a release does not count: retried.
    assert_eq!(env.nack("c", lc, Release).await, 1);
    // No record or a malformed one: one delivery, uncounted.
    assert_eq!(env.nack("d", ld, Release).await, 1);
    assert_eq!(env.nack("j", lj, Release).await, 1);
    assert_eq!(env.nack("e", le, Release).await, 1);
    assert_eq!(env.nack("f", lf, Release).await, 1);

    // A retry (a delivery counted before) goes to the front of retry; a
    // first delivery to the front of ready, or of priority 7 back among
    // its priority's due messages by its due time (sent + delay).
    assert_eq!(env.list(&k.retry), vec!["c", "a", "older"]);
    assert_eq!(env.list(&k.ready), vec!["j", "d", "b"]);
    let span: i64 = 1 << 42;
    let (f, e) = ((3 * span + 1400).to_string(), (3 * span + 1500).to_string());
    assert_eq!(
        env.lines(&["ZRANGE", &k.prio, "0", "-1", "WITHSCORES"]),
        vec!["f", &f, "e", &e]
    );
    // The next claim delivers the released retry first with the same attempt number.
    let c = env.claim(1).await;
    assert_eq!(c.got, vec![("c".into(), "payload-c".into(), 4)]);
    assert_eq!(env.record("c").as_deref(), Some("4"));
}

#[tokio::test]
async fn nack_is_fenced_and_a_late_one_adds_no_second_copy() {
    let env = Env::new().await;
    let k = env.k().clone();
    env.seed("a", Some("0"));
    env.raw(&["RPUSH", &k.ready, "a"]);

    // Wrong lease: nothing happens. (A release of the attempt Redis holds
    // under another lease reads as its own re-run after a new claim, the
    // one way a consumer meets that state, and answers 1.)
    let c1 = env.claim_with("c", 10, 10, 1).await;
    // The receipt expires after 10 ms, at any point of what follows: drop it.
    env.raw(&["DEL", &k.claim("c")]);
    let state = env.snapshot();
    assert_eq!(env.nack("a", c1.lease + 1, fail(0)).await, 0);
    assert_eq!(env.nack("a", c1.lease - 1, Release).await, 1);
    assert_eq!(env.snapshot(), state);

    // The lease runs out, the message is taken back and claimed again.
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(env.timeout(10).await, vec![1, 0]);
    let c2 = env.claim_with("c", 10, VIS, 2).await;
    assert_eq!(c2.got, vec![("a".into(), "payload-a".into(), 2)]);

    // The first delivery's late nack, release and ack do nothing.
    let state = env.snapshot();
    assert_eq!(env.nack_of("a", c1.lease, fail(0), "", 1).await, 0);
    assert_eq!(env.nack_of("a", c1.lease, fail(5_000), "", 1).await, 0);
    assert_eq!(env.nack_of("a", c1.lease, Release, "", 1).await, 0);
    assert_eq!(env.ack(&[("a", c1.lease)]).await, vec![0]);
    assert_eq!(env.snapshot(), state);
    assert!(!env.exists(&k.retry) && !env.exists(&k.pending));
    assert_eq!(env.zset(&k.processing), vec![("a".to_string(), c2.lease)]);
    assert_eq!(env.record("a").as_deref(), Some("2@:timeout"));
}

/// A nack re-sent after its reply was lost answers what its first run did
/// (retried, buried, released), so the consumer does not report a lost
/// lease; a nack whose lease the sweep took back still answers 0.
#[tokio::test]
async fn a_re_sent_nack_answers_as_its_first_run_did() {
    let env = Env::new().await;
    let k = env.k().clone();
    let lf = seed_processing(&env, "f", "1");
    let ld = seed_processing(&env, "d", "2");
    let lr = seed_processing(&env, "r", "2");
    assert_eq!(env.nack_of("f", lf, fail(0), "boom", 1).await, 1);
    assert_eq!(env.nack_of("d", ld, Dead, "bad input", 2).await, 2);
    assert_eq!(env.nack_of("r", lr, Release, "", 2).await, 1);
    let state = env.snapshot();
    assert_eq!(env.nack_of("f", lf, fail(0), "boom", 1).await, 1);
    assert_eq!(env.nack_of("d", ld, Dead, "bad input", 2).await, 2);
    assert_eq!(env.nack_of("r", lr, Release, "", 2).await, 1);
    assert_eq!(env.snapshot(), state, "a re-run writes nothing");
    // Another reason or attempt is not this call's work: the lease is lost.
    assert_eq!(env.nack_of("f", lf, fail(0), "other", 1).await, 0);
    assert_eq!(env.nack_of("f", lf, fail(0), "boom", 2).await, 0);

    // Claimed again after the first run: a re-run still recognises it.
    let again = env.claim(10).await;
    assert_eq!(again.ids(), vec!["r", "f"]);
    assert_eq!(env.nack_of("f", lf, fail(0), "boom", 1).await, 1);
    assert_eq!(env.nack_of("r", lr, Release, "", 2).await, 1);
    assert_eq!(env.nack_of("r", lr, fail(0), "", 2).await, 0);
    // Then acked (record and payload gone): a re-run answers 3, finished,
    // not a lost lease (history seed 1795680229951249103: a re-sent release
    // reported a spurious LeaseLost).
    assert_eq!(env.ack(&[("r", again.lease), ("f", again.lease)]).await, vec![1, 1]);
    let state = env.snapshot();
    assert_eq!(env.nack_of("r", lr, Release, "", 2).await, 3);
    assert_eq!(env.nack_of("f", lf, fail(0), "boom", 1).await, 3);
    assert_eq!(env.nack_of("f", lf, Dead, "boom", 1).await, 3);
    assert_eq!(env.snapshot(), state, "nothing written");

    // Released, claimed again and failed: a re-sent release is recognised
    // (history seed 1796058274376048858: a spurious LeaseLost).
    let lh = seed_processing(&env, "h", "2");
    assert_eq!(env.nack_of("h", lh, Release, "", 2).await, 1);
    let again = env.claim(10).await;
    assert_eq!(again.ids(), vec!["h"]);
    assert_eq!(env.nack_of("h", again.lease, fail(0), "boom", 2).await, 1);
    let state = env.snapshot();
    assert_eq!(env.nack_of("h", lh, Release, "", 2).await, 1);
    assert_eq!(env.snapshot(), state, "nothing written");

    // Taken back by the sweep: a late nack finds the lease lost.
    let lt = seed_processing(&env, "t", "1");
    env.raw(&["ZADD", &k.processing, &(env.now_us() - 1_000).to_string(), "t"]);
    assert_eq!(env.timeout(10).await, vec![1, 0]);
    assert_eq!(env.nack_of("t", lt, fail(0), "boom", 1).await, 0);
    assert_eq!(env.nack_of("t", lt, Release, "", 1).await, 0);
}

#[tokio::test]
async fn nack_records_the_reason_and_dead_mode_buries_at_once() {
    let env = Env::new().await;
    let k = env.k().clone();
    let la = seed_processing(&env, "a", "1");
    let lb = seed_processing(&env, "b", "1");
    let before = env.now_ms();
    assert_eq!(env.nack_because("a", la, fail(0), "HTTP 503").await, 1);
    assert_eq!(env.record("a").as_deref(), Some("1@:HTTP 503"));
    assert_eq!(env.list(&k.retry), vec!["a"]);
    // 'dead' ignores the retries left.
    assert_eq!(env.nack_because("b", lb, Dead, "bad payload").await, 2);
    assert_eq!(env.dead(), vec!["b"]);
    let died = env.zscore(&k.dead, "b").unwrap();
    assert!(died >= before && died <= env.now_ms(), "scored by time of death");
    assert_eq!(env.record("b").as_deref(), Some("1:bad payload"));
    // The payload, live without TTL until now, gets the retention as TTL.
    assert_pttl_near(env.pttl("b"), RETENTION);
    // The next claim keeps the reason with the new count.
    let c = env.claim(10).await;
    assert_eq!(c.got, vec![("a".into(), "payload-a".into(), 2)]);
    assert_eq!(env.record("a").as_deref(), Some("2@:HTTP 503"));
    let totals = env.lines(&["HGETALL", &k.totals]);
    assert_eq!(totals, vec!["failed", "2", "dead", "1"]);
}
