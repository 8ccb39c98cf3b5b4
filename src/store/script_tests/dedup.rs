//! send.lua's modes (unique_for, throttle, debounce, replace) and the
//! windows that ack, cancel and the burials start (docs/dedup.md).

use std::time::Duration;

use fred::prelude::Value;

use super::{Env, NEVER};
use crate::store::ops::nack::NackMode;
use crate::store::ops::send::{Outgoing, SendBatch, SendMode, SendOutcome};
use crate::store::stored::{encode_stored, ValueParts};

/// One message with a caller-chosen id, retry count 3, sent with `mode`.
fn outgoing(id: &str, payload: &str, delay_ms: u64, mode: Option<SendMode>) -> Outgoing {
    Outgoing {
        id: id.into(),
        value: encode_stored(&ValueParts::new(3, payload.as_bytes())).into(),
        delay: Duration::from_millis(delay_ms),
        expire_after: None,
        own_id: true,
        wait: false,
        stage: None,
        mode,
    }
}

const MINUTE: Duration = Duration::from_secs(60);

impl Env {
    /// Sends one message with `mode`; its outcome and, when a marker
    /// refused it, when that ends (ms of Redis time).
    async fn send_mode(&self, id: &str, payload: &str, delay_ms: u64, mode: SendMode) -> (SendOutcome, Option<i64>) {
        let mut reply = self
            .run(&SendBatch {
                msgs: vec![outgoing(id, payload, delay_ms, Some(mode))],
            })
            .await;
        let (outcome, until) = reply.pop().expect("one outcome");
        let until = until.map(|t| t.duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64);
        (outcome, until)
    }

    fn marker(&self, id: &str) -> (String, i64) {
        let key = self.k().marker(id);
        (self.raw(&["GET", &key]), self.int(&["PTTL", &key]))
    }

    /// The due time the header of `id`'s value says: sent at + delay.
    fn header_due(&self, id: &str) -> i64 {
        let whole = self.stored_whole(id).unwrap();
        let times = whole.split_once('/').and_then(|(_, rest)| rest.split_once(':'));
        let (sent, delay) = times.and_then(|(t, _)| t.split_once('+')).expect("send times");
        sent.parse::<i64>().unwrap() + delay.parse::<i64>().unwrap()
    }

    /// Claims the one due message `id` (promoting it first); its lease.
    async fn take(&self, id: &str) -> i64 {
        self.raw(&["ZADD", &self.k().pending, "XX", "0", id]);
        self.promote(10).await;
        let c = self.claim(10).await;
        assert_eq!(c.ids(), vec![id]);
        c.lease
    }
}

#[tokio::test]
async fn unique_for_holds_while_live_and_for_its_window_after_the_ack() {
    let env = Env::new().await;
    let unique = SendMode::Unique(MINUTE);
    assert_eq!(env.send_mode("a", "one", 0, unique).await, (SendOutcome::Stored, None));
    assert_eq!(
        env.marker("a"),
        ("60000".into(), -1),
        "no TTL while the message is live"
    );
    assert_eq!(env.int(&["DBSIZE"]), 4, "payload, pending, totals, marker");

    let live = env.snapshot();
    assert_eq!(
        env.send_mode("a", "two", 0, unique).await,
        (SendOutcome::Held, None),
        "held by a marker without TTL: its message is live"
    );
    assert_eq!(env.snapshot(), live, "a refused send writes nothing");

    let lease = env.take("a").await;
    assert_eq!(env.marker("a").1, -1, "a delivery starts no window");
    let before = env.now_ms();
    assert_eq!(env.ack(&[("a", lease)]).await, vec![1]);
    let (value, ttl) = env.marker("a");
    assert_eq!(value, "60000");
    assert!((59_000..=60_000).contains(&ttl), "the window starts at the ack: {ttl}");

    let finished = env.snapshot();
    let (outcome, until) = env.send_mode("a", "three", 0, unique).await;
    let after = env.now_ms();
    assert_eq!(outcome, SendOutcome::Held);
    let until = until.expect("the marker has a TTL");
    assert!((before + 59_000..=after + 60_000).contains(&until), "{until}");
    assert_eq!(env.snapshot(), finished, "refused by the marker: nothing written");
    // A plain send does not look at markers.
    assert_eq!(env.send_own("a", "plain", 0, NEVER, 3).await, 1);

    // Once the marker is gone, the id is free for a unique send again.
    env.raw(&["DEL", &env.k().msg("a"), &env.k().pending, &env.k().marker("a")]);
    assert_eq!(env.send_mode("a", "four", 0, unique).await.0, SendOutcome::Stored);
}

