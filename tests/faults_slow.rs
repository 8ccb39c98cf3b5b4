//! Fault scenario 6, slow handlers: lease renewal (`handler_timeout` longer
//! than `max_consume_duration`) keeps a slow but alive handler's message,
//! while a dead consumer's message comes back after the visibility timeout
//! and a stuck handler is cut at its time limit. (Without renewal, the cut at
//! the visibility timeout and the fencing of a late ack are shown in
//! tests/consumer.rs.)

mod helpers;
use delayqueue_test_support as support;

use std::future::IntoFuture;
use std::sync::Arc;
use std::time::{Duration, Instant};

use delayqueue::{Counts, DelayQueue, Message, MessageId};
use fred::prelude::*;
use helpers::crashing::Crashing;
use helpers::{acking, recording, start_queue, wait_stats, Log};
use support::{all_keys, wait_for, wait_until, WAIT};
use tokio::sync::Semaphore;

const FETCH_INTERVAL: Duration = Duration::from_millis(50);
/// The visibility timeout. A renewal comes when a third of the lease has
/// passed, so a process stalled for about half a lease loses it: long
/// enough that a loaded machine does not stall that long.
const VIS: Duration = Duration::from_secs(2);

/// The lease deadline (µs of Redis time) of `id` in queue `name`, if held.
async fn lease_of(client: &Client, name: &str, id: &MessageId) -> Option<f64> {
    client
        .zscore(format!("dq:{{{name}}}:unack"), id.as_str())
        .await
        .unwrap()
}

