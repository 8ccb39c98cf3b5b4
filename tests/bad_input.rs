//! Bad input and misuse (issue 4): every case gets a typed error, and
//! nothing is lost or half-written. Each test runs against a private
//! redis-server and checks the error's variant together with what Redis
//! holds afterwards.

mod helpers;
use delayqueue_test_support as support;

use std::collections::BTreeMap;
use std::future::IntoFuture;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use delayqueue::{
    Counts, DelayQueue, Error, Event, HandlerError, Json, Message, MessageId, MessageState, NewMessage, MAX_DELAY,
    MAX_ID_LEN, MAX_QUEUE_NAME_LEN, MAX_RETRY_COUNT,
};
use fred::prelude::*;
use helpers::{acking, queue_builder, recording, start_queue, wait_stats, Log};
use support::logs::Logs;
use support::{all_keys, wait_for, wait_until, RawReply, RedisServer, WAIT};

/// How often the consumers in these tests poll.
const FETCH_INTERVAL: Duration = Duration::from_millis(50);
/// A fetch interval that never comes around in a test: only wake-ups drive
/// the consumer, so garbage stays until a sweep is forced.
const NO_SWEEP: Duration = Duration::from_secs(3600);
/// The documented default of `max_payload_size` (1 MiB).
const DEFAULT_MAX_PAYLOAD: usize = 1024 * 1024;

/// Every key with its `DUMP` (type, value and encoding), read over a raw
/// connection: two equal snapshots mean nothing was written in between.
fn snapshot(server: &RedisServer) -> BTreeMap<String, RawReply> {
    let RawReply::Array(keys) = server.raw_reply(&["KEYS", "*"]) else {
        panic!("KEYS did not return an array");
    };
    keys.iter()
        .map(|k| {
            let k = k.render();
            let dump = server.raw_reply(&["DUMP", &k]);
            (k, dump)
        })
        .collect()
}

// ---------------------------------------------------------------- queue names

#[tokio::test]
async fn invalid_queue_names_are_rejected_at_build_and_write_nothing() {
    let server = RedisServer::start().await;
    let client = server.client().await;
    let too_long = "q".repeat(MAX_QUEUE_NAME_LEN + 1);
    let bad = [
        "",
        too_long.as_str(),
        "a{b",
        "a}b",
        "{q}",
        "a b",
        " ",
        "tab\t",
        "nl\n",
        "nul\0",
        "bell\u{7}",
        "del\u{7f}",
        "é",
        "a*b",
    ];
    for name in bad {
        match DelayQueue::builder(name, client.clone()).build() {
            Err(Error::InvalidQueueName { name: got, reason }) => {
                assert_eq!(got, name);
                assert!(!reason.is_empty());
            }
            other => panic!("queue name {name:?}: expected InvalidQueueName, got {other:?}"),
        }
    }
    // A bad key prefix is a bad setting, not a bad name.
    for prefix in ["a{", "}", "a b", "x\n"] {
        let res = DelayQueue::builder("ok", client.clone()).key_prefix(prefix).build();
        assert!(
            matches!(res, Err(Error::InvalidArgument(_))),
            "prefix {prefix:?}: {res:?}"
        );
    }
    assert!(all_keys(&client).await.is_empty());

    // The edges that are allowed work for real.
    let longest = "q".repeat(MAX_QUEUE_NAME_LEN);
    for name in [longest.as_str(), "a-b_c.d:e/f@g"] {
        let q = DelayQueue::builder(name, client.clone()).build().unwrap();
        q.send("x").delay(Duration::from_secs(60)).await.unwrap();
        assert_eq!(q.counts().await.unwrap().pending, 1);
        let prefix = format!("dq:{{{name}}}:");
        assert!(all_keys(&client).await.iter().all(|k| k.starts_with("dq:{")));
        assert!(all_keys(&client).await.iter().any(|k| k.starts_with(&prefix)));
    }
}

// ---------------------------------------------------------------- message ids

fn bad_ids() -> Vec<String> {
    vec![
        String::new(),
        "y".repeat(MAX_ID_LEN + 1),
        // 101 characters, 202 bytes: the limit is in bytes.
        "é".repeat(MAX_ID_LEN / 2 + 1),
        "a b".into(),
        " lead".into(),
        // The retries hash's marker field; whitespace keeps ids from colliding with it.
        " stale".into(),
        "tab\there".into(),
        "nl\n".into(),
        "cr\r".into(),
        "nul\0".into(),
        "del\u{7f}".into(),
        "esc\u{1b}[0m".into(),
        "nbsp\u{a0}".into(),
        "line\u{2028}sep".into(),
    ]
}

#[tokio::test]
async fn invalid_message_ids_are_rejected_before_anything_is_written() {
    let (server, client, q) = start_queue("ids", FETCH_INTERVAL, |b| b).await;
    // Something already in the queue, which must stay as it is.
    let resident = q.send("resident").delay(Duration::from_secs(60)).await.unwrap();
    let before = snapshot(&server);
    for id in bad_ids() {
        let expect_invalid = |res: Result<(), Error>, what: &str| match res {
            Err(Error::InvalidMessageId { id: got, reason }) => {
                assert_eq!(got, id, "{what}");
                assert!(!reason.is_empty());
            }
            other => panic!("{what} with id {id:?}: expected InvalidMessageId, got {other:?}"),
        };
        let res = q.send("x").id(id.as_str()).await;
        expect_invalid(res.map(drop), "send");
        let res = q.send("x").at(SystemTime::now()).id(id.as_str()).await;
        expect_invalid(res.map(drop), "send at");
        expect_invalid(q.cancel(id.as_str()).await.map(drop), "cancel");
        // One bad id fails the whole batch: the good messages are not stored either.
        let batch = [
            NewMessage::new("good").id("good-1"),
            NewMessage::new("bad").id(id.as_str()),
            NewMessage::new("good"),
        ];
        expect_invalid(q.send_batch(batch).await.map(drop), "send_batch");
        assert_eq!(snapshot(&server), before, "id {id:?} wrote something");
    }
    assert_eq!(q.counts().await.unwrap().pending, 1);
    assert!(q.cancel(&resident).await.unwrap());
    assert!(all_keys(&client).await.is_empty());
}