#[tokio::test]
async fn cancel_and_every_death_start_the_window() {
    let env = Env::new().await;
    let unique = SendMode::Unique(MINUTE);
    let in_window = |env: &Env, id: &str| {
        let (value, ttl) = env.marker(id);
        value == "60000" && (59_000..=60_000).contains(&ttl)
    };
    // Cancelled.
    env.send_mode("c", "x", 5_000, unique).await;
    assert_eq!(env.cancel("c").await, 1);
    assert!(in_window(&env, "c"), "{:?}", env.marker("c"));
    // Dead by nack.
    env.send_mode("n", "x", 0, unique).await;
    let lease = env.take("n").await;
    assert_eq!(env.nack("n", lease, NackMode::Dead).await, 2);
    assert!(in_window(&env, "n"), "{:?}", env.marker("n"));
    // Retried by nack: still live, no window yet.
    env.send_mode("r", "x", 0, unique).await;
    let lease = env.take("r").await;
    assert_eq!(env.nack("r", lease, NackMode::Fail { delay: MINUTE }).await, 1);
    assert_eq!(env.marker("r").1, -1);
    // Dead by timeout: out of deliveries (the record says 4 of 3 retries + 1).
    env.send_mode("t", "x", 0, unique).await;
    env.take("t").await;
    env.raw(&["HSET", &env.k().attempts, "t", "4"]);
    env.raw(&["ZADD", &env.k().processing, "XX", "0", "t"]);
    assert_eq!(env.timeout(10).await, vec![1, 1]);
    assert!(in_window(&env, "t"), "{:?}", env.marker("t"));
    // Dead by expiry at claim.
    env.run(&SendBatch {
        msgs: vec![Outgoing {
            expire_after: Some(Duration::from_millis(1)),
            ..outgoing("e", "x", 0, Some(unique))
        }],
    })
    .await;
    env.raw(&["ZADD", &env.k().pending, "XX", "0", "e"]);
    env.promote(10).await;
    let stored = env.stored_whole("e").unwrap();
    let deadline = stored.split('@').nth(1).unwrap().split(':').next().unwrap().to_string();
    env.raw(&["SET", &env.k().msg("e"), &stored.replace(&deadline, "1")]);
    let c = env.claim(10).await;
    assert_eq!(c.expired_ids, vec!["e"]);
    assert!(in_window(&env, "e"), "{:?}", env.marker("e"));
    // Every dead or cancelled id is refused until its window ends.
    for id in ["c", "n", "t", "e"] {
        assert_eq!(env.send_mode(id, "again", 0, unique).await.0, SendOutcome::Held, "{id}");
    }
}

#[tokio::test]
async fn throttle_lets_the_first_send_of_a_window_through() {
    let env = Env::new().await;
    let throttle = SendMode::Throttle(MINUTE);
    assert_eq!(env.send_mode("a", "one", 0, throttle).await.0, SendOutcome::Stored);
    let (value, ttl) = env.marker("a");
    assert_eq!(value, "t");
    assert!((59_000..=60_000).contains(&ttl), "the window starts at the send: {ttl}");
    assert_eq!(env.send_mode("a", "two", 0, throttle).await.0, SendOutcome::Held);
    let lease = env.take("a").await;
    assert_eq!(env.ack(&[("a", lease)]).await, vec![1]);
    assert!(env.marker("a").1 <= ttl, "an ack leaves a throttle window as it is");
    let (outcome, until) = env.send_mode("a", "three", 0, throttle).await;
    assert_eq!(outcome, SendOutcome::Held);
    assert!(until.unwrap() <= env.now_ms() + 60_000);
    assert!(env.payload("a").is_none(), "nothing written");
    env.raw(&["DEL", &env.k().marker("a")]);
    assert_eq!(env.send_mode("a", "four", 0, throttle).await.0, SendOutcome::Stored);
}

