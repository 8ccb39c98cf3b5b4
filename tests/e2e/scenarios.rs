//! The end-to-end scenarios, each an async fn generic over the [`Backend`]
//! it runs on. [`scenario_tests!`] turns every one of them into a test for
//! a given backend; a scenario missing from its list is dead code, which
//! the lints reject.
//!
//! A scenario builds its queues with `Backend::builder` (so the backend's
//! settings apply and the names are in the test's namespace), checks for
//! leaks with `Backend::keys` (every node), and touches nothing but its own
//! queues: tests may share a cluster, so no `FLUSHALL`, no server restarts.

use std::time::{Duration, Instant, SystemTime};

use delayqueue::{Counts, DelayQueue, DelayQueueBuilder, Error, HandlerError, Message, MessageId, NewMessage};

use crate::backends::Backend;
use crate::helpers::{acking, recording, wait_stats, Log};
use crate::support::{wait_until, WAIT};

/// How often the consumers in these tests poll.
const FETCH_INTERVAL: Duration = Duration::from_millis(100);

/// Defines one `#[tokio::test]` per scenario of this file, each running it
/// on a fresh backend of type `$backend`. Expand it in a module of its own
/// per backend: the tests are named after the scenarios.
macro_rules! scenario_tests {
    ($backend:ty) => {
        $crate::scenarios::scenario_tests!(@each $backend;
            delayed_message_is_delivered_not_before_due_and_leaves_nothing,
            schedule_at_and_immediate_delivery,
            handler_error_and_panic_retry_then_garbage_with_n_plus_1_attempts,
            many_messages_with_concurrency_are_each_delivered_once,
            invalid_input_gives_typed_errors,
            reschedule_pushes_a_pending_message_out_and_delivers_it_once,
            batches_cancels_and_duplicates_keep_the_queue_consistent,
        );
    };
    (@each $backend:ty; $($scenario:ident),* $(,)?) => {
        $(
            #[tokio::test]
            async fn $scenario() {
                let started = std::time::Instant::now();
                let backend = <$backend as $crate::backends::Backend>::start().await;
                let ready = started.elapsed();
                $crate::scenarios::$scenario(&backend).await;
                println!(
                    "{}::{}: backend ready after {ready:?}, done after {:?}",
                    module_path!(),
                    stringify!($scenario),
                    started.elapsed()
                );
            }
        )*
    };
}
pub(crate) use scenario_tests;

/// The test's queue `base`, polling every [`FETCH_INTERVAL`], with the
/// backend's settings and then `configure`'s.
fn queue(
    backend: &impl Backend,
    base: &str,
    configure: impl FnOnce(DelayQueueBuilder) -> DelayQueueBuilder,
) -> DelayQueue {
    configure(backend.builder(base).fetch_interval(FETCH_INTERVAL))
        .build()
        .unwrap()
}

pub async fn delayed_message_is_delivered_not_before_due_and_leaves_nothing(b: &impl Backend) {
    let q = queue(b, "orders", |b| b);
    let log = Log::default();
    let consumer = q.start_consume(acking(&log)).await.unwrap();
    let sent_at = Instant::now();
    let id = q.send("hello").delay(Duration::from_millis(300)).await.unwrap();
    assert!(wait_until(WAIT, || log.len() == 1).await);
    let (got, attempt, at, payload) = log.snapshot()[0].clone();
    assert_eq!((got, attempt, payload), (id, 1, b"hello".to_vec()));
    // Never early. How late is scheduling on a possibly loaded machine,
    // not a pass condition.
    assert!(
        at - sent_at >= Duration::from_millis(295),
        "delivered early: {:?}",
        at - sent_at
    );
    assert_eq!(wait_stats(&q, WAIT, Counts::default()).await, Counts::default());
    consumer.shutdown().await.unwrap();
    assert_eq!(b.keys().await, Vec::<String>::new(), "keys left after ack");
}

