//! Fault scenario 6, slow handlers: lease renewal (`handler_timeout` longer
//! than `max_consume_duration`) keeps a slow but alive handler's message,
//! while a dead consumer's message comes back after the visibility timeout
//! and a stuck handler is cut at its time limit. (Without renewal, the cut at
//! the visibility timeout and the fencing of a late ack are shown in
//! tests/consumer.rs.)

mod support;
support::queue_helpers!();

use std::future::IntoFuture;
use std::time::{Duration, Instant};

use delayqueue::{DelayQueue, Message, MessageId, QueueStats};
use fred::prelude::*;
use helpers::{acking, queue_builder, recording, start_queue, wait_stats, Log};
use support::{all_keys, wait_until};

const FETCH_INTERVAL: Duration = Duration::from_millis(50);
const VIS: Duration = Duration::from_millis(300);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewed_lease_keeps_a_slow_but_alive_handler_s_message() {
    let (_server, client, q) = start_queue("slow", FETCH_INTERVAL, |b| {
        b.max_consume_duration(VIS)
            .handler_timeout(Duration::from_secs(10))
            .concurrency(8)
    })
    .await;
    let log = Log::default();
    let slow = q
        .start_consume(recording(&log, |_msg: Message| async move {
            tokio::time::sleep(Duration::from_millis(1500)).await;
            Ok(())
        }))
        .await
        .unwrap();
    let ids: Vec<MessageId> =
        futures::future::try_join_all((0..5).map(|i| q.send_delay_msg(format!("m{i}"), Duration::ZERO).into_future()))
            .await
            .unwrap();
    assert!(wait_until(Duration::from_secs(3), || log.len() == 5).await);
    // A second consumer sweeps for timed-out deliveries all along: it must
    // find none, since the slow handlers' leases keep being renewed.
    let other_log = Log::default();
    let other = q.start_consume(acking(&other_log)).await.unwrap();
    let unack = "dq:{slow}:unack";
    let first: f64 = client.zscore(unack, ids[0].as_str()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    let later: f64 = client.zscore(unack, ids[0].as_str()).await.unwrap();
    assert!(later > first, "lease not renewed: {first} -> {later}");

    assert_eq!(
        wait_stats(&q, Duration::from_secs(5), QueueStats::default()).await,
        QueueStats::default()
    );
    assert!(
        other_log.is_empty(),
        "a renewed message was redelivered: {:?}",
        other_log.snapshot()
    );
    let counts = log.counts();
    assert!(ids.iter().all(|id| counts.get(id) == Some(&1)), "{counts:?}");
    slow.shutdown().await.unwrap();
    other.shutdown().await.unwrap();
    assert!(q.check_integrity().await.unwrap().is_clean());
    assert!(all_keys(&client).await.is_empty());
}

/// Consumer A runs on a runtime of its own, which is then dropped with its
/// tasks, as a crashed process would: no nack, no more renewals. Consumer B
/// must get the message once A's last lease ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_consumer_stops_renewing_and_its_message_comes_back() {
    let (server, client, q) = start_queue("dead", FETCH_INTERVAL, |b| b.max_consume_duration(VIS)).await;
    let url = server.url();
    let (started_tx, started_rx) = std::sync::mpsc::channel::<()>();
    let (crash_tx, crash_rx) = tokio::sync::oneshot::channel::<()>();
    let a = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let client = delayqueue::connect(&url).await.unwrap();
            let q = queue_builder("dead", &client, FETCH_INTERVAL)
                .max_consume_duration(VIS)
                .handler_timeout(Duration::from_secs(60))
                .build()
                .unwrap();
            let consumer = q
                .start_consume(move |_msg: Message| {
                    let started = started_tx.clone();
                    async move {
                        let _ = started.send(());
                        tokio::time::sleep(Duration::from_secs(60)).await;
                        Ok::<(), delayqueue::HandlerError>(())
                    }
                })
                .await
                .unwrap();
            // Never shut down: the runtime goes away under it.
            std::mem::forget(consumer);
            let _ = crash_rx.await;
        });
        rt.shutdown_background();
    });
    let id = q.send_delay_msg("x", Duration::ZERO).await.unwrap();
    tokio::task::spawn_blocking(move || started_rx.recv_timeout(Duration::from_secs(5)))
        .await
        .unwrap()
        .expect("A never started the handler");
    // Alive, A keeps the message for several leases.
    tokio::time::sleep(VIS * 3).await;
    assert_eq!(q.stats().await.unwrap().processing, 1);
    let log = Log::default();
    let b = q.start_consume(acking(&log)).await.unwrap();
    tokio::time::sleep(VIS).await;
    assert!(log.is_empty(), "B took a message A still renews");

    let crashed = Instant::now();
    crash_tx.send(()).unwrap();
    a.join().unwrap();
    assert!(
        wait_until(Duration::from_secs(5), || log.len() == 1).await,
        "never redelivered"
    );
    let took = log.snapshot()[0].2 - crashed;
    println!("FAULT scenario=dead-renewer redelivered_after_ms={}", took.as_millis());
    assert_eq!(log.attempts(&id), vec![2]);
    assert!(
        took < VIS + FETCH_INTERVAL * 4 + Duration::from_millis(500),
        "took {took:?}"
    );
    assert_eq!(
        wait_stats(&q, Duration::from_secs(3), QueueStats::default()).await,
        QueueStats::default()
    );
    b.shutdown().await.unwrap();
    assert!(all_keys(&client).await.is_empty());
}

