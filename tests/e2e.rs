//! End-to-end behaviour of producer and consumer against a real redis-server.

mod support;
support::queue_helpers!();

use std::time::{Duration, Instant, SystemTime};

use delayqueue::{DelayQueue, Error, HandlerError, Message, QueueStats};
use helpers::{acking, recording, start_queue, wait_stats, Log};
use support::{all_keys, wait_until, RedisServer};

/// How often the consumers in these tests poll.
const FETCH_INTERVAL: Duration = Duration::from_millis(100);

#[tokio::test]
async fn delayed_message_is_delivered_not_before_due_and_leaves_nothing() {
    let (_server, client, q) = start_queue("orders", FETCH_INTERVAL, |b| b).await;
    let log = Log::default();
    let consumer = q.start_consume(acking(&log)).await.unwrap();
    let sent_at = Instant::now();
    let id = q.send_delay_msg("hello", Duration::from_millis(300)).await.unwrap();
    assert!(wait_until(Duration::from_secs(5), || log.len() == 1).await);
    let (got, attempt, at, payload) = log.snapshot()[0].clone();
    assert_eq!((got, attempt, payload), (id, 1, b"hello".to_vec()));
    assert!(
        at - sent_at >= Duration::from_millis(295),
        "delivered early: {:?}",
        at - sent_at
    );
    assert!(
        at - sent_at < Duration::from_millis(1000),
        "delivered late: {:?}",
        at - sent_at
    );
    assert_eq!(
        wait_stats(&q, Duration::from_secs(2), QueueStats::default()).await,
        QueueStats::default()
    );
    consumer.shutdown().await.unwrap();
    assert!(wait_until(Duration::from_secs(2), || true).await);
    assert_eq!(all_keys(&client).await, Vec::<String>::new(), "keys left after ack");
}

#[tokio::test]
async fn schedule_at_and_immediate_delivery() {
    let (_server, _client, q) = start_queue("sched", FETCH_INTERVAL, |b| b).await;
    let log = Log::default();
    let consumer = q.start_consume(acking(&log)).await.unwrap();
    let start = Instant::now();
    q.send_delay_msg("now", Duration::ZERO).await.unwrap();
    q.send_schedule_msg("past", SystemTime::now() - Duration::from_secs(60))
        .await
        .unwrap();
    q.send_schedule_msg("later", SystemTime::now() + Duration::from_millis(400))
        .await
        .unwrap();
    assert!(wait_until(Duration::from_secs(5), || log.len() == 3).await);
    let log = log.snapshot();
    let at = |p: &[u8]| log.iter().find(|e| e.3 == p).unwrap().2 - start;
    assert!(at(b"now") < Duration::from_millis(300), "{:?}", at(b"now"));
    assert!(at(b"past") < Duration::from_millis(300));
    assert!(at(b"later") >= Duration::from_millis(390), "{:?}", at(b"later"));
    consumer.shutdown().await.unwrap();
}

#[tokio::test]
async fn handler_error_and_panic_retry_then_garbage_with_n_plus_1_attempts() {
    let (_server, client, q) = start_queue("flaky", FETCH_INTERVAL, |b| {
        b.default_retry_count(2)
            .nack_redelivery_delay(Duration::ZERO)
            .dead_letter_retention(Duration::ZERO)
    })
    .await;
    let log = Log::default();
    let consumer = q
        .start_consume(recording(&log, |msg: Message| async move {
            if msg.payload() == b"panic" {
                panic!("boom");
            }
            Err("always fails".into())
        }))
        .await
        .unwrap();
    let failing = q.send_delay_msg("err", Duration::ZERO).await.unwrap();
    let panicking = q.send_delay_msg("panic", Duration::ZERO).await.unwrap();
    let five = q.send_delay_msg("err", Duration::ZERO).retry_count(4).await.unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || log.len() == 3 + 3 + 5).await,
        "{}",
        log.len()
    );
    assert_eq!(log.attempts(&failing), vec![1, 2, 3]);
    assert_eq!(log.attempts(&panicking), vec![1, 2, 3]);
    assert_eq!(log.attempts(&five), vec![1, 2, 3, 4, 5]);
    // Collected as garbage: nothing of them remains.
    assert_eq!(
        wait_stats(&q, Duration::from_secs(3), QueueStats::default()).await,
        QueueStats::default()
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(log.len(), 11, "delivered again after garbage");
    consumer.shutdown().await.unwrap();
    assert_eq!(all_keys(&client).await, Vec::<String>::new());
}

