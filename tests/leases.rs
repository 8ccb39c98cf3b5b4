//! Leases under trouble: a renewal whose reply is lost, and claimed
//! deliveries that wait too long for a handler slot. Each against a private
//! redis-server.

mod helpers;
use delayqueue_test_support as support;

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use delayqueue::fred::prelude::*;
use delayqueue::{Counts, DelayQueue, Event, HandlerError, Message, MessageState, NewMessage};
use helpers::{recording, wait_stats, Log};
use support::{wait_for, wait_until, RedisServer, WAIT};

/// A renewal (`extend`) that times out on the client but runs in Redis
/// once a write pause ends leaves Redis holding a lease the consumer never
/// heard of. Stalls shorter than the lease left must cost nothing: the
/// handler runs once, its ack lands, no lease is reported lost.
#[tokio::test]
async fn a_renewal_whose_reply_is_lost_keeps_the_lease() {
    let server = RedisServer::start().await;
    let cfg = Config::from_url(&server.url()).unwrap();
    // Commands give up after 200 ms, so a 1.1 s write pause loses replies
    // of scripts that still run when it ends.
    let client = Builder::from_config(cfg)
        .set_policy(ReconnectPolicy::new_exponential(0, 50, 1000, 2))
        .with_performance_config(|p| p.default_command_timeout = Duration::from_millis(200))
        .build()
        .unwrap();
    client.init().await.unwrap();
    let q = DelayQueue::builder("renew", client.clone())
        .fetch_interval(Duration::from_millis(100))
        .max_consume_duration(Duration::from_secs(3))
        .handler_timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let mut events = q.events();
    let log = Log::default();
    let consumer = q
        .start_consume(recording(&log, |_m: Message| async move {
            tokio::time::sleep(Duration::from_secs(12)).await;
            Ok::<(), HandlerError>(())
        }))
        .await
        .unwrap();
    let id = q.send("slow").await.unwrap();
    assert!(wait_until(WAIT, || log.len() == 1).await, "never delivered");
    // Pauses of 1.1 s every 1.6 s while the handler runs: each is shorter
    // than the 1.5 s or more a renewed lease has left, and renewals (every
    // 0.5 s) keep running into them.
    for _ in 0..6 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(server.raw_command(&["CLIENT", "PAUSE", "1100", "WRITE"]), "OK");
        tokio::time::sleep(Duration::from_millis(1100)).await;
    }
    let drained = wait_stats(&q, WAIT, Counts::default()).await;
    assert_eq!(drained, Counts::default(), "the message was not acked");
    consumer.shutdown().await.unwrap();
    assert_eq!(log.attempts(&id), vec![1], "delivered more than once");
    while let Ok(e) = events.try_recv() {
        assert!(
            !matches!(e, Event::LeaseLost { .. }),
            "a lease was reported lost: {e:?}"
        );
    }
    let totals = q.status().await.unwrap().totals;
    assert_eq!((totals.acked, totals.failed), (1, 0), "{totals:?}");
}

/// Claims sized by fast handlers, then slow ones: deliveries still waiting
/// for the one handler slot when their lease runs short are handed back
/// uncounted, never timed out as failed deliveries that no handler ran.
#[tokio::test]
async fn deliveries_waiting_for_a_slot_are_handed_back_uncounted() {
    let (_server, _client, q) = helpers::start_queue("slots", Duration::from_millis(50), |b| {
        b.concurrency(1)
            .max_consume_duration(Duration::from_millis(400))
            .default_retry_count(0)
    })
    .await;
    let log = Log::default();
    let slow = Arc::new(AtomicUsize::new(0));
    let runs = slow.clone();
    let consumer = q
        .start_consume(recording(&log, move |m: Message| {
            let runs = runs.clone();
            async move {
                if m.payload() == b"slow" {
                    runs.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(150)).await;
                }
                Ok::<(), HandlerError>(())
            }
        }))
        .await
        .unwrap();
    q.send("fast").await.unwrap();
    assert!(wait_until(WAIT, || log.len() == 1).await);
    let mut ids = HashSet::new();
    for _ in 0..10 {
        ids.insert(q.send("slow").await.unwrap());
    }
    // Every message ends acked or dead; bounded by count and time.
    let mut totals = q.status().await.unwrap().totals;
    for _ in 0..600 {
        if totals.acked + totals.dead == 11 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        totals = q.status().await.unwrap().totals;
    }
    consumer.shutdown().await.unwrap();
    assert_eq!(totals.acked + totals.dead, 11, "not all handled: {totals:?}");
    let dead = q.list(MessageState::Dead, 0, 100).await.unwrap();
    let seen = log.ids();
    let unseen: Vec<_> = dead.items.iter().filter(|m| !seen.contains(&m.id)).collect();
    assert!(unseen.is_empty(), "dead letters no handler ever saw: {unseen:?}");
    // Every counted failure is a handler run that did not end in an ack.
    let handled = log.snapshot().iter().filter(|d| ids.contains(&d.0)).count() as u64;
    assert!(
        totals.failed <= handled - (totals.acked - 1),
        "{totals:?}, {handled} slow runs"
    );
    assert_eq!(slow.load(Ordering::SeqCst) as u64, handled);
}

