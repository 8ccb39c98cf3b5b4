//! unique_for, throttle, debounce and replace under concurrency
//! (docs/dedup.md): 16 tasks send the same id at once, round after round,
//! on one Redis and on a local cluster, and every round ends exactly as
//! documented: one message stored, the others dropped or folded into it,
//! each id delivered once with its last payload, none lost. Windows run on
//! Redis's clock: a producer whose clock is an hour off changes nothing.

mod helpers;
use delayqueue_test_support as support;

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use delayqueue::fred::clients::Client;
use delayqueue::{DelayQueue, Error, MessageState, NewMessage, Sent};
use fred::interfaces::ClientLike;
use helpers::{acking, Log};
use support::cluster::RedisCluster;
use support::{wait_until, RedisServer, WAIT};
use tokio::sync::Barrier;

/// Tasks sending one id at once.
const SENDERS: usize = 16;
/// Rounds of each race.
const ROUNDS: usize = 8;
/// Tolerance, in ms, between the Redis times the tests read and a window's end.
const SLACK_MS: u64 = 1_000;
/// A window no test outlives.
const HOUR: Duration = Duration::from_secs(3600);

async fn redis_ms(client: &Client) -> u64 {
    let t: Vec<String> = client.custom(fred::cmd!("TIME"), Vec::<String>::new()).await.unwrap();
    t[0].parse::<u64>().unwrap() * 1000 + t[1].parse::<u64>().unwrap() / 1000
}

fn ms_of(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).unwrap().as_millis() as u64
}

/// What `SENDERS` tasks, released at once, got from `send(i)` each.
async fn race<F>(queue: &DelayQueue, send: F) -> Vec<Sent>
where
    F: Fn(&DelayQueue, usize) -> NewMessage<&DelayQueue> + Send + Sync + 'static,
{
    let (send, gate) = (Arc::new(send), Arc::new(Barrier::new(SENDERS)));
    let tasks: Vec<_> = (0..SENDERS)
        .map(|i| {
            let (queue, send, gate) = (queue.clone(), send.clone(), gate.clone());
            tokio::spawn(async move {
                gate.wait().await;
                send(&queue, i).outcome().await
            })
        })
        .collect();
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.expect("sender task").expect("send"));
    }
    out
}

fn count(sent: &[Sent], what: fn(&Sent) -> bool) -> usize {
    sent.iter().filter(|s| what(s)).count()
}

