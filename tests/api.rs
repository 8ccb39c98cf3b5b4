//! The public API's shapes, end to end against a real redis-server: ids
//! taken as any string, the due and send times a handler sees,
//! `reschedule_at`, and `json_or_skip`.

mod helpers;
use delayqueue_test_support as support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use delayqueue::{Error, HandlerError, Message, MessageId, MessageState};
use helpers::{recording, start_queue, wait_stats, Log};
use support::{wait_until, WAIT};

/// How often the consumers in these tests poll.
const FETCH_INTERVAL: Duration = Duration::from_millis(100);

/// Milliseconds since the Unix epoch.
fn ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).unwrap().as_millis() as u64
}

/// What a handler saw of each delivery: id, attempt, sent at, due at (ms).
type Times = Arc<Mutex<Vec<(String, u32, u64, u64)>>>;

/// A handler that records each delivery's times, failing the first
/// `fail` deliveries of each message.
fn timing(times: &Times, fail: u32) -> impl delayqueue::Handler {
    let times = times.clone();
    move |msg: Message| {
        let (sent, due) = (ms(msg.sent_at()), ms(msg.first_due_at()));
        if msg.attempt() == 1 {
            assert_eq!(
                msg.due_at(),
                msg.first_due_at(),
                "a first delivery is due when its send said"
            );
        }
        times
            .lock()
            .unwrap()
            .push((msg.id().to_string(), msg.attempt(), sent, due));
        async move {
            if msg.attempt() <= fail {
                return Err::<(), HandlerError>("not yet".into());
            }
            Ok(())
        }
    }
}

#[tokio::test]
async fn ids_are_taken_as_str_string_or_message_id() {
    let (_server, _client, q) = start_queue("ids", FETCH_INTERVAL, |b| b).await;
    let minute = Duration::from_secs(60);
    q.send("a").delay(minute).id("order-1").await.unwrap();
    q.send("b").delay(minute).id("order-2").await.unwrap();
    let id3: MessageId = q.send("c").delay(minute).id("order-3").await.unwrap();

    let info = q.get("order-1").await.unwrap().expect("pending");
    assert_eq!((info.id.as_str(), info.state), ("order-1", MessageState::Pending));
    assert!(q.get(String::from("order-2")).await.unwrap().is_some());
    assert!(q.get(&id3).await.unwrap().is_some());
    assert!(q.reschedule("order-1", minute * 2).await.unwrap());
    assert!(q.reschedule(&id3, minute * 2).await.unwrap());
    assert!(q.cancel("order-1").await.unwrap());
    assert!(q.cancel(format!("order-{}", 2)).await.unwrap());
    assert!(q.cancel(id3).await.unwrap());
    assert!(!q.cancel("order-1").await.unwrap(), "already cancelled");
    assert!(q.get("order-1").await.unwrap().is_none());
    assert!(!q.requeue_dead("order-1").await.unwrap());
    assert!(!q.delete_dead("order-1").await.unwrap());

    // A bad id is still a typed error, before anything is sent to Redis.
    for bad in ["", "a b", "x\n"] {
        assert!(
            matches!(q.cancel(bad).await, Err(Error::InvalidMessageId { .. })),
            "{bad:?}"
        );
        assert!(
            matches!(q.get(bad).await, Err(Error::InvalidMessageId { .. })),
            "{bad:?}"
        );
        assert!(matches!(
            q.reschedule(bad, minute).await,
            Err(Error::InvalidMessageId { .. })
        ));
        assert!(matches!(q.requeue_dead(bad).await, Err(Error::InvalidMessageId { .. })));
        assert!(matches!(q.delete_dead(bad).await, Err(Error::InvalidMessageId { .. })));
    }
    assert_eq!(q.counts().await.unwrap(), Default::default());
}

