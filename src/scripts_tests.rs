//! Tests of the Lua scripts in `lua/`, one state transition at a time, in
//! the style of asynq's `internal/rdb` tests: every test starts its own
//! redis-server, seeds exact Redis state, runs one script directly and
//! checks the exact Redis state afterwards.
//!
//! KEYS/ARGV of each script are built once, in the `Env` helpers below, in
//! the same order as `producer.rs`, `consumer.rs`, `queue.rs` and `acker.rs`.

use std::time::Duration;

use fred::prelude::{Client, FromValue, KeysInterface, Value};

use crate::keys::Keys;
use crate::scripts::{self, LuaScript};
use crate::test_support::RedisServer;
use crate::{DelayQueue, Error, QueueStats};

/// msg ttl (ms) the tests pass to send, nack and timeout.
const TTL: i64 = 60_000;
/// Default retry count the tests pass to claim, nack and timeout.
const RETRY: i64 = 3;
/// Visibility timeout (ms) the tests pass to claim.
const VIS: i64 = 5_000;
/// Slack for clock readings taken around a script call, in ms.
const SLACK_MS: i64 = 1_000;

/// One test's private redis-server, a client on it and a queue.
struct Env {
    server: RedisServer,
    client: Client,
    queue: DelayQueue,
}

/// A decoded claim reply.
#[derive(Debug)]
struct Claimed {
    popped: i64,
    expired: i64,
    lease: i64,
    /// Ms of the lease left when the script ran.
    left_ms: i64,
    /// (id, payload, attempt) per delivery, in reply order.
    got: Vec<(String, String, i64)>,
}

impl Claimed {
    fn ids(&self) -> Vec<&str> {
        self.got.iter().map(|d| d.0.as_str()).collect()
    }
}

impl Env {
    async fn new() -> Env {
        let server = RedisServer::start().await;
        let client = server.client().await;
        let queue = DelayQueue::builder("q", client.clone()).build().expect("build queue");
        Env { server, client, queue }
    }

    fn k(&self) -> &Keys {
        &self.queue.inner.keys
    }

    async fn run<R: FromValue>(&self, script: &LuaScript, keys: Vec<String>, args: Vec<Value>) -> R {
        script
            .call(&self.client, keys, args)
            .await
            .unwrap_or_else(|e| panic!("script {} failed: {e:?}", script.name))
    }

    // ---- the scripts, KEYS/ARGV in the order the crate uses ----

    async fn send(&self, id: &str, payload: &str, delay_ms: i64, ttl_ms: i64, retry: i64) -> Vec<i64> {
        let args: Vec<Value> = vec![id.into(), payload.into(), delay_ms.into(), ttl_ms.into(), retry.into()];
        self.run(&scripts::SEND, self.k().for_send(id), args).await
    }

    async fn promote(&self, limit: i64) -> Vec<i64> {
        let keys = self.k().for_promote();
        self.run(&scripts::PROMOTE, keys, vec![limit.into()]).await
    }

    async fn claim_with(&self, consumer: &str, limit: i64, vis_ms: i64, seq: i64) -> Claimed {
        let k = self.k();
        let keys = k.for_claim(&k.claim(consumer));
        let args: Vec<Value> = vec![
            k.msg_prefix.as_str().into(),
            limit.into(),
            vis_ms.into(),
            RETRY.into(),
            seq.into(),
            TTL.into(),
        ];
        let reply: Vec<Value> = self.run(&scripts::CLAIM, keys, args).await;
        assert!(reply.len() >= 4 && reply.len() % 3 == 1, "claim reply {reply:?}");
        let int = |v: &Value| v.as_i64().unwrap_or_else(|| panic!("claim: not an integer: {v:?}"));
        let text = |v: &Value| {
            v.as_str()
                .unwrap_or_else(|| panic!("claim: not a string: {v:?}"))
                .into_owned()
        };
        Claimed {
            popped: int(&reply[0]),
            expired: int(&reply[1]),
            lease: int(&reply[2]),
            left_ms: int(&reply[3]),
            got: reply[4..]
                .chunks_exact(3)
                .map(|t| (text(&t[0]), text(&t[1]), int(&t[2])))
                .collect(),
        }
    }