/// Waits until `id`'s lease was renewed at or after `deadline` (µs), that is
/// until it outlived a lease ending then.
async fn wait_renewed_past(client: &Client, name: &str, id: &MessageId, deadline: f64) -> bool {
    let past = deadline + VIS.as_micros() as f64;
    wait_for(WAIT, || async {
        lease_of(client, name, id).await.is_some_and(|l| l >= past)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewed_lease_keeps_a_slow_but_alive_handler_s_message() {
    let (_server, client, q) = start_queue("slow", FETCH_INTERVAL, |b| {
        b.max_consume_duration(VIS)
            .handler_timeout(Duration::from_secs(10))
            .concurrency(8)
    })
    .await;
    let log = Log::default();
    // The handlers run until the test has seen their leases outlive the first.
    let release = Arc::new(Semaphore::new(0));
    let held = release.clone();
    let slow = q
        .start_consume(recording(&log, move |_msg: Message| {
            let held = held.clone();
            async move {
                let _ = tokio::time::timeout(WAIT, held.acquire()).await;
                Ok(())
            }
        }))
        .await
        .unwrap();
    let ids: Vec<MessageId> = futures::future::try_join_all((0..5).map(|i| q.send(format!("m{i}")).into_future()))
        .await
        .unwrap();
    assert!(wait_until(WAIT, || log.len() == 5).await);
    // A second consumer sweeps for timed-out deliveries all along: it must
    // find none, since the slow handlers' leases keep being renewed.
    let other_log = Log::default();
    let other = q.start_consume(acking(&other_log)).await.unwrap();
    let first = lease_of(&client, "slow", &ids[0]).await.expect("m0 not held");
    assert!(
        wait_renewed_past(&client, "slow", &ids[0], first).await,
        "lease not renewed past {first}: {:?}",
        lease_of(&client, "slow", &ids[0]).await
    );
    release.add_permits(ids.len());

    assert_eq!(wait_stats(&q, WAIT, Counts::default()).await, Counts::default());
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
    let mut a = Crashing::start(server.url(), "dead", FETCH_INTERVAL, VIS);
    let id = q.send("x").await.unwrap();
    a.wait_started().await;
    // Alive, A keeps the message past its first lease.
    let first = lease_of(&client, "dead", &id).await.expect("not held");
    assert!(wait_renewed_past(&client, "dead", &id, first).await, "A did not renew");
    assert_eq!(q.counts().await.unwrap().processing, 1);
    let log = Log::default();
    let b = q.start_consume(acking(&log)).await.unwrap();
    // B sweeps while A renews past the lease B first saw.
    let seen = lease_of(&client, "dead", &id).await.expect("not held");
    assert!(wait_renewed_past(&client, "dead", &id, seen).await, "A did not renew");
    assert!(log.is_empty(), "B took a message A still renews");

    let crashed = Instant::now();
    a.crash();
    assert!(wait_until(WAIT, || log.len() == 1).await, "never redelivered");
    // How soon is a measurement, not a pass condition: a loaded machine
    // may take longer.
    let took = log.snapshot()[0].2 - crashed;
    println!("FAULT scenario=dead-renewer redelivered_after_ms={}", took.as_millis());
    assert_eq!(log.attempts(&id), vec![2]);
    assert_eq!(wait_stats(&q, WAIT, Counts::default()).await, Counts::default());
    b.shutdown().await.unwrap();
    assert!(all_keys(&client).await.is_empty());
}

#[tokio::test]
async fn a_stuck_handler_is_cut_at_its_handler_timeout_and_the_delivery_counts() {
    let limit = VIS * 2;
    let (_server, client, q) = start_queue("stuck", FETCH_INTERVAL, |b| {
        b.max_consume_duration(VIS)
            .handler_timeout(limit)
            .default_retry_count(1)
    })
    .await;
    let log = Log::default();
    let consumer = q
        .start_consume(recording(&log, |msg: Message| async move {
            // Longer than the test waits: only a cut ends it.
            if msg.attempt() < 3 {
                tokio::time::sleep(WAIT * 4).await;
            }
            Ok(())
        }))
        .await
        .unwrap();
    let id = q.send("x").await.unwrap();
    assert!(wait_until(WAIT, || log.len() == 2).await, "attempt 1 was not cut");
    let deliveries = log.snapshot();
    // Renewed past its first lease, then cut at the handler's limit.
    let gap = deliveries[1].2 - deliveries[0].2;
    assert!(gap >= limit - Duration::from_millis(50), "gap {gap:?}");
    assert_eq!(log.attempts(&id), vec![1, 2]);
    // Retry count 1: two deliveries, both cut, so the message is dead.
    let mut dead = Counts::default();
    dead.dead = 1;
    assert_eq!(wait_stats(&q, WAIT, dead).await, dead);
    consumer.shutdown().await.unwrap();
    let _ = client;
}

/// The renewal keeps going for deliveries that outlive many leases, and a
/// consumer that shuts down waits for them and acks them with their latest lease.
#[tokio::test]
async fn shutdown_waits_for_renewed_handlers_and_acks_them() {
    let (_server, client, q): (_, _, DelayQueue) = start_queue("shut", FETCH_INTERVAL, |b| {
        b.max_consume_duration(VIS).handler_timeout(WAIT * 2)
    })
    .await;
    let log = Log::default();
    let release = Arc::new(Semaphore::new(0));
    let held = release.clone();
    let consumer = q
        .start_consume(recording(&log, move |_msg: Message| {
            let held = held.clone();
            async move {
                let _ = tokio::time::timeout(WAIT, held.acquire()).await;
                Ok(())
            }
        }))
        .await
        .unwrap();
    let id = q.send("x").await.unwrap();
    assert!(wait_until(WAIT, || log.len() == 1).await);
    let first = lease_of(&client, "shut", &id).await.expect("not held");
    let stopping = tokio::spawn(consumer.shutdown());
    // Still renewed while the consumer stops, past the first lease.
    assert!(wait_renewed_past(&client, "shut", &id, first).await, "not renewed");
    assert!(!stopping.is_finished(), "shutdown did not wait for the running handler");
    release.add_permits(1);
    stopping.await.unwrap().unwrap();
    assert_eq!(log.len(), 1);
    assert_eq!(q.counts().await.unwrap(), Counts::default());
    assert!(all_keys(&client).await.is_empty());
}
