//! Batch handlers (`DelayQueue::consume_batch`) against a real Redis: a
//! partial failure retries only the failed messages, a consumer that dies
//! mid-batch leaves the whole batch to come back after its leases, leases
//! are renewed while a long batch runs, a batch holds at most its size and
//! runs on its wait, groups by a header, and bad options are typed errors.

mod helpers;
use delayqueue_test_support as support;

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use delayqueue::fred::prelude::Client;
use delayqueue::Consumer;
use delayqueue::{BatchHandler, Counts, DelayQueue, Error, Event, HandlerError, Message, MessageId, NewMessage};
use helpers::{failures, start_queue, wait_stats};
use support::{all_keys, client_for, wait_for, wait_until, WAIT};

const FETCH_INTERVAL: Duration = Duration::from_millis(50);

/// One batch as its handler saw it: when it arrived, and each message's
/// (id, attempt, payload, `tenant` header).
type Seen = (Instant, Vec<(MessageId, u32, String, Option<String>)>);

/// Every batch a handler saw, in order. Clones share it.
#[derive(Clone, Default)]
struct Batches(Arc<Mutex<Vec<Seen>>>);

impl Batches {
    fn record(&self, batch: &[Message]) {
        let seen = batch
            .iter()
            .map(|m| {
                let payload = String::from_utf8_lossy(m.payload()).into_owned();
                (
                    m.id().clone(),
                    m.attempt(),
                    payload,
                    m.header("tenant").map(str::to_string),
                )
            })
            .collect();
        self.0.lock().unwrap().push((Instant::now(), seen));
    }

    fn snapshot(&self) -> Vec<Seen> {
        self.0.lock().unwrap().clone()
    }

    /// Messages seen over all batches.
    fn messages(&self) -> usize {
        self.0.lock().unwrap().iter().map(|b| b.1.len()).sum()
    }