#[tokio::test]
async fn a_handler_sees_when_its_message_was_sent_and_due_and_retries_keep_both() {
    let (server, _client, q) = start_queue("times", FETCH_INTERVAL, |b| {
        b.nack_redelivery_delay(Duration::from_millis(50))
    })
    .await;
    let times = Times::default();
    let consumer = q.start_consume(timing(&times, 1)).await.unwrap();
    let before = server.now_ms();
    q.send("x").delay(Duration::from_millis(300)).await.unwrap();
    let after = server.now_ms();
    assert!(wait_until(WAIT, || times.lock().unwrap().len() == 2).await);
    consumer.shutdown().await.unwrap();
    let seen = times.lock().unwrap().clone();
    let (id, _, sent, due) = seen[0].clone();
    assert!(
        (before..=after).contains(&sent),
        "sent {sent} not in {before}..={after}"
    );
    assert_eq!(due - sent, 300, "due = sent + delay, by Redis's clock");
    assert_eq!(
        seen,
        vec![(id.clone(), 1, sent, due), (id, 2, sent, due)],
        "a retry keeps its send time and first due time"
    );

    // `at`: due at the given time (ms, turned into a delay on this host).
    let times = Times::default();
    let consumer = q.start_consume(timing(&times, 0)).await.unwrap();
    let at = SystemTime::now() + Duration::from_millis(400);
    q.send("y").at(at).await.unwrap();
    assert!(wait_until(WAIT, || times.lock().unwrap().len() == 1).await);
    consumer.shutdown().await.unwrap();
    let (_, _, sent, due) = times.lock().unwrap()[0].clone();
    // Redis runs on this host: its clock is this one, the send's round trip apart.
    assert!(due + 2 >= ms(at) && due <= ms(at) + 5_000, "due {due}, at {}", ms(at));
    assert!(sent <= due);
}

#[tokio::test]
async fn reschedule_and_reschedule_at_move_the_due_time_the_handler_sees() {
    let (server, _client, q) = start_queue("resched", FETCH_INTERVAL, |b| b).await;
    let times = Times::default();
    let hour = Duration::from_secs(3600);
    let sent_before = server.now_ms();
    q.send("a").delay(hour).id("a").await.unwrap();
    q.send("b").delay(hour).id("b").await.unwrap();
    // From an hour away to 300 ms from now.
    let at = SystemTime::now() + Duration::from_millis(300);
    assert!(q.reschedule_at("a", at).await.unwrap());
    let info = q.get("a").await.unwrap().unwrap();
    let due = ms(info.due.expect("pending has a due time"));
    assert!(due + 2 >= ms(at) && due <= ms(at) + 5_000, "due {due}, at {}", ms(at));
    let sent = ms(info.sent_at.expect("stored: has its send time"));
    assert!(sent >= sent_before && sent <= due);
    // A time in the past means due now.
    assert!(q.reschedule_at("b", UNIX_EPOCH).await.unwrap());

    let consumer = q.start_consume(timing(&times, 0)).await.unwrap();
    assert!(wait_until(WAIT, || times.lock().unwrap().len() == 2).await);
    consumer.shutdown().await.unwrap();
    let seen = times.lock().unwrap().clone();
    let ids: Vec<&str> = seen.iter().map(|t| t.0.as_str()).collect();
    assert_eq!(ids, vec!["b", "a"], "b due at once, a after 300 ms");
    assert_eq!(
        seen[1],
        ("a".to_string(), 1, sent, due),
        "a's handler sees the new due time"
    );
    let (_, _, b_sent, b_due) = seen[0].clone();
    assert!(b_due >= b_sent && b_due < b_sent + 5_000, "b: due now, not in an hour");
    // Delivered: no longer pending, so nothing to reschedule.
    assert!(!q.reschedule_at("a", at).await.unwrap());
    assert!(!q.reschedule("b", hour).await.unwrap());
}

#[derive(Debug, serde::Deserialize)]
#[allow(dead_code)]
struct Order {
    order_id: u64,
}

