//! Consumer behaviour under retries, timeouts, cancels, shutdown and Redis trouble,
//! each against a private redis-server.

mod helpers;
use delayqueue_test_support as support;

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use delayqueue::{Counts, Error, HandlerError, Message};
use fred::prelude::*;
use helpers::{acking, queue_builder, recording, start_queue, start_queue_with, wait_stats, Log};
use support::{all_keys, wait_until, RedisServer, ServerOptions, WAIT};

/// How often the consumers in these tests poll.
const FETCH_INTERVAL: Duration = Duration::from_millis(50);

#[tokio::test]
async fn nack_redelivers_after_the_nack_delay() {
    let (_server, client, q) = start_queue("nack", FETCH_INTERVAL, |b| {
        b.nack_redelivery_delay(Duration::from_millis(400))
    })
    .await;
    let log = Log::default();
    let consumer = q
        .start_consume(recording(&log, |msg: Message| async move {
            if msg.attempt() == 1 {
                Err("first try fails".into())
            } else {
                Ok(())
            }
        }))
        .await
        .unwrap();
    let id = q.send("x").await.unwrap();
    assert!(wait_until(WAIT, || log.len() == 2).await);
    let log = log.snapshot();
    assert_eq!((log[0].0.clone(), log[0].1, log[1].1), (id, 1, 2));
    let gap = log[1].2 - log[0].2;
    assert!(gap >= Duration::from_millis(390), "redelivered after {gap:?}");
    assert_eq!(wait_stats(&q, WAIT, Counts::default()).await, Counts::default());
    consumer.shutdown().await.unwrap();
    assert!(all_keys(&client).await.is_empty());
}

/// A retry's `due_at` is its failure plus the backoff, so a handler's
/// lateness (`now - due_at`) is this delivery's; `first_due_at` is the send's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_is_due_at_its_failure_plus_its_backoff() {
    let backoff = Duration::from_millis(300);
    let (_server, _client, q) = start_queue("due", FETCH_INTERVAL, |b| b.nack_redelivery_delay(backoff)).await;
    // (attempt, due_at, first_due_at, handler start, handler end) per delivery.
    type Seen = (u32, SystemTime, SystemTime, SystemTime, SystemTime);
    let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let record = seen.clone();
    let consumer = q
        .start_consume(move |msg: Message| {
            let record = record.clone();
            async move {
                let start = SystemTime::now();
                let end = SystemTime::now();
                record
                    .lock()
                    .unwrap()
                    .push((msg.attempt(), msg.due_at(), msg.first_due_at(), start, end));
                if msg.attempt() == 1 {
                    Err::<(), HandlerError>("first try fails".into())
                } else {
                    Ok(())
                }
            }
        })
        .await
        .unwrap();
    q.send("x").await.unwrap();
    assert!(wait_until(WAIT, || seen.lock().unwrap().len() == 2).await);
    let seen = seen.lock().unwrap().clone();
    let [(1, due1, first1, _, failed), (2, due2, first2, start2, _)] = seen[..] else {
        panic!("{seen:?}");
    };
    assert_eq!(
        (first1, first2),
        (due1, due1),
        "first_due_at is the send's on every delivery"
    );
    // Redis's clock counts whole ms: allow one.
    let tick = Duration::from_millis(1);
    assert!(
        due2 + tick >= failed + backoff,
        "the retry is due {:?} after the failure, not at least the backoff {backoff:?}",
        due2.duration_since(failed).unwrap_or_default()
    );
    let late = start2.duration_since(due2).unwrap_or_default();
    assert!(
        late < Duration::from_millis(250),
        "the retry ran {late:?} after its due time"
    );
    consumer.shutdown().await.unwrap();
}

