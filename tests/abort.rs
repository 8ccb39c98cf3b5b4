//! `DelayQueue::abort` (docs/handlers.md, "Aborting a running handler"):
//! a running handler is told through `Message::aborted`, by the abort
//! signal on the wake-up channel or, when that was lost, by its lease
//! renewal; whatever it returns the message ends as aborted; a worker
//! process killed holding an aborted message does not bring it back. Each
//! against a private redis-server.

mod helpers;
use delayqueue_test_support as support;

use std::time::Duration;

use delayqueue::fred::prelude::*;
use delayqueue::{AbortOutcome, Counts, DelayQueue, Error, Event, HandlerError, Message};
use helpers::worker::{read_ledger, Worker, WorkerOptions};
use helpers::{start_queue, wait_stats};
use support::{all_keys, wait_for, wait_until, WAIT};
use tokio::sync::mpsc;

/// A handler that reports each start on `started`, waits for its abort,
/// then fails (`fail`) or succeeds: neither brings an aborted message back.
fn waits_for_abort(
    started: mpsc::UnboundedSender<String>,
    fail: bool,
) -> impl Fn(Message) -> futures::future::BoxFuture<'static, Result<(), HandlerError>> + Send + Sync + 'static {
    move |msg: Message| {
        let started = started.clone();
        Box::pin(async move {
            let _ = started.send(msg.id().to_string());
            msg.aborted().await;
            assert!(msg.is_aborted() && msg.abort_token().is_cancelled());
            if fail {
                return Err("stopped on abort".into());
            }
            Ok(())
        })
    }
}