    /// A claim by a fresh request (each call its own consumer and seq).
    async fn claim(&self, limit: i64) -> Claimed {
        static SEQ: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);
        let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.claim_with(&format!("c{seq}"), limit, VIS, seq).await
    }

    async fn ack(&self, pairs: &[(&str, i64)]) -> Vec<i64> {
        let k = self.k();
        let mut args: Vec<Value> = vec![k.msg_prefix.as_str().into()];
        for (id, lease) in pairs {
            args.push((*id).into());
            args.push((*lease).into());
        }
        self.run(&scripts::ACK, k.for_ack(), args).await
    }

    async fn nack(&self, id: &str, lease: i64, delay_ms: i64, mode: &str) -> i64 {
        let k = self.k();
        let keys = k.for_nack(id);
        let args: Vec<Value> = vec![
            id.into(),
            lease.into(),
            delay_ms.into(),
            TTL.into(),
            mode.into(),
            RETRY.into(),
        ];
        self.run(&scripts::NACK, keys, args).await
    }

    async fn timeout(&self, limit: i64) -> Vec<i64> {
        let k = self.k();
        let keys = k.for_timeout();
        let args: Vec<Value> = vec![k.msg_prefix.as_str().into(), limit.into(), TTL.into(), RETRY.into()];
        self.run(&scripts::TIMEOUT, keys, args).await
    }

    async fn cancel(&self, id: &str) -> i64 {
        self.run(&scripts::CANCEL, self.k().for_cancel(id), vec![id.into()])
            .await
    }

    async fn gc(&self, limit: i64) -> i64 {
        let k = self.k();
        let args: Vec<Value> = vec![k.msg_prefix.as_str().into(), limit.into()];
        self.run(&scripts::GC, k.for_gc(), args).await
    }

    async fn stats(&self) -> Vec<i64> {
        self.run(&scripts::STATS, self.k().for_stats(), vec![]).await
    }

    // ---- raw Redis access ----

    fn raw(&self, args: &[&str]) -> String {
        let out = self.server.raw_command(args);
        assert!(!out.starts_with('-'), "{args:?} -> {out}");
        out
    }

    fn int(&self, args: &[&str]) -> i64 {
        let out = self.raw(args);
        out.parse()
            .unwrap_or_else(|_| panic!("{args:?} -> {out:?} is not an integer"))
    }

    fn lines(&self, args: &[&str]) -> Vec<String> {
        match self.server.raw_reply(args) {
            crate::test_support::RawReply::Array(items) => items.iter().map(|i| i.render()).collect(),
            other => panic!("{args:?} -> {other:?} is not an array"),
        }
    }

    /// Redis's clock in microseconds.
    fn now_us(&self) -> i64 {
        let t = self.lines(&["TIME"]);
        t[0].parse::<i64>().unwrap() * 1_000_000 + t[1].parse::<i64>().unwrap()
    }

    fn now_ms(&self) -> i64 {
        self.now_us() / 1000
    }

    /// A zset as (member, score), lowest score first.
    fn zset(&self, key: &str) -> Vec<(String, i64)> {
        self.lines(&["ZRANGE", key, "0", "-1", "WITHSCORES"])
            .chunks_exact(2)
            .map(|p| (p[0].clone(), p[1].parse::<f64>().unwrap() as i64))
            .collect()
    }

    fn zscore(&self, key: &str, id: &str) -> Option<i64> {
        match self.raw(&["ZSCORE", key, id]).as_str() {
            "(nil)" => None,
            s => Some(s.parse::<f64>().unwrap() as i64),
        }
    }

    fn list(&self, key: &str) -> Vec<String> {
        self.lines(&["LRANGE", key, "0", "-1"])
    }

    fn set(&self, key: &str) -> Vec<String> {
        let mut m = self.lines(&["SMEMBERS", key]);
        m.sort();
        m
    }

    fn record(&self, id: &str) -> Option<String> {
        match self.raw(&["HGET", &self.k().retries, id]).as_str() {
            "(nil)" => None,
            s => Some(s.to_string()),
        }
    }

    fn payload(&self, id: &str) -> Option<String> {
        match self.raw(&["GET", &self.k().msg(id)]).as_str() {
            "(nil)" => None,
            s => Some(s.to_string()),
        }
    }

    fn pttl(&self, id: &str) -> i64 {
        self.int(&["PTTL", &self.k().msg(id)])
    }

    fn exists(&self, key: &str) -> bool {
        self.int(&["EXISTS", key]) == 1
    }

    /// A whole-queue snapshot, to check that a call changed nothing.
    fn snapshot(&self) -> String {
        let k = self.k();
        let mut keys = self.lines(&["KEYS", "*"]);
        keys.sort();
        let mut out = format!("keys {keys:?}\n");
        out += &format!("pending {:?}\n", self.zset(&k.pending));
        out += &format!("unack {:?}\n", self.zset(&k.unack));
        out += &format!("ready {:?}\n", self.list(&k.ready));
        out += &format!("retry {:?}\n", self.list(&k.retry));
        out += &format!("garbage {:?}\n", self.set(&k.garbage));
        out += &format!("retries {:?}\n", {
            let mut h = self.lines(&["HGETALL", &k.retries]);
            h.sort();
            h
        });
        for key in keys.iter().filter(|key| key.starts_with(&k.msg_prefix)) {
            out += &format!("{key} = {}\n", self.raw(&["GET", key]));
        }
        out
    }

    // ---- seeding ----

    /// Stores a payload `payload-<id>` (TTL = `TTL`) and, if given, a retry record.
    fn seed(&self, id: &str, record: Option<&str>) {
        self.raw(&[
            "SET",
            &self.k().msg(id),
            &format!("payload-{id}"),
            "PX",
            &TTL.to_string(),
        ]);
        if let Some(r) = record {
            self.raw(&["HSET", &self.k().retries, id, r]);
        }
    }
}

fn assert_pttl_near(pttl: i64, expected: i64) {
    assert!(
        pttl <= expected && pttl > expected - SLACK_MS,
        "PTTL {pttl} not within {SLACK_MS} ms below {expected}"
    );
}

// ======================= send =======================

#[tokio::test]
async fn send_stores_payload_record_and_pending_entry_together() {
    let env = Env::new().await;
    let k = env.k().clone();
    let delay = 1_500;
    let before = env.now_ms();
    let reply = env.send("a", "hello", delay, TTL, 5).await;
    let after = env.now_ms();

    assert_eq!(reply.len(), 2);
    assert_eq!(reply[0], 1);
    let due = reply[1];
    assert!(
        (before + delay..=after + delay).contains(&due),
        "due {due} not Redis TIME + delay ({before}..{after} + {delay})"
    );
    assert_eq!(env.zset(&k.pending), vec![("a".to_string(), due)]);
    assert_eq!(env.payload("a").as_deref(), Some("hello"));
    assert_eq!(env.record("a").as_deref(), Some("0:5"));
    let pttl = env.pttl("a");
    assert_pttl_near(pttl, delay + TTL);
    assert!(pttl > delay, "payload must outlive its due time");
    // Nothing else was written.
    for key in [&k.ready, &k.retry, &k.unack, &k.garbage] {
        assert!(!env.exists(key), "{key} written");
    }
    assert_eq!(env.int(&["DBSIZE"]), 3);

    // Binary payloads are stored byte for byte.
    let bytes = vec![0u8, 255, b'\n', b' ', 1];
    let args: Vec<Value> = vec![
        "bin".into(),
        Value::Bytes(bytes.clone().into()),
        0i64.into(),
        TTL.into(),
        RETRY.into(),
    ];
    let reply: Vec<i64> = env.run(&scripts::SEND, env.k().for_send("bin"), args).await;
    assert_eq!(reply[0], 1);
    let stored: Vec<u8> = env.client.get(k.msg("bin")).await.unwrap();
    assert_eq!(stored, bytes);
    assert_pttl_near(env.pttl("bin"), TTL);
}

