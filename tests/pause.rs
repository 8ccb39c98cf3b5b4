//! Pausing a queue: consumers lease nothing while it is paused, for every
//! consumer and across restarts; sends succeed and due messages wait in
//! ready, delivered on resume neither early nor lost. Every operator
//! action is an [`Event::Changed`].

mod helpers;
use delayqueue_test_support as support;

use std::collections::HashSet;
use std::time::{Duration, SystemTime};

use delayqueue::{Action, DelayQueue, Event, Message, MessageId};
use helpers::{acking, recording, start_queue, Log};
use support::logs::Logs;
use support::{wait_for, wait_until, WAIT};

const FETCH: Duration = Duration::from_millis(200);

/// Waits until the queue holds `ready` messages in ready and nothing anywhere else but pending.
async fn wait_ready(queue: &DelayQueue, ready: u64) -> bool {
    wait_for(WAIT, || async {
        let c = queue.counts().await.unwrap();
        c.ready == ready && c.processing == 0 && c.retry == 0 && c.pending == 0
    })
    .await
}

#[tokio::test]
async fn a_paused_queue_holds_due_messages_for_every_consumer_and_resume_delivers_each_once() {
    let (_server, _client, queue) = start_queue("paused", FETCH, |b| b).await;
    let logs = Logs::capture("paused");
    let log = Log::default();
    let consumer = queue.start_consume(acking(&log)).await.unwrap();
    queue.send("before").id("before").await.unwrap();
    assert!(wait_until(WAIT, || log.len() == 1).await, "delivered before the pause");

    assert!(queue.pause().await.unwrap());
    assert!(!queue.pause().await.unwrap(), "paused already");
    assert!(queue.is_paused().await.unwrap());
    assert!(queue.status().await.unwrap().paused);
    // Sends succeed while paused; some are due now, some a little later
    // (promoted by the consumer while paused: it keeps running its loop).
    let mut ids: Vec<MessageId> = Vec::new();
    for i in 0..10 {
        let delay = Duration::from_millis(if i % 2 == 0 { 0 } else { 300 });
        ids.push(
            queue
                .send(format!("m{i}"))
                .delay(delay)
                .id(format!("m{i}"))
                .await
                .unwrap(),
        );
    }
    assert!(wait_ready(&queue, 10).await, "{:?}", queue.counts().await.unwrap());
    assert!(
        wait_until(WAIT, || logs.text().contains("queue is paused")).await,
        "the consumer claimed and saw the pause: {}",
        logs.text()
    );
    assert_eq!(log.len(), 1, "delivered while paused: {:?}", log.ids());

    // A restarted consumer (the flag lives in Redis) leases nothing either.
    consumer.shutdown().await.unwrap();
    let logs = Logs::capture("paused");
    let consumer = queue.start_consume(acking(&log)).await.unwrap();
    assert!(
        wait_until(WAIT, || logs.text().contains("queue is paused")).await,
        "{}",
        logs.text()
    );
    assert_eq!(log.len(), 1, "a new consumer leased while paused");
    assert_eq!(queue.counts().await.unwrap().ready, 10);

    // A message sent now and due in 1 s must not come early on resume.
    let later_due = SystemTime::now() + Duration::from_secs(1);
    queue.send("later").id("later").at(later_due).await.unwrap();
    assert!(queue.resume().await.unwrap());
    assert!(!queue.resume().await.unwrap(), "not paused any more");
    assert!(!queue.is_paused().await.unwrap());
    assert!(wait_until(WAIT, || log.len() == 12).await, "{:?}", log.ids());
    let counts = log.counts();
    for id in ids.iter().chain([&MessageId::from("later".to_string())]) {
        assert_eq!(counts.get(id), Some(&1), "{id} delivered once");
    }
    consumer.shutdown().await.unwrap();
    assert_eq!(queue.counts().await.unwrap(), Default::default());
}

#[tokio::test]
async fn a_resumed_queue_is_not_delivered_early() {
    let (_server, _client, queue) = start_queue("early", FETCH, |b| b).await;
    let log = Log::default();
    let due = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = due.clone();
    let consumer = queue
        .start_consume(recording(&log, move |msg: Message| {
            seen.lock().unwrap().push((SystemTime::now(), msg.due_at()));
            async { Ok(()) }
        }))
        .await
        .unwrap();
    queue.pause().await.unwrap();
    for i in 0..5 {
        queue
            .send(format!("m{i}"))
            .delay(Duration::from_millis(400 * i))
            .await
            .unwrap();
    }
    queue.resume().await.unwrap();
    assert!(wait_until(WAIT, || log.len() == 5).await);
    for (at, due) in due.lock().unwrap().iter() {
        // Redis's clock decides due times; allow for a host clock a little apart.
        assert!(*at + Duration::from_millis(50) >= *due, "delivered {at:?}, due {due:?}");
    }
    consumer.shutdown().await.unwrap();
}

#[tokio::test]
async fn every_operator_action_is_an_event() {
    let (_server, _client, queue) = start_queue("operated", FETCH, |b| b.default_retry_count(0)).await;
    let mut events = queue.events();
    queue.pause().await.unwrap();
    queue.pause().await.unwrap();
    queue.resume().await.unwrap();
    queue.send("a").id("a").delay(Duration::from_secs(60)).await.unwrap();
    queue.send("b").id("b").delay(Duration::from_secs(60)).await.unwrap();
    assert!(queue.reschedule("a", Duration::from_secs(30)).await.unwrap());
    assert!(!queue.reschedule("unknown", Duration::from_secs(30)).await.unwrap());
    assert!(queue.cancel("b").await.unwrap());
    // Two dead letters: handlers that fail with no retries left.
    for id in ["d1", "d2", "d3"] {
        queue.send("x").id(id).await.unwrap();
    }
    let consumer = queue
        .start_consume(|_: Message| async { Err::<(), _>(delayqueue::HandlerError::from("no")) })
        .await
        .unwrap();
    assert!(wait_for(WAIT, || async { queue.counts().await.unwrap().dead == 3 }).await);
    consumer.shutdown().await.unwrap();
    assert!(queue.requeue_dead("d1").await.unwrap());
    assert_eq!(queue.delete_all_dead().await.unwrap(), 2);
    assert!(queue.purge().await.unwrap() > 0);

    let mut changed = Vec::new();
    let deadline = tokio::time::Instant::now() + WAIT;
    while changed.len() < 7 && tokio::time::Instant::now() < deadline {
        match tokio::time::timeout_at(deadline, events.recv()).await {
            Ok(Ok(Event::Changed { action, id, count, .. })) => {
                changed.push((action, id.map(|i| i.as_str().to_string()), count))
            }
            Ok(Ok(_)) => {}
            other => panic!("events ended: {other:?}"),
        }
    }
    let s = |id: &str| Some(id.to_string());
    assert_eq!(
        changed[..6],
        [
            (Action::Paused, None, 0),
            (Action::Resumed, None, 0),
            (Action::Rescheduled, s("a"), 1),
            (Action::Cancelled, s("b"), 1),
            (Action::Requeued, s("d1"), 1),
            (Action::Deleted, None, 2),
        ]
    );
    assert!(matches!(changed[6], (Action::Purged, None, n) if n > 0), "{changed:?}");
    let kinds: HashSet<_> = changed.iter().map(|c| c.0).collect();
    assert_eq!(kinds.len(), 7);
}