/// Waits for `n` events `Aborted`; fails on any sign of a retry or a dead letter.
async fn aborted_events(events: &mut tokio::sync::broadcast::Receiver<Event>, n: usize) -> Vec<String> {
    let mut ids = Vec::new();
    let wait = async {
        while ids.len() < n {
            match events.recv().await.expect("events") {
                Event::Aborted { id } => ids.push(id.to_string()),
                e @ (Event::Failed { .. } | Event::Dead { .. } | Event::Acked { .. } | Event::TimedOut { .. }) => {
                    panic!("an aborted message must not be {e:?}")
                }
                _ => {}
            }
        }
    };
    tokio::time::timeout(WAIT, wait)
        .await
        .expect("Aborted events within WAIT");
    ids.sort();
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_handler_is_told_and_its_message_ends_as_aborted_whatever_it_returns() {
    let (_server, client, queue) = start_queue("ab", Duration::from_millis(100), |b| b).await;
    let mut events = queue.events();
    let (tx, mut started) = mpsc::unbounded_channel();
    let failing = queue.clone();
    let (tx2, mut started2) = mpsc::unbounded_channel();
    let consumer = queue.start_consume(waits_for_abort(tx, true)).await.unwrap();
    // A second queue whose handler returns Ok after the abort.
    let ok_queue = DelayQueue::builder("ab2", client.clone())
        .fetch_interval(Duration::from_millis(100))
        .build()
        .unwrap();
    let mut ok_events = ok_queue.events();
    let ok_consumer = ok_queue.start_consume(waits_for_abort(tx2, false)).await.unwrap();

    let a = failing.send("a").await.unwrap();
    let b = ok_queue.send("b").await.unwrap();
    assert_eq!(started.recv().await.as_deref(), Some(a.as_str()));
    assert_eq!(started2.recv().await.as_deref(), Some(b.as_str()));
    assert_eq!(failing.abort(&a).await.unwrap(), AbortOutcome::Aborting);
    assert_eq!(ok_queue.abort(&b).await.unwrap(), AbortOutcome::Aborting);
    assert_eq!(aborted_events(&mut events, 1).await, vec![a.to_string()]);
    assert_eq!(aborted_events(&mut ok_events, 1).await, vec![b.to_string()]);

    for q in [&failing, &ok_queue] {
        assert_eq!(q.counts().await.unwrap(), Counts::default());
        let totals = q.status().await.unwrap().totals;
        assert_eq!((totals.aborted, totals.acked, totals.failed, totals.dead), (1, 0, 0, 0));
    }
    // Never delivered again, nothing of it left but the totals.
    assert!(started.try_recv().is_err() && started2.try_recv().is_err());
    assert_eq!(failing.abort(&a).await.unwrap(), AbortOutcome::NotFound);
    consumer.shutdown().await.unwrap();
    ok_consumer.shutdown().await.unwrap();
    let keys = all_keys(&client).await;
    assert!(
        !keys.iter().any(|k| k.ends_with(":aborted") || k.contains(":m:")),
        "{keys:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_answers_each_case_with_its_outcome() {
    let (_server, _client, queue) = start_queue("answers", Duration::from_millis(100), |b| b).await;
    assert!(matches!(
        queue.abort("bad id").await,
        Err(Error::InvalidMessageId { .. })
    ));
    assert_eq!(queue.abort("unknown").await.unwrap(), AbortOutcome::NotFound);
    let waiting = queue.send("w").delay(Duration::from_secs(60)).await.unwrap();
    assert_eq!(queue.abort(&waiting).await.unwrap(), AbortOutcome::Cancelled);
    assert_eq!(queue.abort(&waiting).await.unwrap(), AbortOutcome::NotFound);

    let (tx, mut started) = mpsc::unbounded_channel();
    let consumer = queue.start_consume(waits_for_abort(tx, true)).await.unwrap();
    let running = queue.send("r").await.unwrap();
    started.recv().await.unwrap();
    let mut events = queue.events();
    assert_eq!(queue.abort(&running).await.unwrap(), AbortOutcome::Aborting);
    // Until it has ended: already aborted (or, once ended, not found).
    let again = queue.abort(&running).await.unwrap();
    assert!(
        matches!(again, AbortOutcome::AlreadyAborted | AbortOutcome::NotFound),
        "{again:?}"
    );
    aborted_events(&mut events, 1).await;
    assert_eq!(queue.abort(&running).await.unwrap(), AbortOutcome::NotFound);
    consumer.shutdown().await.unwrap();
}

/// The abort signal lost (simulated: the mark written without it, as a
/// publish lost on a broken subscriber connection leaves it): the lease
/// renewal tells the handler.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_whose_abort_signal_was_lost_is_told_by_its_lease_renewal() {
    let (_server, client, queue) = start_queue("renewal", Duration::from_millis(100), |b| {
        b.max_consume_duration(Duration::from_secs(1))
            .handler_timeout(Duration::from_secs(60))
    })
    .await;
    let mut events = queue.events();
    let (tx, mut started) = mpsc::unbounded_channel();
    let consumer = queue.start_consume(waits_for_abort(tx, true)).await.unwrap();
    let id = queue.send("r").await.unwrap();
    started.recv().await.unwrap();
    // The mark as lua/include/abort.lua writes it (docs/wire-format.md).
    let _: i64 = client.hset("dq:{renewal}:aborted", (id.as_str(), "1")).await.unwrap();
    assert_eq!(aborted_events(&mut events, 1).await, vec![id.to_string()]);
    assert_eq!(queue.counts().await.unwrap(), Counts::default());
    consumer.shutdown().await.unwrap();
}

/// Across processes: a worker process holds the message, this process
/// aborts it, the worker's handler is told (its `--aborts` line).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abort_reaches_the_handler_in_another_process() {
    let (server, _client, queue) = start_queue("xproc", Duration::from_millis(100), |b| b).await;
    let (url, dir) = (server.url(), server.dir().to_path_buf());
    let aborts = dir.join("aborts");
    let worker = Worker::spawn(WorkerOptions {
        handler_ms: 120_000,
        max_consume_ms: 5_000,
        aborts: Some(aborts.clone()),
        ..WorkerOptions::new(&url, "xproc", &dir, "w")
    })
    .await;
    let id = queue.send("x").await.unwrap();
    let mut processing = Counts::default();
    processing.processing = 1;
    assert_eq!(wait_stats(&queue, WAIT, processing).await, processing);
    assert_eq!(queue.abort(&id).await.unwrap(), AbortOutcome::Aborting);
    let told = wait_until(WAIT, || read_ledger(&aborts).0.iter().any(|d| d.id == id.as_str())).await;
    assert!(told, "the worker's handler was not told; log:\n{}", worker.log_tail(30));
    assert_eq!(wait_stats(&queue, WAIT, Counts::default()).await, Counts::default());
    assert_eq!(queue.status().await.unwrap().totals.aborted, 1);
    assert!(read_ledger(&worker.opts.ledger).0.is_empty());
}