    /// A batch handler that records each batch, then runs `then` on it.
    fn recording<F, Fut>(&self, then: F) -> impl BatchHandler
    where
        F: Fn(Vec<Message>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Vec<Result<(), HandlerError>>> + Send + 'static,
    {
        let batches = self.clone();
        move |batch: Vec<Message>| {
            batches.record(&batch);
            then(batch)
        }
    }

    /// A batch handler that records each batch, then answers each message with `verdict`.
    fn handler(
        &self,
        verdict: impl Fn(&Message) -> Result<(), HandlerError> + Send + Sync + 'static,
    ) -> impl BatchHandler {
        self.recording(move |batch: Vec<Message>| {
            let results: Vec<_> = batch.iter().map(&verdict).collect();
            async move { results }
        })
    }
}

/// Sends `n` messages, payloads "0", "1", ...; returns their ids in order.
async fn send_n(q: &DelayQueue, n: usize) -> Vec<MessageId> {
    let mut ids = Vec::with_capacity(n);
    for i in 0..n {
        ids.push(q.send(format!("{i}")).await.unwrap());
    }
    ids
}

/// Waits until `batches` saw `n` messages, stops `consumer` gracefully
/// (its batches end and are acked), and checks that the queue holds
/// nothing and no key is left. Returns the batches seen.
async fn finish(q: &DelayQueue, client: &Client, consumer: Consumer, batches: &Batches, n: usize) -> Vec<Seen> {
    assert!(
        wait_until(WAIT, || batches.messages() >= n).await,
        "{} of {n} messages: {:?}",
        batches.messages(),
        batches.snapshot()
    );
    consumer.shutdown().await.unwrap();
    assert_eq!(wait_stats(q, WAIT, Counts::default()).await, Counts::default());
    // The claim receipt of a consumer that died expires on its own.
    assert!(
        wait_for(WAIT, || async { all_keys(client).await.is_empty() }).await,
        "keys left: {:?}",
        all_keys(client).await
    );
    batches.snapshot()
}

#[tokio::test]
async fn a_partial_failure_retries_only_the_failed_messages() {
    let (_server, client, q) = start_queue("batch-partial", FETCH_INTERVAL, |b| {
        b.nack_redelivery_delay(Duration::from_millis(50))
    })
    .await;
    let ids: HashMap<MessageId, usize> = send_n(&q, 10).await.into_iter().zip(0..).collect();
    let batches = Batches::default();
    // Odd payloads fail their first delivery.
    let handler = batches.handler(|m| match (m.payload()[0] - b'0') % 2 == 1 && m.attempt() == 1 {
        true => Err("odd fails once".into()),
        false => Ok(()),
    });
    let consumer = q
        .consume_batch(handler)
        .size(10)
        .wait(Duration::from_secs(1))
        .await
        .unwrap();
    let seen = finish(&q, &client, consumer, &batches, 15).await;
    assert_eq!(seen[0].1.len(), 10, "the first batch holds every message: {seen:?}");
    let mut deliveries: HashMap<MessageId, Vec<u32>> = HashMap::new();
    for (_, batch) in &seen {
        for (id, attempt, _, _) in batch {
            deliveries.entry(id.clone()).or_default().push(*attempt);
        }
    }
    for (id, i) in &ids {
        let want: &[u32] = if i % 2 == 1 { &[1, 2] } else { &[1] };
        assert_eq!(deliveries[id], want, "payload {i}");
    }
    let retried: HashSet<_> = seen[1..].iter().flat_map(|b| b.1.iter().map(|m| m.0.clone())).collect();
    let odd: HashSet<_> = ids
        .iter()
        .filter(|(_, i)| *i % 2 == 1)
        .map(|(id, _)| id.clone())
        .collect();
    assert_eq!(retried, odd, "only the failed messages came back");
}

#[tokio::test]
async fn a_panic_fails_the_whole_batch_as_a_handler_panic_and_short_results_fail_the_rest() {
    let (_server, client, q) = start_queue("batch-panic", FETCH_INTERVAL, |b| {
        b.nack_redelivery_delay(Duration::from_millis(50))
    })
    .await;
    let mut events = q.events();
    send_n(&q, 4).await;
    let batches = Batches::default();
    let handler = batches.recording(|batch: Vec<Message>| async move {
        match batch[0].attempt() {
            1 => panic!("boom in the batch"),
            // One result for a batch of four: the other three fail.
            2 => vec![Ok(())],
            _ => batch.iter().map(|_| Ok(())).collect(),
        }
    });
    let consumer = q
        .consume_batch(handler)
        .size(4)
        .wait(Duration::from_secs(2))
        .await
        .unwrap();
    let reasons = failures(&mut events, 7).await;
    finish(&q, &client, consumer, &batches, 4 + 4 + 3).await;
    let panics = reasons
        .iter()
        .filter(|r| r == &&(1, "panic: boom in the batch".to_string()));
    assert_eq!(panics.count(), 4, "{reasons:?}");
    let short = reasons
        .iter()
        .filter(|(a, r)| *a == 2 && r.contains("returned 1 results for 4 messages"));
    assert_eq!(short.count(), 3, "{reasons:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_that_dies_mid_batch_leaves_the_whole_batch_to_come_back_after_its_leases() {
    const N: usize = 8;
    let lease = Duration::from_secs(1);
    let (server, client, q) = start_queue("batch-crash", FETCH_INTERVAL, |b| b.max_consume_duration(lease)).await;
    let sent: HashSet<_> = send_n(&q, N).await.into_iter().collect();
    // The dying consumer runs on a runtime of its own, with a client of its
    // own; shutting that runtime down ends its tasks mid-batch, as a crash does.
    let url = server.url();
    let crashed_at = tokio::task::spawn_blocking(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let consumer = rt.block_on(async {
            let client = client_for(&url).await;
            let q = helpers::queue_builder("batch-crash", &client, FETCH_INTERVAL)
                .max_consume_duration(lease)
                .build()
                .unwrap();
            let (started, mut got) = tokio::sync::mpsc::unbounded_channel();
            let handler = move |batch: Vec<Message>| {
                let _ = started.send(batch.len());
                async move { std::future::pending::<Vec<Result<(), HandlerError>>>().await }
            };
            let consumer = q.consume_batch(handler).size(N).wait(lease / 2).await.unwrap();
            let first = tokio::time::timeout(WAIT, got.recv()).await;
            assert_eq!(first.expect("a batch within WAIT"), Some(N));
            consumer
        });
        let at = Instant::now();
        rt.shutdown_background();
        drop(consumer);
        at
    })
    .await
    .unwrap();
    assert_eq!(
        q.counts().await.unwrap().processing,
        N as u64,
        "the batch is still leased"
    );
    let batches = Batches::default();
    let consumer = q
        .consume_batch(batches.handler(|_| Ok(())))
        .size(N)
        .wait(Duration::from_millis(500))
        .await
        .unwrap();
    let seen = finish(&q, &client, consumer, &batches, N).await;
    let again: HashSet<_> = seen.iter().flat_map(|b| b.1.iter().map(|m| m.0.clone())).collect();
    assert_eq!(again, sent, "every message of the batch came back");
    assert!(seen.iter().flat_map(|b| &b.1).all(|m| m.1 == 2), "as second deliveries");
    // The leases began before the crash, so allow for the batch's own time.
    let after = seen[0].0 - crashed_at;
    assert!(
        after >= lease / 2,
        "redelivered {after:?} after the crash, lease {lease:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_are_renewed_while_a_batch_outlives_them() {
    const N: usize = 6;
    let lease = Duration::from_secs(2);
    let (_server, client, q) = start_queue("batch-renew", FETCH_INTERVAL, |b| {
        b.max_consume_duration(lease).handler_timeout(Duration::from_secs(60))
    })
    .await;
    let mut events = q.events();
    send_n(&q, N).await;
    let batches = Batches::default();
    let handler = batches.recording(move |batch: Vec<Message>| async move {
        // The work: two and a half leases long.
        tokio::time::sleep(lease * 5 / 2).await;
        batch.iter().map(|_| Ok(())).collect()
    });
    let consumer = q
        .consume_batch(handler)
        .size(N)
        .wait(Duration::from_secs(1))
        .await
        .unwrap();
    let seen = finish(&q, &client, consumer, &batches, N).await;
    assert_eq!(seen.len(), 1, "one batch, never taken back: {seen:?}");
    assert_eq!(seen[0].1.len(), N);
    let mut acked = 0;
    while let Ok(event) = events.try_recv() {
        match event {
            Event::Acked { .. } => acked += 1,
            Event::LeaseLost { .. } | Event::Failed { .. } => panic!("{event:?}"),
            _ => {}
        }
    }
    assert_eq!(acked, N);
}

#[tokio::test]
async fn a_batch_holds_at_most_its_size_runs_when_full_and_otherwise_after_its_wait() {
    let (_server, client, q) = start_queue("batch-size", FETCH_INTERVAL, |b| {
        b.max_consume_duration(Duration::from_secs(30))
            .handler_timeout(Duration::from_secs(60))
    })
    .await;
    send_n(&q, 10).await;
    // A long wait: full batches must not wait for it.
    let batches = Batches::default();
    let sent = Instant::now();
    let consumer = q
        .consume_batch(batches.handler(|_| Ok(())))
        .size(5)
        .wait(Duration::from_secs(40))
        .await
        .unwrap();
    let seen = finish(&q, &client, consumer, &batches, 10).await;
    assert_eq!(seen.iter().map(|b| b.1.len()).collect::<Vec<_>>(), [5, 5]);
    assert!(seen[1].0 - sent < Duration::from_secs(20), "full batches ran at once");

    // Fewer than the size: the batch runs with what it has after the wait.
    let wait = Duration::from_millis(400);
    let batches = Batches::default();
    let consumer = q
        .consume_batch(batches.handler(|_| Ok(())))
        .size(5)
        .wait(wait)
        .await
        .unwrap();
    let sent = Instant::now();
    // In one call, so both are due at once however slow the machine.
    let two = q
        .send_batch([NewMessage::new("a"), NewMessage::new("b")])
        .await
        .unwrap();
    assert!(two.iter().all(Result::is_ok));
    let seen = finish(&q, &client, consumer, &batches, 2).await;
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].1.len(), 2);
    assert!(seen[0].0 - sent >= wait, "ran {:?} after the send", seen[0].0 - sent);
}