#[tokio::test]
async fn json_or_skip_makes_an_undecodable_payload_dead_at_once() {
    let (_server, _client, q) = start_queue("skipjson", FETCH_INTERVAL, |b| {
        b.default_retry_count(3)
            .nack_redelivery_delay(Duration::from_millis(10))
    })
    .await;
    let log = Log::default();
    let consumer = q
        .start_consume(recording(&log, |msg: Message| async move {
            let order: Order = msg.json_or_skip()?;
            assert_eq!(order.order_id, 7);
            Ok::<(), HandlerError>(())
        }))
        .await
        .unwrap();
    let good = q.send(r#"{"order_id": 7}"#).await.unwrap();
    let bad = q.send("not json").id("bad-1").await.unwrap();
    let mut dead = delayqueue::Counts::default();
    dead.dead = 1;
    assert_eq!(wait_stats(&q, WAIT, dead).await, dead);
    assert_eq!(log.attempts(&good), vec![1]);
    assert_eq!(log.attempts(&bad), vec![1], "not retried");
    let info = q.get("bad-1").await.unwrap().expect("a dead letter");
    assert_eq!(info.state, MessageState::Dead);
    let reason = info.last_error.unwrap_or_default();
    assert!(reason.contains("JSON"), "{reason}");

    // Requeued by a plain &str, it fails the same way; then deleted by one.
    assert!(q.requeue_dead("bad-1").await.unwrap());
    assert!(wait_until(WAIT, || log.attempts(&bad) == vec![1, 1]).await);
    assert_eq!(wait_stats(&q, WAIT, dead).await, dead);
    consumer.shutdown().await.unwrap();
    assert!(q.delete_dead("bad-1").await.unwrap());
    assert_eq!(q.counts().await.unwrap(), Default::default());
}

#[tokio::test]
async fn get_and_list_show_the_backoff_a_message_was_sent_with() {
    let (_server, _client, q) = start_queue("backoffs", FETCH_INTERVAL, |b| b).await;
    let minute = Duration::from_secs(60);
    let fixed = delayqueue::Backoff::fixed(Duration::from_secs(5));
    q.send("a")
        .delay(minute)
        .id("own")
        .backoff(fixed.clone())
        .await
        .unwrap();
    q.send("b").delay(minute).id("default").await.unwrap();
    let own = q.get("own").await.unwrap().unwrap();
    assert_eq!(own.backoff, Some(fixed));
    assert_eq!(own.backoff.unwrap().to_string(), "fixed 5s");
    assert_eq!(q.get("default").await.unwrap().unwrap().backoff, None);
    let page = q.list(MessageState::Pending, 0, 10).await.unwrap();
    let listed: Vec<bool> = page.items.iter().map(|m| m.backoff.is_some()).collect();
    assert_eq!(listed.iter().filter(|b| **b).count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_due_message_counts_as_ready_before_any_consumer_runs() {
    let (_server, client, _queue) = start_queue("counts-due", FETCH_INTERVAL, |b| b).await;
    for shards in [1, 4] {
        let queue = helpers::queue_builder(&format!("counts-due-{shards}"), &client, FETCH_INTERVAL)
            .shards(shards)
            .build()
            .unwrap();
        queue.send("now").await.unwrap();
        queue
            .send("a minute ago")
            .at(SystemTime::now() - Duration::from_secs(60))
            .await
            .unwrap();
        queue.send("in an hour").delay(Duration::from_secs(3600)).await.unwrap();
        let counts = queue.counts().await.unwrap();
        assert_eq!((counts.pending, counts.ready), (1, 2), "{shards} shard(s): {counts:?}");
        let status = queue.status().await.unwrap();
        assert_eq!(status.counts, counts, "{shards} shard(s)");
        let next = status.next_due.expect("the message due in an hour");
        assert!(
            next > Duration::from_secs(3500),
            "{shards} shard(s): next due in {next:?}"
        );
        assert!(status.latency.is_some(), "{shards} shard(s): due messages wait");
    }
}

type Left = (u32, u32, Option<u32>);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_left_means_one_thing_before_and_during_a_delivery() {
    let (_server, _client, queue) = start_queue("deliveries-left", FETCH_INTERVAL, |b| b).await;
    let id = queue.send("x").retry_count(2).await.unwrap();
    let before = queue.get(&id).await.unwrap().unwrap();
    assert_eq!(
        before.deliveries_left(),
        Some(3),
        "retry_count 2: 3 deliveries, none made"
    );
    // (attempt, the handler's deliveries left, get's deliveries left meanwhile)
    let seen: Arc<Mutex<Vec<Left>>> = Arc::default();
    let log = seen.clone();
    let q = queue.clone();
    let consumer = queue
        .start_consume(move |msg: Message| {
            let (log, q) = (log.clone(), q.clone());
            async move {
                let during = q.get(msg.id()).await.unwrap().unwrap().deliveries_left();
                log.lock().unwrap().push((msg.attempt(), msg.deliveries_left(), during));
                Err::<(), HandlerError>("again".into())
            }
        })
        .await
        .unwrap();
    assert!(wait_until(WAIT, || seen.lock().unwrap().len() == 1).await);
    consumer.shutdown().await.unwrap();
    let seen = seen.lock().unwrap().clone();
    assert_eq!(
        seen,
        [(1, 2, Some(2))],
        "the handler and get agree: deliveries left after the running one"
    );
}
