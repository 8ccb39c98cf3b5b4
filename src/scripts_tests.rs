//! Tests of the Lua scripts in `lua/`, one state transition at a time, in
//! the style of asynq's `internal/rdb` tests: every test starts its own
//! redis-server, seeds exact Redis state, runs one script directly and
//! checks the exact Redis state afterwards.
//!
//! KEYS/ARGV of each script are built once, in the `Env` helpers below, in
//! the same order as `producer.rs`, `consumer.rs`, `queue.rs` and `acker.rs`.

use std::time::Duration;

use fred::prelude::{Client, ClientLike, EventInterface, FromValue, KeysInterface, PubsubInterface, Value};
use tokio::sync::broadcast;

use crate::keys::Keys;
use crate::payload::{decode_stored, encode_stored};
use crate::scripts::{self, LuaScript};
use crate::test_support::RedisServer;
use crate::{DelayQueue, Error, QueueStats};

/// msg ttl (ms) the tests pass to send, claim, nack and timeout.
const TTL: i64 = 60_000;
/// Default retry count the tests pass to nack and timeout, and the retry
/// count in the header of every seeded payload.
const RETRY: i64 = 3;
/// Visibility timeout (ms) the tests pass to claim.
const VIS: i64 = 5_000;
/// Slack for clock readings taken around a script call, in ms.
const SLACK_MS: i64 = 1_000;
/// How long a test waits for a wake-up it expects.
const WAKE_WAIT: Duration = Duration::from_secs(2);

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
    /// (id, payload, attempt) per delivery, in reply order; the payload
    /// without the stored value's "<retry count>:" header.
    got: Vec<(String, String, i64)>,
    /// Each delivery's value exactly as the script returned it.
    values: Vec<String>,
}

impl Claimed {
    fn ids(&self) -> Vec<&str> {
        self.got.iter().map(|d| d.0.as_str()).collect()
    }
}

/// One message of a send batch: id, payload, delay ms, msg ttl ms, retry count.
type Msg<'a> = (&'a str, &'a str, i64, i64, i64);

/// A second connection subscribed to the queue's wake-up channel.
struct Wakes {
    /// Held so the subscribed connection lives as long as the test needs it.
    _sub: Client,
    rx: broadcast::Receiver<fred::types::Message>,
    channel: String,
}

impl Wakes {
    /// The next message published on the channel, within `WAKE_WAIT`.
    async fn next(&mut self) -> String {
        let wait = async {
            loop {
                match self.rx.recv().await {
                    Ok(msg) if *msg.channel == *self.channel => {
                        return msg
                            .value
                            .as_string()
                            .unwrap_or_else(|| panic!("wake-up is not a string: {:?}", msg.value))
                    }
                    Ok(_) => {}
                    Err(e) => panic!("wake-up subscription broke: {e:?}"),
                }
            }
        };
        tokio::time::timeout(WAKE_WAIT, wait)
            .await
            .unwrap_or_else(|_| panic!("no wake-up on {} within {WAKE_WAIT:?}", self.channel))
    }

    /// Asserts that nothing was published on the channel so far: a sentinel
    /// published now must be the next message (Redis delivers a channel's
    /// messages to a subscriber in publish order).
    async fn assert_quiet(&mut self, env: &Env, what: &str) {
        env.raw(&["PUBLISH", &self.channel, "sentinel"]);
        let next = self.next().await;
        assert_eq!(next, "sentinel", "{what}: unexpected wake-up");
    }
}

