//! A `Worker` over several queues: weights, strict order, shutdown, and
//! the connections it shares, each against a private redis-server.

mod helpers;
use delayqueue_test_support as support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use delayqueue::{Counts, DelayQueue, Handler, HandlerError, Message, NewMessage, Worker};
use fred::prelude::*;
use helpers::{queue_builder, wait_stats};
use support::{wait_for, wait_until, RedisServer, WAIT};

const FETCH_INTERVAL: Duration = Duration::from_millis(50);

/// The deliveries seen, by queue number, in the order handlers started.
type Seen = Arc<Mutex<Vec<usize>>>;

/// A handler for queue `n` that records each delivery in `seen`, then
/// works for `work`.
fn recording(seen: &Seen, n: usize, work: Duration) -> impl Handler {
    let seen = seen.clone();
    move |_m: Message| {
        seen.lock().unwrap().push(n);
        async move {
            tokio::time::sleep(work).await;
            Ok::<(), HandlerError>(())
        }
    }
}

/// `queues` queues named `w0`, `w1`, ... on a private server, each with
/// `backlog[i]` messages due now.
async fn backlogged(backlog: &[usize]) -> (RedisServer, Client, Vec<DelayQueue>) {
    let server = RedisServer::start().await;
    let client = server.client().await;
    let mut queues = Vec::new();
    for (i, &n) in backlog.iter().enumerate() {
        let q = queue_builder(&format!("w{i}"), &client, FETCH_INTERVAL)
            .build()
            .unwrap();
        for chunk in (0..n).collect::<Vec<_>>().chunks(1000) {
            let msgs = chunk.iter().map(|j| NewMessage::new(format!("m{j}")));
            for sent in q.send_batch(msgs).await.unwrap() {
                sent.unwrap();
            }
        }
        queues.push(q);
    }
    (server, client, queues)
}

/// Weights 6, 3 and 1 over queues that all keep a backlog: of the first
/// 10,000 deliveries each queue gets its weight's share, within 5 %.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backlogged_queues_share_the_deliveries_by_weight() {
    const FIRST: usize = 10_000;
    let weights = [6u32, 3, 1];
    // More than each queue's share of FIRST, so none runs dry.
    let (_server, _client, queues) = backlogged(&[7_000, 4_000, 2_000]).await;
    let seen: Seen = Arc::default();
    let work = Duration::from_millis(1);
    // The default fetch_limit (256): claims run ahead of the handlers, so
    // no queue's slots idle while its next claim is on its way.
    let mut worker = Worker::new().concurrency(10);
    for (i, q) in queues.iter().enumerate() {
        worker = worker.queue(q, weights[i], recording(&seen, i, work));
    }
    let consumer = worker.start().await.unwrap();
    assert!(
        wait_until(Duration::from_secs(120), || seen.lock().unwrap().len() >= FIRST).await,
        "{} deliveries",
        seen.lock().unwrap().len()
    );
    consumer.shutdown().await.unwrap();
    let seen = seen.lock().unwrap();
    let total: u32 = weights.iter().sum();
    for (i, w) in weights.iter().enumerate() {
        let got = seen[..FIRST].iter().filter(|&&n| n == i).count() as f64;
        let want = FIRST as f64 * f64::from(*w) / f64::from(total);
        assert!(
            (got - want).abs() <= 0.05 * want,
            "queue {i} (weight {w}) got {got} of the first {FIRST} deliveries, not {want} ± 5 %"
        );
    }
}

/// Strict order: the lower queue gets nothing while the higher has
/// messages waiting, then everything once it has none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_strict_priority_a_lower_queue_waits_for_the_higher() {
    let (_server, _client, queues) = backlogged(&[300, 300]).await;
    let seen: Seen = Arc::default();
    let work = Duration::from_millis(1);
    let consumer = Worker::new()
        .queue(&queues[0], 1, recording(&seen, 0, work))
        .queue(&queues[1], 1, recording(&seen, 1, work))
        .strict_priority()
        .concurrency(4)
        .start()
        .await
        .unwrap();
    assert!(wait_until(WAIT, || seen.lock().unwrap().len() == 600).await);
    for q in &queues {
        assert_eq!(wait_stats(q, WAIT, Counts::default()).await, Counts::default());
    }
    consumer.shutdown().await.unwrap();
    let seen = seen.lock().unwrap();
    // Handlers that took their slots together may record in any order:
    // the higher queue's last ones were claimed, and so in line, first.
    let first_low = seen.iter().position(|&n| n == 1).unwrap();
    let high_after = seen[first_low..].iter().filter(|&&n| n == 0).count();
    assert!(
        high_after < 4,
        "a lower-queue delivery started while the higher had work: {seen:?}"
    );
}