#[tokio::test]
async fn a_stuck_handler_is_cut_at_its_handler_timeout_and_the_delivery_counts() {
    let (_server, client, q) = start_queue("stuck", FETCH_INTERVAL, |b| {
        b.max_consume_duration(Duration::from_millis(200))
            .handler_timeout(Duration::from_secs(1))
            .default_retry_count(1)
    })
    .await;
    let log = Log::default();
    let consumer = q
        .start_consume(recording(&log, |msg: Message| async move {
            if msg.attempt() < 3 {
                tokio::time::sleep(Duration::from_secs(30)).await;
            }
            Ok(())
        }))
        .await
        .unwrap();
    let id = q.send_delay_msg("x", Duration::ZERO).await.unwrap();
    assert!(wait_until(Duration::from_secs(5), || log.len() == 2).await);
    let deliveries = log.snapshot();
    // Renewed past five leases, then cut at the handler's limit.
    let gap = deliveries[1].2 - deliveries[0].2;
    assert!(
        gap >= Duration::from_millis(950) && gap < Duration::from_secs(3),
        "gap {gap:?}"
    );
    assert_eq!(log.attempts(&id), vec![1, 2]);
    // Retry count 1: two deliveries, both cut, so the message is dead.
    assert_eq!(
        wait_stats(
            &q,
            Duration::from_secs(3),
            QueueStats {
                garbage: 1,
                ..Default::default()
            }
        )
        .await,
        QueueStats {
            garbage: 1,
            ..Default::default()
        }
    );
    consumer.shutdown().await.unwrap();
    let _ = client;
}

/// The renewal keeps going for deliveries that outlive many leases, and a
/// consumer that shuts down waits for them and acks them with their latest lease.
#[tokio::test]
async fn shutdown_waits_for_renewed_handlers_and_acks_them() {
    let (_server, client, q): (_, _, DelayQueue) = start_queue("shut", FETCH_INTERVAL, |b| {
        b.max_consume_duration(Duration::from_millis(150))
            .handler_timeout(Duration::from_secs(5))
    })
    .await;
    let log = Log::default();
    let consumer = q
        .start_consume(recording(&log, |_msg: Message| async move {
            tokio::time::sleep(Duration::from_millis(1000)).await;
            Ok(())
        }))
        .await
        .unwrap();
    q.send_delay_msg("x", Duration::ZERO).await.unwrap();
    assert!(wait_until(Duration::from_secs(3), || log.len() == 1).await);
    consumer.shutdown().await.unwrap();
    assert_eq!(log.len(), 1);
    assert_eq!(q.stats().await.unwrap(), QueueStats::default());
    assert!(all_keys(&client).await.is_empty());
}
