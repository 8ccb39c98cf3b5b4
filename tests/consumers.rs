//! The registry of live consumers (docs/operations.md, "Live consumers"):
//! worker processes (`examples/worker.rs`) listed with what they run, a
//! SIGKILLed one gone once its heartbeat's TTL passes, one shut down
//! gone at once; a Worker over several queues; the consumers of a process
//! in one entry; entries of another version
//! or another writer skipped with the reason.

mod helpers;
use delayqueue_test_support as support;

use std::time::{Duration, Instant};

use delayqueue::{ConsumerInfo, DelayQueue, HandlerError, LiveConsumers, Message, Worker};
use helpers::worker::{Worker as Process, WorkerOptions};
use support::{wait_for, RawReply, RedisServer, WAIT};

/// The workers' heartbeat in these tests; their entries live three times as long.
const HEARTBEAT_MS: u64 = 300;
const TTL: Duration = Duration::from_millis(3 * HEARTBEAT_MS);

fn of_pid(all: &LiveConsumers, pid: u32) -> Option<&ConsumerInfo> {
    all.consumers.iter().find(|c| c.pid == pid)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkilled_worker_drops_out_within_its_ttl() {
    helpers::worker::worker_bin();
    let server = RedisServer::start().await;
    let client = server.client().await;
    let queue = DelayQueue::builder("jobs", client.clone()).build().unwrap();
    let (url, dir) = (server.url(), server.dir().to_path_buf());
    let opts = |name: &str| WorkerOptions {
        concurrency: 2,
        // Long handlers: the messages are running when the registry is read.
        handler_ms: 60_000,
        max_consume_ms: 120_000,
        heartbeat_ms: Some(HEARTBEAT_MS),
        ..WorkerOptions::new(&url, "jobs", &dir, name)
    };
    let mut victim = Process::spawn(opts("victim")).await;
    let mut survivor = Process::spawn(opts("survivor")).await;
    let (victim_pid, survivor_pid) = (victim.pid().unwrap(), survivor.pid().unwrap());
    for i in 0..4 {
        queue.send(format!("m{i}")).id(format!("m{i}")).await.unwrap();
    }
    // Both listed, each running its two messages (they run for a minute).
    let both_busy = wait_for(WAIT, || {
        let queue = queue.clone();
        async move {
            let seen = queue.consumers().await.unwrap();
            [victim_pid, survivor_pid]
                .iter()
                .all(|pid| of_pid(&seen, *pid).is_some_and(|c| c.running.len() == 2))
        }
    })
    .await;
    let seen = queue.consumers().await.unwrap();
    assert!(both_busy, "{seen:#?}");
    let c = of_pid(&seen, victim_pid).unwrap();
    assert_eq!(c.version, env!("CARGO_PKG_VERSION"));
    assert_eq!((c.concurrency, c.running_total, c.queues_total), (2, 2, 1));
    assert_eq!((c.queues[0].name.as_str(), c.queues[0].weight), ("jobs", 1));
    assert_eq!(c.ttl_ms, TTL.as_millis() as u64);
    assert!(!c.host.is_empty() && c.started_ms <= c.heartbeat_ms);
    for m in &c.running {
        assert!(m.id.starts_with('m') && m.queue == "jobs" && m.attempt == 1, "{m:?}");
        assert!(m.since_ms >= c.started_ms && m.since_ms <= c.heartbeat_ms, "{m:?}");
    }
    assert!(seen.skipped.is_empty(), "{:?}", seen.skipped);

    // SIGKILL: no clean stop, so the entry lives until its TTL passes.
    victim.kill();
    let killed = Instant::now();
    let gone = wait_for(WAIT, || {
        let queue = queue.clone();
        async move { of_pid(&queue.consumers().await.unwrap(), victim_pid).is_none() }
    })
    .await;
    let took = killed.elapsed();
    assert!(gone, "a killed worker still listed after {WAIT:?}");
    println!("CONSUMERS killed worker dropped out after {took:?} (TTL {TTL:?})");
    // Its last heartbeat was at most one interval before the kill: out by
    // one TTL after the kill, plus slack for a loaded machine.
    assert!(took <= TTL + Duration::from_secs(5), "{took:?}");
    let after = queue.consumers().await.unwrap();
    assert!(of_pid(&after, survivor_pid).is_some(), "the live one stays: {after:#?}");
    assert_eq!(after.live, 1);

    // (A clean stop, which waits for these minute-long handlers, is the next test's.)
    survivor.kill();
    let no_one = wait_for(WAIT, || {
        let client = client.clone();
        async move { delayqueue::consumers(&client, "dq:").await.unwrap().live == 0 }
    })
    .await;
    assert!(no_one);
    // Nothing leaks: the entries, and then the index, expire.
    let registry_keys = || server.raw_reply(&["KEYS", "dq:{#consumers}*"]);
    let none_left = support::wait_until(
        WAIT,
        || matches!(registry_keys(), RawReply::Array(keys) if keys.is_empty()),
    )
    .await;
    assert!(none_left, "{}", registry_keys().render());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_shutdown_removes_the_entry_at_once() {
    let server = RedisServer::start().await;
    let client = server.client().await;
    let a = DelayQueue::builder("a", client.clone()).build().unwrap();
    let b = DelayQueue::builder("b", client.clone()).shards(2).build().unwrap();
    let ok = |_m: Message| async { Ok::<(), HandlerError>(()) };
    let consumer = Worker::new()
        .queue(&a, 3, ok)
        .queue(&b, 1, ok)
        .concurrency(5)
        .start()
        .await
        .unwrap();
    let listed = wait_for(WAIT, || {
        let b = b.clone();
        async move { b.consumers().await.unwrap().consumers.len() == 1 }
    })
    .await;
    let seen = b.consumers().await.unwrap();
    assert!(listed, "{seen:#?}");
    let c = &seen.consumers[0];
    assert_eq!(c.pid, std::process::id());
    assert_eq!(c.concurrency, 5);
    let queues: Vec<(&str, u64, usize)> = c.queues.iter().map(|q| (q.name.as_str(), q.weight, q.shards)).collect();
    assert_eq!(queues, [("a", 3, 1), ("b", 1, 2)]);
    // The default heartbeat: 5 s, its entry living 15 s.
    assert_eq!(c.ttl_ms, 15_000);
    let other = DelayQueue::builder("other", client.clone()).build().unwrap();
    assert!(other.consumers().await.unwrap().consumers.is_empty());

    consumer.shutdown().await.unwrap();
    let after = delayqueue::consumers(&client, "dq:").await.unwrap();
    assert_eq!((after.live, after.consumers.len()), (0, 0), "{after:#?}");
}

/// The consumers of one client in a process share one entry (one
/// heartbeat per process, not per queue): it lists every queue of them,
/// loses a queue when its consumer stops, and goes with the last.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_consumers_of_a_process_share_one_entry() {
    let server = RedisServer::start().await;
    let client = server.client().await;
    let ok = |_m: Message| async { Ok::<(), HandlerError>(()) };
    let queues: Vec<DelayQueue> = (0..20)
        .map(|i| {
            DelayQueue::builder(format!("q{i}"), client.clone())
                .concurrency(2)
                .build()
                .unwrap()
        })
        .collect();
    let mut consumers = Vec::new();
    for q in &queues {
        consumers.push(q.start_consume(ok).await.unwrap());
    }
    let names = |all: &LiveConsumers| -> Vec<Vec<String>> {
        all.consumers
            .iter()
            .map(|c| c.queues.iter().map(|q| q.name.clone()).collect())
            .collect()
    };
    let all_listed = wait_for(WAIT, || {
        let client = client.clone();
        async move {
            let all = delayqueue::consumers(&client, "dq:").await.unwrap();
            all.consumers.len() == 1 && all.consumers[0].queues_total == 20
        }
    })
    .await;
    let seen = delayqueue::consumers(&client, "dq:").await.unwrap();
    assert!(all_listed, "{seen:#?}");
    assert_eq!(seen.live, 1);
    assert_eq!(seen.consumers[0].concurrency, 40);
    // Every queue's own listing finds the one entry.
    assert_eq!(queues[19].consumers().await.unwrap().consumers.len(), 1);

    // The first consumer stops: the entry stays, without its queue.
    consumers.remove(0).shutdown().await.unwrap();
    let without = wait_for(WAIT, || {
        let client = client.clone();
        async move {
            let all = delayqueue::consumers(&client, "dq:").await.unwrap();
            all.consumers.len() == 1 && all.consumers[0].queues_total == 19
        }
    })
    .await;
    let seen = delayqueue::consumers(&client, "dq:").await.unwrap();
    assert!(without, "{seen:#?}");
    assert!(!names(&seen)[0].contains(&"q0".to_string()), "{seen:#?}");
    assert!(queues[0].consumers().await.unwrap().consumers.is_empty());

    for c in consumers {
        c.shutdown().await.unwrap();
    }
    let after = delayqueue::consumers(&client, "dq:").await.unwrap();
    assert_eq!((after.live, after.consumers.len()), (0, 0), "{after:#?}");
    // A consumer started after the last one stopped has an entry of its own.
    let again = queues[1].start_consume(ok).await.unwrap();
    let back = wait_for(WAIT, || {
        let q = queues[1].clone();
        async move { q.consumers().await.unwrap().consumers.len() == 1 }
    })
    .await;
    assert!(back);
    assert_ne!(
        queues[1].consumers().await.unwrap().consumers[0].id,
        seen.consumers[0].id
    );
    again.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entries_of_another_version_or_writer_are_skipped_with_the_reason() {
    let server = RedisServer::start().await;
    let client = server.client().await;
    let later = (u64::MAX / 2).to_string();
    let entries: [(&str, &[&str]); 5] = [
        (
            "old",
            &["SET", "dq:{#consumers}:consumer:old", r#"{"host":"h","pid":1}"#],
        ),
        ("v9", &["SET", "dq:{#consumers}:consumer:v9", r#"{"v":9}"#]),
        ("junk", &["SET", "dq:{#consumers}:consumer:junk", "\u{1b}[2J not json"]),
        ("hash", &["HSET", "dq:{#consumers}:consumer:hash", "f", "v"]),
        ("huge", &["SETRANGE", "dq:{#consumers}:consumer:huge", "1000000", "x"]),
    ];
    for (id, write) in entries {
        server.raw_command(write);
        server.raw_command(&["ZADD", "dq:{#consumers}:consumers", &later, id]);
    }
    let all = delayqueue::consumers(&client, "dq:").await.unwrap();
    assert!(all.consumers.is_empty());
    assert_eq!(all.live, 5);
    let mut reasons: Vec<(String, String)> = all.skipped.into_iter().map(|s| (s.id, s.reason)).collect();
    reasons.sort();
    let expect = [
        ("hash", "no string"),
        ("huge", "1000001 bytes, over the 65536 read"),
        ("junk", "not a JSON entry"),
        ("old", "no entry version"),
        ("v9", "entry version 9, this client reads 1"),
    ];
    for ((id, reason), (want_id, want)) in reasons.iter().zip(expect) {
        assert_eq!(id, want_id);
        assert!(reason.contains(want), "{id}: {reason}");
    }
    assert_eq!(reasons.len(), expect.len());
}