/// Every race on `queue`, round after round; then one consumer delivers
/// everything: each id once, a debounced one with the payload Redis held
/// last; then the windows of the finished ids still refuse.
async fn every_race(client: &Client, queue: &DelayQueue) {
    let mut debounced = Vec::new();
    for round in 0..ROUNDS {
        let before = redis_ms(client).await;
        let id = format!("u-{round}");
        let sent = race(queue, move |q, i| {
            q.send(format!("u{i}")).id(id.as_str()).unique_for(HOUR)
        })
        .await;
        assert_eq!(
            count(&sent, |s| matches!(s, Sent::Stored(_))),
            1,
            "unique round {round}: {sent:?}"
        );
        assert_eq!(
            count(&sent, |s| matches!(s, Sent::Dropped { until: None, .. })),
            SENDERS - 1,
            "unique round {round}: the others meet a live message: {sent:?}"
        );

        let id = format!("t-{round}");
        let sent = race(queue, move |q, i| {
            q.send(format!("t{i}")).id(id.as_str()).throttle(HOUR)
        })
        .await;
        let after = redis_ms(client).await;
        assert_eq!(
            count(&sent, |s| matches!(s, Sent::Stored(_))),
            1,
            "throttle round {round}: {sent:?}"
        );
        for s in &sent {
            if let Sent::Dropped { until, .. } = s {
                let until = ms_of(until.expect("a throttle window has an end"));
                // Slack: a script's key expiry reads the time cached at its
                // start, TIME the time of the call, and on a cluster these
                // TIMEs come from whichever node answers.
                assert!(
                    (before + 3_600_000 - SLACK_MS..=after + 3_600_000 + SLACK_MS).contains(&until),
                    "throttle round {round}: window ends {until}, Redis time {before}..{after} + 1 h"
                );
            }
        }
        assert_eq!(count(&sent, |s| matches!(s, Sent::Dropped { .. })), SENDERS - 1);

        // Pending for a minute while they race: each send replaces it.
        let id = format!("d-{round}");
        let name = id.clone();
        let sent = race(queue, move |q, i| {
            q.send(format!("d{i}"))
                .id(name.as_str())
                .debounce(Duration::from_secs(60))
        })
        .await;
        assert_eq!(
            count(&sent, |s| matches!(s, Sent::Stored(_))),
            1,
            "debounce round {round}: {sent:?}"
        );
        assert_eq!(
            count(&sent, |s| matches!(s, Sent::Replaced(_))),
            SENDERS - 1,
            "{sent:?}"
        );
        let info = queue.get(&id).await.unwrap().expect("the debounced message");
        assert_eq!(info.state, MessageState::Pending);
        let due = ms_of(info.due.expect("due time"));
        let last = redis_ms(client).await;
        assert!(due > last + 50_000, "due {due}: a minute after the last send ({last})");

        // Replaces of the pending message: all of them land, one after the other.
        let name = id.clone();
        let sent = race(queue, move |q, i| q.replace(name.as_str(), format!("r{i}"))).await;
        assert_eq!(count(&sent, |s| matches!(s, Sent::Replaced(_))), SENDERS, "{sent:?}");
        let info = queue.get(&id).await.unwrap().expect("the replaced message");
        assert_eq!(
            ms_of(info.due.unwrap()),
            due,
            "a replace without a time keeps the due time"
        );
        assert!(queue.reschedule(&id, Duration::ZERO).await.unwrap());
        debounced.push((id, info.payload));
    }

    let log = Log::default();
    let consumer = queue.start_consume(acking(&log)).await.unwrap();
    let want = ROUNDS * 3;
    assert!(
        wait_until(WAIT, || log.len() >= want).await,
        "{} of {want} delivered",
        log.len()
    );
    let counts = log.counts();
    assert_eq!(counts.len(), want, "every id delivered: {counts:?}");
    assert!(counts.values().all(|&n| n == 1), "each once: {counts:?}");
    let deliveries = log.snapshot();
    for (id, payload) in &debounced {
        let got = deliveries.iter().find(|d| d.0.as_str() == id).unwrap();
        assert_eq!(&got.3, payload, "{id} delivered with the payload Redis held last");
    }
    // Acked: a unique window now runs from the ack, a throttle window from the send.
    let mut acked = false;
    for _ in 0..1_500 {
        if queue.counts().await.unwrap().processing == 0 {
            acked = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(acked, "acks did not land within 30 s");
    consumer.shutdown().await.unwrap();
    for round in 0..ROUNDS {
        let refused = queue.send("again").id(format!("u-{round}")).unique_for(HOUR).await;
        assert!(
            matches!(refused, Err(Error::Duplicate { until: Some(_), .. })),
            "unique u-{round} after its ack: {refused:?}"
        );
        let refused = queue.send("again").id(format!("t-{round}")).throttle(HOUR).await;
        assert!(
            matches!(refused, Err(Error::Duplicate { until: Some(_), .. })),
            "{refused:?}"
        );
        let again = queue
            .send("again")
            .id(format!("d-{round}"))
            .debounce(Duration::from_secs(60))
            .outcome()
            .await;
        assert!(
            matches!(again, Ok(Sent::Stored(_))),
            "debounce after the ack is a new message: {again:?}"
        );
    }
    let report = queue.check_integrity().await.unwrap();
    assert!(report.is_clean(), "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixteen_senders_of_one_id_on_one_redis() {
    let server = RedisServer::start().await;
    let client = server.client().await;
    let queue = DelayQueue::builder("races", client.clone())
        .fetch_interval(Duration::from_millis(50))
        .build()
        .unwrap();
    every_race(&client, &queue).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixteen_senders_of_one_id_on_a_cluster() {
    let cluster = RedisCluster::start(3).await;
    let client = cluster.client().await;
    for node in 0..3 {
        let name = cluster.queue_on(node, "races");
        let queue = DelayQueue::builder(name.as_str(), client.clone())
            .fetch_interval(Duration::from_millis(50))
            .build()
            .unwrap();
        every_race(&client, &queue).await;
    }
}

/// A unique_for marker whose message vanished without finishing (deleted
/// by something else) never starts its window: the integrity check names
/// it, and a marker whose window runs is no anomaly.
#[tokio::test]
async fn the_integrity_check_names_a_marker_left_without_its_message() {
    let server = RedisServer::start().await;
    let client = server.client().await;
    let queue = DelayQueue::builder("orphans", client.clone()).build().unwrap();
    for id in ["kept", "lost", "done"] {
        queue.send("x").id(id).delay(HOUR).unique_for(HOUR).await.unwrap();
    }
    assert!(queue.cancel("done").await.unwrap());
    let _: i64 = client
        .custom(fred::cmd!("ZREM"), vec!["dq:{orphans}:pending", "lost"])
        .await
        .unwrap();
    let _: i64 = client
        .custom(fred::cmd!("DEL"), vec!["dq:{orphans}:m:lost"])
        .await
        .unwrap();
    let report = queue.check_integrity().await.unwrap();
    assert_eq!(
        report.anomalies,
        vec![delayqueue::Anomaly::OrphanMarker { id: "lost".into() }],
        "{report}"
    );
}

/// The CLI under libfaketime, its clock `offset` off.
fn cli(server: &RedisServer, offset: &str, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_delayqueue"))
        .arg("--url")
        .arg(server.url())
        .args(args)
        .env("LD_PRELOAD", helpers::worker::libfaketime())
        .env("FAKETIME", offset)
        .env("FAKETIME_DONT_RESET", "1")
        .output()
        .expect("run the CLI")
}

/// Windows and due times are Redis's: producers an hour ahead and an hour
/// behind send, debounce and refuse exactly as one on time does.
#[tokio::test]
async fn a_producer_clock_an_hour_off_changes_nothing() {
    let server = RedisServer::start().await;
    let client = server.client().await;
    let queue = DelayQueue::builder("skew", client.clone()).build().unwrap();
    for (offset, id) in [("+1h", "ahead"), ("-1h", "behind")] {
        let sent = cli(
            &server,
            offset,
            &["send", "skew", "one", "--id", id, "--throttle", "10m"],
        );
        assert!(sent.status.success(), "{offset}: {sent:?}");
        let before = redis_ms(&client).await;
        let refused = cli(
            &server,
            offset,
            &["send", "skew", "two", "--id", id, "--throttle", "10m"],
        );
        assert_eq!(refused.status.code(), Some(1), "{offset}: {refused:?}");
        let refused = queue.send("three").id(id).throttle(HOUR).await;
        let Err(Error::Duplicate { until: Some(until), .. }) = refused else {
            panic!("{offset}: {refused:?}");
        };
        let left = ms_of(until) as i64 - before as i64;
        assert!(
            (590_000..=600_000 + SLACK_MS as i64).contains(&left),
            "{offset}: window ends {left} ms after Redis's now"
        );

        let debounced = format!("{id}-debounced");
        for payload in ["d1", "d2"] {
            let out = cli(
                &server,
                offset,
                &["send", "skew", payload, "--id", &debounced, "--debounce", "30s"],
            );
            assert!(out.status.success(), "{offset}: {out:?}");
        }
        let now = redis_ms(&client).await;
        let info = queue.get(&debounced).await.unwrap().expect("pending");
        assert_eq!(info.payload, b"d2");
        let due = ms_of(info.due.unwrap()) as i64 - now as i64;
        assert!(
            (25_000..=30_000).contains(&due),
            "{offset}: due {due} ms after Redis's now"
        );
    }
}

/// Groups and dedup together (docs/groups.md, docs/dedup.md): a grouped
/// message sent with unique_for is served through its group, and its ack
/// both frees the group and starts the window that refuses a resend; a
/// debounced grouped message keeps its group through every fold and is
/// delivered from it with its last payload.
#[tokio::test]
async fn grouped_messages_keep_their_windows_and_their_groups() {
    let server = RedisServer::start().await;
    let client = server.client().await;
    let queue = DelayQueue::builder("grouped", client.clone())
        .fetch_interval(Duration::from_millis(50))
        .build()
        .unwrap();
    queue.send("u").id("u").group("A").unique_for(HOUR).await.unwrap();
    for i in 0..3 {
        let sent = queue
            .send(format!("d{i}"))
            .id("d")
            .group("B")
            .debounce(Duration::from_secs(60))
            .outcome()
            .await
            .unwrap();
        if i == 0 {
            assert!(matches!(sent, Sent::Stored(_)), "{sent:?}");
        } else {
            assert!(matches!(sent, Sent::Replaced(_)), "{sent:?}");
        }
    }
    let info = queue.get("d").await.unwrap().expect("the debounced message");
    assert_eq!(info.state, MessageState::Pending);
    assert_eq!(info.group.as_deref(), Some("B"), "folded, it keeps its group");
    assert!(queue.reschedule("d", Duration::ZERO).await.unwrap());

    let log = Log::default();
    let consumer = queue.start_consume(acking(&log)).await.unwrap();
    assert!(
        wait_until(WAIT, || log.len() >= 2).await,
        "{} of 2 delivered",
        log.len()
    );
    let deliveries = log.snapshot();
    let d = deliveries.iter().find(|d| d.0.as_str() == "d").expect("d delivered");
    assert_eq!(d.3, b"d2", "with the payload Redis held last");
    // Both acks landed: no group has a message in processing or waiting.
    let mut idle = false;
    for _ in 0..1_500 {
        let c = queue.counts().await.unwrap();
        if c.processing == 0 && queue.groups(0, 10).await.unwrap().items.is_empty() {
            idle = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(idle, "acks did not land within 30 s");
    consumer.shutdown().await.unwrap();
    assert_eq!(log.len(), 2, "each once");

    let refused = queue.send("again").id("u").group("A").unique_for(HOUR).await;
    assert!(
        matches!(refused, Err(Error::Duplicate { until: Some(_), .. })),
        "the window runs from the ack: {refused:?}"
    );
    let report = queue.check_integrity().await.unwrap();
    assert!(report.is_clean(), "{report}");
}

/// A message that is due but not yet moved out of pending (no consumer
/// runs) is due for everyone: a replace fails with `NotPending { live:
/// true }`, a debounce is a duplicate, nothing is written, and `get`
/// names it ready as `counts` counts it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_due_message_no_consumer_moved_yet_is_neither_replaced_nor_debounced() {
    let server = RedisServer::start().await;
    let client = server.client().await;
    let queue = DelayQueue::builder("due", client.clone()).build().unwrap();
    queue.send("a").id("due").await.unwrap();
    let replaced = queue.replace("due", "b").await;
    assert!(
        matches!(replaced, Err(Error::NotPending { live: true, .. })),
        "{replaced:?}"
    );
    let debounced = queue.send("c").id("due").debounce(Duration::from_secs(60)).await;
    assert!(matches!(debounced, Err(Error::Duplicate { .. })), "{debounced:?}");
    let info = queue.get("due").await.unwrap().expect("live");
    assert_eq!(info.payload, b"a", "nothing written");
    let counts = queue.counts().await.unwrap();
    assert_eq!(
        (info.state, counts.pending, counts.ready),
        (MessageState::Ready, 0, 1),
        "get names it as counts counts it"
    );
}