#[tokio::test]
async fn debounce_replaces_a_pending_message_and_moves_its_due_time() {
    let env = Env::new().await;
    let k = env.k().clone();
    assert_eq!(
        env.send_mode("a", "one", 5_000, SendMode::Debounce).await.0,
        SendOutcome::Stored
    );
    let first = env.zscore(&k.pending, "a").unwrap();
    assert!(!env.exists(&k.marker("a")), "debounce keeps no marker");
    let before = env.now_ms();
    assert_eq!(
        env.send_mode("a", "two", 9_000, SendMode::Debounce).await.0,
        SendOutcome::Replaced
    );
    let due = env.zscore(&k.pending, "a").unwrap();
    assert!(due >= before + 9_000 && due > first, "due {due} moved to now + window");
    assert_eq!(env.zset(&k.pending).len(), 1);
    assert_eq!(env.payload("a").as_deref(), Some("two"), "the last payload only");
    assert_eq!(env.hget(&k.totals, "sent"), "1", "a replace is not a new message");
    assert_eq!(env.header_due("a"), due, "the header says the due time");

    // Due or being processed: refused, nothing written.
    let lease = env.take("a").await;
    let taken = env.snapshot();
    assert_eq!(
        env.send_mode("a", "three", 0, SendMode::Debounce).await.0,
        SendOutcome::Live
    );
    assert_eq!(env.snapshot(), taken);
    // Finished: the next one is a new message.
    assert_eq!(env.ack(&[("a", lease)]).await, vec![1]);
    assert_eq!(
        env.send_mode("a", "four", 0, SendMode::Debounce).await.0,
        SendOutcome::Stored
    );
    assert_eq!(env.payload("a").as_deref(), Some("four"));
}

#[tokio::test]
async fn replace_changes_only_a_pending_message() {
    let env = Env::new().await;
    let k = env.k().clone();
    let keep = SendMode::Replace { move_due: false };
    let move_due = SendMode::Replace { move_due: true };
    // Missing: nothing written.
    assert_eq!(env.send_mode("a", "x", 0, keep).await.0, SendOutcome::Missing);
    assert_eq!(env.int(&["DBSIZE"]), 0);

    env.send_own("a", "one", 60_000, NEVER, 3).await;
    let due = env.zscore(&k.pending, "a").unwrap();
    assert_eq!(env.send_mode("a", "two", 0, keep).await.0, SendOutcome::Replaced);
    assert_eq!(env.zscore(&k.pending, "a"), Some(due), "its due time kept");
    assert_eq!(env.payload("a").as_deref(), Some("two"));
    assert_eq!(env.header_due("a"), due, "the header says the due time");

    let before = env.now_ms();
    assert_eq!(
        env.send_mode("a", "three", 1_000, move_due).await.0,
        SendOutcome::Replaced
    );
    let moved = env.zscore(&k.pending, "a").unwrap();
    assert!(moved >= before + 1_000 && moved < due, "{moved}");

    // A retry waiting in pending keeps its attempt record, with the new due time.
    env.raw(&["HSET", &k.attempts, "a", "1@5:boom"]);
    assert_eq!(
        env.send_mode("a", "four", 2_000, move_due).await.0,
        SendOutcome::Replaced
    );
    let due = env.zscore(&k.pending, "a").unwrap();
    assert_eq!(env.raw_record("a"), Some(format!("1@{due}:boom")));

    // Ready or processing: refused, nothing written.
    env.raw(&["HDEL", &k.attempts, "a"]);
    let lease = env.take("a").await;
    let taken = env.snapshot();
    assert_eq!(env.send_mode("a", "five", 0, keep).await.0, SendOutcome::Live);
    assert_eq!(env.snapshot(), taken);
    // Dead: missing for a replace.
    assert_eq!(env.nack("a", lease, NackMode::Dead).await, 2);
    let dead = env.snapshot();
    assert_eq!(env.send_mode("a", "six", 0, keep).await.0, SendOutcome::Missing);
    assert_eq!(env.snapshot(), dead);
}

