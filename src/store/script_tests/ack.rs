//! ack.lua: settling deliveries, fenced by lease.

use crate::store::ops::ack::Ack;
use crate::store::ops::nack::NackMode::Release;

use super::{Env, Msg, NEVER, RETRY};

#[tokio::test]
async fn ack_is_fenced_by_lease() {
    let env = Env::new().await;
    let k = env.k().clone();
    env.seed("a", Some("0"));
    env.seed("b", Some("0"));
    env.raw(&["RPUSH", &k.ready, "a", "b"]);
    let c = env.claim(10).await;
    let lease = c.lease;

    // Wrong leases (older, newer) and unknown ids: nothing deleted; an id
    // neither being processed nor stored has nothing left to ack (2).
    let before = env.snapshot();
    assert_eq!(
        env.ack(&[("a", lease - 1), ("b", lease + 1), ("nope", lease)]).await,
        vec![0, 0, 2]
    );
    assert_eq!(env.snapshot(), before);

    // One pair right, one wrong: one result per pair, in order.
    assert_eq!(env.ack(&[("a", lease + 1), ("b", lease)]).await, vec![0, 1]);
    assert!(env.payload("b").is_none());
    assert!(env.record("b").is_none());
    assert_eq!(env.zset(&k.processing), vec![("a".to_string(), lease)]);

    assert_eq!(env.ack(&[("a", lease), ("b", lease)]).await, vec![1, 2]);
    assert!(env.payload("a").is_none() && env.record("a").is_none());
    assert!(!env.exists(&k.processing) && !env.exists(&k.attempts));

    // Idempotent re-run: finished already, not a lost lease.
    assert_eq!(env.ack(&[("a", lease), ("b", lease)]).await, vec![2, 2]);
    assert_eq!(
        env.int(&["DBSIZE"]),
        2,
        "only the claim receipt and the totals are left"
    );
}

#[tokio::test]
async fn ack_of_a_batch_with_current_and_lost_leases_in_one_call() {
    let env = Env::new().await;
    let k = env.k().clone();
    let batch: Vec<Msg> = ["a", "b", "c", "d", "e"].map(|id| (id, "x", 0, NEVER, RETRY)).to_vec();
    assert_eq!(env.send_many(&batch).await, vec![1; 5]);
    assert_eq!(env.promote(10).await[0], 5);
    let first = env.claim(10).await;
    let l1 = first.lease;
    // "d" is handed back and delivered again under a new lease; "e" is
    // handed back and waits in ready, where a first delivery goes back.
    assert_eq!(env.nack("e", l1, Release).await, 1);
    assert_eq!(env.nack("d", l1, Release).await, 1);
    let second = env.claim(1).await;
    assert_eq!(second.ids(), vec!["d"]);
    let l2 = second.lease;
    assert!(l2 > l1);
    assert_eq!(env.list(&k.ready), vec!["e"]);

    env.reset_command_stats();
    let pairs = [
        ("a", l1),     // current
        ("b", l1 - 1), // wrong lease
        ("d", l1),     // the first delivery of d: lease lost
        ("c", l1),     // current
        ("nope", l1),  // unknown id: nothing left to ack
        ("e", l1),     // not being processed
        ("d", l2),     // the second delivery of d: current
    ];
    assert_eq!(env.ack(&pairs).await, vec![1, 0, 0, 1, 2, 0, 1]);
    // One call of each command for the whole batch.
    let calls = |cmd: &str| env.command_calls(cmd);
    assert_eq!(["zmscore", "zrem", "del", "hdel"].map(calls), [1, 1, 1, 1]);
    assert_eq!(calls("zscore"), 0, "no call per id");

    for id in ["a", "c", "d"] {
        assert!(env.payload(id).is_none(), "{id} payload left");
        assert!(env.record(id).is_none(), "{id} record left");
    }
    assert_eq!(env.zset(&k.processing), vec![("b".to_string(), l1)]);
    assert_eq!(env.payload("b").as_deref(), Some("x"));
    assert_eq!(env.record("b").as_deref(), Some("1"));
    assert_eq!(env.payload("e").as_deref(), Some("x"));
    assert_eq!(env.record("e").as_deref(), Some("0"), "released: no delivery counted");
    assert_eq!(env.list(&k.ready), vec!["e"]);

    // The same batch again writes nothing: what was acked (a, c, d, and d's
    // first delivery, finished by the second) has nothing left to ack; b
    // and e are still stored elsewhere, so their leases are lost.
    let state = env.snapshot();
    env.reset_command_stats();
    assert_eq!(env.ack(&pairs).await, vec![2, 0, 2, 2, 2, 0, 2]);
    assert_eq!(env.snapshot(), state);
    assert_eq!(["zmscore", "zrem", "del", "hdel"].map(calls), [1, 0, 0, 0]);
}

/// An ack of no pairs is a no-op.
#[tokio::test]
async fn ack_of_no_pairs_returns_an_empty_reply() {
    let env = Env::new().await;
    let reply = env.store().run(&Ack::plain(&[])).await;
    match reply {
        Ok(results) => assert!(results.acks.is_empty() && results.notes.is_empty(), "{results:?}"),
        Err(e) => panic!("ack of no pairs failed: {e:?}"),
    }
}