impl Env {
    async fn new() -> Env {
        let server = loop {
            let server = RedisServer::start().await;
            if owns(&server) {
                break server;
            }
        };
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

    /// Subscribes a second client to the wake-up channel; returns once the
    /// subscription is in place (PUBSUB NUMSUB says so and a probe arrived).
    async fn subscribe(&self) -> Wakes {
        let channel = self.k().wake.clone();
        let sub = self.client.clone_new();
        let rx = sub.message_rx();
        sub.init().await.expect("subscriber connects");
        sub.subscribe(channel.as_str()).await.expect("subscribe");
        assert_eq!(
            self.lines(&["PUBSUB", "NUMSUB", &channel]),
            vec![channel.clone(), "1".into()]
        );
        let mut wakes = Wakes { _sub: sub, rx, channel };
        self.raw(&["PUBLISH", &wakes.channel, "probe"]);
        assert_eq!(wakes.next().await, "probe");
        wakes
    }

    // ---- the scripts, KEYS/ARGV in the order the crate uses ----

    /// Send with exact ARGV per message: (id, stored value, delay ms, payload TTL ms).
    async fn send_values(&self, msgs: &[(&str, Vec<u8>, i64, i64)]) -> Vec<i64> {
        let k = self.k();
        let keys = k.for_send(msgs.iter().map(|m| m.0));
        let mut args: Vec<Value> = vec![k.wake.as_str().into()];
        for (id, value, delay_ms, payload_ttl_ms) in msgs {
            args.push((*id).into());
            args.push(Value::Bytes(value.clone().into()));
            args.push((*delay_ms).into());
            args.push((*payload_ttl_ms).into());
        }
        let statuses: Vec<i64> = self.run(&scripts::SEND, keys, args).await;
        assert_eq!(statuses.len(), msgs.len(), "one status per message: {statuses:?}");
        statuses
    }

    /// A batch as `producer.rs` encodes it: stored value "<retry>:<payload>",
    /// payload TTL = delay + msg ttl.
    async fn send_many(&self, msgs: &[Msg<'_>]) -> Vec<i64> {
        let raw: Vec<(&str, Vec<u8>, i64, i64)> = msgs
            .iter()
            .map(|&(id, payload, delay_ms, ttl_ms, retry)| {
                let retry = u32::try_from(retry).expect("retry count");
                (
                    id,
                    encode_stored(retry, payload.as_bytes()),
                    delay_ms,
                    delay_ms + ttl_ms,
                )
            })
            .collect();
        self.send_values(&raw).await
    }

    /// A batch of one; returns its status.
    async fn send(&self, id: &str, payload: &str, delay_ms: i64, ttl_ms: i64, retry: i64) -> i64 {
        self.send_many(&[(id, payload, delay_ms, ttl_ms, retry)]).await[0]
    }

    async fn promote(&self, limit: i64) -> Vec<i64> {
        let k = self.k();
        let args: Vec<Value> = vec![k.msg_prefix.as_str().into(), limit.into()];
        self.run(&scripts::PROMOTE, k.for_promote(), args).await
    }

    async fn claim_with(&self, consumer: &str, limit: i64, vis_ms: i64, seq: i64) -> Claimed {
        let k = self.k();
        let keys = k.for_claim(&k.claim(consumer));
        let args: Vec<Value> = vec![
            k.msg_prefix.as_str().into(),
            limit.into(),
            vis_ms.into(),
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
        let value = |v: &Value| {
            let stored = v.as_bytes().unwrap_or_else(|| panic!("claim: no value: {v:?}"));
            let payload = decode_stored(stored).unwrap_or_else(|| panic!("claim: {v:?} is not a stored value"));
            (
                String::from_utf8_lossy(stored).into_owned(),
                String::from_utf8_lossy(payload).into_owned(),
            )
        };
        let deliveries = reply[4..].chunks_exact(3);
        Claimed {
            popped: int(&reply[0]),
            expired: int(&reply[1]),
            lease: int(&reply[2]),
            left_ms: int(&reply[3]),
            got: deliveries
                .clone()
                .map(|t| (text(&t[0]), value(&t[1]).1, int(&t[2])))
                .collect(),
            values: deliveries.map(|t| value(&t[1]).0).collect(),
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
            k.wake.as_str().into(),
        ];
        self.run(&scripts::NACK, keys, args).await
    }

    async fn timeout(&self, limit: i64) -> Vec<i64> {
        let k = self.k();
        let keys = k.for_timeout();
        let args: Vec<Value> = vec![
            k.msg_prefix.as_str().into(),
            limit.into(),
            TTL.into(),
            RETRY.into(),
            k.wake.as_str().into(),
        ];
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
        match self.server.raw_reply(args) {
            crate::test_support::RawReply::Integer(i) => i,
            other => panic!("{args:?} -> {other:?} is not an integer"),
        }
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

    /// The value of `id`'s msg key as stored: "<retry count>:<payload>".
    fn stored(&self, id: &str) -> Option<String> {
        match self.raw(&["GET", &self.k().msg(id)]).as_str() {
            "(nil)" => None,
            s => Some(s.to_string()),
        }
    }

    /// The payload of `id`: its stored value without the header.
    fn payload(&self, id: &str) -> Option<String> {
        self.stored(id).map(|v| {
            let payload = decode_stored(v.as_bytes()).unwrap_or_else(|| panic!("{id}: {v:?} is not a stored value"));
            String::from_utf8_lossy(payload).into_owned()
        })
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
            let value = match self.raw(&["TYPE", key]).as_str() {
                "string" => self.raw(&["GET", key]),
                other => other.to_string(),
            };
            out += &format!("{key} = {value}\n");
        }
        out
    }

    // ---- seeding ----

    /// Stores `value` as `id`'s msg key (TTL = `TTL`) and, if given, a retry record.
    fn seed_value(&self, id: &str, value: &str, record: Option<&str>) {
        self.raw(&["SET", &self.k().msg(id), value, "PX", &TTL.to_string()]);
        if let Some(r) = record {
            self.raw(&["HSET", &self.k().retries, id, r]);
        }
    }

    /// Stores a payload `payload-<id>` with retry count `RETRY` in its header
    /// (TTL = `TTL`) and, if given, a retry record.
    fn seed(&self, id: &str, record: Option<&str>) {
        self.seed_value(id, &format!("{RETRY}:payload-{id}"), record);
    }
}

/// Whether the server answering on `server`'s port is the one it spawned.
/// When many tests start servers at once, two can be handed the same free
/// port; the one whose redis-server then fails to bind may be answered by
/// the other test's server (tests/support pings the port, not the process).
/// Each server has a dir of its own, so ask the one that answers.
fn owns(server: &RedisServer) -> bool {
    let reply = server.raw_reply(&["CONFIG", "GET", "dir"]);
    let crate::test_support::RawReply::Array(items) = reply else {
        panic!("CONFIG GET dir -> {reply:?}");
    };
    let answering = items.get(1).map(|d| d.render()).unwrap_or_default();
    let own = server
        .dir()
        .canonicalize()
        .unwrap_or_else(|_| server.dir().to_path_buf());
    std::path::Path::new(&answering) == own
}

fn assert_pttl_near(pttl: i64, expected: i64) {
    assert!(
        pttl <= expected && pttl > expected - SLACK_MS,
        "PTTL {pttl} not within {SLACK_MS} ms below {expected}"
    );
}

// ======================= send =======================

#[tokio::test]
async fn send_stores_payload_and_pending_entry_together() {
    let env = Env::new().await;
    let k = env.k().clone();
    let delay = 1_500;
    let before = env.now_ms();
    assert_eq!(env.send("a", "hello", delay, TTL, 5).await, 1);
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
    assert!(env.record("a").is_none(), "no retry record until the first claim");
    let pttl = env.pttl("a");
    assert_pttl_near(pttl, delay + TTL);
    assert!(pttl > delay, "payload must outlive its due time");
    // Nothing else was written.
    for key in [&k.ready, &k.retry, &k.unack, &k.garbage, &k.retries] {
        assert!(!env.exists(key), "{key} written");
    }
    assert_eq!(env.int(&["DBSIZE"]), 2);

    // The first claim creates the record from the stored retry count.
    env.raw(&["ZADD", &k.pending, "XX", "0", "a"]);
    assert_eq!(env.promote(10).await[0], 1);
    let c = env.claim(10).await;
    assert_eq!(c.got, vec![("a".into(), "hello".into(), 1)]);
    assert_eq!(env.record("a").as_deref(), Some("1:5"));

    // Binary payloads are stored byte for byte.
    let bytes = vec![0u8, 255, b'\n', b' ', b':', 1];
    let value = encode_stored(3, &bytes);
    assert_eq!(env.send_values(&[("bin", value.clone(), 0, TTL)]).await, vec![1]);
    let stored: Vec<u8> = env.client.get(k.msg("bin")).await.unwrap();
    assert_eq!(stored, value);
    assert_eq!(decode_stored(&stored), Some(&bytes[..]));
    assert_pttl_near(env.pttl("bin"), TTL);
}

#[tokio::test]
async fn send_of_a_live_id_is_a_duplicate_and_changes_nothing() {
    let env = Env::new().await;
    let k = env.k().clone();
    // pending
    assert_eq!(env.send("p", "first", 60_000, TTL, 1).await, 1);
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
        assert_eq!(env.send(id, "second", 0, TTL, 9).await, 0, "{id}");
    }
    // The same as one batch.
    let batch: Vec<Msg> = ["p", "rd", "rt", "u"].map(|id| (id, "second", 0, TTL, 9)).to_vec();
    assert_eq!(env.send_many(&batch).await, vec![0, 0, 0, 0]);
    assert_eq!(env.snapshot(), before);
    assert_eq!(env.stored("p").as_deref(), Some("1:first"));
}

#[tokio::test]
async fn send_of_an_id_in_unack_is_a_duplicate_even_without_payload() {
    let env = Env::new().await;
    let k = env.k().clone();
    // Being processed while its payload expired: still not replaced.
    env.raw(&["HSET", &k.retries, "u", "1:3"]);
    env.raw(&["ZADD", &k.unack, "123", "u"]);
    let before = env.snapshot();
    assert_eq!(env.send("u", "new", 0, TTL, 3).await, 0);
    assert_eq!(env.snapshot(), before);
    assert!(env.payload("u").is_none());
}

#[tokio::test]
async fn send_replaces_a_dead_message_in_garbage() {
    let env = Env::new().await;
    let k = env.k().clone();
    env.seed("g", Some("4:3"));
    env.raw(&["SADD", &k.garbage, "g", "other"]);

    assert_eq!(env.send("g", "again", 2_000, TTL, 7).await, 1);
    assert_eq!(env.set(&k.garbage), vec!["other".to_string()]);
    let due = env.zscore(&k.pending, "g").expect("g pending");
    assert_eq!(env.zset(&k.pending), vec![("g".to_string(), due)]);
    assert_eq!(env.stored("g").as_deref(), Some("7:again"));
    assert!(env.record("g").is_none(), "the dead message's record is gone");
    assert_pttl_near(env.pttl("g"), 2_000 + TTL);

    // Attempts start again from the new message's own retry count.
    env.raw(&["ZADD", &k.pending, "XX", "0", "g"]);
    assert_eq!(env.promote(10).await[0], 1);
    let c = env.claim(10).await;
    assert_eq!(c.got, vec![("g".into(), "again".into(), 1)]);
    assert_eq!(env.record("g").as_deref(), Some("1:7"), "attempts reset");
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

#[tokio::test]
async fn send_batch_gives_each_message_its_own_status_and_ttl() {
    let env = Env::new().await;
    let k = env.k().clone();
    // A msg key of another type: that message gets 2, the others are stored.
    env.raw(&["RPUSH", &k.msg("w"), "foreign"]);
    let before = env.now_ms();
    let statuses = env
        .send_many(&[
            ("a", "pa", 1_000, TTL, 2),
            ("b", "pb", 0, 2 * TTL, 0),
            ("a", "dup", 0, TTL, 9),
            ("w", "pw", 0, TTL, 3),
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
    assert_eq!(env.stored("c").as_deref(), Some("1:pc"));
    // Payload TTL = delay + msg ttl, per message.
    assert_pttl_near(env.pttl("a"), 1_000 + TTL);
    assert_pttl_near(env.pttl("b"), 2 * TTL);
    assert_pttl_near(env.pttl("c"), 30_000 + 5_000);
    // Nothing written for the wrong-type one, and no retry records at all.
    assert_eq!(env.raw(&["TYPE", &k.msg("w")]), "list");
    assert_eq!(env.list(&k.msg("w")), vec!["foreign"]);
    assert_eq!(env.int(&["PTTL", &k.msg("w")]), -1);
    assert!(env.zscore(&k.pending, "w").is_none());
    assert!(!env.exists(&k.retries));
    assert_eq!(env.int(&["DBSIZE"]), 5, "pending, 3 payloads, the foreign list");

    // Idempotent: the same batch again changes nothing.
    let state = env.snapshot();
    let again = env
        .send_many(&[
            ("a", "pa", 1_000, TTL, 2),
            ("b", "pb", 0, 2 * TTL, 0),
            ("a", "dup", 0, TTL, 9),
            ("w", "pw", 0, TTL, 3),
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
async fn send_never_writes_a_record_and_claim_creates_it_from_the_stored_retry_count() {
    let env = Env::new().await;
    let k = env.k().clone();
    assert_eq!(env.send("seven", "p7", 0, TTL, 7).await, 1);
    assert_eq!(env.send("one", "p1", 0, TTL, 1).await, 1);
    assert_eq!(env.send("zero", "p0", 0, TTL, 0).await, 1);
    // Through the public API too.
    let api = env
        .queue
        .send_delay_msg("pa", Duration::ZERO)
        .retry_count(2)
        .id("api")
        .await
        .unwrap();
    assert_eq!(env.stored(api.as_str()).as_deref(), Some("2:pa"));
    // A value without header (not written by send): max 0.
    env.seed_value("bare", "no header", None);
    env.raw(&["ZADD", &k.pending, "0", "bare"]);
    assert!(!env.exists(&k.retries), "send wrote a retry record");

    assert_eq!(env.promote(10).await, vec![5, -1, 0]);
    assert!(!env.exists(&k.retries), "promote wrote a retry record");
    // The bare value has no header, so the Claimed helper would reject it: claim raw.
    let keys = k.for_claim(&k.claim("raw"));
    let args: Vec<Value> = vec![
        k.msg_prefix.as_str().into(),
        10.into(),
        VIS.into(),
        1_000_000.into(),
        TTL.into(),
    ];
    let reply: Vec<Value> = env.run(&scripts::CLAIM, keys, args).await;
    let lease = reply[2].as_i64().unwrap();
    let mut values: Vec<(String, String, i64)> = reply[4..]
        .chunks_exact(3)
        .map(|t| {
            (
                t[0].as_string().unwrap(),
                t[1].as_string().unwrap(),
                t[2].as_i64().unwrap(),
            )
        })
        .collect();
    values.sort();
    // Each delivery's value is the stored value, header included.
    assert_eq!(
        values,
        vec![
            ("api".to_string(), "2:pa".to_string(), 1),
            ("bare".to_string(), "no header".to_string(), 1),
            ("one".to_string(), "1:p1".to_string(), 1),
            ("seven".to_string(), "7:p7".to_string(), 1),
            ("zero".to_string(), "0:p0".to_string(), 1),
        ]
    );
    assert_eq!(env.record("seven").as_deref(), Some("1:7"));
    assert_eq!(env.record("one").as_deref(), Some("1:1"));
    assert_eq!(env.record("zero").as_deref(), Some("1:0"));
    assert_eq!(env.record("api").as_deref(), Some("1:2"));
    assert_eq!(env.record("bare").as_deref(), Some("1:0"));
    assert_eq!(env.ack(&[("api", lease)]).await, vec![1]);

    // retry 0 and no header: the first failure is the last.
    assert_eq!(env.nack("zero", lease, 0, "fail").await, 2);
    assert_eq!(env.nack("bare", lease, 0, "fail").await, 2);
    // retry 1: two deliveries, the second failure moves it to garbage.
    assert_eq!(env.nack("one", lease, 0, "fail").await, 1);
    assert_eq!(env.nack("seven", lease, 0, "fail").await, 1);
    let (c, got) = claim_sorted(&env).await;
    assert_eq!(got, vec![("one".to_string(), 2), ("seven".to_string(), 2)]);
    assert_eq!(c.values.len(), 2);
    assert!(c.values.contains(&"1:p1".to_string()) && c.values.contains(&"7:p7".to_string()));
    assert_eq!(env.record("one").as_deref(), Some("2:1"));
    assert_eq!(env.record("seven").as_deref(), Some("2:7"));
    assert_eq!(env.nack("one", c.lease, 0, "fail").await, 2);
    assert_eq!(env.nack("seven", c.lease, 0, "fail").await, 1);
    assert_eq!(env.set(&k.garbage), vec!["bare", "one", "zero"]);
    assert_eq!(env.list(&k.retry), vec!["seven"]);
    // Seven more deliveries in all for "seven": attempts 3..=8, the 8th failure is its last.
    for attempt in 3..=8 {
        let (c, got) = claim_sorted(&env).await;
        assert_eq!(got, vec![("seven".to_string(), attempt)]);
        let want = if attempt == 8 { 2 } else { 1 };
        assert_eq!(env.nack("seven", c.lease, 0, "fail").await, want, "attempt {attempt}");
    }
    assert_eq!(env.set(&k.garbage), vec!["bare", "one", "seven", "zero"]);
    assert_eq!(env.record("seven").as_deref(), Some("8:7"));
    assert!(!env.exists(&k.retry) && !env.exists(&k.unack));
}

/// A claim of up to 10, with (id, attempt) of its deliveries sorted by id.
async fn claim_sorted(env: &Env) -> (Claimed, Vec<(String, i64)>) {
    let c = env.claim(10).await;
    let mut got: Vec<(String, i64)> = c.got.iter().map(|d| (d.0.clone(), d.2)).collect();
    got.sort();
    (c, got)
}

/// Expected to fail with the current lua/send.lua: see the ignore reason.
#[tokio::test]
#[ignore = "lua/send.lua bug: an id left in garbage after its payload expired keeps its garbage entry and \
            retry record when sent again, so the new message is never delivered"]
async fn send_replaces_a_dead_message_whose_payload_expired() {
    let env = Env::new().await;
    let k = env.k().clone();
    // Dead, and its payload expired before gc ran (cancel's test has the same state).
    env.raw(&["HSET", &k.retries, "g", "4:3"]);
    env.raw(&["SADD", &k.garbage, "g"]);

    assert_eq!(env.send("g", "again", 0, TTL, 7).await, 1);
    assert!(
        env.set(&k.garbage).is_empty(),
        "garbage entry left: {:?}",
        env.set(&k.garbage)
    );
    assert!(env.record("g").is_none(), "old record left: {:?}", env.record("g"));
    assert_eq!(env.promote(10).await[0], 1);
    let c = env.claim(10).await;
    assert_eq!(
        c.got,
        vec![("g".into(), "again".into(), 1)],
        "the new message is delivered"
    );
    assert_eq!(env.record("g").as_deref(), Some("1:7"));
}

/// Expected to fail with the current lua/send.lua: see the ignore reason.
#[tokio::test]
#[ignore = "lua/send.lua bug: a message sent with the id of an expired message inherits its stale \
            retry record (attempts and max) instead of starting at attempt 1 with its own retry count"]
async fn send_over_an_expired_message_starts_a_fresh_retry_record() {
    let env = Env::new().await;
    let k = env.k().clone();
    // Delivered twice, nacked to retry, then its payload expired before a claim.
    env.raw(&["HSET", &k.retries, "x", "2:3"]);
    env.raw(&["RPUSH", &k.retry, "x"]);

    assert_eq!(env.send("x", "new", 0, TTL, 7).await, 1);
    assert!(env.record("x").is_none(), "stale record kept: {:?}", env.record("x"));
    assert_eq!(env.promote(10).await[0], 1);
    let c = env.claim(10).await;
    assert_eq!(c.got, vec![("x".into(), "new".into(), 1)]);
    assert_eq!(env.record("x").as_deref(), Some("1:7"));
}

// ======================= promote =======================

#[tokio::test]
async fn promote_moves_due_ids_in_due_order_in_batches() {
    let env = Env::new().await;
    let k = env.k().clone();
    assert_eq!(env.promote(1000).await, vec![0, -1, 0], "empty queue");

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
    // Every id has its payload (promote drops ids without one).
    let mut mset = vec!["MSET".to_string()];
    for (_, id) in due.iter().chain([&(0, "future".to_string())]) {
        mset.push(k.msg(id));
        mset.push(format!("{RETRY}:payload-{id}"));
    }
    env.raw(&mset.iter().map(String::as_str).collect::<Vec<_>>());
    due.sort();
    let due_order: Vec<String> = due.into_iter().map(|(_, id)| id).collect();

    assert_eq!(env.promote(1000).await, vec![1000, 0, 0], "more are due: wait 0");
    assert_eq!(env.list(&k.ready), due_order[..1000]);
    assert_eq!(env.int(&["ZCARD", &k.pending]), N - 1000 + 1);

    assert_eq!(env.promote(1000).await, vec![1000, 0, 0]);
    assert_eq!(env.list(&k.ready), due_order[..2000]);

    let reply = env.promote(1000).await;
    let after = env.now_ms();
    assert_eq!((reply[0], reply[2]), (500, 0));
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
    assert_eq!((again[0], again[2]), (0, 0));
    assert!(again[1] <= wait && again[1] > wait - SLACK_MS, "{again:?}");
    assert_eq!(env.list(&k.ready).len(), N as usize);

    env.raw(&["ZREM", &k.pending, "future"]);
    assert_eq!(env.promote(1000).await, vec![0, -1, 0]);
}

#[tokio::test]
async fn promote_moves_what_send_made_due() {
    let env = Env::new().await;
    let k = env.k().clone();
    assert_eq!(env.send("now", "x", 0, TTL, RETRY).await, 1);
    assert_eq!(env.send("later", "y", 60_000, TTL, RETRY).await, 1);
    let reply = env.promote(1000).await;
    assert_eq!((reply[0], reply[2]), (1, 0));
    assert!(reply[1] > 60_000 - SLACK_MS && reply[1] <= 60_000, "{reply:?}");
    assert_eq!(env.list(&k.ready), vec!["now"]);
    assert_eq!(env.zset(&k.pending).len(), 1);
    // Promote does not touch the payload, nor create a record.
    assert_eq!(env.stored("now").as_deref(), Some("3:x"));
    assert!(env.record("now").is_none());
}

#[tokio::test]
async fn promote_drops_and_counts_an_expired_id() {
    let env = Env::new().await;
    let k = env.k().clone();
    let batch: Vec<Msg> = vec![
        ("gone", "x", 0, TTL, RETRY),
        ("live", "y", 0, TTL, RETRY),
        ("gone-later", "z", 60_000, TTL, RETRY),
    ];
    assert_eq!(env.send_many(&batch).await, vec![1, 1, 1]);
    // Their payloads expired (msg ttl passed while no consumer ran).
    env.raw(&["DEL", &k.msg("gone"), &k.msg("gone-later")]);

    let reply = env.promote(10).await;
    assert_eq!((reply[0], reply[2]), (1, 1), "moved 1, expired 1: {reply:?}");
    assert!(reply[1] > 60_000 - SLACK_MS && reply[1] <= 60_000, "{reply:?}");
    assert_eq!(env.list(&k.ready), vec!["live"], "the expired id is not pushed");
    // Not due yet: stays pending even without payload, until it is due.
    let pending = env.zset(&k.pending);
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].0, "gone-later");
    assert!(!env.exists(&k.retries));

    // Idempotent: nothing more moved or counted.
    let state = env.snapshot();
    let again = env.promote(10).await;
    assert_eq!((again[0], again[2]), (0, 0));
    assert_eq!(env.snapshot(), state);

    // Once due it is dropped too; a limit counts moved and expired ids alike.
    env.raw(&["ZADD", &k.pending, "XX", "0", "gone-later"]);
    assert_eq!(env.send("live2", "w", 0, TTL, RETRY).await, 1);
    env.raw(&["ZADD", &k.pending, "XX", "1", "live2"]);
    assert_eq!(
        env.promote(1).await,
        vec![0, 0, 1],
        "the limit reached by an expired id"
    );
    assert_eq!(env.promote(1).await, vec![1, -1, 0]);
    assert_eq!(env.list(&k.ready), vec!["live", "live2"]);
    assert!(!env.exists(&k.pending));
}

/// Expected to fail with the current lua/promote.lua: see the ignore reason.
#[tokio::test]
#[ignore = "lua/promote.lua bug: promote drops a due id whose payload expired but leaves its retry \
            record in the retries hash for ever (claim, which used to delete it, never sees the id)"]
async fn promote_drops_the_retry_record_of_an_expired_id() {
    let env = Env::new().await;
    let k = env.k().clone();
    // Nacked with a delay after its first delivery, then its payload expired.
    env.raw(&["HSET", &k.retries, "e", "1:3"]);
    env.raw(&["ZADD", &k.pending, "1", "e"]);
    assert_eq!(env.promote(10).await, vec![0, -1, 1]);
    assert!(!env.exists(&k.pending) && !env.exists(&k.ready));
    assert!(env.record("e").is_none(), "record leaked: {:?}", env.record("e"));
    assert_eq!(env.int(&["DBSIZE"]), 0, "keys left behind");
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
    assert_eq!(env.send("ok", "x", 0, TTL, RETRY).await, 1);
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
async fn claim_without_or_with_malformed_record_uses_the_stored_retry_count() {
    let env = Env::new().await;
    let k = env.k().clone();
    // Retry count 6 in the stored value's header.
    let ids = ["none", "junk", "half", "neg"];
    for (id, record) in ids.into_iter().zip([None, Some("junk"), Some("2:"), Some("-1:3")]) {
        env.seed_value(id, &format!("6:payload-{id}"), record);
    }
    env.raw(&["RPUSH", &k.ready, "none", "junk", "half", "neg"]);

    let c = env.claim(10).await;
    let attempts: Vec<(&str, i64)> = c.got.iter().map(|d| (d.0.as_str(), d.2)).collect();
    assert_eq!(attempts, vec![("none", 1), ("junk", 1), ("half", 1), ("neg", 1)]);
    for id in ids {
        assert_eq!(env.record(id).as_deref(), Some("1:6"), "{id}");
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

#[tokio::test]
async fn claim_does_not_lease_an_id_twice() {
    let env = Env::new().await;
    let k = env.k().clone();
    env.seed("a", None);
    env.seed("b", None);
    // A second entry for the same id (stale, e.g. after a cancel and re-send),
    // in the same list and in retry.
    env.raw(&["RPUSH", &k.retry, "a"]);
    env.raw(&["RPUSH", &k.ready, "a", "b", "a"]);

    let c = env.claim(10).await;
    assert_eq!((c.popped, c.expired), (4, 0));
    assert_eq!(c.ids(), vec!["a", "b"], "each id leased once");
    assert_eq!(c.got[0], ("a".into(), "payload-a".into(), 1));
    assert_eq!(env.record("a").as_deref(), Some("1:3"), "one delivery counted");
    assert_eq!(env.zset(&k.unack).len(), 2);
    assert!(!env.exists(&k.ready) && !env.exists(&k.retry));

    // A stale entry popped while the id is in unack leaves its lease alone.
    env.raw(&["RPUSH", &k.ready, "a"]);
    let state = env.zset(&k.unack);
    let d = env.claim(10).await;
    assert_eq!((d.popped, d.expired, d.got.len()), (1, 0, 0));
    assert_eq!(env.zset(&k.unack), state, "lease not replaced");
    assert_eq!(env.zscore(&k.unack, "a"), Some(c.lease));
    assert_eq!(env.record("a").as_deref(), Some("1:3"));
    // The first lease still fences: ack with it works.
    assert_eq!(env.ack(&[("a", c.lease), ("b", c.lease)]).await, vec![1, 1]);
}

/// Expected to fail with the current lua/claim.lua: see the ignore reason.
#[tokio::test]
#[ignore = "lua/claim.lua bug (minor): the replay path reads payloads with redis.call('GET'), so a \
            payload key of another type fails the replayed request with WRONGTYPE instead of being \
            left out as the new-request path (pcall) does"]
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
    let keys = k.for_claim(&k.claim("w"));
    let args: Vec<Value> = vec![
        k.msg_prefix.as_str().into(),
        10.into(),
        VIS.into(),
        5.into(),
        TTL.into(),
    ];
    let replay = scripts::CLAIM.call::<Value>(&env.client, keys, args).await;
    assert!(replay.is_ok(), "replay failed: {replay:?}");
    let again = env.claim_with("w", 10, VIS, 5).await;
    assert_eq!(again.ids(), vec!["b"]);
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
    // The receipt expires after 10 ms, at any point of what follows: drop it.
    env.raw(&["DEL", &k.claim("c")]);
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

// ======================= wake-ups =======================

#[tokio::test]
async fn send_wakes_consumers_only_when_it_brings_the_earliest_due_time_forward() {
    let env = Env::new().await;
    let mut wakes = env.subscribe().await;

    // Pending empty: publishes the delay.
    assert_eq!(env.send("a", "x", 5_000, TTL, RETRY).await, 1);
    assert_eq!(wakes.next().await, "5000");
    // Due after the current head: nothing.
    assert_eq!(env.send("b", "x", 10_000, TTL, RETRY).await, 1);
    wakes.assert_quiet(&env, "send due later than the head").await;
    // Due before the head: publishes its delay.
    assert_eq!(env.send("c", "x", 1_000, TTL, RETRY).await, 1);
    assert_eq!(wakes.next().await, "1000");
    // A batch: one wake-up, for its earliest message.
    let batch: Vec<Msg> = vec![
        ("d", "x", 20_000, TTL, RETRY),
        ("e", "x", 500, TTL, RETRY),
        ("f", "x", 200, TTL, RETRY),
        ("g", "x", 30_000, TTL, RETRY),
    ];
    assert_eq!(env.send_many(&batch).await, vec![1, 1, 1, 1]);
    assert_eq!(wakes.next().await, "200");
    wakes.assert_quiet(&env, "second wake-up for one batch").await;
    // A batch entirely due after the head: nothing.
    let later: Vec<Msg> = vec![("h", "x", 40_000, TTL, RETRY), ("i", "x", 50_000, TTL, RETRY)];
    assert_eq!(env.send_many(&later).await, vec![1, 1]);
    wakes.assert_quiet(&env, "batch due later than the head").await;
    // A batch that stored nothing (duplicate: 0, wrong type: 2): nothing.
    env.raw(&["RPUSH", &env.k().msg("w"), "foreign"]);
    let dups: Vec<Msg> = vec![("a", "x", 0, TTL, RETRY), ("w", "x", 0, TTL, RETRY)];
    assert_eq!(env.send_many(&dups).await, vec![0, 2]);
    wakes.assert_quiet(&env, "send that stored nothing").await;
    // Due now into a pending whose head is later: publishes 0.
    assert_eq!(env.send("now", "x", 0, TTL, RETRY).await, 1);
    assert_eq!(wakes.next().await, "0");
    wakes.assert_quiet(&env, "end").await;
}

#[tokio::test]
async fn nack_wakes_consumers_when_the_message_is_claimable_now_or_due_first() {
    let env = Env::new().await;
    let k = env.k().clone();
    let mut wakes = env.subscribe().await;

    // fail with no delay: to retry, publishes 0.
    let la = seed_unack(&env, "a", "1:3");
    assert_eq!(env.nack("a", la, 0, "fail").await, 1);
    assert_eq!(wakes.next().await, "0");
    // release: to retry, publishes 0 (even with a delay given).
    let lb = seed_unack(&env, "b", "1:3");
    assert_eq!(env.nack("b", lb, 30_000, "release").await, 1);
    assert_eq!(wakes.next().await, "0");
    // fail with a delay into an empty pending: publishes the delay.
    let lc = seed_unack(&env, "c", "1:3");
    assert_eq!(env.nack("c", lc, 20_000, "fail").await, 1);
    assert_eq!(wakes.next().await, "20000");
    // fail with a delay later than the head: nothing.
    let ld = seed_unack(&env, "d", "1:3");
    assert_eq!(env.nack("d", ld, 40_000, "fail").await, 1);
    wakes.assert_quiet(&env, "nack due later than the head").await;
    // fail with a delay earlier than the head: publishes the delay.
    let le = seed_unack(&env, "e", "1:3");
    assert_eq!(env.nack("e", le, 7_000, "fail").await, 1);
    assert_eq!(wakes.next().await, "7000");
    assert_eq!(
        env.zset(&k.pending).iter().map(|p| p.0.as_str()).collect::<Vec<_>>(),
        vec!["e", "c", "d"]
    );
    // Out of deliveries, to garbage: nothing.
    let lg = seed_unack(&env, "g", "4:3");
    assert_eq!(env.nack("g", lg, 0, "fail").await, 2);
    wakes.assert_quiet(&env, "nack to garbage").await;
    // Lease lost: nothing.
    assert_eq!(env.nack("a", la, 0, "fail").await, 0);
    assert_eq!(env.nack("b", lb, 0, "release").await, 0);
    wakes.assert_quiet(&env, "nack with a lost lease").await;
}

#[tokio::test]
async fn timeout_wakes_consumers_when_it_moves_something_to_retry() {
    let env = Env::new().await;
    let k = env.k().clone();
    let mut wakes = env.subscribe().await;
    let now = env.now_us();

    // Nothing overdue: nothing.
    env.seed("ontime", Some("1:3"));
    env.raw(&["ZADD", &k.unack, &(now + 60_000_000).to_string(), "ontime"]);
    assert_eq!(env.timeout(10).await, vec![0, 0]);
    wakes.assert_quiet(&env, "timeout of nothing").await;
    // Overdue but out of deliveries, to garbage only: nothing.
    env.seed("dead", Some("4:3"));
    env.raw(&["ZADD", &k.unack, &(now - 1_000).to_string(), "dead"]);
    assert_eq!(env.timeout(10).await, vec![1, 1]);
    wakes.assert_quiet(&env, "timeout to garbage only").await;
    // Overdue with deliveries left (alongside a dead one): one wake-up, 0.
    env.seed("late1", Some("1:3"));
    env.seed("late2", Some("2:3"));
    env.seed("dead2", Some("9:3"));
    for (i, id) in ["late1", "dead2", "late2"].into_iter().enumerate() {
        env.raw(&["ZADD", &k.unack, &(now - 1_000 + i as i64).to_string(), id]);
    }
    assert_eq!(env.timeout(10).await, vec![3, 1]);
    assert_eq!(wakes.next().await, "0");
    wakes.assert_quiet(&env, "second wake-up for one timeout").await;
    assert_eq!(env.list(&k.retry), vec!["late1", "late2"]);
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
    assert_eq!(env.send("a", "one", 0, TTL, RETRY).await, 1);
    assert_eq!(env.promote(10).await[0], 1);
    assert_eq!(env.cancel("a").await, 1);
    // The stale ready entry is still there when the id is sent again.
    assert_eq!(env.send("a", "two", 0, TTL, RETRY).await, 1);
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
    assert_eq!(env.send("a", "x", 0, TTL, RETRY).await, 1);
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
    assert_eq!(env.send("a", "x", 0, TTL, RETRY).await, 1);
    assert_eq!(env.promote(10).await[0], 1);
    env.raw(&["SET", &k.unack, "not a zset"]);
    let keys = k.for_claim(&k.claim("c"));
    let args: Vec<Value> = vec![
        k.msg_prefix.as_str().into(),
        10.into(),
        VIS.into(),
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
    assert!(env.record("a").is_none(), "claim wrote before failing");
    assert!(!env.exists(&k.claim("c")), "claim wrote its receipt before failing");
}