/// A delivery whose lease ran out acks after its redelivery, handled by
/// another consumer, was acked: one ack took effect, so one `Acked` (the
/// redelivery's), and the late one is `LeaseLost`, never a second `Acked`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_ack_after_the_redelivery_was_acked_is_a_lost_lease_not_a_second_ack() {
    // A short lease; one handler, holding no more than it runs.
    let (_server, client, late) = helpers::start_queue("late", Duration::from_millis(50), |b| {
        b.concurrency(1)
            .fetch_limit(1)
            .max_consume_duration(Duration::from_millis(300))
    })
    .await;
    let other = helpers::queue_builder("late", &client, Duration::from_millis(50))
        .build()
        .unwrap();
    let (mut late_events, mut other_events) = (late.events(), other.events());
    let (log, other_log) = (Log::default(), Log::default());
    let acked_again = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let release = acked_again.clone();
    // Blocks its thread (the handler time limit cannot cut it short) until
    // the redelivery was acked, or WAIT.
    let slow = late
        .start_consume(recording(&log, move |_m: Message| {
            let release = release.clone();
            async move {
                tokio::task::block_in_place(|| {
                    let start = std::time::Instant::now();
                    while !release.load(Ordering::Acquire) && start.elapsed() < WAIT {
                        std::thread::sleep(Duration::from_millis(10));
                    }
                });
                Ok::<(), HandlerError>(())
            }
        }))
        .await
        .unwrap();
    let id = late.send("once").await.unwrap();
    assert!(wait_until(WAIT, || log.len() == 1).await, "never delivered");
    // Its lease runs out: a sweep takes the message back and the other
    // consumer handles and acks the redelivery.
    let fast = other.start_consume(helpers::acking(&other_log)).await.unwrap();
    assert!(wait_until(WAIT, || other_log.len() == 1).await, "never redelivered");
    let drained = wait_stats(&other, WAIT, Counts::default()).await;
    assert_eq!(drained, Counts::default(), "the redelivery was not acked");
    // Only now does the first delivery's handler return: its ack is late.
    acked_again.store(true, Ordering::Release);
    let lost = tokio::time::timeout(WAIT, async {
        loop {
            let e = late_events.recv().await.unwrap();
            if matches!(e, Event::LeaseLost { .. } | Event::Acked { .. }) {
                return e;
            }
        }
    })
    .await
    .expect("no outcome of the late ack");
    slow.shutdown().await.unwrap();
    fast.shutdown().await.unwrap();
    assert_eq!(log.len(), 1, "{:?}", log.snapshot());
    assert_eq!(lost, Event::LeaseLost { id: id.clone() }, "the late ack");
    let mut acked = Vec::new();
    while let Ok(e) = other_events.try_recv() {
        if let Event::Acked { id } = e {
            acked.push(id);
        }
    }
    assert_eq!(acked, vec![id], "the redelivery's ack");
    assert_eq!(other.status().await.unwrap().totals.acked, 1);
}

/// A consumer whose one handler is held by a slow run hands back what it
/// claimed ahead of that run once its handlers stall, and claims nothing
/// more meanwhile: another consumer with free handlers runs those
/// messages while the slow run goes on, rather than after it (or after
/// three quarters of their lease, 90 s here, when the waits give up).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_claimed_ahead_of_a_stalled_handler_go_to_a_consumer_with_a_free_one() {
    let (_server, _client, q) = helpers::start_queue("stall", Duration::from_millis(50), |b| {
        b.concurrency(1).max_consume_duration(Duration::from_secs(120))
    })
    .await;
    let (on_a, on_b) = (Log::default(), Log::default());
    let hold = Arc::new(tokio::sync::Semaphore::new(0));
    let a = q.start_consume(helpers::stalling(&on_a, &hold)).await.unwrap();
    q.send("warm").await.unwrap();
    assert!(wait_until(WAIT, || on_a.len() == 1).await);
    assert!(wait_for(WAIT, || async { q.status().await.unwrap().totals.acked == 1 }).await);
    let batch = std::iter::once(NewMessage::new("slow")).chain((0..50).map(|i| NewMessage::new(format!("f{i}"))));
    assert!(q.send_batch(batch).await.unwrap().iter().all(Result::is_ok));
    // The one claim-ahead: the slow message runs, the other 50 wait behind it.
    assert!(wait_for(WAIT, || async { q.status().await.unwrap().counts.processing == 51 }).await);
    // Leased in Redis before its handler starts here.
    assert!(
        wait_until(WAIT, || on_a.len() >= 2).await,
        "the slow message never started"
    );
    assert_eq!(on_a.len(), 2, "only the slow message started on a");
    let b = q.start_consume(helpers::acking(&on_b)).await.unwrap();
    let ran_on_b = wait_until(WAIT, || on_b.len() == 50).await;
    assert!(ran_on_b, "{} of 50 ran while the slow run went on", on_b.len());
    assert_eq!(on_a.len(), 2, "a started nothing more while its handler was held");
    assert!(
        on_b.snapshot().iter().all(|d| d.1 == 1),
        "a hand-back is not a delivery"
    );
    hold.add_permits(1);
    assert!(wait_for(WAIT, || async { q.status().await.unwrap().totals.acked == 52 }).await);
    let totals = q.status().await.unwrap().totals;
    assert_eq!((totals.failed, totals.dead), (0, 0), "{totals:?}");
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}