pub async fn schedule_at_and_immediate_delivery(b: &impl Backend) {
    let q = queue(b, "sched", |b| b);
    let log = Log::default();
    let consumer = q.start_consume(acking(&log)).await.unwrap();
    let start = Instant::now();
    q.send("now").await.unwrap();
    q.send("past")
        .at(SystemTime::now() - Duration::from_secs(60))
        .await
        .unwrap();
    q.send("later")
        .at(SystemTime::now() + Duration::from_millis(400))
        .await
        .unwrap();
    assert!(wait_until(WAIT, || log.len() == 3).await);
    let log = log.snapshot();
    let at = |p: &[u8]| log.iter().find(|e| e.3 == p).unwrap().2 - start;
    // Due now and overdue come at once: before the one due later, which
    // comes not early. (How soon is not a pass condition.)
    assert!(at(b"now") < at(b"later"), "{log:?}");
    assert!(at(b"past") < at(b"later"), "{log:?}");
    assert!(at(b"later") >= Duration::from_millis(390), "{:?}", at(b"later"));
    assert_eq!(wait_stats(&q, WAIT, Counts::default()).await, Counts::default());
    consumer.shutdown().await.unwrap();
    assert_eq!(b.keys().await, Vec::<String>::new());
}

pub async fn handler_error_and_panic_retry_then_garbage_with_n_plus_1_attempts(b: &impl Backend) {
    let q = queue(b, "flaky", |b| {
        b.default_retry_count(2)
            .nack_redelivery_delay(Duration::ZERO)
            .dead_letter_retention(Duration::ZERO)
    });
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
    let failing = q.send("err").await.unwrap();
    let panicking = q.send("panic").await.unwrap();
    let five = q.send("err").retry_count(4).await.unwrap();
    assert!(wait_until(WAIT, || log.len() == 3 + 3 + 5).await, "{}", log.len());
    assert_eq!(log.attempts(&failing), vec![1, 2, 3]);
    assert_eq!(log.attempts(&panicking), vec![1, 2, 3]);
    assert_eq!(log.attempts(&five), vec![1, 2, 3, 4, 5]);
    // Collected as garbage: nothing of them remains.
    assert_eq!(wait_stats(&q, WAIT, Counts::default()).await, Counts::default());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(log.len(), 11, "delivered again after garbage");
    consumer.shutdown().await.unwrap();
    assert_eq!(b.keys().await, Vec::<String>::new());
}

pub async fn many_messages_with_concurrency_are_each_delivered_once(b: &impl Backend) {
    let q = queue(b, "many", |b| b.concurrency(16).fetch_limit(64));
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
            q.send(format!("m{i}"))
                .delay(Duration::from_millis(i % 500))
                .await
                .unwrap()
        }
    });
    let ids = futures::future::join_all(sends).await;
    assert!(wait_until(2 * WAIT, || log.len() >= 2000).await, "{}", log.len());
    let counts = log.counts();
    for id in &ids {
        assert_eq!(counts.get(id), Some(&1), "{id}");
    }
    consumer.shutdown().await.unwrap();
    assert_eq!(q.counts().await.unwrap(), Counts::default());
    assert_eq!(b.keys().await, Vec::<String>::new());
}