#[tokio::test]
async fn unusual_but_valid_ids_round_trip() {
    // Braces are allowed in ids: the key's hash tag is the first `{...}`,
    // which is always the queue's, so `dq:{q}:m:{x}` stays in the queue's slot.
    let (_server, client, q) = start_queue("okids", FETCH_INTERVAL, |b| b).await;
    let valid: Vec<String> = vec![
        "{".into(),
        "}".into(),
        "a{b}c".into(),
        "{other-queue}".into(),
        "order-42/é".into(),
        "*?[glob]".into(),
        "y".repeat(MAX_ID_LEN),
        "é".repeat(MAX_ID_LEN / 2),
    ];
    for id in &valid {
        let got = q.send(format!("payload of {id}")).id(id.as_str()).await.unwrap();
        assert_eq!(got.as_str(), id);
    }
    let keys = all_keys(&client).await;
    assert!(keys.iter().all(|k| k.starts_with("dq:{okids}:")), "{keys:?}");
    // Cancel takes them too.
    let later = q.send("later").delay(Duration::from_secs(60)).id("{c}").await.unwrap();
    assert!(q.cancel(&later).await.unwrap());

    let log = Log::default();
    let consumer = q.start_consume(acking(&log)).await.unwrap();
    assert!(wait_until(WAIT, || log.len() == valid.len()).await);
    for (id, _attempt, _at, payload) in log.snapshot() {
        assert_eq!(payload, format!("payload of {id}").into_bytes());
    }
    let delivered: std::collections::HashSet<String> = log.ids().iter().map(|i| i.to_string()).collect();
    assert_eq!(delivered, valid.iter().cloned().collect());
    assert_eq!(wait_stats(&q, WAIT, Counts::default()).await, Counts::default());
    consumer.shutdown().await.unwrap();
    assert!(all_keys(&client).await.is_empty(), "{:?}", all_keys(&client).await);
}

// ---------------------------------------------------------------- payload size

#[tokio::test]
async fn payload_over_the_default_max_is_rejected_and_writes_nothing() {
    let (server, client, q) = start_queue("big", FETCH_INTERVAL, |b| b).await;
    let before = snapshot(&server);
    let too_big = vec![b'x'; DEFAULT_MAX_PAYLOAD + 1];
    match q.send(too_big.clone()).await {
        Err(Error::PayloadTooLarge { size, max }) => {
            assert_eq!((size, max), (DEFAULT_MAX_PAYLOAD + 1, DEFAULT_MAX_PAYLOAD))
        }
        other => panic!("expected PayloadTooLarge, got {other:?}"),
    }
    // JSON payloads are measured after encoding.
    let json = Json(serde_json::json!({ "blob": "y".repeat(DEFAULT_MAX_PAYLOAD) }));
    assert!(matches!(
        q.send(json).await,
        Err(Error::PayloadTooLarge {
            max: DEFAULT_MAX_PAYLOAD,
            ..
        })
    ));
    let batch = [NewMessage::new("small"), NewMessage::new(too_big)];
    assert!(matches!(q.send_batch(batch).await, Err(Error::PayloadTooLarge { .. })));
    assert_eq!(snapshot(&server), before);
    assert!(all_keys(&client).await.is_empty());

    // Exactly the maximum is accepted and delivered whole.
    let largest = vec![b'z'; DEFAULT_MAX_PAYLOAD];
    q.send(largest.clone()).await.unwrap();
    let log = Log::default();
    let consumer = q.start_consume(acking(&log)).await.unwrap();
    assert!(wait_until(WAIT, || log.len() == 1).await);
    assert_eq!(log.snapshot()[0].3, largest);
    consumer.shutdown().await.unwrap();
}

#[tokio::test]
async fn payload_over_a_configured_max_is_rejected_and_writes_nothing() {
    let (server, _client, q) = start_queue("small", FETCH_INTERVAL, |b| b.max_payload_size(100)).await;
    q.send(vec![1u8; 100]).delay(Duration::from_secs(60)).await.unwrap();
    let before = snapshot(&server);
    match q.send(vec![1u8; 101]).await {
        Err(Error::PayloadTooLarge { size, max }) => assert_eq!((size, max), (101, 100)),
        other => panic!("expected PayloadTooLarge, got {other:?}"),
    }
    match q.send(Json("j".repeat(99))).await {
        // 99 characters and two quotes.
        Err(Error::PayloadTooLarge { size, max }) => assert_eq!((size, max), (101, 100)),
        other => panic!("expected PayloadTooLarge, got {other:?}"),
    }
    assert_eq!(snapshot(&server), before);
    assert_eq!(q.counts().await.unwrap().pending, 1);
}

// ---------------------------------------------------------------- schedule times

#[tokio::test]
async fn schedule_time_in_the_past_is_due_now() {
    let (server, client, q) = start_queue("past", FETCH_INTERVAL, |b| b).await;
    let day = Duration::from_secs(24 * 3600);
    let times = [
        ("epoch", UNIX_EPOCH),
        ("a day ago", SystemTime::now() - day),
        ("a millisecond ago", SystemTime::now() - Duration::from_millis(1)),
    ];
    for (what, at) in times {
        q.send(what).at(at).await.unwrap();
    }
    // Stored as pending and due by Redis's clock already.
    let redis_now_ms = match server.raw_reply(&["TIME"]) {
        RawReply::Array(t) => {
            t[0].render().parse::<u64>().unwrap() * 1000 + t[1].render().parse::<u64>().unwrap() / 1000
        }
        other => panic!("{other:?}"),
    };
    let RawReply::Array(pending) = server.raw_reply(&["ZRANGE", "dq:{past}:pending", "0", "-1", "WITHSCORES"]) else {
        panic!("ZRANGE");
    };
    let due: Vec<u64> = pending.chunks(2).map(|p| p[1].render().parse().unwrap()).collect();
    assert_eq!(due.len(), 3);
    assert!(due.iter().all(|&d| d <= redis_now_ms), "{due:?} vs now {redis_now_ms}");

    // Due already (the scores say so): delivered. How soon is not a pass
    // condition on a possibly loaded machine.
    let log = Log::default();
    let consumer = q.start_consume(acking(&log)).await.unwrap();
    assert!(wait_until(WAIT, || log.len() == 3).await);
    consumer.shutdown().await.unwrap();
    assert!(all_keys(&client).await.is_empty());
}