#[tokio::test]
async fn send_of_a_live_id_is_a_duplicate_and_changes_nothing() {
    let env = Env::new().await;
    let k = env.k().clone();
    // pending
    assert_eq!(env.send("p", "first", 60_000, TTL, 1).await[0], 1);
    // ready and retry: payload live, id in a list
    env.seed("rd", Some("0:3"));
    env.raw(&["RPUSH", &k.ready, "rd"]);
    env.seed("rt", Some("1:3"));
    env.raw(&["RPUSH", &k.retry, "rt"]);
    // processing
    env.seed("u", Some("1:3"));
    env.raw(&["ZADD", &k.unack, &(env.now_us() + 5_000_000).to_string(), "u"]);

    let before = env.snapshot();
    for id in ["p", "rd", "rt", "u"] {
        assert_eq!(env.send(id, "second", 0, TTL, 9).await, vec![0, 0], "{id}");
    }
    assert_eq!(env.snapshot(), before);
    assert_eq!(env.payload("p").as_deref(), Some("first"));
}

#[tokio::test]
async fn send_of_an_id_in_unack_is_a_duplicate_even_without_payload() {
    let env = Env::new().await;
    let k = env.k().clone();
    // Being processed while its payload expired: still not replaced.
    env.raw(&["HSET", &k.retries, "u", "1:3"]);
    env.raw(&["ZADD", &k.unack, "123", "u"]);
    let before = env.snapshot();
    assert_eq!(env.send("u", "new", 0, TTL, 3).await, vec![0, 0]);
    assert_eq!(env.snapshot(), before);
    assert!(env.payload("u").is_none());
}

#[tokio::test]
async fn send_replaces_a_dead_message_in_garbage() {
    let env = Env::new().await;
    let k = env.k().clone();
    env.seed("g", Some("4:3"));
    env.raw(&["SADD", &k.garbage, "g", "other"]);

    let reply = env.send("g", "again", 2_000, TTL, 7).await;
    assert_eq!(reply[0], 1);
    assert_eq!(env.set(&k.garbage), vec!["other".to_string()]);
    assert_eq!(env.zset(&k.pending), vec![("g".to_string(), reply[1])]);
    assert_eq!(env.payload("g").as_deref(), Some("again"));
    assert_eq!(env.record("g").as_deref(), Some("0:7"), "attempts reset");
    assert_pttl_near(env.pttl("g"), 2_000 + TTL);
}

#[tokio::test]
async fn send_through_the_api_reports_wrongtype() {
    let env = Env::new().await;
    env.raw(&["SET", &env.k().pending, "not a zset"]);
    let err = env
        .queue
        .send_delay_msg("x", Duration::ZERO)
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
    assert!(matches!(env.queue.stats().await, Err(Error::WrongType { .. })));
}

#[tokio::test]
async fn send_that_fails_on_wrongtype_writes_nothing() {
    let env = Env::new().await;
    let k = env.k().clone();
    env.raw(&["SET", &k.pending, "not a zset"]);
    let res = env.queue.send_delay_msg("x", Duration::ZERO).id("w").await;
    assert!(matches!(res, Err(Error::WrongType { .. })), "{res:?}");
    assert!(env.payload("w").is_none(), "payload written by a failed send");
    assert!(env.record("w").is_none(), "retry record written by a failed send");
    // Once the key is fixed, the same id must be accepted.
    env.raw(&["DEL", &k.pending]);
    let id = env.queue.send_delay_msg("x", Duration::ZERO).id("w").await;
    assert!(id.is_ok(), "re-send after a failed send: {id:?}");
}

// ======================= promote =======================

#[tokio::test]
async fn promote_moves_due_ids_in_due_order_in_batches() {
    let env = Env::new().await;
    let k = env.k().clone();
    assert_eq!(env.promote(1000).await, vec![0, -1], "empty queue");

    // 2500 due ids whose due order differs from their name order, and one future id.
    const N: i64 = 2500;
    let now = env.now_ms();
    let past = now - 10_000;
    let mut due: Vec<(i64, String)> = (0..N).map(|i| (past + (i * 7919) % N, format!("m{i:04}"))).collect();
    let mut cmd = vec!["ZADD".to_string(), k.pending.clone()];
    for (score, id) in &due {
        cmd.push(score.to_string());
        cmd.push(id.clone());
    }
    let future_due = now + 30_000;
    cmd.push(future_due.to_string());
    cmd.push("future".into());
    env.raw(&cmd.iter().map(String::as_str).collect::<Vec<_>>());
    due.sort();
    let due_order: Vec<String> = due.into_iter().map(|(_, id)| id).collect();

    assert_eq!(env.promote(1000).await, vec![1000, 0], "more are due: wait 0");
    assert_eq!(env.list(&k.ready), due_order[..1000]);
    assert_eq!(env.int(&["ZCARD", &k.pending]), N - 1000 + 1);

    assert_eq!(env.promote(1000).await, vec![1000, 0]);
    assert_eq!(env.list(&k.ready), due_order[..2000]);

    let reply = env.promote(1000).await;
    let after = env.now_ms();
    assert_eq!(reply[0], 500);
    let wait = reply[1];
    assert!(
        wait <= future_due - now && wait >= future_due - after,
        "wait {wait} for an id due in {} ms",
        future_due - now
    );
    assert_eq!(env.list(&k.ready), due_order);
    assert_eq!(env.zset(&k.pending), vec![("future".to_string(), future_due)]);

    // Idempotent: a re-run moves nothing and reports the same next due time.
    let again = env.promote(1000).await;
    assert_eq!(again[0], 0);
    assert!(again[1] <= wait && again[1] > wait - SLACK_MS, "{again:?}");
    assert_eq!(env.list(&k.ready).len(), N as usize);

    env.raw(&["ZREM", &k.pending, "future"]);
    assert_eq!(env.promote(1000).await, vec![0, -1]);
}