pub async fn invalid_input_gives_typed_errors(b: &impl Backend) {
    for name in ["", "a b", "x{y}", "tab\t"] {
        assert!(matches!(
            b.configure(DelayQueue::builder(name, b.client().clone())).build(),
            Err(Error::InvalidQueueName { .. })
        ));
    }
    assert!(matches!(
        b.builder("q").concurrency(0).build(),
        Err(Error::InvalidArgument(_))
    ));
    let q = b.builder("q").max_payload_size(10).build().unwrap();
    assert!(matches!(
        q.send("01234567890").await,
        Err(Error::PayloadTooLarge { size: 11, max: 10 })
    ));
    assert!(matches!(q.send("x").id("").await, Err(Error::InvalidMessageId { .. })));
    assert!(matches!(
        q.send("x").id("a b").await,
        Err(Error::InvalidMessageId { .. })
    ));
    assert!(matches!(
        q.send("x").retry_count(1_000_000).await,
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        q.send("x").delay(Duration::from_secs(u64::MAX / 4)).await,
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        q.send("x").expire_after(Duration::ZERO).await,
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(b.keys().await, Vec::<String>::new(), "a rejected send wrote something");
}

/// Debounce: each reschedule pushes the due time out again; the consumer
/// delivers once, after the last one, and a delivered message can no
/// longer be rescheduled.
pub async fn reschedule_pushes_a_pending_message_out_and_delivers_it_once(b: &impl Backend) {
    let q = queue(b, "debounce", |b| b);
    let log = Log::default();
    let consumer = q.start_consume(acking(&log)).await.unwrap();
    // Due long after each next reschedule, however slow the machine: the
    // consumer sees a due time come that was pushed out before it came.
    let debounce = Duration::from_secs(2);
    let id = q.send("logout").delay(debounce).await.unwrap();
    let mut last = Instant::now();
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(150)).await;
        last = Instant::now();
        assert!(q.reschedule(&id, debounce).await.unwrap());
    }
    assert!(wait_until(WAIT, || log.len() == 1).await);
    let delivered_after = log.snapshot()[0].2 - last;
    assert!(
        delivered_after >= debounce - Duration::from_millis(10),
        "{delivered_after:?}"
    );
    assert!(!q.reschedule(&id, Duration::from_secs(1)).await.unwrap());
    assert!(matches!(
        q.reschedule("bad id", Duration::ZERO).await,
        Err(Error::InvalidMessageId { .. })
    ));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(log.len(), 1);
    consumer.shutdown().await.unwrap();
    assert!(b.keys().await.is_empty());
}

/// Batch and single sends with caller-given ids, a duplicate id refused,
/// cancel (once), reschedule to now, stats of what is left and a clean
/// integrity check before and after, and nothing left behind.
pub async fn batches_cancels_and_duplicates_keep_the_queue_consistent(b: &impl Backend) {
    let q = queue(b, "batches", |b| b.concurrency(8));
    let log = Log::default();
    let consumer = q.start_consume(acking(&log)).await.unwrap();

    // Long-delayed messages: cancelled, rescheduled, counted by stats.
    let later = q
        .send_batch((0..20).map(|i| {
            NewMessage::new("later")
                .delay(Duration::from_secs(600))
                .id(format!("later-{i}"))
        }))
        .await
        .unwrap();
    let later: Vec<MessageId> = later.into_iter().map(Result::unwrap).collect();
    assert_eq!(q.counts().await.unwrap().pending, 20);
    assert!(matches!(
        q.send("again").id("later-0").await,
        Err(Error::Duplicate { .. })
    ));

    // Due within 200 ms, in a batch and one by one.
    let batch = q
        .send_batch((0..200).map(|i| NewMessage::new(format!("b{i}")).delay(Duration::from_millis(i % 200))))
        .await
        .unwrap();
    let mut ids: Vec<MessageId> = batch.into_iter().map(Result::unwrap).collect();
    for i in 0..50 {
        ids.push(q.send(format!("s{i}")).await.unwrap());
    }

    // Cancel half of the later ones; move one of the rest to now.
    for id in &later[..10] {
        assert!(q.cancel(id).await.unwrap(), "{id}");
    }
    assert!(!q.cancel(&later[0]).await.unwrap());
    assert!(q.reschedule(&later[10], Duration::ZERO).await.unwrap());
    ids.push(later[10].clone());

    assert!(
        wait_until(WAIT, || log.len() >= ids.len()).await,
        "{} of {} delivered",
        log.len(),
        ids.len()
    );
    let counts = log.counts();
    for id in &ids {
        assert_eq!(counts.get(id), Some(&1), "{id}");
    }

    // What is left: the 9 later ones, pending.
    let mut want = Counts::default();
    want.pending = 9;
    assert_eq!(wait_stats(&q, WAIT, want).await, want);
    let report = q.check_integrity().await.unwrap();
    assert!(report.is_clean(), "{report}");
    for id in &later[11..] {
        assert!(q.cancel(id).await.unwrap(), "{id}");
    }
    consumer.shutdown().await.unwrap();
    assert_eq!(q.counts().await.unwrap(), Counts::default());
    let report = q.check_integrity().await.unwrap();
    assert!(report.is_clean(), "{report}");
    assert_eq!(log.len(), ids.len(), "delivered more than once");
    assert_eq!(b.keys().await, Vec::<String>::new());
}