#[tokio::test]
async fn a_message_due_in_pending_is_due_for_replace_debounce_get_and_counts() {
    let env = Env::new().await;
    let k = env.k().clone();
    // Due, and no consumer has promoted it: it still waits in pending.
    env.send_own("a", "one", 60_000, NEVER, 3).await;
    env.raw(&["ZADD", &k.pending, "XX", "1", "a"]);
    let due = env.snapshot();
    let mut outcomes = Vec::new();
    for mode in [
        SendMode::Replace { move_due: false },
        SendMode::Replace { move_due: true },
        SendMode::Debounce,
    ] {
        outcomes.push(env.send_mode("a", "two", 1_000, mode).await.0);
    }
    assert_eq!(outcomes, [SendOutcome::Live; 3], "due: as ready, never replaced");
    assert_eq!(env.snapshot(), due, "nothing written");
    let info = env.queue.get("a").await.unwrap().expect("live");
    let counts = env.queue.counts().await.unwrap();
    assert_eq!(
        (info.state, counts.pending, counts.ready),
        (crate::MessageState::Ready, 0, 1),
        "get and counts name it alike"
    );
}

#[tokio::test]
async fn a_bad_mode_fails_before_any_write() {
    let env = Env::new().await;
    let op = SendBatch {
        msgs: vec![outgoing("a", "x", 0, None)],
    };
    // ARGV[7] is the first message's id flag and mode.
    for bad in ["0u5", "1u0", "1u", "1t", "1x", "1d5", "1r1", "2", "1 u5"] {
        let err = env.run_with_arg(&op, 7, Value::from(bad)).await.expect_err(bad);
        assert!(err.to_string().contains("bad id flag and mode"), "{bad}: {err:?}");
    }
    assert_eq!(env.int(&["DBSIZE"]), 0);
}

#[tokio::test]
async fn purge_deletes_markers_with_their_messages() {
    let env = Env::new().await;
    env.send_mode("a", "x", 0, SendMode::Unique(MINUTE)).await;
    env.send_mode("b", "x", 0, SendMode::Throttle(MINUTE)).await;
    let purge = crate::store::ops::purge::Purge { limit: 100 };
    assert_eq!(env.run(&purge).await, 2);
    assert_eq!(env.run(&purge).await, 0);
    assert_eq!(env.keys(), Vec::<String>::new());
}

#[tokio::test]
async fn a_queue_without_markers_reads_none_when_its_messages_finish() {
    let env = Env::new().await;
    env.send_own("p", "x", 0, NEVER, 3).await;
    let lease = env.take("p").await;
    env.reset_command_stats();
    assert_eq!(env.ack(&[("p", lease)]).await, vec![1]);
    assert_eq!(env.command_calls("mget"), 0, "no marker read by the ack");
    assert_eq!(env.int(&["HEXISTS", &env.k().totals, "markers"]), 0);

    // The first send that stores a marker marks the queue, from when on
    // the ack starts its window.
    assert_eq!(
        env.send_mode("u", "one", 0, SendMode::Unique(MINUTE)).await.0,
        SendOutcome::Stored
    );
    assert_eq!(env.hget(&env.k().totals, "markers"), "1");
    let lease = env.take("u").await;
    assert_eq!(env.ack(&[("u", lease)]).await, vec![1]);
    assert!(env.marker("u").1 > 0, "its window started");
}