#[tokio::test]
async fn promote_moves_what_send_made_due() {
    let env = Env::new().await;
    let k = env.k().clone();
    assert_eq!(env.send("now", "x", 0, TTL, RETRY).await[0], 1);
    assert_eq!(env.send("later", "y", 60_000, TTL, RETRY).await[0], 1);
    let reply = env.promote(1000).await;
    assert_eq!(reply[0], 1);
    assert!(reply[1] > 60_000 - SLACK_MS && reply[1] <= 60_000, "{reply:?}");
    assert_eq!(env.list(&k.ready), vec!["now"]);
    assert_eq!(env.zset(&k.pending).len(), 1);
    // Promote does not touch the payload or the record.
    assert_eq!(env.payload("now").as_deref(), Some("x"));
    assert_eq!(env.record("now").as_deref(), Some("0:3"));
}

// ======================= claim =======================

#[tokio::test]
async fn claim_takes_retry_first_then_ready_and_leases_them() {
    let env = Env::new().await;
    let k = env.k().clone();
    env.seed("r1", Some("1:3"));
    env.seed("r2", Some("2:5"));
    env.seed("a", Some("0:3"));
    env.seed("b", Some("0:0"));
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
    assert_eq!(
        c.got,
        vec![
            ("r1".into(), "payload-r1".into(), 2),
            ("r2".into(), "payload-r2".into(), 3),
            ("a".into(), "payload-a".into(), 1),
            ("b".into(), "payload-b".into(), 1),
        ]
    );
    let mut unack = env.zset(&k.unack);
    unack.sort();
    assert_eq!(
        unack,
        ["a", "b", "r1", "r2"].map(|id| (id.to_string(), c.lease)).to_vec()
    );
    assert_eq!(env.record("r1").as_deref(), Some("2:3"));
    assert_eq!(env.record("r2").as_deref(), Some("3:5"));
    assert_eq!(env.record("a").as_deref(), Some("1:3"));
    assert_eq!(env.record("b").as_deref(), Some("1:0"));
    assert!(!env.exists(&k.ready) && !env.exists(&k.retry));
    // Payloads stay until ack.
    assert_eq!(env.payload("a").as_deref(), Some("payload-a"));

    // Nothing left: nothing popped or leased.
    let empty = env.claim(10).await;
    assert_eq!((empty.popped, empty.expired, empty.got.len()), (0, 0, 0));
}

#[tokio::test]
async fn claim_is_bounded_by_limit() {
    let env = Env::new().await;
    let k = env.k().clone();
    for id in ["r1", "r2", "a", "b", "c"] {
        env.seed(id, Some("0:3"));
    }
    env.raw(&["RPUSH", &k.retry, "r1", "r2"]);
    env.raw(&["RPUSH", &k.ready, "a", "b", "c"]);

    let c = env.claim(3).await;
    assert_eq!(c.ids(), vec!["r1", "r2", "a"]);
    assert_eq!(c.popped, 3);
    assert_eq!(env.list(&k.ready), vec!["b", "c"]);
    assert_eq!(env.zset(&k.unack).len(), 3);

    let c = env.claim(1).await;
    assert_eq!(c.ids(), vec!["b"]);
    assert_eq!(env.list(&k.ready), vec!["c"]);
    assert_eq!(env.record("c").as_deref(), Some("0:3"), "unclaimed id untouched");
}

#[tokio::test]
async fn claim_skips_stale_entries() {
    let env = Env::new().await;
    let k = env.k().clone();
    let lease_u = env.now_us() + 9_000_000;
    // cancelled: entry left in ready, payload and record gone
    env.raw(&["RPUSH", &k.ready, "cancelled"]);
    // live elsewhere: pending (re-sent), unack (being processed), garbage (dead)
    env.seed("p", Some("0:3"));
    env.raw(&["ZADD", &k.pending, &(env.now_ms() + 60_000).to_string(), "p"]);
    env.seed("u", Some("1:3"));
    env.raw(&["ZADD", &k.unack, &lease_u.to_string(), "u"]);
    env.seed("g", Some("4:3"));
    env.raw(&["SADD", &k.garbage, "g"]);
    env.raw(&["RPUSH", &k.retry, "u", "g"]);
    env.raw(&["RPUSH", &k.ready, "p", "ok"]);
    env.seed("ok", Some("0:3"));

    let c = env.claim(10).await;
    assert_eq!((c.popped, c.expired), (5, 0));
    assert_eq!(c.ids(), vec!["ok"], "only the valid id is leased");
    // Stale entries are gone from the lists, and nothing else changed for them.
    assert!(!env.exists(&k.ready) && !env.exists(&k.retry));
    assert_eq!(env.zscore(&k.unack, "u"), Some(lease_u));
    assert_eq!(env.zscore(&k.unack, "ok"), Some(c.lease));
    assert!(env.zscore(&k.pending, "p").is_some());
    assert_eq!(env.set(&k.garbage), vec!["g"]);
    assert_eq!(env.record("p").as_deref(), Some("0:3"));
    assert_eq!(env.record("u").as_deref(), Some("1:3"));
    assert_eq!(env.record("g").as_deref(), Some("4:3"));
    assert_eq!(env.record("ok").as_deref(), Some("1:3"));
    for id in ["p", "u", "g"] {
        assert_eq!(env.payload(id), Some(format!("payload-{id}")));
    }
    assert!(env.record("cancelled").is_none());
}