#[tokio::test]
async fn delay_beyond_max_delay_is_rejected_and_writes_nothing() {
    let (server, _client, q) = start_queue("far", FETCH_INTERVAL, |b| b).await;
    let before = snapshot(&server);
    let day = Duration::from_secs(24 * 3600);
    let res = q.send("x").delay(MAX_DELAY + Duration::from_millis(1)).await;
    assert!(matches!(res, Err(Error::InvalidArgument(_))), "{res:?}");
    let res = q.send("x").delay(Duration::MAX).await;
    assert!(matches!(res, Err(Error::InvalidArgument(_))), "{res:?}");
    let res = q.send("x").at(SystemTime::now() + MAX_DELAY + day).await;
    assert!(matches!(res, Err(Error::InvalidArgument(_))), "{res:?}");
    // expire_after is 1 ms to MAX_DELAY.
    for d in [
        Duration::ZERO,
        Duration::from_micros(999),
        MAX_DELAY + Duration::from_secs(1),
    ] {
        let res = q.send("x").expire_after(d).await;
        assert!(
            matches!(res, Err(Error::InvalidArgument(_))),
            "expire_after {d:?}: {res:?}"
        );
    }
    assert_eq!(snapshot(&server), before);
}

#[tokio::test]
async fn the_longest_valid_delay_is_stored_pending() {
    let (server, client, q) = start_queue("longest", FETCH_INTERVAL, |b| b).await;
    let id = q.send("in ten years").delay(MAX_DELAY).await.unwrap();
    let scheduled = q
        .send("also far")
        .at(SystemTime::now() + MAX_DELAY - Duration::from_secs(60))
        .await
        .unwrap();
    let redis_now_ms = match server.raw_reply(&["TIME"]) {
        RawReply::Array(t) => t[0].render().parse::<i64>().unwrap() * 1000,
        other => panic!("{other:?}"),
    };
    let due: f64 = client.zscore("dq:{longest}:pending", id.as_str()).await.unwrap();
    let max_ms = MAX_DELAY.as_millis() as i64;
    assert!((due as i64 - redis_now_ms - max_ms).abs() < 10_000, "due {due}");
    // The payload has no TTL: it waits for its delivery however long that takes.
    let pttl: i64 = client.pttl(format!("dq:{{longest}}:m:{id}")).await.unwrap();
    assert_eq!(pttl, -1);
    let _: f64 = client.zscore("dq:{longest}:pending", scheduled.as_str()).await.unwrap();
    // A running consumer leaves them alone.
    let log = Log::default();
    let consumer = q.start_consume(acking(&log)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(log.is_empty());
    consumer.shutdown().await.unwrap();
    let s = q.counts().await.unwrap();
    assert_eq!((s.pending, s.live()), (2, 2), "{s:?}");
}

// ---------------------------------------------------------------- retry counts and settings

#[tokio::test]
async fn retry_counts_beyond_the_maximum_are_rejected() {
    let (server, client, q) = start_queue("retries", FETCH_INTERVAL, |b| b).await;
    let before = snapshot(&server);
    for n in [MAX_RETRY_COUNT + 1, u32::MAX] {
        let res = q.send("x").retry_count(n).await;
        assert!(
            matches!(res, Err(Error::InvalidArgument(_))),
            "retry_count {n}: {res:?}"
        );
        let res = queue_builder("retries", &client, FETCH_INTERVAL)
            .default_retry_count(n)
            .build();
        assert!(
            matches!(res, Err(Error::InvalidArgument(_))),
            "default_retry_count {n}: {res:?}"
        );
    }
    assert_eq!(snapshot(&server), before);
    // The maximum itself is fine, per message and per queue.
    let id = q
        .send("x")
        .delay(Duration::from_secs(60))
        .retry_count(MAX_RETRY_COUNT)
        .await
        .unwrap();
    let stored: String = client.get(format!("dq:{{retries}}:m:{id}")).await.unwrap();
    // "<retry count>/<sent at>+<delay>:<payload>"
    assert!(
        stored.starts_with(&format!("{MAX_RETRY_COUNT}/")) && stored.ends_with("+60000:x"),
        "{stored}"
    );
    let q2 = queue_builder("retries", &client, FETCH_INTERVAL)
        .default_retry_count(MAX_RETRY_COUNT)
        .build()
        .unwrap();
    q2.send("y").delay(Duration::from_secs(60)).await.unwrap();
    assert_eq!(q.counts().await.unwrap().pending, 2);
}

#[tokio::test]
async fn builder_settings_out_of_range_are_rejected() {
    let server = RedisServer::start().await;
    let client = server.client().await;
    type Configure = fn(delayqueue::DelayQueueBuilder) -> delayqueue::DelayQueueBuilder;
    let cases: [(&str, Configure); 12] = [
        ("fetch_interval 0", |b| b.fetch_interval(Duration::ZERO)),
        ("max_consume_duration 9 ms", |b| {
            b.max_consume_duration(Duration::from_millis(9))
        }),
        ("concurrency 0", |b| b.concurrency(0)),
        ("fetch_limit below concurrency", |b| b.concurrency(4).fetch_limit(3)),
        ("batch_size 0", |b| b.batch_size(0)),
        ("batch_size 1001", |b| b.batch_size(1001)),
        ("group_share 1001", |b| b.group_share(1001)),
        ("nack_redelivery_delay > MAX_DELAY", |b| {
            b.nack_redelivery_delay(MAX_DELAY + Duration::from_secs(1))
        }),
        ("expire_after 0", |b| b.expire_after(Duration::ZERO)),
        ("expire_after > MAX_DELAY", |b| {
            b.expire_after(MAX_DELAY + Duration::from_secs(1))
        }),
        ("default_retry_count > MAX", |b| {
            b.default_retry_count(MAX_RETRY_COUNT + 1)
        }),
        ("key_prefix with a brace", |b| b.key_prefix("x{")),
    ];
    for (what, configure) in cases {
        let res = configure(DelayQueue::builder("settings", client.clone())).build();
        assert!(matches!(res, Err(Error::InvalidArgument(_))), "{what}: {res:?}");
    }
    assert!(all_keys(&client).await.is_empty());
}

// ---------------------------------------------------------------- keys of the wrong type

/// The queue keys a foreign writer may clobber, with their script type.
const QUEUE_KEYS: [&str; 6] = ["pending", "ready", "unack", "retry", "garbage", "retries"];

#[tokio::test]
async fn a_wrong_type_key_fails_each_call_whole_that_touches_it() {
    let server = RedisServer::start().await;
    let client = server.client().await;
    for key in QUEUE_KEYS {
        let name = format!("wt-{key}");
        let q = queue_builder(&name, &client, FETCH_INTERVAL).build().unwrap();
        let full = format!("dq:{{{name}}}:{key}");
        // A message already waiting (pending itself must not exist to be clobbered).
        let resident = match key {
            "pending" => None,
            _ => Some(q.send("resident").delay(Duration::from_secs(3600)).await.unwrap()),
        };
        assert_eq!(server.raw_command(&["SET", &full, "foreign", "NX"]), "OK");
        let before = snapshot(&server);

        // Which calls touch which key (see each script). A send with a
        // generated id, alone or in a batch, reads unack and writes
        // pending (a generated id has no dead letter or retry record of an
        // earlier message); a caller-chosen id also clears its dead letter
        // and retry record.
        let own_touches = matches!(key, "pending" | "retries" | "unack" | "garbage");
        let send_touches = matches!(key, "pending" | "unack");
        let batch_touches = send_touches;
        let cancel_touches = own_touches;
        let is_wrong_type = |e: &Error| match e {
            Error::WrongType { queue, detail } => {
                *queue == name && detail.contains("WRONGTYPE") && detail.contains(&full)
            }
            _ => false,
        };
        // A refused call writes nothing; the others go through.
        let mut stored = i64::from(resident.is_some());
        let expect =
            |what: &str, touches: bool, refused: Option<&Error>, before: &BTreeMap<String, RawReply>| match refused {
                Some(e) => {
                    assert!(touches && is_wrong_type(e), "{key}: {what} gave {e:?}");
                    assert_eq!(&snapshot(&server), before, "{key}: a refused {what} wrote something");
                }
                None => assert!(!touches, "{key}: {what} went through"),
            };
        let sent = q.send("x").await;
        expect("send", send_touches, sent.as_ref().err(), &before);
        stored += i64::from(sent.is_ok());
        let before = snapshot(&server);
        let own = q.send("x").id("own").await;
        expect("send with an id", own_touches, own.as_ref().err(), &before);
        stored += i64::from(own.is_ok());
        let before = snapshot(&server);
        let batch = q.send_batch([NewMessage::new("b1"), NewMessage::new("b2")]).await;
        expect("send_batch", batch_touches, batch.as_ref().err(), &before);
        if let Ok(results) = &batch {
            assert!(results.iter().all(Result::is_ok), "{key}: {results:?}");
            stored += 2;
        }
        if let Some(resident) = &resident {
            let before = snapshot(&server);
            let res = q.cancel(resident).await;
            expect("cancel", cancel_touches, res.as_ref().err(), &before);
            if let Ok(cancelled) = res {
                assert!(cancelled, "{key}");
                stored -= 1;
            }
        }
        if key != "pending" {
            let pending: i64 = client.zcard(format!("dq:{{{name}}}:pending")).await.unwrap();
            assert_eq!(pending, stored, "{key}");
        }
        // stats checks every key it may read up front (the attempts hash
        // holds the due time of a retried or requeued message: its latency),
        // and so does a consumer's start.
        let stats = q.counts().await;
        assert!(
            matches!(&stats, Err(e) if is_wrong_type(e)),
            "{key}: stats gave {stats:?}"
        );
        let started = q.start_consume(acking(&Log::default())).await;
        assert!(
            matches!(&started, Err(e) if is_wrong_type(e)),
            "{key}: start_consume gave {:?}",
            started.as_ref().map(drop)
        );
        // The foreign value itself is untouched.
        assert_eq!(server.raw_command(&["GET", &full]), "foreign", "{key}");
    }
}

#[tokio::test]
async fn a_totals_key_of_the_wrong_type_refuses_every_send_whole() {
    // Every send counts what it stored last, after its writes: the key is
    // checked before the first one.
    let (server, _client, q) = start_queue("wttotals", FETCH_INTERVAL, |b| b).await;
    assert_eq!(server.raw_command(&["RPUSH", "dq:{wttotals}:totals", "foreign"]), "1");
    let before = snapshot(&server);
    let sends = [
        q.send("x").await.map(drop),
        q.send("x").id("own").await.map(drop),
        q.send_batch([NewMessage::new("a"), NewMessage::new("b")])
            .await
            .map(drop),
    ];
    for sent in sends {
        assert!(
            matches!(&sent, Err(Error::WrongType { detail, .. }) if detail.contains("dq:{wttotals}:totals")),
            "{sent:?}"
        );
    }
    assert_eq!(snapshot(&server), before);
}

#[tokio::test]
async fn a_payload_key_of_the_wrong_type_fails_that_message_alone() {
    let (server, client, q) = start_queue("wtmsg", FETCH_INTERVAL, |b| b).await;
    let _: () = client.hset("dq:{wtmsg}:m:taken", ("f", "v")).await.unwrap();
    let before = snapshot(&server);
    let res = q.send("x").id("taken").await;
    match &res {
        Err(Error::WrongType { queue, detail }) => assert!(queue == "wtmsg" && detail.contains("taken"), "{detail}"),
        other => panic!("expected WrongType, got {other:?}"),
    }
    assert_eq!(snapshot(&server), before);
    let results = q
        .send_batch([
            NewMessage::new("a").id("a"),
            NewMessage::new("t").id("taken"),
            NewMessage::new("c").id("c"),
        ])
        .await
        .unwrap();
    assert!(results[0].is_ok() && results[2].is_ok(), "{results:?}");
    assert!(matches!(&results[1], Err(Error::WrongType { .. })), "{results:?}");
    assert_eq!(q.counts().await.unwrap().ready, 2, "due at once");
    assert_eq!(server.raw_command(&["TYPE", "dq:{wtmsg}:m:taken"]), "hash");
}

#[tokio::test]
async fn a_running_consumer_backs_off_on_wrong_type_keys_and_resumes_once_fixed() {
    let (server, client, q) = start_queue("wtrun", FETCH_INTERVAL, |b| b).await;
    let logs = Logs::capture("wtrun");
    let log = Log::default();
    let consumer = q.start_consume(acking(&log)).await.unwrap();
    let mut expected = 0;
    for key in QUEUE_KEYS {
        let full = format!("dq:{{wtrun}}:{key}");
        assert_eq!(wait_stats(&q, WAIT, Counts::default()).await, Counts::default());
        // Sent before the breakage and due during it (pending cannot hold
        // anything while it is clobbered): due late enough that a slow
        // machine still breaks the key first.
        let due = Duration::from_secs(1);
        let due_at = tokio::time::Instant::now() + due;
        let before = match key {
            "pending" => None,
            _ => Some(q.send(format!("before {key}")).delay(due).await.unwrap()),
        };
        assert_eq!(server.raw_command(&["SET", &full, "foreign", "NX"]), "OK");
        let failing = format!("WRONGTYPE {full}");
        assert!(
            wait_until(WAIT, || logs.text().contains(&failing)).await,
            "{key}: the consumer did not report the broken key"
        );
        // A send during the breakage: refused whole, or stored (when send
        // does not touch the key: a generated id's reads unack and writes pending).
        let during = q.send(format!("during {key}")).await;
        match &during {
            Ok(_) => assert!(!matches!(key, "pending" | "unack")),
            Err(Error::WrongType { .. }) => assert!(matches!(key, "pending" | "unack")),
            Err(e) => panic!("{key}: {e:?}"),
        }
        // Past the due time of `before`, and a few sweeps more.
        tokio::time::sleep_until(due_at + FETCH_INTERVAL * 6).await;
        assert_eq!(log.len(), expected, "{key}: delivered through a broken key");
        // Repaired by the operator; the same consumer carries on.
        assert_eq!(server.raw_command(&["DEL", &full]), "1");
        let after = q.send(format!("after {key}")).await.unwrap();
        let want: Vec<MessageId> = before.into_iter().chain(during.ok()).chain(Some(after)).collect();
        expected += want.len();
        assert!(
            wait_until(WAIT, || log.len() >= expected).await,
            "{key}: consumer did not resume ({} of {expected})",
            log.len()
        );
        let ids = log.ids();
        assert!(want.iter().all(|id| ids.contains(id)), "{key}");
    }
    let text = logs.text();
    assert!(text.contains("consumer step failed; backing off"), "{text}");
    assert_eq!(wait_stats(&q, WAIT, Counts::default()).await, Counts::default());
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(log.len(), expected, "duplicates: {:?}", log.counts());
    consumer.shutdown().await.unwrap();
    assert!(all_keys(&client).await.is_empty(), "{:?}", all_keys(&client).await);
}

// ---------------------------------------------------------------- foreign values inside keys

/// Sets the retry record (delivery count) of `id` to `value`.
async fn set_retry_record(client: &Client, queue: &str, id: &MessageId, value: &str) {
    let _: () = client
        .hset(format!("dq:{{{queue}}}:retries"), (id.as_str(), value))
        .await
        .unwrap();
}

#[tokio::test]
async fn a_non_numeric_retry_record_is_counted_with_a_default() {
    // Every delivery fails, so each message uses all 3 of its deliveries.
    let (_server, client, q) = start_queue("abc", FETCH_INTERVAL, |b| {
        // fetch_limit 1: while one message is handled, the next waits in ready.
        b.default_retry_count(2)
            .fetch_limit(1)
            .nack_redelivery_delay(Duration::ZERO)
            .dead_letter_retention(Duration::ZERO)
    })
    .await;
    let log = Log::default();
    // The blocker holds the only slot until the test has seen "ready" wait.
    let release = Arc::new(tokio::sync::Notify::new());
    let held = release.clone();
    let handler = |log: &Log| {
        recording(log, move |msg: Message| {
            let held = held.clone();
            async move {
                if msg.payload() == b"blocker" {
                    let _ = tokio::time::timeout(WAIT, held.notified()).await;
                    return Ok(());
                }
                Err::<(), HandlerError>("always fails".into())
            }
        })
    };
    // Pending, not yet due; and pending, already due (not yet promoted).
    let waiting = q.send("waiting").delay(Duration::from_millis(500)).await.unwrap();
    let due = q.send("due").await.unwrap();
    for (id, value) in [(&waiting, "abc"), (&due, "-7")] {
        set_retry_record(&client, "abc", id, value).await;
    }
    let consumer = q.start_consume(handler(&log)).await.unwrap();
    assert!(
        wait_until(WAIT, || log.attempts(&waiting).len() == 3
            && log.attempts(&due).len() == 3)
        .await,
        "{:?}",
        log.counts()
    );
    // Ready: promoted while the only handler slot is busy.
    q.send("blocker").await.unwrap();
    assert!(wait_until(WAIT, || log.snapshot().iter().any(|e| e.3 == b"blocker")).await);
    let ready = q.send("ready").await.unwrap();
    let seen_ready = wait_for(WAIT, || async { q.counts().await.unwrap().ready == 1 }).await;
    assert!(seen_ready, "the message never sat in ready");
    assert!(log.attempts(&ready).is_empty());
    set_retry_record(&client, "abc", &ready, "1.5e3").await;
    release.notify_one();

    assert!(
        wait_until(WAIT, || log.len() == 3 + 3 + 3 + 1).await,
        "{:?}",
        log.counts()
    );
    for id in [&waiting, &due, &ready] {
        assert_eq!(log.attempts(id), vec![1, 2, 3], "{id}");
    }
    // All three used up their deliveries, were dead and collected.
    assert_eq!(wait_stats(&q, WAIT, Counts::default()).await, Counts::default());
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(log.len(), 10);
    consumer.shutdown().await.unwrap();
    assert!(all_keys(&client).await.is_empty(), "{:?}", all_keys(&client).await);
}

#[tokio::test]
async fn a_non_numeric_retry_record_while_waiting_for_a_retry_restarts_the_count() {
    let (_server, client, q) = start_queue("abcretry", FETCH_INTERVAL, |b| {
        b.default_retry_count(1)
            .dead_letter_retention(Duration::ZERO)
            .nack_redelivery_delay(Duration::from_millis(300))
    })
    .await;
    let log = Log::default();
    // The first failure asks for a retry long after the test, so the record
    // is changed while the retry waits however slow the machine; a
    // reschedule then makes it due.
    let first = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let consumer = q
        .start_consume(recording(&log, move |_msg: Message| {
            let first = first.swap(false, std::sync::atomic::Ordering::Relaxed);
            async move {
                if first {
                    return Err(delayqueue::RetryAfter::new(Duration::from_secs(3600), "not yet").into());
                }
                Err::<(), HandlerError>("always fails".into())
            }
        }))
        .await
        .unwrap();
    let id = q.send("x").await.unwrap();
    assert!(wait_until(WAIT, || log.len() == 1).await);
    // Waiting for its retry, with record "1".
    assert!(
        wait_for(WAIT, || async { q.counts().await.unwrap().pending == 1 }).await,
        "{:?}",
        q.counts().await
    );
    set_retry_record(&client, "abcretry", &id, "abc").await;
    assert!(q.reschedule(&id, Duration::ZERO).await.unwrap());
    assert!(wait_until(WAIT, || log.len() == 3).await);
    // The unreadable record counts as 0 deliveries: one extra delivery, never endless.
    assert_eq!(log.attempts(&id), vec![1, 1, 2]);
    assert_eq!(wait_stats(&q, WAIT, Counts::default()).await, Counts::default());
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(log.len(), 3);
    consumer.shutdown().await.unwrap();
    assert!(all_keys(&client).await.is_empty());
}

/// Message `a`, made unreadable by `corrupt` once sent, is claimed in one
/// batch with `b` (retry_count 0): `b` must still get its one delivery,
/// promptly (before the visibility timeout, longer than the test waits),
/// and `a` must end delivered or dead, not stuck.
async fn an_unreadable_message_spares_its_batch(name: &str, corrupt: impl FnOnce(&RedisServer, &MessageId)) {
    let (server, client, q) = start_queue(name, FETCH_INTERVAL, |b| {
        b.concurrency(8).max_consume_duration(2 * WAIT)
    })
    .await;
    let a = q.send("a").await.unwrap();
    let b = q.send("b").retry_count(0).await.unwrap();
    corrupt(&server, &a);
    let logs = Logs::capture(name);
    let log = Log::default();
    let consumer = q.start_consume(acking(&log)).await.unwrap();
    let got_b = wait_until(WAIT, || log.attempts(&b) == vec![1]).await;
    // Where does everything end? (Before any lease runs out.)
    wait_for(WAIT, || async { q.counts().await.unwrap().live() == 0 }).await;
    let s = q.counts().await.unwrap();
    consumer.shutdown().await.unwrap();
    let b_payload: Option<String> = client.get(format!("dq:{{{name}}}:m:{b}")).await.unwrap();
    let problems: Vec<String> = logs
        .text()
        .lines()
        .filter(|l| l.contains("WARN") || l.contains("ERROR"))
        .map(|l| l.chars().take(300).collect())
        .collect();
    let story = format!(
        "a = {a}, b = {b}; deliveries {:?}; stats {s:?}; b's payload key afterwards {b_payload:?}; warnings:\n{}",
        log.snapshot()
            .iter()
            .map(|e| (e.0.to_string(), e.1))
            .collect::<Vec<_>>(),
        problems.join("\n")
    );
    assert!(got_b, "b was not delivered within {WAIT:?}: {story}");
    assert_eq!(log.attempts(&b), vec![1], "{story}");
    assert_eq!(s.live(), 0, "a is stuck: {story}");
}

#[tokio::test]
async fn a_retry_record_beyond_u32_spares_the_rest_of_its_claim() {
    an_unreadable_message_spares_its_batch("huge", |server, a| {
        server.raw_command(&["HSET", "dq:{huge}:retries", a.as_str(), "4294967296"]);
    })
    .await;
}

#[tokio::test]
async fn a_payload_without_its_header_spares_the_rest_of_its_claim() {
    // E.g. written by something else, or by a version that stored bare payloads.
    an_unreadable_message_spares_its_batch("headless", |server, a| {
        let key = format!("dq:{{headless}}:m:{a}");
        assert_eq!(server.raw_command(&["SET", &key, "bare payload", "KEEPTTL"]), "OK");
    })
    .await;
}

/// A message made unreadable while it waits for its retry is settled like
/// any delivery that cannot succeed: one `Dead` event with its attempt and
/// reason, counted in the totals, kept as a dead letter with that reason,
/// and never given to the handler.
#[tokio::test]
async fn an_unreadable_retry_is_settled_as_a_dead_letter_like_any_other() {
    let (server, _client, q) = start_queue("unreadable", FETCH_INTERVAL, |b| b.max_consume_duration(2 * WAIT)).await;
    let mut events = q.events();
    let log = Log::default();
    let consumer = q
        .start_consume(recording(&log, |msg: Message| async move {
            // The retry is asked for long after the test, so the value is
            // changed while it waits however slow the machine.
            match msg.attempt() {
                1 => Err(delayqueue::RetryAfter::new(Duration::from_secs(3600), "not yet").into()),
                _ => Ok::<(), HandlerError>(()),
            }
        }))
        .await
        .unwrap();
    let id = q.send("x").await.unwrap();
    assert!(
        wait_for(WAIT, || async { q.counts().await.unwrap().pending == 1 }).await,
        "{:?}",
        q.counts().await
    );
    let key = format!("dq:{{unreadable}}:m:{id}");
    assert_eq!(server.raw_command(&["SET", &key, "bare payload", "KEEPTTL"]), "OK");
    assert!(q.reschedule(&id, Duration::ZERO).await.unwrap());
    let mut seen = Vec::new();
    let dead = tokio::time::timeout(WAIT, async {
        loop {
            match events.recv().await.expect("events") {
                dead @ Event::Dead { .. } => return dead,
                other => seen.push(other),
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no Dead event within {WAIT:?}; saw {seen:?}"));
    assert_eq!(
        dead,
        Event::Dead {
            id: id.clone(),
            attempt: 2,
            reason: "unreadable stored value".into(),
        },
        "after {seen:?}"
    );
    let status = q.status().await.unwrap();
    consumer.shutdown().await.unwrap();
    assert_eq!(log.attempts(&id), vec![1], "the handler never gets it");
    assert_eq!(
        (status.counts.dead, status.totals.failed, status.totals.dead),
        (1, 2, 1)
    );
    let info = q.get(&id).await.unwrap().expect("kept as a dead letter");
    assert_eq!(
        (info.state, info.attempts, info.last_error.as_deref()),
        (MessageState::Dead, 2, Some("unreadable stored value"))
    );
}

// ---------------------------------------------------------------- handler trouble

#[derive(Debug, serde::Deserialize)]
#[allow(dead_code)]
struct Order {
    order_id: u64,
}

#[tokio::test]
async fn an_undecodable_json_payload_follows_the_retry_path_to_garbage() {
    let (_server, client, q) = start_queue("json", NO_SWEEP, |b| b.nack_redelivery_delay(Duration::ZERO)).await;
    let logs = Logs::capture("json");
    let log = Log::default();
    let kinds = Arc::new(Mutex::new(Vec::new()));
    let k = kinds.clone();
    let consumer = q
        .start_consume(recording(&log, move |msg: Message| {
            let k = k.clone();
            async move {
                let parsed = msg.json::<Order>();
                k.lock().unwrap().push(match &parsed {
                    Err(Error::Json(_)) => "Error::Json",
                    Err(_) => "another error",
                    Ok(_) => "decoded",
                });
                let _order: Order = parsed?;
                Ok(())
            }
        }))
        .await
        .unwrap();
    let not_json = q.send(&b"\xff\xfe not json"[..]).retry_count(2).await.unwrap();
    let wrong_shape = q.send(Json(serde_json::json!({ "order_id": "seven" }))).await.unwrap();
    // retry_count 2 and the default 3: 3 and 4 deliveries.
    assert!(wait_until(WAIT, || log.len() == 7).await, "{:?}", log.counts());
    assert_eq!(log.attempts(&not_json), vec![1, 2, 3]);
    assert_eq!(log.attempts(&wrong_shape), vec![1, 2, 3, 4]);
    assert!(kinds.lock().unwrap().iter().all(|k| *k == "Error::Json"), "{kinds:?}");
    let mut want = Counts::default();
    want.dead = 2;
    assert_eq!(wait_stats(&q, WAIT, want).await, want);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(log.len(), 7);
    assert_eq!(q.counts().await.unwrap(), want);
    // The handler's error reached the consumer's log as what it was.
    let text = logs.text();
    assert!(
        text.contains("handler failed") && text.contains("JSON payload"),
        "{text}"
    );
    assert!(text.contains("used up its deliveries"), "{text}");
    consumer.shutdown().await.unwrap();

    // The next sweep collects the dead messages.
    let sweeper = queue_builder("json", &client, FETCH_INTERVAL)
        .dead_letter_retention(Duration::ZERO)
        .build()
        .unwrap();
    let consumer = sweeper.start_consume(acking(&log)).await.unwrap();
    assert_eq!(wait_stats(&q, WAIT, Counts::default()).await, Counts::default());
    consumer.shutdown().await.unwrap();
    assert_eq!(log.len(), 7, "a dead message was delivered again");
    assert!(all_keys(&client).await.is_empty(), "{:?}", all_keys(&client).await);
}

#[tokio::test]
async fn a_handler_that_always_panics_ends_in_garbage_and_the_consumer_goes_on() {
    let (_server, client, q) = start_queue("panic", NO_SWEEP, |b| b.nack_redelivery_delay(Duration::ZERO)).await;
    let logs = Logs::capture("panic");
    let log = Log::default();
    let consumer = q
        .start_consume(recording(&log, |msg: Message| async move {
            if msg.payload() == b"poison" {
                panic!("handler bug on attempt {}", msg.attempt());
            }
            Ok::<(), HandlerError>(())
        }))
        .await
        .unwrap();
    let poison = q.send("poison").retry_count(2).await.unwrap();
    assert!(wait_until(WAIT, || log.len() == 3).await);
    assert_eq!(log.attempts(&poison), vec![1, 2, 3]);
    let mut want = Counts::default();
    want.dead = 1;
    assert_eq!(wait_stats(&q, WAIT, want).await, want);
    // The same consumer serves the next messages.
    let mut fine = Vec::new();
    for i in 0..5 {
        fine.push(q.send(format!("fine {i}")).await.unwrap());
    }
    assert!(wait_until(WAIT, || log.len() == 8).await);
    assert!(fine.iter().all(|id| log.attempts(id) == vec![1]));
    assert_eq!(wait_stats(&q, WAIT, want).await, want);
    assert_eq!(log.attempts(&poison).len(), 3);
    // The nack logs after its reply, which may come after the stats show it.
    wait_until(WAIT, || logs.text().contains("used up its deliveries")).await;
    let text = logs.text();
    assert_eq!(text.matches("handler panicked").count(), 3, "{text}");
    assert!(
        text.contains("handler bug on attempt 3") && text.contains("used up its deliveries"),
        "{text}"
    );
    consumer.shutdown().await.unwrap();
    let sweeper = queue_builder("panic", &client, FETCH_INTERVAL)
        .dead_letter_retention(Duration::ZERO)
        .build()
        .unwrap();
    let consumer = sweeper.start_consume(acking(&log)).await.unwrap();
    assert_eq!(wait_stats(&q, WAIT, Counts::default()).await, Counts::default());
    consumer.shutdown().await.unwrap();
    assert_eq!(log.len(), 8);
    assert!(all_keys(&client).await.is_empty());
}

// ---------------------------------------------------------------- Redis unreachable

/// A loopback port nobody listens on.
fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[tokio::test]
async fn connect_to_a_closed_port_fails_within_its_limit() {
    let url = format!("redis://127.0.0.1:{}", closed_port());
    let started = Instant::now();
    let res = tokio::time::timeout(WAIT, delayqueue::connect(&url))
        .await
        .expect("connect hung");
    assert!(matches!(res, Err(Error::Redis(_))), "{res:?}");
    println!(
        "connect to a closed port failed after {:?}: {}",
        started.elapsed(),
        res.unwrap_err()
    );
    // connect() gives up after 5 s at most.
    let limit = Duration::from_secs(5);
    assert!(started.elapsed() <= limit + slack(limit), "{:?}", started.elapsed());
    let res = delayqueue::connect("not a url").await;
    assert!(matches!(res, Err(Error::Redis(_))), "{res:?}");
}

/// Kills the server, then keeps its port taken by a listener that drops
/// every connection (so no other test's server can appear there).
fn kill_and_hold_port(server: &mut RedisServer) -> std::net::TcpListener {
    server.kill();
    let listener = std::net::TcpListener::bind(("127.0.0.1", server.port())).expect("could not take the port over");
    let acceptor = listener.try_clone().unwrap();
    std::thread::spawn(move || {
        for stream in acceptor.incoming() {
            drop(stream);
        }
    });
    listener
}

/// What a loaded machine may add to a time limit before the call returns:
/// less than the limit again, so one more attempt would still show.
fn slack(limit: Duration) -> Duration {
    (limit / 2).max(Duration::from_secs(1))
}

/// Runs `call` on a dead server: `Error::Redis` within `limit` (for a
/// send `Error::Unconfirmed`: it cannot know whether the script ran).
async fn fails_within<T: std::fmt::Debug>(
    what: &str,
    limit: Duration,
    call: impl std::future::Future<Output = Result<T, Error>>,
) {
    let started = Instant::now();
    let res = tokio::time::timeout(limit * 2 + WAIT, call)
        .await
        .unwrap_or_else(|_| panic!("{what} hung"));
    let took = started.elapsed();
    match &res {
        Err(Error::Unconfirmed { ids, .. }) if what == "send" => assert_eq!(ids.len(), 1),
        Err(Error::Redis(_)) if what != "send" => {}
        other => panic!("{what}: {other:?}"),
    }
    assert!(took <= limit + slack(limit), "{what} took {took:?}");
    println!("{what} on a dead server failed after {took:?}: {}", res.unwrap_err());
}

/// Send, cancel and stats (at once) on a queue whose Redis is gone.
async fn calls_fail_within(q: &DelayQueue, limit: Duration) {
    let id = MessageId::from("someone");
    tokio::join!(
        fails_within("send", limit, q.send("x").into_future()),
        fails_within("cancel", limit, q.cancel(&id)),
        fails_within("stats", limit, q.counts()),
    );
}

#[tokio::test]
async fn send_after_the_server_died_fails_within_a_short_command_timeout() {
    let mut server = RedisServer::start().await;
    let cfg = fred::prelude::Config::from_url(&server.url()).unwrap();
    let client = Builder::from_config(cfg)
        .with_connection_config(|c| c.connection_timeout = Duration::from_secs(1))
        .with_performance_config(|p| p.default_command_timeout = Duration::from_secs(1))
        .set_policy(ReconnectPolicy::new_exponential(0, 100, 1000, 2))
        .build()
        .unwrap();
    client.init().await.unwrap();
    let q = queue_builder("dead", &client, FETCH_INTERVAL).build().unwrap();
    q.send("before").delay(Duration::from_secs(60)).await.unwrap();
    let _port = kill_and_hold_port(&mut server);
    calls_fail_within(&q, Duration::from_secs(1)).await;
}

#[tokio::test]
async fn send_after_the_server_died_fails_within_connects_command_timeout() {
    let mut server = RedisServer::start().await;
    let client = delayqueue::connect(&server.url()).await.unwrap();
    let q = queue_builder("dead10", &client, FETCH_INTERVAL).build().unwrap();
    q.send("before").delay(Duration::from_secs(60)).await.unwrap();
    let _port = kill_and_hold_port(&mut server);
    // connect() sets a 10 s command timeout.
    calls_fail_within(&q, Duration::from_secs(10)).await;
}

/// A server that cannot run Lua scripts (Valkey 9 after `MODULE UNLOAD
/// lua`): sending, reading stats and starting a consumer each fail with
/// `ScriptingUnavailable`, naming the server, and nothing is written.
/// Redis 7 and Valkey 8 have Lua built in, so there it cannot be removed
/// and the test skips, saying so; on Valkey 9 it always runs.
#[tokio::test]
async fn a_server_without_lua_gets_a_typed_error_naming_it() {
    let server = RedisServer::start_with(support::ServerOptions {
        extra_args: vec!["--enable-module-command".into(), "local".into()],
        ..Default::default()
    })
    .await;
    let valkey_major = server
        .info_server("valkey_version")
        .and_then(|v| v.split('.').next()?.parse::<u32>().ok());
    let unload = server.raw_reply(&["MODULE", "UNLOAD", "lua"]);
    if valkey_major.is_none_or(|major| major < 9) {
        support::skip(
            "a_server_without_lua_gets_a_typed_error_naming_it",
            &format!(
                "Lua is built into this server (not Valkey 9 or later), so it cannot run without it; MODULE UNLOAD lua: {}",
                unload.render()
            ),
        );
        return;
    }
    assert_eq!(unload, RawReply::Simple("OK".into()), "Valkey 9 unloads its lua module");

    let q = DelayQueue::builder("nolua", server.client().await).build().unwrap();
    let check = |what: &str, result: Result<(), Error>| {
        let e = result.expect_err(what);
        assert!(
            matches!(&e, Error::ScriptingUnavailable { server, .. } if server.starts_with("Valkey 9.")),
            "{what}: {e:?}"
        );
        // The message says what to do.
        assert!(e.to_string().contains("lua module"), "{what}: {e}");
    };
    check("send", q.send("x").await.map(|_| ()));
    check("counts", q.counts().await.map(|_| ()));
    let log = Log::default();
    check("start_consume", q.start_consume(acking(&log)).await.map(|_| ()));
    assert!(snapshot(&server).is_empty());
}