/// The worker holding an aborted message is SIGKILLed: the message ends as
/// aborted at its lease's end and another worker never gets it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_holding_an_aborted_message_does_not_bring_it_back() {
    let (server, client, queue) = start_queue("killed", Duration::from_millis(100), |b| b).await;
    let (url, dir) = (server.url(), server.dir().to_path_buf());
    let opts = |name: &str, handler_ms: u64| WorkerOptions {
        handler_ms,
        max_consume_ms: 1_500,
        ..WorkerOptions::new(&url, "killed", &dir, name)
    };
    // It ignores aborts: only the kill ends its handler.
    let mut holder = Worker::spawn(opts("holder", 120_000)).await;
    let id = queue.send("x").await.unwrap();
    let mut processing = Counts::default();
    processing.processing = 1;
    assert_eq!(wait_stats(&queue, WAIT, processing).await, processing);
    assert_eq!(queue.abort(&id).await.unwrap(), AbortOutcome::Aborting);
    holder.kill();
    let other = Worker::spawn(opts("other", 10)).await;
    let next = queue.send("y").await.unwrap();
    let ended = wait_for(WAIT, || async {
        queue.status().await.unwrap().totals.aborted == 1 && queue.counts().await.unwrap() == Counts::default()
    })
    .await;
    assert!(ended, "not ended as aborted; log:\n{}", other.log_tail(30));
    assert!(
        wait_until(WAIT, || read_ledger(&other.opts.ledger)
            .0
            .iter()
            .any(|d| d.id == next.as_str()))
        .await
    );
    // Ended, it is gone from every state: no later delivery can exist.
    for ledger in [&holder.opts.ledger, &other.opts.ledger] {
        assert!(
            read_ledger(ledger).0.iter().all(|d| d.id != id.as_str()),
            "{id} delivered again"
        );
    }
    let totals = queue.status().await.unwrap().totals;
    assert_eq!((totals.aborted, totals.failed, totals.dead, totals.acked), (1, 0, 0, 1));
    let keys = all_keys(&client).await;
    assert!(!keys.iter().any(|k| k.ends_with(":aborted")), "{keys:?}");
}

/// An aborted child is to its parent's policy a cancelled one
/// (docs/workflows.md): under `Fail` the parent becomes a dead letter with
/// the reason `child <queue>/<id> cancelled`, and never runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aborted_child_is_a_cancelled_one_to_its_parent() {
    let (_server, _client, queue) = start_queue("flowab", Duration::from_millis(100), |b| b).await;
    let child = queue.send("child").await.unwrap();
    let parent = queue.send("parent").after([child.clone()]).await.unwrap();
    let (tx, mut started) = mpsc::unbounded_channel();
    let consumer = queue.start_consume(waits_for_abort(tx, false)).await.unwrap();
    assert_eq!(started.recv().await.as_deref(), Some(child.as_str()));
    assert_eq!(queue.abort(&child).await.unwrap(), AbortOutcome::Aborting);
    let dead = wait_for(WAIT, || async {
        queue
            .get(&parent)
            .await
            .unwrap()
            .is_some_and(|m| m.state == delayqueue::MessageState::Dead)
    })
    .await;
    assert!(dead, "the parent did not fail");
    let info = queue.get(&parent).await.unwrap().unwrap();
    assert_eq!(info.last_error, Some(format!("child flowab/{child} cancelled")));
    assert!(started.try_recv().is_err(), "the parent ran");
    consumer.shutdown().await.unwrap();
}