/// Shutdown drains every queue: the deliveries under way finish and are
/// acked, and nothing is lost or left processing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_drains_every_queue() {
    let (_server, _client, queues) = backlogged(&[50, 50, 50]).await;
    let acked: Arc<Mutex<Vec<usize>>> = Arc::default();
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let started: Seen = Arc::default();
    let handler = |n: usize| {
        let (acked, gate, started) = (acked.clone(), gate.clone(), started.clone());
        move |_m: Message| {
            let (acked, gate, started) = (acked.clone(), gate.clone(), started.clone());
            async move {
                started.lock().unwrap().push(n);
                // Held until the test lets the handlers finish.
                gate.acquire().await.unwrap().forget();
                acked.lock().unwrap().push(n);
                Ok::<(), HandlerError>(())
            }
        }
    };
    let mut worker = Worker::new().concurrency(6);
    for (i, q) in queues.iter().enumerate() {
        worker = worker.queue(q, 1, handler(i));
    }
    let consumer = worker.start().await.unwrap();
    // Every queue has a delivery under way.
    assert!(
        wait_until(WAIT, || {
            let s = started.lock().unwrap();
            (0..3).all(|i| s.contains(&i))
        })
        .await
    );
    let stopping = tokio::spawn(consumer.shutdown());
    gate.add_permits(1_000);
    stopping.await.unwrap().unwrap();
    let acked = acked.lock().unwrap().clone();
    assert_eq!(
        acked.len(),
        started.lock().unwrap().len(),
        "every started handler finished"
    );
    for (i, q) in queues.iter().enumerate() {
        let done = acked.iter().filter(|&&n| n == i).count() as u64;
        let c = q.counts().await.unwrap();
        assert_eq!(c.processing, 0, "queue {i}: {c:?}");
        assert_eq!(c.live() + done, 50, "queue {i}: {c:?} and {done} acked");
        assert_eq!(q.status().await.unwrap().totals.acked, done, "queue {i}");
    }
}

/// Many queues in one Worker share two connections: the client's and one
/// subscriber connection for every queue's wake-ups, which still arrive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_queues_share_one_subscriber_connection_and_still_wake() {
    let server = RedisServer::start().await;
    let client = server.client().await;
    // Slow polls: a delivery within one is a wake-up's doing.
    let slow = Duration::from_secs(30);
    let queues: Vec<DelayQueue> = (0..50)
        .map(|i| queue_builder(&format!("c{i}"), &client, slow).build().unwrap())
        .collect();
    let seen: Seen = Arc::default();
    let mut worker = Worker::new();
    for (i, q) in queues.iter().enumerate() {
        worker = worker.queue(q, 1, recording(&seen, i, Duration::ZERO));
    }
    let consumer = worker.start().await.unwrap();
    let before = clients(&server).await;
    assert!(
        before <= 3,
        "{before} connections: the test's, the client's and one subscriber"
    );
    // The first round may meet each loop's first probe; the second only a wake-up.
    for round in 1..=2 {
        for q in &queues {
            q.send("x").await.unwrap();
        }
        assert!(
            wait_until(Duration::from_secs(20), || seen.lock().unwrap().len() == 50 * round).await,
            "{} of {} delivered within 20 s (polls every 30 s)",
            seen.lock().unwrap().len(),
            50 * round
        );
    }
    consumer.shutdown().await.unwrap();
    // The subscriber connection closes with the last consumer.
    assert!(wait_for(WAIT, || async { clients(&server).await <= 2 }).await);
}

/// Connections the server has open.
async fn clients(server: &RedisServer) -> usize {
    let probe = server.client().await;
    let info: String = probe.info(Some(fred::types::InfoKind::Clients)).await.unwrap();
    let n: usize = info
        .lines()
        .find_map(|l| l.strip_prefix("connected_clients:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap();
    probe.quit().await.unwrap();
    // Less this probe's own.
    n - 1
}
