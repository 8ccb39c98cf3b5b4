//! cancel.lua: removing a waiting message in any state.

use std::time::Duration;

use super::{Env, NEVER, RETRY};

#[tokio::test]
async fn cancel_removes_a_waiting_message_in_every_state() {
    let env = Env::new().await;
    let k = env.k().clone();
    let lease = env.now_us() + 60_000_000;
    env.seed("p", Some("0"));
    env.raw(&["ZADD", &k.pending, &(env.now_ms() + 60_000).to_string(), "p"]);
    env.seed("rd", Some("0"));
    env.raw(&["RPUSH", &k.ready, "rd"]);
    env.seed("rt", Some("2"));
    env.raw(&["RPUSH", &k.retry, "rt"]);
    env.seed("g", Some("4"));
    env.bury(&["g"]);
    env.seed("u", Some("1"));
    env.raw(&["ZADD", &k.processing, &lease.to_string(), "u"]);
    // A dead message whose payload was already collected.
    env.bury(&["g2"]);

    for id in ["p", "g", "g2", "rd", "rt"] {
        assert_eq!(env.cancel(id).await, 1, "{id}");
        assert!(env.payload(id).is_none(), "{id} payload");
        assert!(env.record(id).is_none(), "{id} record");
        // Only a message waiting in a list leaves an entry behind, and
        // marks the hash STALE so claim looks.
        assert_eq!(env.stale(), matches!(id, "rd" | "rt"), "{id}");
    }
    assert!(!env.exists(&k.pending) && !env.exists(&k.dead));
    // List entries stay behind as stale entries.
    assert_eq!(env.list(&k.ready), vec!["rd"]);
    assert_eq!(env.list(&k.retry), vec!["rt"]);

    // Being processed: untouched.
    let state = env.snapshot();
    assert_eq!(env.cancel("u").await, 0);
    assert_eq!(env.cancel("unknown").await, 0);
    // Idempotent.
    for id in ["p", "rd", "rt", "g", "g2"] {
        assert_eq!(env.cancel(id).await, 0, "{id} again");
    }
    assert_eq!(env.snapshot(), state);
    assert_eq!(env.zset(&k.processing), vec![("u".to_string(), lease)]);
    assert_eq!(env.record("u").as_deref(), Some("1"));
    assert_eq!(env.payload("u").as_deref(), Some("payload-u"));

    // A claim drops the stale entries without delivering or counting them,
    // and clears the mark.
    let c = env.claim(10).await;
    assert_eq!((c.popped, c.expired, c.got.len()), (2, 0, 0));
    assert!(!env.exists(&k.ready) && !env.exists(&k.retry));
    assert!(!env.stale());
    assert_eq!(env.records(), vec![("u".to_string(), "1".to_string())]);

    // Through the public API too.
    let id = env.queue.send("x").delay(Duration::from_secs(60)).await.unwrap();
    assert!(env.queue.cancel(&id).await.unwrap());
    assert!(!env.queue.cancel(&id).await.unwrap());
    assert!(env.payload(id.as_str()).is_none());
    assert!(!env.stale(), "a pending message leaves no entry");
}

#[tokio::test]
async fn cancel_of_a_listed_message_whose_payload_is_gone_leaves_it_to_claim_to_bury() {
    let env = Env::new().await;
    let k = env.k().clone();
    // Waits in retry, payload deleted by something else: nothing of it left
    // to cancel but its record.
    env.raw(&["HSET", &k.attempts, "x", "1"]);
    env.raw(&["RPUSH", &k.retry, "x"]);
    assert_eq!(env.cancel("x").await, 0);
    assert!(env.record("x").is_none());
    assert!(!env.stale(), "no payload deleted: no mark");
    // Without the mark the claim buries the entry as the lost message it is.
    let c = env.claim(10).await;
    assert_eq!((c.popped, c.expired, c.got.len()), (1, 1, 0));
    assert_eq!(env.dead(), vec!["x"]);
    let mut left = vec![k.dead.clone(), k.attempts.clone(), k.totals.clone()];
    left.sort();
    assert_eq!(env.keys(), left, "the dead letter and the totals, counting it expired");
}

#[tokio::test]
async fn cancelled_id_sent_again_is_delivered_once() {
    let env = Env::new().await;
    let k = env.k().clone();
    assert_eq!(env.send_own("a", "one", 0, NEVER, RETRY).await, 1);
    assert_eq!(env.promote(10).await[0], 1);
    assert_eq!(env.cancel("a").await, 1);
    // The stale ready entry is still there when the id is sent again.
    assert_eq!(env.send_own("a", "two", 0, NEVER, RETRY).await, 1);
    assert_eq!(env.promote(10).await[0], 1);
    assert_eq!(env.list(&k.ready), vec!["a", "a"]);
    assert!(env.stale());
    let c = env.claim(10).await;
    assert_eq!(c.popped, 2);
    assert_eq!(c.got, vec![("a".into(), "two".into(), 1)]);
    assert_eq!(env.zset(&k.processing), vec![("a".to_string(), c.lease)]);
    assert_eq!(env.record("a").as_deref(), Some("1"));
    assert!(!env.stale());
}
