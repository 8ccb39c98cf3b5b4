//! Queue-wide limits through the public API: a global concurrency limit
//! and a rate limit hold across consumers (and shards), are kept in Redis
//! and shown by `status`; an uncounted `RetryAfter` does not use up
//! deliveries.

mod helpers;
use delayqueue_test_support as support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use delayqueue::{Event, HandlerError, Message, NewMessage, RateLimit, RetryAfter};
use helpers::{acking, start_queue, Gauge, Log};
use support::{wait_for, wait_until, WAIT};

const FETCH: Duration = Duration::from_millis(200);

#[tokio::test]
async fn global_concurrency_holds_across_consumers_and_shards() {
    const N: usize = 60;
    let (_server, client, queue) =
        start_queue("gconc", FETCH, |b| b.shards(2).concurrency(8).global_concurrency(4)).await;
    let gauge = Gauge::default();
    queue
        .send_batch((0..N).map(|i| NewMessage::new(format!("m{i}"))))
        .await
        .unwrap();
    // Two consumers of 8 handlers each, and a second handle built without
    // the limit: it obeys what Redis holds.
    let plain = helpers::queue_builder("gconc", &client, FETCH)
        .shards(2)
        .concurrency(8)
        .build()
        .unwrap();
    let a = queue
        .start_consume(gauge.handler(Duration::from_millis(20)))
        .await
        .unwrap();
    let b = plain
        .start_consume(gauge.handler(Duration::from_millis(20)))
        .await
        .unwrap();
    assert_eq!(plain.status().await.unwrap().global_concurrency, Some(4));
    assert!(wait_until(WAIT, || gauge.done() == N).await);
    let most = gauge.most();
    assert!((2..=4).contains(&most), "at most 4 at once over both consumers: {most}");
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
    // Cleared for everyone; a second clear changes nothing.
    assert!(queue.set_global_concurrency(None).await.unwrap());
    assert!(!queue.set_global_concurrency(None).await.unwrap());
    assert_eq!(plain.status().await.unwrap().global_concurrency, None);
    assert!(
        queue.set_global_concurrency(Some(1)).await.is_err(),
        "less than one per shard"
    );
}

#[tokio::test]
async fn a_rate_limit_paces_starts_across_consumers() {
    // 10 per 500 ms: 40 messages take at least 1.5 s whatever the consumers.
    const N: usize = 40;
    let per = Duration::from_millis(500);
    let (_server, _client, queue) = start_queue("rate", FETCH, |b| b.concurrency(16).rate_limit(10, per)).await;
    queue
        .send_batch((0..N).map(|i| NewMessage::new(format!("m{i}"))))
        .await
        .unwrap();
    let log = Log::default();
    let start = Instant::now();
    let a = queue.start_consume(acking(&log)).await.unwrap();
    let b = queue.start_consume(acking(&log)).await.unwrap();
    assert!(wait_until(WAIT, || log.len() == N).await, "{} delivered", log.len());
    let elapsed = start.elapsed();
    assert!(elapsed >= per * 3, "40 starts at 10 per {per:?} in {elapsed:?}");
    let status = queue.status().await.unwrap();
    assert_eq!(status.rate_limit, Some(RateLimit::new(10, per)));
    assert_eq!(status.totals.acked, N as u64);
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
    assert!(queue
        .set_rate_limit(Some(RateLimit::new(10, Duration::ZERO)))
        .await
        .is_err());
}

/// A handler sees how often it deferred a message, which its attempt
/// number, not counting deferrals, does not show.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_sees_its_deferrals_with_the_attempt_unchanged() {
    let (_server, _client, queue) = start_queue("deferrals", FETCH, |b| b).await;
    // (attempt, deferrals) of each delivery, and as `get` shows them meanwhile.
    let seen: Arc<std::sync::Mutex<Vec<(u32, u32)>>> = Arc::default();
    let shown: Arc<std::sync::Mutex<Vec<(u32, u32)>>> = Arc::default();
    let (record, show, q) = (seen.clone(), shown.clone(), queue.clone());
    let handler = move |msg: Message| {
        let (record, show, q) = (record.clone(), show.clone(), q.clone());
        async move {
            record.lock().unwrap().push((msg.attempt(), msg.deferrals()));
            let info = q.get(msg.id()).await?.expect("processing");
            assert_eq!(info.due, Some(msg.due_at()), "get shows this delivery's due time");
            show.lock().unwrap().push((info.attempts, info.deferrals));
            if msg.deferrals() < 2 {
                return Err(RetryAfter::new(Duration::from_millis(20), "429").uncounted().into());
            }
            Ok::<(), HandlerError>(())
        }
    };
    let id = queue.send("x").await.unwrap();
    let consumer = queue.start_consume(handler).await.unwrap();
    assert!(
        wait_for(WAIT, || async { queue.counts().await.unwrap().live() == 0 }).await,
        "acked in the end: {:?}",
        seen.lock().unwrap()
    );
    assert_eq!(
        *seen.lock().unwrap(),
        vec![(1, 0), (1, 1), (1, 2)],
        "(attempt, deferrals)"
    );
    assert_eq!(*shown.lock().unwrap(), vec![(1, 0), (1, 1), (1, 2)], "MessageInfo");
    consumer.shutdown().await.unwrap();
    assert!(queue.get(&id).await.unwrap().is_none(), "acked");
}

#[tokio::test]
async fn an_uncounted_retry_after_keeps_the_message_s_deliveries() {
    let (_server, _client, queue) = start_queue("defer", FETCH, |b| b.default_retry_count(0)).await;
    let log = Log::default();
    let deferred = Arc::new(AtomicUsize::new(0));
    let handler = helpers::recording(&log, move |_msg: Message| {
        let deferred = deferred.clone();
        async move {
            if deferred.fetch_add(1, Ordering::SeqCst) < 3 {
                return Err(RetryAfter::new(Duration::from_millis(50), "429").uncounted().into());
            }
            Ok::<(), HandlerError>(())
        }
    });
    let mut events = queue.events();
    let id = queue.send("x").await.unwrap();
    let consumer = queue.start_consume(handler).await.unwrap();
    assert!(wait_until(WAIT, || log.len() >= 4).await, "{:?}", log.attempts(&id));
    // Retry count 0 allows one counted delivery; three deferrals used none.
    assert_eq!(log.attempts(&id), vec![1, 1, 1, 1]);
    // Each deferral is an event, though no failure.
    let mut deferrals = Vec::new();
    for _ in 0..100 {
        match tokio::time::timeout(WAIT, events.recv()).await {
            Ok(Ok(Event::Deferred {
                id: d,
                attempt,
                retry_in,
                ..
            })) => deferrals.push((d, attempt, retry_in)),
            Ok(Ok(Event::Acked { .. })) => break,
            Ok(Ok(_)) => {}
            other => panic!("events ended before the ack: {other:?}"),
        }
    }
    let want = (id.clone(), 1, Duration::from_millis(50));
    assert_eq!(deferrals, [want.clone(), want.clone(), want]);
    assert!(
        wait_for(WAIT, || async { queue.counts().await.unwrap().live() == 0 }).await,
        "acked in the end"
    );
    let status = queue.status().await.unwrap();
    assert_eq!((status.totals.failed, status.totals.dead), (0, 0));
    consumer.shutdown().await.unwrap();
}