#[tokio::test]
async fn claim_pops_each_list_once_so_stale_entries_use_up_the_pop() {
    let env = Env::new().await;
    let k = env.k().clone();
    env.raw(&["RPUSH", &k.ready, "gone1", "gone2", "a", "b"]);
    env.seed("a", Some("0:3"));
    env.seed("b", Some("0:3"));
    // One LPOP of `limit` per list: the stale id is popped, nothing leased;
    // popped == limit tells the consumer to claim again at once.
    let c = env.claim(1).await;
    assert_eq!((c.popped, c.expired, c.got.len()), (1, 0, 0));
    assert_eq!(env.list(&k.ready), vec!["gone2", "a", "b"]);
    let c = env.claim(10).await;
    assert_eq!((c.popped, c.ids()), (3, vec!["a", "b"]));
}

#[tokio::test]
async fn claim_counts_an_expired_payload_and_drops_its_record() {
    let env = Env::new().await;
    let k = env.k().clone();
    // Payload expired while waiting: record left behind.
    env.raw(&["HSET", &k.retries, "e1", "0:3", "e2", "2:3"]);
    env.raw(&["RPUSH", &k.ready, "e1"]);
    env.raw(&["RPUSH", &k.retry, "e2"]);
    // Payload gone while processing: not ours to count (its delivery decides).
    env.raw(&["HSET", &k.retries, "u", "1:3"]);
    env.raw(&["ZADD", &k.unack, "1", "u"]);
    env.raw(&["RPUSH", &k.ready, "u"]);

    let c = env.claim(10).await;
    assert_eq!((c.popped, c.expired, c.got.len()), (3, 2, 0));
    assert!(env.record("e1").is_none() && env.record("e2").is_none());
    assert_eq!(env.record("u").as_deref(), Some("1:3"));
    assert_eq!(env.zset(&k.unack), vec![("u".to_string(), 1)]);
    // A re-claim finds nothing more to expire.
    env.raw(&["RPUSH", &k.ready, "e1"]);
    let c = env.claim(10).await;
    assert_eq!((c.popped, c.expired), (1, 0));
}

#[tokio::test]
async fn claim_drops_a_payload_key_of_another_type_instead_of_failing() {
    let env = Env::new().await;
    let k = env.k().clone();
    assert_eq!(env.send("ok", "x", 0, TTL, RETRY).await[0], 1);
    assert_eq!(env.promote(10).await[0], 1);
    env.raw(&["HSET", &k.retries, "odd", "0:3"]);
    env.raw(&["HSET", &k.msg("odd"), "f", "v"]);
    env.raw(&["LPUSH", &k.ready, "odd"]);
    let c = env.claim(10).await;
    assert_eq!((c.popped, c.expired, c.ids()), (2, 1, vec!["ok"]));
    assert!(env.record("odd").is_none());
    assert_eq!(
        env.raw(&["TYPE", &k.msg("odd")]),
        "hash",
        "the foreign key is left alone"
    );
}

#[tokio::test]
async fn claim_without_or_with_malformed_record_uses_default_retry_count() {
    let env = Env::new().await;
    let k = env.k().clone();
    env.seed("none", None);
    env.seed("junk", Some("junk"));
    env.seed("half", Some("2:"));
    env.seed("neg", Some("-1:3"));
    env.raw(&["RPUSH", &k.ready, "none", "junk", "half", "neg"]);

    let c = env.claim(10).await;
    let attempts: Vec<(&str, i64)> = c.got.iter().map(|d| (d.0.as_str(), d.2)).collect();
    assert_eq!(attempts, vec![("none", 1), ("junk", 1), ("half", 1), ("neg", 1)]);
    for id in ["none", "junk", "half", "neg"] {
        assert_eq!(env.record(id), Some(format!("1:{RETRY}")), "{id}");
    }
}

