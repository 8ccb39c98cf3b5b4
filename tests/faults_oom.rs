//! Fault: Redis full (`maxmemory` reached with `noeviction`).
//!
//! A send that Redis refuses must fail whole with `Error::OutOfMemory` and
//! write nothing; a consumer that runs throughout keeps consuming, and by
//! acking frees the memory that lets sends succeed again. Every message
//! whose send returned `Ok` is handled; none is lost.

mod helpers;
use delayqueue_test_support as support;

use std::collections::HashSet;
use std::time::{Duration, Instant, SystemTime};

use delayqueue::{Counts, Error, MessageId, NewMessage};
use helpers::{acking, start_queue_with, wait_stats, Log};
use support::logs::Logs;
use support::{wait_until, RawReply, RedisServer, ServerOptions, WAIT};

/// Payload size of the messages that fill Redis.
const PAYLOAD: usize = 4 * 1024;
/// Upper bound on fill sends; 3 MB of Redis holds far fewer 4 KiB messages.
const MAX_FILL: usize = 5_000;

/// The names of the payload keys of queue `oom`.
fn msg_keys(server: &RedisServer, pattern: &str) -> Vec<String> {
    match server.raw_reply(&["KEYS", pattern]) {
        RawReply::Array(keys) => keys.iter().map(RawReply::render).collect(),
        other => panic!("KEYS gave {other:?}"),
    }
}

/// A field of `INFO memory`.
fn memory_info(server: &RedisServer, field: &str) -> String {
    let info = server.raw_command(&["INFO", "memory"]);
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .map(|v| v.trim().to_string())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_full_refuses_sends_whole_and_a_running_consumer_drains_it() {
    let opts = ServerOptions {
        maxmemory: Some("3mb".into()),
        maxmemory_policy: Some("noeviction".into()),
        ..Default::default()
    };
    let (server, _client, q) = start_queue_with(opts, "oom", Duration::from_millis(100), |b| b.concurrency(8)).await;
    let logs = Logs::capture("oom");
    let log = Log::default();
    // Runs from before the first send to after the last.
    let consumer = q.start_consume(acking(&log)).await.unwrap();
    let payload = vec![b'p'; PAYLOAD];
    let mut ok: Vec<MessageId> = Vec::new();
    let mut refused = 0usize;

    // 1. Fill with messages all due at one moment, long after the test
    //    (step 3 makes them due), so none is due during the checks below
    //    however slow the machine.
    let due = SystemTime::now() + Duration::from_secs(3600);
    let mut first_refusal = None;
    for _ in 0..MAX_FILL {
        match q.send(payload.clone()).at(due).await {
            Ok(id) => ok.push(id),
            Err(e) => {
                first_refusal = Some(e);
                break;
            }
        }
    }
    let err = first_refusal.unwrap_or_else(|| panic!("{MAX_FILL} sends of {PAYLOAD} bytes fit into 3 MB"));
    refused += 1;
    match &err {
        Error::OutOfMemory { queue, detail } => assert!(queue == "oom" && detail.starts_with("OOM"), "{detail}"),
        other => panic!("a send into a full Redis gave {other:?}, not OutOfMemory"),
    }
    let used_at_refusal = memory_info(&server, "used_memory_human");

    // 2. Nothing half-written: exactly the accepted messages are stored,
    //    each whole (a pending entry and a payload key). Nothing is due yet.
    let s = q.counts().await.unwrap();
    assert_eq!((s.pending, s.live(), s.dead), (ok.len() as u64, ok.len() as u64, 0));
    assert_eq!(msg_keys(&server, "dq:{oom}:m:*").len(), ok.len());
    assert!(log.is_empty());
    // A batch, and sends with caller-given ids, are refused whole too.
    let batch = (0..10).map(|i| NewMessage::new("small").id(format!("batch-{i}")));
    match q.send_batch(batch).await {
        Err(Error::OutOfMemory { .. }) => refused += 1,
        other => panic!("a batch into a full Redis gave {other:?}"),
    }
    assert!(msg_keys(&server, "dq:{oom}:m:batch-*").is_empty());
    assert_eq!(q.counts().await.unwrap().pending, ok.len() as u64);

    // 3. Keep sending while the consumer, which never stopped, drains the
    //    queue once it is due: refused until acks free memory, then accepted.
    //    A full Redis still takes a reschedule (it adds nothing).
    for id in &ok {
        assert!(q.reschedule(id, Duration::ZERO).await.unwrap(), "{id}");
    }
    let mut refused_ids: Vec<String> = Vec::new();
    let mut accepted_after = 0usize;
    let drain_started = Instant::now();
    let mut i = 0usize;
    while accepted_after < 50 {
        assert!(
            drain_started.elapsed() < 2 * WAIT,
            "sends never succeeded again: {} of {} handled, {refused} refused",
            log.ids().len(),
            ok.len()
        );
        let id = format!("later-{i}");
        i += 1;
        match q.send(payload.clone()).id(id.as_str()).await {
            Ok(id) => {
                ok.push(id);
                accepted_after += 1;
            }
            Err(Error::OutOfMemory { .. }) => {
                refused += 1;
                refused_ids.push(id);
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(e) => panic!("send while full gave {e:?}"),
        }
    }

    // 4. Every accepted message is handled; no refused one exists or is delivered.
    let accepted: HashSet<MessageId> = ok.iter().cloned().collect();
    assert_eq!(accepted.len(), ok.len());
    assert!(
        wait_until(2 * WAIT, || accepted.is_subset(&log.ids())).await,
        "{} of {} handled",
        accepted.intersection(&log.ids()).count(),
        accepted.len()
    );
    assert_eq!(wait_stats(&q, WAIT, Counts::default()).await, Counts::default());
    tokio::time::sleep(Duration::from_millis(200)).await;
    let handled = log.ids();
    let lost = accepted.difference(&handled).count();
    assert!(refused_ids
        .iter()
        .all(|id| !handled.contains(&MessageId::from(id.as_str()))));
    assert!(handled.is_subset(&accepted), "delivered something that was refused");
    assert!(msg_keys(&server, "dq:{oom}:m:*").is_empty());
    consumer.shutdown().await.unwrap();
    let report = q.check_integrity().await.unwrap();
    assert!(report.is_clean(), "{report}");
    assert!(support::all_keys(&server.client().await).await.is_empty());
    // The consumer's scripts are allowed under OOM: not one of its calls failed.
    let warnings = logs.warnings();
    assert!(
        warnings.is_empty(),
        "the consumer had trouble while Redis was full:\n{}",
        warnings.join("\n")
    );
    println!(
        "oom: maxmemory=3mb payload={PAYLOAD} used_memory_at_refusal={used_at_refusal} filled={} deliveries={}",
        ok.len() - accepted_after,
        log.len()
    );
    println!(
        "FAULT scenario=oom sent_ok={} refused={refused} handled={} lost={lost}",
        ok.len(),
        handled.len()
    );
    assert_eq!(lost, 0);
}
