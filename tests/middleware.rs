//! Handler middleware through tower, against a real Redis: a layer sees
//! every delivery, a tower timeout is a retry, a concurrency limit holds
//! deliveries back, and a panic deep in a stack is reported as a handler's.

mod helpers;
use delayqueue_test_support as support;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use delayqueue::{Counts, HandlerError, HandlerService, Message, MessageId};
use helpers::{failures, recording, start_queue, wait_stats, Gauge, Log};
use support::{all_keys, wait_until, WAIT};
use tower::{Layer, Service, ServiceBuilder};

const FETCH_INTERVAL: Duration = Duration::from_millis(50);

/// A layer that records the id of every message passing through it.
#[derive(Clone)]
struct Seen(Arc<Mutex<Vec<MessageId>>>);

impl<S> Layer<S> for Seen {
    type Service = SeenService<S>;
    fn layer(&self, inner: S) -> SeenService<S> {
        SeenService(self.clone(), inner)
    }
}

#[derive(Clone)]
struct SeenService<S>(Seen, S);

impl<S: Service<Message>> Service<Message> for SeenService<S> {
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.1.poll_ready(cx)
    }
    fn call(&mut self, msg: Message) -> S::Future {
        self.0 .0.lock().unwrap().push(msg.id().clone());
        self.1.call(msg)
    }
}

#[tokio::test]
async fn a_layer_sees_every_delivery_and_the_stack_acks_them() {
    let (_server, client, q) = start_queue("mw-seen", FETCH_INTERVAL, |b| b.concurrency(4)).await;
    let seen = Seen(Default::default());
    let log = Log::default();
    let inner = {
        let log = log.clone();
        HandlerService::new(move |msg: Message| {
            log.record(&msg);
            async { Ok::<(), HandlerError>(()) }
        })
    };
    let stack = ServiceBuilder::new().layer(seen.clone()).service(inner);
    let consumer = q.start_consume(delayqueue::service(stack)).await.unwrap();
    let mut sent = HashSet::new();
    for i in 0..20 {
        sent.insert(q.send(format!("m{i}")).await.unwrap());
    }
    assert!(wait_until(WAIT, || log.len() >= 20).await, "delivered {}", log.len());
    assert_eq!(wait_stats(&q, WAIT, Counts::default()).await, Counts::default());
    consumer.shutdown().await.unwrap();
    let seen: HashSet<_> = seen.0.lock().unwrap().iter().cloned().collect();
    assert_eq!(seen, sent, "the layer saw every delivery");
    assert_eq!(log.ids(), sent);
    assert!(all_keys(&client).await.is_empty());
}

#[tokio::test]
async fn a_tower_timeout_is_a_failed_delivery_that_is_retried() {
    let (_server, client, q) = start_queue("mw-timeout", FETCH_INTERVAL, |b| {
        b.nack_redelivery_delay(Duration::from_millis(50))
            .max_consume_duration(Duration::from_secs(30))
    })
    .await;
    let mut events = q.events();
    let log = Log::default();
    let inner = HandlerService::new(recording(&log, |msg: Message| async move {
        if msg.attempt() == 1 {
            // Never answers: only the layer's timeout ends it.
            std::future::pending::<()>().await;
        }
        Ok(())
    }));
    let stack = ServiceBuilder::new().timeout(Duration::from_millis(200)).service(inner);
    let consumer = q.start_consume(delayqueue::service(stack)).await.unwrap();
    let id = q.send("slow once").await.unwrap();
    assert_eq!(failures(&mut events, 1).await, [(1, "request timed out".to_string())]);
    assert_eq!(wait_stats(&q, WAIT, Counts::default()).await, Counts::default());
    assert_eq!(log.attempts(&id), [1, 2], "retried after the timeout, then acked");
    consumer.shutdown().await.unwrap();
    assert!(all_keys(&client).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_concurrency_limit_layer_holds_deliveries_back_in_poll_ready() {
    let (_server, client, q) = start_queue("mw-limit", FETCH_INTERVAL, |b| b.concurrency(8)).await;
    let gauge = Gauge::default();
    let inner = tower::service_fn(gauge.handler(Duration::from_millis(20)));
    let stack = ServiceBuilder::new().concurrency_limit(2).service(inner);
    for i in 0..24 {
        q.send(format!("m{i}")).await.unwrap();
    }
    let consumer = q.start_consume(delayqueue::service(stack)).await.unwrap();
    assert!(wait_until(WAIT, || gauge.done() >= 24).await);
    assert_eq!(wait_stats(&q, WAIT, Counts::default()).await, Counts::default());
    consumer.shutdown().await.unwrap();
    let most = gauge.most();
    assert!((1..=2).contains(&most), "{most} ran at once under a limit of 2");
    assert!(all_keys(&client).await.is_empty());
}

#[tokio::test]
async fn a_panic_inside_a_stack_is_reported_as_a_handler_panic() {
    let (_server, client, q) = start_queue("mw-panic", FETCH_INTERVAL, |b| {
        b.nack_redelivery_delay(Duration::from_millis(50))
    })
    .await;
    let mut events = q.events();
    let log = Log::default();
    let inner = HandlerService::new(recording(&log, |msg: Message| async move {
        if msg.attempt() == 1 {
            panic!("boom in the inner service");
        }
        Ok(())
    }));
    let stack = ServiceBuilder::new()
        .layer(Seen(Default::default()))
        .timeout(Duration::from_secs(30))
        .service(inner);
    let consumer = q.start_consume(delayqueue::service(stack)).await.unwrap();
    let id = q.send("panics once").await.unwrap();
    assert_eq!(
        failures(&mut events, 1).await,
        [(1, "panic: boom in the inner service".to_string())]
    );
    assert_eq!(wait_stats(&q, WAIT, Counts::default()).await, Counts::default());
    assert_eq!(log.attempts(&id), [1, 2]);
    consumer.shutdown().await.unwrap();
    assert!(all_keys(&client).await.is_empty());
}