#[tokio::test]
async fn claim_receipt_replays_a_resent_request() {
    let env = Env::new().await;
    let k = env.k().clone();
    for id in ["a", "b", "c"] {
        env.seed(id, Some("0:3"));
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
    assert!(
        again.left_ms <= VIS && again.left_ms > VIS - SLACK_MS,
        "left {}",
        again.left_ms
    );
    assert_eq!(env.snapshot(), state, "a replay writes nothing");
    assert_eq!(env.list(&k.ready), vec!["c"]);
    assert_eq!(env.record("a").as_deref(), Some("1:3"), "attempt not counted twice");

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
async fn claim_after_timeout_gets_a_larger_lease() {
    let env = Env::new().await;
    let k = env.k().clone();
    env.seed("a", Some("0:3"));
    env.raw(&["RPUSH", &k.ready, "a"]);
    let first = env.claim_with("c", 10, 10, 1).await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(env.timeout(10).await, vec![1, 0]);
    let second = env.claim_with("c", 10, 10, 2).await;
    assert_eq!(second.got, vec![("a".into(), "payload-a".into(), 2)]);
    assert!(second.lease > first.lease);
}

// ======================= ack =======================

#[tokio::test]
async fn ack_is_fenced_by_lease() {
    let env = Env::new().await;
    let k = env.k().clone();
    env.seed("a", Some("0:3"));
    env.seed("b", Some("0:3"));
    env.raw(&["RPUSH", &k.ready, "a", "b"]);
    let c = env.claim(10).await;
    let lease = c.lease;

    // Wrong leases (older, newer) and unknown ids: nothing deleted.
    let before = env.snapshot();
    assert_eq!(
        env.ack(&[("a", lease - 1), ("b", lease + 1), ("nope", lease)]).await,
        vec![0, 0, 0]
    );
    assert_eq!(env.snapshot(), before);

    // One pair right, one wrong: one result per pair, in order.
    assert_eq!(env.ack(&[("a", lease + 1), ("b", lease)]).await, vec![0, 1]);
    assert!(env.payload("b").is_none());
    assert!(env.record("b").is_none());
    assert_eq!(env.zset(&k.unack), vec![("a".to_string(), lease)]);

    assert_eq!(env.ack(&[("a", lease), ("b", lease)]).await, vec![1, 0]);
    assert!(env.payload("a").is_none() && env.record("a").is_none());
    assert!(!env.exists(&k.unack) && !env.exists(&k.retries));

    // Idempotent re-run.
    assert_eq!(env.ack(&[("a", lease), ("b", lease)]).await, vec![0, 0]);
    assert_eq!(env.ack(&[]).await, Vec::<i64>::new());
    assert_eq!(env.int(&["DBSIZE"]), 1, "only the claim receipt is left");
}

// ======================= nack =======================

/// Seeds `id` as claimed with `record` and returns its lease.
fn seed_unack(env: &Env, id: &str, record: &str) -> i64 {
    env.seed(id, Some(record));
    let lease = env.now_us() + VIS * 1000;
    env.raw(&["ZADD", &env.k().unack, &lease.to_string(), id]);
    lease
}

#[tokio::test]
async fn nack_fail_with_retries_left_goes_to_retry_or_pending() {
    let env = Env::new().await;
    let k = env.k().clone();

    // delay 0: straight to the end of the retry list, payload kept >= msg ttl.
    env.raw(&["RPUSH", &k.retry, "older"]);
    let la = seed_unack(&env, "a", "1:3");
    env.raw(&["PEXPIRE", &k.msg("a"), "2000"]);
    assert_eq!(env.nack("a", la, 0, "fail").await, 1);
    assert_eq!(env.list(&k.retry), vec!["older", "a"]);
    assert!(env.zscore(&k.unack, "a").is_none());
    assert_eq!(env.record("a").as_deref(), Some("1:3"), "claim counted the delivery");
    assert_pttl_near(env.pttl("a"), TTL);

    // delay > 0: pending at Redis now + delay, payload kept >= delay + msg ttl.
    let delay = 30_000;
    let lb = seed_unack(&env, "b", "3:3");
    env.raw(&["PEXPIRE", &k.msg("b"), "2000"]);
    let before = env.now_ms();
    assert_eq!(env.nack("b", lb, delay, "fail").await, 1);
    let after = env.now_ms();
    let due = env.zscore(&k.pending, "b").expect("b pending");
    assert!((before + delay..=after + delay).contains(&due), "due {due}");
    assert_pttl_near(env.pttl("b"), delay + TTL);
    assert_eq!(env.list(&k.retry), vec!["older", "a"]);
    assert!(!env.exists(&k.unack));

    // A payload that already lives longer keeps its TTL.
    let lc = seed_unack(&env, "c", "1:3");
    env.raw(&["PEXPIRE", &k.msg("c"), "600000"]);
    assert_eq!(env.nack("c", lc, 0, "fail").await, 1);
    assert_pttl_near(env.pttl("c"), 600_000);

    // Idempotent: a re-run finds the lease gone.
    let state = env.snapshot();
    assert_eq!(env.nack("a", la, 0, "fail").await, 0);
    assert_eq!(env.nack("b", lb, delay, "fail").await, 0);
    assert_eq!(env.snapshot(), state);
}

#[tokio::test]
async fn nack_fail_out_of_retries_goes_to_garbage() {
    let env = Env::new().await;
    let k = env.k().clone();
    let la = seed_unack(&env, "a", "4:3");
    let lz = seed_unack(&env, "zero", "1:0");
    let ln = seed_unack(&env, "norecord", "x");
    env.raw(&["HDEL", &k.retries, "norecord"]);

    assert_eq!(env.nack("a", la, 0, "fail").await, 2);
    assert_eq!(env.nack("zero", lz, 5_000, "fail").await, 2);
    // No record: counted as delivery 1 of default RETRY+1, so retried.
    assert_eq!(env.nack("norecord", ln, 0, "fail").await, 1);

    assert_eq!(env.set(&k.garbage), vec!["a", "zero"]);
    assert_eq!(env.list(&k.retry), vec!["norecord"]);
    assert!(!env.exists(&k.pending) && !env.exists(&k.unack));
    // Garbage keeps payload and record until gc.
    assert_eq!(env.payload("a").as_deref(), Some("payload-a"));
    assert_eq!(env.record("a").as_deref(), Some("4:3"));
    assert_eq!(env.record("zero").as_deref(), Some("1:0"));
}

#[tokio::test]
async fn nack_release_uncounts_the_delivery_and_goes_first() {
    let env = Env::new().await;
    let k = env.k().clone();
    env.raw(&["RPUSH", &k.retry, "older"]);
    let la = seed_unack(&env, "a", "2:5");
    let lb = seed_unack(&env, "b", "0:3");
    let lc = seed_unack(&env, "c", "4:3");

    assert_eq!(env.nack("a", la, 30_000, "release").await, 1);
    assert_eq!(env.nack("b", lb, 0, "release").await, 1);
    // Out of retries by the record, but a release does not count: retried.
    assert_eq!(env.nack("c", lc, 0, "release").await, 1);

    assert_eq!(env.list(&k.retry), vec!["c", "b", "a", "older"]);
    assert_eq!(env.record("a").as_deref(), Some("1:5"));
    assert_eq!(env.record("b").as_deref(), Some("0:3"), "never below 0");
    assert_eq!(env.record("c").as_deref(), Some("3:3"));
    assert!(!env.exists(&k.pending) && !env.exists(&k.unack) && !env.exists(&k.garbage));

    // The next claim delivers the released id first with the same attempt number.
    let c = env.claim(1).await;
    assert_eq!(c.got, vec![("c".into(), "payload-c".into(), 4)]);
}

#[tokio::test]
async fn nack_is_fenced_and_a_late_one_adds_no_second_copy() {
    let env = Env::new().await;
    let k = env.k().clone();
    env.seed("a", Some("0:3"));
    env.raw(&["RPUSH", &k.ready, "a"]);

    // Wrong lease: nothing happens.
    let c1 = env.claim_with("c", 10, 10, 1).await;
    let state = env.snapshot();
    assert_eq!(env.nack("a", c1.lease + 1, 0, "fail").await, 0);
    assert_eq!(env.nack("a", c1.lease - 1, 0, "release").await, 0);
    assert_eq!(env.snapshot(), state);

    // The lease runs out, the message is taken back and claimed again.
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(env.timeout(10).await, vec![1, 0]);
    let c2 = env.claim_with("c", 10, VIS, 2).await;
    assert_eq!(c2.got, vec![("a".into(), "payload-a".into(), 2)]);

    // The first delivery's late nack, release and ack do nothing.
    let state = env.snapshot();
    assert_eq!(env.nack("a", c1.lease, 0, "fail").await, 0);
    assert_eq!(env.nack("a", c1.lease, 5_000, "fail").await, 0);
    assert_eq!(env.nack("a", c1.lease, 0, "release").await, 0);
    assert_eq!(env.ack(&[("a", c1.lease)]).await, vec![0]);
    assert_eq!(env.snapshot(), state);
    assert!(!env.exists(&k.retry) && !env.exists(&k.pending));
    assert_eq!(env.zset(&k.unack), vec![("a".to_string(), c2.lease)]);
    assert_eq!(env.record("a").as_deref(), Some("2:3"));
}

// ======================= timeout =======================

#[tokio::test]
async fn timeout_takes_back_only_overdue_deliveries() {
    let env = Env::new().await;
    let k = env.k().clone();
    let now = env.now_us();
    let zadd = |id: &str, score: i64| env.raw(&["ZADD", &k.unack, &score.to_string(), id]);
    env.seed("late1", Some("1:3"));
    zadd("late1", now - 3_000);
    env.seed("dead", Some("4:3"));
    zadd("dead", now - 2_000);
    env.seed("late2", None); // no record: delivery 1 of default
    zadd("late2", now - 1_000);
    env.raw(&["PEXPIRE", &k.msg("late2"), "5000"]);
    env.seed("ontime", Some("1:3"));
    zadd("ontime", now + 60_000_000);

    assert_eq!(env.timeout(1000).await, vec![3, 1]);
    assert_eq!(env.list(&k.retry), vec!["late1", "late2"], "in deadline order");
    assert_eq!(env.set(&k.garbage), vec!["dead"]);
    assert_eq!(env.zset(&k.unack), vec![("ontime".to_string(), now + 60_000_000)]);
    // Records untouched (the claim counted the delivery), payloads kept >= msg ttl.
    assert_eq!(env.record("late1").as_deref(), Some("1:3"));
    assert_eq!(env.record("dead").as_deref(), Some("4:3"));
    assert!(env.record("late2").is_none());
    assert_pttl_near(env.pttl("late2"), TTL);
    assert_eq!(env.payload("dead").as_deref(), Some("payload-dead"));

    // Idempotent.
    let state = env.snapshot();
    assert_eq!(env.timeout(1000).await, vec![0, 0]);
    assert_eq!(env.snapshot(), state);
}

#[tokio::test]
async fn timeout_is_bounded_by_limit() {
    let env = Env::new().await;
    let k = env.k().clone();
    let now = env.now_us();
    for i in 0..5i64 {
        let id = format!("t{i}");
        env.seed(&id, Some(if i == 1 { "9:3" } else { "1:3" }));
        env.raw(&["ZADD", &k.unack, &(now - 10_000 + i).to_string(), &id]);
    }
    assert_eq!(env.timeout(2).await, vec![2, 1]);
    assert_eq!(env.list(&k.retry), vec!["t0"]);
    assert_eq!(env.set(&k.garbage), vec!["t1"]);
    assert_eq!(env.int(&["ZCARD", &k.unack]), 3);
    assert_eq!(env.timeout(2).await, vec![2, 0]);
    assert_eq!(env.timeout(2).await, vec![1, 0]);
    assert_eq!(env.list(&k.retry), vec!["t0", "t2", "t3", "t4"]);
    assert!(!env.exists(&k.unack));
}

// ======================= cancel =======================

#[tokio::test]
async fn cancel_removes_a_waiting_message_in_every_state() {
    let env = Env::new().await;
    let k = env.k().clone();
    let lease = env.now_us() + 60_000_000;
    env.seed("p", Some("0:3"));
    env.raw(&["ZADD", &k.pending, &(env.now_ms() + 60_000).to_string(), "p"]);
    env.seed("rd", Some("0:3"));
    env.raw(&["RPUSH", &k.ready, "rd"]);
    env.seed("rt", Some("2:3"));
    env.raw(&["RPUSH", &k.retry, "rt"]);
    env.seed("g", Some("4:3"));
    env.raw(&["SADD", &k.garbage, "g"]);
    env.seed("u", Some("1:3"));
    env.raw(&["ZADD", &k.unack, &lease.to_string(), "u"]);
    // A dead message whose payload was already collected.
    env.raw(&["SADD", &k.garbage, "g2"]);

    for id in ["p", "rd", "rt", "g", "g2"] {
        assert_eq!(env.cancel(id).await, 1, "{id}");
        assert!(env.payload(id).is_none(), "{id} payload");
        assert!(env.record(id).is_none(), "{id} record");
    }
    assert!(!env.exists(&k.pending) && !env.exists(&k.garbage));
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
    assert_eq!(env.zset(&k.unack), vec![("u".to_string(), lease)]);
    assert_eq!(env.record("u").as_deref(), Some("1:3"));
    assert_eq!(env.payload("u").as_deref(), Some("payload-u"));

    // A claim drops the stale entries without delivering or counting them.
    let c = env.claim(10).await;
    assert_eq!((c.popped, c.expired, c.got.len()), (2, 0, 0));
    assert!(!env.exists(&k.ready) && !env.exists(&k.retry));

    // Through the public API too.
    let id = env.queue.send_delay_msg("x", Duration::from_secs(60)).await.unwrap();
    assert!(env.queue.cancel(&id).await.unwrap());
    assert!(!env.queue.cancel(&id).await.unwrap());
    assert!(env.payload(id.as_str()).is_none());
}

#[tokio::test]
async fn cancelled_id_sent_again_is_delivered_once() {
    let env = Env::new().await;
    let k = env.k().clone();
    assert_eq!(env.send("a", "one", 0, TTL, RETRY).await[0], 1);
    assert_eq!(env.promote(10).await[0], 1);
    assert_eq!(env.cancel("a").await, 1);
    // The stale ready entry is still there when the id is sent again.
    assert_eq!(env.send("a", "two", 0, TTL, RETRY).await[0], 1);
    assert_eq!(env.promote(10).await[0], 1);
    assert_eq!(env.list(&k.ready), vec!["a", "a"]);
    let c = env.claim(10).await;
    assert_eq!(c.popped, 2);
    assert_eq!(c.got, vec![("a".into(), "two".into(), 1)]);
    assert_eq!(env.zset(&k.unack), vec![("a".to_string(), c.lease)]);
}

// ======================= gc =======================

#[tokio::test]
async fn gc_deletes_up_to_limit_dead_messages() {
    let env = Env::new().await;
    let k = env.k().clone();
    let dead = ["d1", "d2", "d3", "d4", "d5"];
    for id in dead {
        env.seed(id, Some("4:3"));
        env.raw(&["SADD", &k.garbage, id]);
    }
    env.seed("live", Some("1:3"));
    env.raw(&["RPUSH", &k.retry, "live"]);

    assert_eq!(env.gc(3).await, 3);
    let left = env.set(&k.garbage);
    assert_eq!(left.len(), 2);
    for id in dead {
        let kept = left.iter().any(|l| l == id);
        assert_eq!(env.payload(id).is_some(), kept, "{id} payload");
        assert_eq!(env.record(id).is_some(), kept, "{id} record");
    }
    assert_eq!(env.gc(10).await, 2);
    assert_eq!(env.gc(10).await, 0);
    assert!(!env.exists(&k.garbage));
    assert_eq!(env.payload("live").as_deref(), Some("payload-live"));
    assert_eq!(env.record("live").as_deref(), Some("1:3"));
    assert_eq!(env.list(&k.retry), vec!["live"]);
    assert_eq!(env.int(&["DBSIZE"]), 3, "live payload, retries hash, retry list");
}

// ======================= stats =======================

#[tokio::test]
async fn stats_counts_every_state() {
    let env = Env::new().await;
    let k = env.k().clone();
    assert_eq!(env.stats().await, vec![0, 0, 0, 0, 0]);
    env.raw(&["ZADD", &k.pending, "1", "p1", "2", "p2"]);
    env.raw(&["RPUSH", &k.ready, "r1", "r2", "r3"]);
    env.raw(&["ZADD", &k.unack, "1", "u1"]);
    env.raw(&["RPUSH", &k.retry, "t1", "t2", "t3", "t4"]);
    env.raw(&["SADD", &k.garbage, "g1", "g2", "g3", "g4", "g5"]);
    let state = env.snapshot();
    assert_eq!(env.stats().await, vec![2, 3, 1, 4, 5]);
    assert_eq!(
        env.queue.stats().await.unwrap(),
        QueueStats {
            pending: 2,
            ready: 3,
            processing: 1,
            retry: 4,
            garbage: 5,
        }
    );
    assert_eq!(env.snapshot(), state, "read-only");
}

// ======================= script cache =======================

#[tokio::test]
async fn scripts_are_reloaded_after_script_flush() {
    let env = Env::new().await;
    let loaded = |script: &LuaScript| env.raw(&["SCRIPT", "EXISTS", script.sha1()]) == "1";
    let claim_src = &scripts::CLAIM;
    assert_eq!(env.stats().await, vec![0, 0, 0, 0, 0]);
    assert_eq!(env.send("a", "x", 0, TTL, RETRY).await[0], 1);
    assert!(loaded(&scripts::SEND));

    assert_eq!(env.raw(&["SCRIPT", "FLUSH"]), "OK");
    assert!(!loaded(&scripts::SEND));
    assert_eq!(env.promote(10).await[0], 1);
    assert_eq!(env.raw(&["SCRIPT", "FLUSH"]), "OK");
    assert!(!loaded(claim_src));
    let c = env.claim(10).await;
    assert_eq!(c.ids(), vec!["a"]);
    assert!(loaded(claim_src), "claim was loaded again");
    assert_eq!(env.raw(&["SCRIPT", "FLUSH"]), "OK");
    assert_eq!(env.ack(&[("a", c.lease)]).await, vec![1]);
    // The public API too.
    assert_eq!(env.raw(&["SCRIPT", "FLUSH"]), "OK");
    assert_eq!(env.queue.stats().await.unwrap(), QueueStats::default());
    assert!(loaded(&scripts::STATS));
}

#[tokio::test]
async fn a_wrong_type_key_fails_a_script_before_it_writes() {
    let env = Env::new().await;
    let k = env.k().clone();
    assert_eq!(env.send("a", "x", 0, TTL, RETRY).await[0], 1);
    assert_eq!(env.promote(10).await[0], 1);
    env.raw(&["SET", &k.unack, "not a zset"]);
    let keys = k.for_claim(&k.claim("c"));
    let args: Vec<Value> = vec![
        k.msg_prefix.as_str().into(),
        10.into(),
        VIS.into(),
        RETRY.into(),
        0.into(),
        TTL.into(),
    ];
    let err = scripts::CLAIM.call::<Value>(&env.client, keys, args).await.unwrap_err();
    assert!(err.details().contains("WRONGTYPE"), "{err:?}");
    assert_eq!(
        env.lines(&["LRANGE", &k.ready, "0", "-1"]),
        vec!["a"],
        "claim popped before failing"
    );
    assert_eq!(env.record("a").as_deref(), Some("0:3"), "claim wrote before failing");
}