#[tokio::test]
async fn slow_handler_is_cut_at_the_visibility_timeout_and_redelivered() {
    let (_server, _client, q) = start_queue("slow", FETCH_INTERVAL, |b| {
        b.max_consume_duration(Duration::from_millis(300))
    })
    .await;
    let log = Log::default();
    let consumer = q
        .start_consume(recording(&log, |msg: Message| async move {
            // Longer than the test waits: only a cut lets attempt 2 start
            // (one handler at a time), however slow the machine is.
            if msg.attempt() == 1 {
                tokio::time::sleep(WAIT * 4).await;
            }
            Ok(())
        }))
        .await
        .unwrap();
    let sent = Instant::now();
    q.send("x").await.unwrap();
    assert!(wait_until(WAIT, || log.len() == 2).await, "attempt 1 was not cut");
    let log = log.snapshot();
    assert_eq!((log[0].1, log[1].1), (1, 2));
    // Not before the lease (taken after the send) ran out; 10 ms for the
    // difference between Redis' clock and ours.
    let gap = log[1].2 - sent;
    assert!(gap >= Duration::from_millis(290), "redelivered after {gap:?}");
    assert_eq!(wait_stats(&q, WAIT, Counts::default()).await, Counts::default());
    consumer.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn late_ack_after_redelivery_is_fenced() {
    let (_server, client, q) = start_queue("fence", FETCH_INTERVAL, |b| {
        b.max_consume_duration(Duration::from_millis(300))
    })
    .await;
    let log = Log::default();
    // Consumer A blocks its thread past the lease (so the time limit cannot
    // cut it) until B holds the redelivery, then returns Ok: its ack comes
    // late. With its one handler busy A claims nothing, so only B can take
    // the redelivery; block_in_place moves A's other tasks to another thread.
    let (release_a, a_held) = std::sync::mpsc::channel::<()>();
    let a_held = Arc::new(Mutex::new(a_held));
    let a = q
        .start_consume(recording(&log, move |msg: Message| {
            let a_held = a_held.clone();
            async move {
                if msg.attempt() == 1 {
                    let _ = tokio::task::block_in_place(|| a_held.lock().unwrap().recv_timeout(WAIT));
                }
                Ok(())
            }
        }))
        .await
        .unwrap();
    let id = q.send("x").await.unwrap();
    assert!(wait_until(WAIT, || log.len() == 1).await);
    // A stops claiming now but finishes (and late-acks) its delivery.
    let a = tokio::spawn(a.shutdown());
    // Consumer B takes the redelivery and holds it until told, within a lease
    // longer than the test (were it cut, the retry would go elsewhere).
    let b_log = Log::default();
    let release_b = Arc::new(tokio::sync::Notify::new());
    let b_queue = queue_builder("fence", &client, FETCH_INTERVAL)
        .max_consume_duration(WAIT * 4)
        .build()
        .unwrap();
    let b_held = release_b.clone();
    let b = b_queue
        .start_consume(recording(&b_log, move |_msg: Message| {
            let b_held = b_held.clone();
            async move {
                let _ = tokio::time::timeout(WAIT, b_held.notified()).await;
                Ok(())
            }
        }))
        .await
        .unwrap();
    assert!(
        wait_until(WAIT, || b_log.len() == 1).await,
        "B never got the redelivery"
    );
    assert_eq!(b_log.snapshot()[0].1, 2);
    // A's shutdown returns once its late ack was sent; the message B holds
    // must be intact.
    release_a.send(()).unwrap();
    a.await.unwrap().unwrap();
    let s = q.counts().await.unwrap();
    assert_eq!(s.processing, 1, "late ack deleted the redelivered message: {s:?}");
    let payload: Option<String> = client.get(format!("dq:{{fence}}:m:{id}")).await.unwrap();
    // Stored as "<retry count>/<sent at>+<delay>:<payload>".
    let payload = payload.unwrap_or_default();
    assert!(payload.starts_with("3/") && payload.ends_with("+0:x"), "{payload}");
    release_b.notify_one();
    assert_eq!(wait_stats(&q, WAIT, Counts::default()).await, Counts::default());
    assert_eq!(log.len(), 1, "A got a second copy");
    b.shutdown().await.unwrap();
    assert!(all_keys(&client).await.is_empty());
}

#[tokio::test]
async fn cancel_pending_processing_and_unknown() {
    let (_server, client, q) = start_queue("cancel", FETCH_INTERVAL, |b| b).await;
    // Sent and cancelled before a consumer runs, so however slow the
    // machine, `later` is still pending when cancelled.
    let later_due = Instant::now() + Duration::from_millis(400);
    let later = q.send("later").delay(Duration::from_millis(400)).await.unwrap();
    assert!(q.cancel(&later).await.unwrap(), "pending message not cancelled");
    assert!(!q.cancel(&later).await.unwrap(), "cancelled twice");
    let log = Log::default();
    let release = Arc::new(tokio::sync::Notify::new());
    let held = release.clone();
    let consumer = q
        .start_consume(recording(&log, move |_msg: Message| {
            let held = held.clone();
            async move {
                let _ = tokio::time::timeout(WAIT, held.notified()).await;
                Ok(())
            }
        }))
        .await
        .unwrap();
    let now = q.send("now").await.unwrap();
    assert!(wait_until(WAIT, || log.len() == 1).await);
    // `now` is being processed (its handler waits for us): cancel leaves it
    // to its delivery.
    assert!(!q.cancel(&now).await.unwrap());
    assert!(!q.cancel("never-sent").await.unwrap());
    release.notify_one();
    assert_eq!(wait_stats(&q, WAIT, Counts::default()).await, Counts::default());
    // Give a wrongly kept `later` its due time and a few sweeps to show up.
    tokio::time::sleep_until((later_due + 10 * FETCH_INTERVAL).into()).await;
    assert_eq!(log.len(), 1, "the cancelled message was delivered");
    consumer.shutdown().await.unwrap();
    assert!(all_keys(&client).await.is_empty());
}

#[tokio::test]
async fn caller_id_makes_send_idempotent() {
    let (_server, _client, q) = start_queue("idem", FETCH_INTERVAL, |b| b).await;
    let id = q
        .send("a")
        .delay(Duration::from_millis(200))
        .id("order-42")
        .await
        .unwrap();
    assert_eq!(id.as_str(), "order-42");
    match q.send("b").id("order-42").await {
        Err(Error::Duplicate { id: dup, .. }) => assert_eq!(dup, id),
        other => panic!("expected Duplicate, got {other:?}"),
    }
    assert_eq!(q.counts().await.unwrap().live(), 1);
    let log = Log::default();
    let consumer = q.start_consume(acking(&log)).await.unwrap();
    assert!(wait_until(WAIT, || log.len() == 1).await);
    assert_eq!(log.snapshot()[0].3, b"a", "the duplicate overwrote the payload");
    // Once finished, the id can be used again.
    assert_eq!(wait_stats(&q, WAIT, Counts::default()).await, Counts::default());
    q.send("c").id("order-42").await.unwrap();
    assert!(wait_until(WAIT, || log.len() == 2).await);
    consumer.shutdown().await.unwrap();
}

#[tokio::test]
async fn expired_message_is_not_delivered_and_becomes_a_dead_letter() {
    let (server, client, q) = start_queue("ttl", FETCH_INTERVAL, |b| b).await;
    let stale = q.send("stale").expire_after(Duration::from_secs(1)).await.unwrap();
    let kept = q.send("fresh").await.unwrap();
    // Until Redis's clock has passed the deadline, however late that is.
    let deadline = q.get(&stale).await.unwrap().unwrap().expires_at.expect("a deadline");
    let deadline_ms = deadline.duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
    assert!(wait_until(WAIT, || server.now_ms() > deadline_ms).await);
    let log = Log::default();
    let consumer = q.start_consume(acking(&log)).await.unwrap();
    assert!(wait_until(WAIT, || log.len() == 1).await);
    let mut dead = Counts::default();
    dead.dead = 1;
    assert_eq!(wait_stats(&q, WAIT, dead).await, dead);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(log.len(), 1);
    assert_eq!(log.snapshot()[0].0, kept);
    consumer.shutdown().await.unwrap();
    assert!(q.delete_dead(&stale).await.unwrap());
    assert!(all_keys(&client).await.is_empty(), "{:?}", all_keys(&client).await);
}

#[tokio::test]
async fn script_flush_is_survived() {
    let (server, client, q) = start_queue("flush", FETCH_INTERVAL, |b| b).await;
    let log = Log::default();
    let consumer = q.start_consume(acking(&log)).await.unwrap();
    q.send("1").await.unwrap();
    assert!(wait_until(WAIT, || log.len() == 1).await);
    for round in 0..3 {
        assert_eq!(server.raw_command(&["SCRIPT", "FLUSH"]), "OK");
        q.send("again").delay(Duration::from_millis(50)).await.unwrap();
        assert!(wait_until(WAIT, || log.len() == round + 2).await, "round {round}");
    }
    consumer.shutdown().await.unwrap();
    assert!(all_keys(&client).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_consumers_never_hold_the_same_message() {
    let (_server, client, q) = start_queue("pair", FETCH_INTERVAL, |b| b.concurrency(8)).await;
    let held = Arc::new(Mutex::new(HashSet::new()));
    let overlaps = Arc::new(AtomicUsize::new(0));
    let log = Log::default();
    let handler = |log: &Log| {
        let (held, overlaps) = (held.clone(), overlaps.clone());
        recording(log, move |msg: Message| {
            let (held, overlaps) = (held.clone(), overlaps.clone());
            async move {
                if !held.lock().unwrap().insert(msg.id().clone()) {
                    overlaps.fetch_add(1, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
                held.lock().unwrap().remove(msg.id());
                Ok(())
            }
        })
    };
    let a = q.start_consume(handler(&log)).await.unwrap();
    let b = q.start_consume(handler(&log)).await.unwrap();
    let sends = (0..1000u64).map(|i| {
        let q = q.clone();
        async move {
            q.send(i.to_string())
                .delay(Duration::from_millis(i % 300))
                .await
                .unwrap()
        }
    });
    futures::future::join_all(sends).await;
    assert!(wait_until(2 * WAIT, || log.len() >= 1000).await, "{}", log.len());
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(overlaps.load(Ordering::Relaxed), 0);
    let ids = log.ids();
    assert_eq!((ids.len(), log.len()), (1000, 1000), "lost or duplicated");
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
    assert!(all_keys(&client).await.is_empty());
}

#[tokio::test]
async fn graceful_shutdown_finishes_running_work_and_hands_back_the_rest() {
    let (_server, client, q) = start_queue("stop", FETCH_INTERVAL, |b| b.concurrency(2).fetch_limit(10)).await;
    let log = Log::default();
    let finished = Arc::new(AtomicUsize::new(0));
    let f = finished.clone();
    // Handler time is not known yet, so the first claim takes `concurrency`
    // messages; a fast first batch teaches it to claim up to fetch_limit.
    for i in 0..10 {
        q.send(format!("fast{i}")).await.unwrap();
    }
    let consumer = q
        .start_consume(recording(&log, move |msg: Message| {
            let f = f.clone();
            async move {
                if msg.payload().starts_with(b"slow") {
                    tokio::time::sleep(Duration::from_millis(400)).await;
                }
                f.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
        }))
        .await
        .unwrap();
    assert!(wait_until(WAIT, || finished.load(Ordering::Relaxed) == 10).await);
    for i in 0..10 {
        q.send(format!("slow{i}")).await.unwrap();
    }
    assert!(wait_until(WAIT, || log.len() >= 12).await);
    consumer.shutdown().await.unwrap();
    // Counted after the stop: a handler may start while it is on its way.
    let started = log.len();
    // Everything that started has finished and was acked; nothing is left claimed.
    assert_eq!(finished.load(Ordering::Relaxed), started);
    let s = q.counts().await.unwrap();
    assert_eq!(s.processing, 0, "{s:?}");
    // The rest waits: handed back to retry, in ready, or (sent just before the
    // stop, its wake-up not yet handled) still pending.
    assert_eq!(s.pending + s.ready + s.retry, 20 - started as u64, "{s:?}");
    // Handed-back messages were not charged a delivery.
    let log2 = Log::default();
    let again = q.start_consume(acking(&log2)).await.unwrap();
    assert!(wait_until(WAIT, || log2.len() == 20 - started).await);
    assert!(
        log2.snapshot().iter().all(|e| e.1 == 1),
        "attempt counted for an unstarted delivery"
    );
    again.shutdown().await.unwrap();
    assert!(all_keys(&client).await.is_empty());
}

#[tokio::test]
async fn wrong_type_key_is_a_clear_error_and_the_consumer_survives_it() {
    let (_server, client, q) = start_queue("typed", FETCH_INTERVAL, |b| b).await;
    let _: () = client
        .set("dq:{typed}:pending", "oops", None, None, false)
        .await
        .unwrap();
    let err = q.send("x").await.unwrap_err();
    assert!(matches!(err, Error::WrongType { .. }), "{err:?}");
    assert!(err.to_string().contains("wrong type"), "{err}");
    let log = Log::default();
    assert!(matches!(
        q.start_consume(acking(&log)).await,
        Err(Error::WrongType { .. })
    ));
    // Broken while running: the consumer logs, backs off, and resumes once repaired.
    let _: () = client.del("dq:{typed}:pending").await.unwrap();
    let consumer = q.start_consume(acking(&log)).await.unwrap();
    let _: () = client
        .set("dq:{typed}:pending", "oops", None, None, false)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let _: () = client.del("dq:{typed}:pending").await.unwrap();
    q.send("x").await.unwrap();
    assert!(wait_until(WAIT, || log.len() == 1).await, "consumer did not resume");
    consumer.shutdown().await.unwrap();
}

#[tokio::test]
async fn consumer_keeps_going_across_a_redis_restart() {
    let mut server = RedisServer::start_with(ServerOptions::durable()).await;
    let url = server.url();
    let client = delayqueue::connect(&url).await.unwrap();
    let q = queue_builder("restart", &client, FETCH_INTERVAL).build().unwrap();
    let log = Log::default();
    let consumer = q.start_consume(acking(&log)).await.unwrap();
    let before = q.send("before").delay(Duration::from_millis(1500)).await.unwrap();
    q.send("now").await.unwrap();
    assert!(wait_until(WAIT, || log.len() == 1).await);
    server.restart().await;
    let after = tokio::time::timeout(WAIT, async {
        loop {
            match q.send("after").await {
                Ok(id) => return id,
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    })
    .await
    .expect("send never succeeded after the restart");
    assert!(wait_until(WAIT, || log.len() == 3).await, "{}", log.len());
    let ids = log.ids();
    assert!(ids.contains(&before) && ids.contains(&after));
    consumer.shutdown().await.unwrap();
}

#[tokio::test]
async fn unreachable_redis_is_an_error_not_a_hang() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let started = Instant::now();
    let res = delayqueue::connect(&format!("redis://127.0.0.1:{port}")).await;
    assert!(matches!(res, Err(Error::Redis(_))), "{res:?}");
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[tokio::test]
async fn eviction_policy_is_warned_about() {
    use tracing_subscriber::fmt::MakeWriter;

    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    impl<'a> MakeWriter<'a> for Buf {
        type Writer = Buf;
        fn make_writer(&'a self) -> Buf {
            self.clone()
        }
    }

    let opts = ServerOptions {
        maxmemory: Some("100mb".into()),
        maxmemory_policy: Some("allkeys-lru".into()),
        ..Default::default()
    };
    let (_server, _client, q) = start_queue_with(opts, "evict", FETCH_INTERVAL, |b| b).await;
    let buf = Buf::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(buf.clone())
        .with_ansi(false)
        .finish();
    let guard = tracing::subscriber::set_default(subscriber);
    let consumer = q
        .start_consume(|_m: Message| async move { Ok::<(), HandlerError>(()) })
        .await
        .unwrap();
    drop(guard);
    consumer.shutdown().await.unwrap();
    let logs = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
    assert!(
        logs.contains("maxmemory-policy") && logs.contains("allkeys-lru"),
        "{logs}"
    );
}