#[tokio::test]
async fn batches_grouped_by_a_header_hold_one_group_each() {
    let (_server, client, q) = start_queue("batch-group", FETCH_INTERVAL, |b| {
        b.concurrency(2)
            .max_consume_duration(Duration::from_secs(30))
            .handler_timeout(Duration::from_secs(60))
    })
    .await;
    for tenant in ["a", "a", "a", "b", "b", "b"] {
        q.send(tenant).header("tenant", tenant).await.unwrap();
    }
    let batches = Batches::default();
    let consumer = q
        .consume_batch(batches.handler(|_| Ok(())))
        .size(3)
        .wait(Duration::from_secs(40))
        .split_by_header("tenant")
        .await
        .unwrap();
    finish(&q, &client, consumer, &batches, 6).await;
    let mut groups: Vec<Vec<Option<String>>> = batches
        .snapshot()
        .into_iter()
        .map(|b| b.1.into_iter().map(|m| m.3).collect())
        .collect();
    groups.sort();
    let t = |s: &str| Some(s.to_string());
    assert_eq!(groups, [vec![t("a"); 3], vec![t("b"); 3]], "full groups ran at once");
}

#[tokio::test]
async fn bad_batch_options_are_typed_errors_and_write_nothing() {
    let (_server, client, q) = start_queue("batch-bad", FETCH_INTERVAL, |b| b).await;
    let ok =
        |batch: Vec<Message>| async move { batch.iter().map(|_| Ok(())).collect::<Vec<Result<(), HandlerError>>>() };
    let reason = |r: Result<delayqueue::Consumer, Error>| match r {
        Err(Error::InvalidArgument(why)) => why,
        other => panic!("{other:?}"),
    };
    assert!(reason(q.consume_batch(ok).size(0).await).contains("batch size"));
    let over = delayqueue::MAX_BATCH_SIZE + 1;
    assert!(reason(q.consume_batch(ok).size(over).await).contains("batch size"));
    // handler_timeout is max_consume_duration, 5 s.
    let wait = q.consume_batch(ok).wait(Duration::from_secs(5)).await;
    assert!(reason(wait).contains("handler_timeout"));
    assert!(all_keys(&client).await.is_empty());
}
