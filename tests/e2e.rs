//! End-to-end behaviour of producer and consumer against a real redis-server.

mod support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use delayqueue::{DelayQueue, Error, HandlerError, Message, MessageId, QueueStats};
use fred::prelude::*;
use support::RedisServer;

/// One delivery as the handler saw it: id, attempt, arrival, payload.
type Delivery = (MessageId, u32, Instant, Vec<u8>);

/// Records every delivery.
#[derive(Clone, Default)]
struct Ledger(Arc<Mutex<Vec<Delivery>>>);

impl Ledger {
    fn record(&self, msg: &Message) {
        self.0
            .lock()
            .unwrap()
            .push((msg.id().clone(), msg.attempt(), Instant::now(), msg.payload().to_vec()));
    }
    fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }
    fn attempts(&self, id: &MessageId) -> Vec<u32> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|e| &e.0 == id)
            .map(|e| e.1)
            .collect()
    }
    fn counts(&self) -> HashMap<MessageId, usize> {
        let mut m = HashMap::new();
        for e in self.0.lock().unwrap().iter() {
            *m.entry(e.0.clone()).or_insert(0) += 1;
        }
        m
    }
}

/// Polls `cond` every 10 ms until it holds or `limit` passes.
async fn wait_until(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if cond() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    cond()
}

async fn wait_stats(queue: &DelayQueue, limit: Duration, want: QueueStats) -> QueueStats {
    let end = Instant::now() + limit;
    loop {
        let s = queue.stats().await.unwrap();
        if s == want || Instant::now() > end {
            return s;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Every key in the server (the tests own the server).
async fn all_keys(client: &Client) -> Vec<String> {
    let mut keys: Vec<String> = client.custom(fred::cmd!("KEYS"), vec!["*"]).await.unwrap();
    keys.sort();
    keys
}

fn queue(name: &str, client: &Client) -> delayqueue::DelayQueueBuilder {
    DelayQueue::builder(name, client.clone()).fetch_interval(Duration::from_millis(100))
}

#[tokio::test]
async fn delayed_message_is_delivered_not_before_due_and_leaves_nothing() {
    let server = RedisServer::start().await;
    let client = server.client().await;
    let q = queue("orders", &client).build().unwrap();
    let ledger = Ledger::default();
    let l = ledger.clone();
    let consumer = q
        .start_consume(move |msg: Message| {
            let l = l.clone();
            async move {
                l.record(&msg);
                Ok::<(), HandlerError>(())
            }
        })
        .await
        .unwrap();
    let sent_at = Instant::now();
    let id = q.send_delay_msg("hello", Duration::from_millis(300)).await.unwrap();
    assert!(wait_until(Duration::from_secs(5), || ledger.len() == 1).await);
    let (got, attempt, at, payload) = ledger.0.lock().unwrap()[0].clone();
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
    let server = RedisServer::start().await;
    let client = server.client().await;
    let q = queue("sched", &client).build().unwrap();
    let ledger = Ledger::default();
    let l = ledger.clone();
    let consumer = q
        .start_consume(move |msg: Message| {
            let l = l.clone();
            async move {
                l.record(&msg);
                Ok::<(), HandlerError>(())
            }
        })
        .await
        .unwrap();
    let start = Instant::now();
    q.send_delay_msg("now", Duration::ZERO).await.unwrap();
    q.send_schedule_msg("past", SystemTime::now() - Duration::from_secs(60))
        .await
        .unwrap();
    q.send_schedule_msg("later", SystemTime::now() + Duration::from_millis(400))
        .await
        .unwrap();
    assert!(wait_until(Duration::from_secs(5), || ledger.len() == 3).await);
    let log = ledger.0.lock().unwrap().clone();
    let at = |p: &[u8]| log.iter().find(|e| e.3 == p).unwrap().2 - start;
    assert!(at(b"now") < Duration::from_millis(300), "{:?}", at(b"now"));
    assert!(at(b"past") < Duration::from_millis(300));
    assert!(at(b"later") >= Duration::from_millis(390), "{:?}", at(b"later"));
    consumer.shutdown().await.unwrap();
}

#[tokio::test]
async fn handler_error_and_panic_retry_then_garbage_with_n_plus_1_attempts() {
    let server = RedisServer::start().await;
    let client = server.client().await;
    let q = queue("flaky", &client).default_retry_count(2).build().unwrap();
    let ledger = Ledger::default();
    let l = ledger.clone();
    let consumer = q
        .start_consume(move |msg: Message| {
            let l = l.clone();
            async move {
                l.record(&msg);
                if msg.payload() == b"panic" {
                    panic!("boom");
                }
                Err::<(), HandlerError>("always fails".into())
            }
        })
        .await
        .unwrap();
    let failing = q.send_delay_msg("err", Duration::ZERO).await.unwrap();
    let panicking = q.send_delay_msg("panic", Duration::ZERO).await.unwrap();
    let five = q.send_delay_msg("err", Duration::ZERO).retry_count(4).await.unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || ledger.len() == 3 + 3 + 5).await,
        "{}",
        ledger.len()
    );
    assert_eq!(ledger.attempts(&failing), vec![1, 2, 3]);
    assert_eq!(ledger.attempts(&panicking), vec![1, 2, 3]);
    assert_eq!(ledger.attempts(&five), vec![1, 2, 3, 4, 5]);
    // Collected as garbage: nothing of them remains.
    assert_eq!(
        wait_stats(&q, Duration::from_secs(3), QueueStats::default()).await,
        QueueStats::default()
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(ledger.len(), 11, "delivered again after garbage");
    consumer.shutdown().await.unwrap();
    assert_eq!(all_keys(&client).await, Vec::<String>::new());
}

#[tokio::test]
async fn many_messages_with_concurrency_are_each_delivered_once() {
    let server = RedisServer::start().await;
    let client = server.client().await;
    let q = queue("many", &client).concurrency(16).fetch_limit(64).build().unwrap();
    let ledger = Ledger::default();
    let l = ledger.clone();
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
        wait_until(Duration::from_secs(30), || ledger.len() >= 2000).await,
        "{}",
        ledger.len()
    );
    let counts = ledger.counts();
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