#[tokio::test]
async fn many_messages_with_concurrency_are_each_delivered_once() {
    let (_server, client, q) = start_queue("many", FETCH_INTERVAL, |b| b.concurrency(16).fetch_limit(64)).await;
    let log = Log::default();
    let l = log.clone();
    // Records after the work, not before as `recording` does.
    let consumer = q
        .start_consume(move |msg: Message| {
            let l = l.clone();
            async move {
                tokio::time::sleep(Duration::from_millis(2)).await;
                l.record(&msg);
                Ok::<(), HandlerError>(())
            }
        })
        .await
        .unwrap();
    let sends = (0..2000).map(|i| {
        let q = q.clone();
        async move {
            q.send_delay_msg(format!("m{i}"), Duration::from_millis(i % 500))
                .await
                .unwrap()
        }
    });
    let ids = futures::future::join_all(sends).await;
    assert!(
        wait_until(Duration::from_secs(30), || log.len() >= 2000).await,
        "{}",
        log.len()
    );
    let counts = log.counts();
    for id in &ids {
        assert_eq!(counts.get(id), Some(&1), "{id}");
    }
    consumer.shutdown().await.unwrap();
    assert_eq!(q.stats().await.unwrap(), QueueStats::default());
    assert_eq!(all_keys(&client).await, Vec::<String>::new());
}

#[tokio::test]
async fn invalid_input_gives_typed_errors() {
    let server = RedisServer::start().await;
    let client = server.client().await;
    for name in ["", "a b", "x{y}", "tab\t"] {
        assert!(matches!(
            DelayQueue::builder(name, client.clone()).build(),
            Err(Error::InvalidQueueName { .. })
        ));
    }
    assert!(matches!(
        DelayQueue::builder("q", client.clone()).concurrency(0).build(),
        Err(Error::InvalidArgument(_))
    ));
    let q = DelayQueue::builder("q", client.clone())
        .max_payload_size(10)
        .build()
        .unwrap();
    assert!(matches!(
        q.send_delay_msg("01234567890", Duration::ZERO).await,
        Err(Error::PayloadTooLarge { size: 11, max: 10 })
    ));
    assert!(matches!(
        q.send_delay_msg("x", Duration::ZERO).id("").await,
        Err(Error::InvalidMessageId { .. })
    ));
    assert!(matches!(
        q.send_delay_msg("x", Duration::ZERO).id("a b").await,
        Err(Error::InvalidMessageId { .. })
    ));
    assert!(matches!(
        q.send_delay_msg("x", Duration::ZERO).retry_count(1_000_000).await,
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        q.send_delay_msg("x", Duration::from_secs(u64::MAX / 4)).await,
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        q.send_delay_msg("x", Duration::ZERO).msg_ttl(Duration::ZERO).await,
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(
        all_keys(&client).await,
        Vec::<String>::new(),
        "a rejected send wrote something"
    );
}

/// Debounce: each reschedule pushes the due time out again; the consumer
/// delivers once, after the last one, and a delivered message can no
/// longer be rescheduled.
#[tokio::test]
async fn reschedule_pushes_a_pending_message_out_and_delivers_it_once() {
    let (_server, client, q) = start_queue("debounce", FETCH_INTERVAL, |b| b).await;
    let log = Log::default();
    let consumer = q.start_consume(acking(&log)).await.unwrap();
    let id = q.send_delay_msg("logout", Duration::from_millis(300)).await.unwrap();
    let started = Instant::now();
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(150)).await;
        assert!(q.reschedule(&id, Duration::from_millis(300)).await.unwrap());
    }
    assert!(wait_until(Duration::from_secs(3), || log.len() == 1).await);
    let delivered_after = log.snapshot()[0].2 - started;
    assert!(delivered_after >= Duration::from_millis(740), "{delivered_after:?}");
    assert!(!q.reschedule(&id, Duration::from_secs(1)).await.unwrap());
    assert!(matches!(
        q.reschedule(&"bad id".into(), Duration::ZERO).await,
        Err(Error::InvalidMessageId { .. })
    ));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(log.len(), 1);
    consumer.shutdown().await.unwrap();
    assert!(all_keys(&client).await.is_empty());
}
