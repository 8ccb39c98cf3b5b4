//! Handler results, progress and logs against a real Redis: results round
//! trip (bytes and JSON) through `result` and `wait_result`, which the ack
//! wakes; a retried message keeps its successful delivery's result; an
//! oversize result fails its delivery; retention zero keeps none; progress
//! and log lines show in `get` while the handler runs, emit
//! `Event::Progress`, and every key they leave expires; cancel and purge
//! take them with the messages.

mod helpers;
use delayqueue_test_support as support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use delayqueue::fred::prelude::{KeysInterface, ListInterface, SortedSetsInterface};
use delayqueue::{Anomaly, Error, Event, Handler, HandlerError, Json, Message, MessageState};
use helpers::start_queue;
use support::{all_keys, wait_for, WAIT};
use tokio::sync::{Barrier, Notify};

/// Longer than any test runs: a result that comes back faster was woken, not polled.
const SLOW_POLL: Duration = Duration::from_secs(60);

#[tokio::test]
async fn results_round_trip_as_bytes_and_json_and_wait_result_wakes_on_the_ack() {
    let (_server, _client, queue) = start_queue("results", SLOW_POLL, |b| b).await;
    assert!(matches!(
        queue.wait_result("never-sent", Duration::from_secs(1)).await,
        Err(Error::NoSuchMessage { .. })
    ));
    let json = queue.send("json").delay(Duration::from_millis(300)).await.unwrap();
    assert_eq!(queue.result(&json).await.unwrap(), None, "not handled yet");
    let consumer = queue
        .start_consume(|msg: Message| async move {
            Ok::<_, HandlerError>(Json(serde_json::json!({"len": msg.payload().len()})))
        })
        .await
        .unwrap();
    // Due in 300 ms, with a consumer that polls every minute: the send's
    // wake-up starts it, the ack's publish ends the wait.
    let started = Instant::now();
    let got = queue.wait_result(&json, WAIT).await.unwrap();
    assert_eq!(got.as_deref(), Some(&br#"{"len":4}"#[..]));
    assert!(started.elapsed() < SLOW_POLL / 4, "woken by the ack, not a poll");
    let value: Option<serde_json::Value> = queue.result_json(&json).await.unwrap();
    assert_eq!(value, Some(serde_json::json!({"len": 4})));
    assert!(
        queue.get(&json).await.unwrap().is_none(),
        "acked: gone, its result kept"
    );
    consumer.shutdown().await.unwrap();

    let bytes = queue.send("bytes").await.unwrap();
    let consumer = queue
        .start_consume(|_msg: Message| async move { Ok::<_, HandlerError>(b"\x00raw".to_vec()) })
        .await
        .unwrap();
    assert_result(&queue, &bytes, b"\x00raw").await;
    consumer.shutdown().await.unwrap();
}

/// Waits for `id`'s result and checks it is `want`.
async fn assert_result(queue: &delayqueue::DelayQueue, id: &delayqueue::MessageId, want: &[u8]) {
    assert_eq!(queue.wait_result(id, WAIT).await.unwrap().as_deref(), Some(want));
}

/// A trait handler sets its result on the message; a retried message's
/// result is its successful delivery's.
struct SecondTime;

#[delayqueue::async_trait]
impl Handler for SecondTime {
    async fn handle(&self, msg: Message) -> Result<(), HandlerError> {
        msg.set_result(format!("attempt {}", msg.attempt()))?;
        if msg.attempt() == 1 {
            return Err("first fails".into());
        }
        Ok(())
    }
}

#[tokio::test]
async fn a_retried_message_keeps_its_successful_deliverys_result() {
    let (_server, _client, queue) = start_queue("retried", Duration::from_millis(50), |b| {
        b.backoff(delayqueue::Backoff::fixed(Duration::from_millis(10)))
    })
    .await;
    let id = queue.send("x").await.unwrap();
    let consumer = queue.start_consume(SecondTime).await.unwrap();
    assert_result(&queue, &id, b"attempt 2").await;
    consumer.shutdown().await.unwrap();
}

#[tokio::test]
async fn an_oversize_result_fails_the_delivery_with_its_reason() {
    let (_server, _client, queue) = start_queue("oversize", Duration::from_millis(50), |b| {
        b.max_result_size(8).default_retry_count(0)
    })
    .await;
    let mut events = queue.events();
    let id = queue.send("x").await.unwrap();
    let consumer = queue
        .start_consume(|_msg: Message| async move { Ok::<_, HandlerError>("nine bytes") })
        .await
        .unwrap();
    let dead = tokio::time::timeout(WAIT, async {
        loop {
            if let Ok(Event::Dead { reason, .. }) = events.recv().await {
                return reason;
            }
        }
    })
    .await
    .expect("dead within WAIT");
    assert_eq!(dead, "result of 10 bytes exceeds max_result_size (8 bytes)");
    let info = queue.get(&id).await.unwrap().expect("a dead letter");
    assert_eq!(info.state, MessageState::Dead);
    assert_eq!(queue.result(&id).await.unwrap(), None, "never cut, never kept");
    consumer.shutdown().await.unwrap();
}

#[tokio::test]
async fn retention_zero_keeps_no_result_and_leaves_no_key() {
    let (_server, client, queue) = start_queue("nothing", Duration::from_millis(50), |b| {
        b.result_retention(Duration::ZERO)
    })
    .await;
    let id = queue.send("x").await.unwrap();
    let consumer = queue
        .start_consume(|msg: Message| async move {
            msg.progress(50).await?;
            msg.log("half way").await?;
            Ok::<_, HandlerError>("result")
        })
        .await
        .unwrap();
    assert!(wait_for(WAIT, || async { queue.status().await.unwrap().totals.acked == 1 }).await);
    assert_eq!(queue.result(&id).await.unwrap(), None);
    consumer.shutdown().await.unwrap();
    let left = keys_left(&client).await;
    assert!(left.is_empty(), "{left:?}");
}

#[tokio::test]
async fn progress_and_log_show_while_processing_and_expire_after_the_ack() {
    let (_server, client, queue) = start_queue("progress", Duration::from_millis(50), |b| {
        b.max_log_lines(2).result_retention(Duration::from_secs(1))
    })
    .await;
    let mut events = queue.events();
    let id = queue.send("x").await.unwrap();
    let (written, release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let (w, r) = (written.clone(), release.clone());
    let consumer = queue
        .start_consume(move |msg: Message| {
            let (w, r) = (w.clone(), r.clone());
            async move {
                msg.progress(serde_json::json!({"done": 3, "of": 10})).await?;
                for line in ["one", "two", "three"] {
                    msg.log(line).await?;
                }
                assert!(matches!(msg.progress(101).await, Err(Error::InvalidArgument(_))));
                w.notify_one();
                r.notified().await;
                Ok::<(), HandlerError>(())
            }
        })
        .await
        .unwrap();
    tokio::time::timeout(WAIT, written.notified())
        .await
        .expect("handler wrote");
    let info = queue.get(&id).await.unwrap().expect("processing");
    assert_eq!(info.state, MessageState::Processing);
    assert_eq!(info.progress.as_deref(), Some(r#"{"done":3,"of":10}"#));
    assert_eq!(info.log, vec!["two", "three"], "the last max_log_lines");
    let progress = tokio::time::timeout(WAIT, async {
        loop {
            if let Ok(Event::Progress { id, value }) = events.recv().await {
                return (id, value);
            }
        }
    })
    .await
    .expect("Event::Progress");
    assert_eq!(progress, (id.clone(), r#"{"done":3,"of":10}"#.to_string()));

    release.notify_one();
    assert!(wait_for(WAIT, || async { queue.status().await.unwrap().totals.acked == 1 }).await);
    consumer.shutdown().await.unwrap();
    // Kept for the result retention (1 s), then gone: no key left.
    let gone = wait_for(WAIT, || async { keys_left(&client).await.is_empty() }).await;
    assert!(gone, "{:?}", keys_left(&client).await);
}

#[tokio::test]
async fn progress_after_the_delivery_ended_writes_nothing() {
    let (_server, client, queue) = start_queue("late", Duration::from_millis(50), |b| b).await;
    let id = queue.send("x").await.unwrap();
    let kept: Arc<std::sync::Mutex<Option<Message>>> = Arc::default();
    let k = kept.clone();
    let consumer = queue
        .start_consume(move |msg: Message| {
            *k.lock().unwrap() = Some(msg.clone());
            async move { Ok::<(), HandlerError>(()) }
        })
        .await
        .unwrap();
    assert!(wait_for(WAIT, || async { queue.status().await.unwrap().totals.acked == 1 }).await);
    let msg = kept.lock().unwrap().take().expect("delivered");
    assert!(
        matches!(msg.log("too late").await, Err(Error::LeaseLost { .. })),
        "{id}"
    );
    consumer.shutdown().await.unwrap();
    let left = keys_left(&client).await;
    assert!(left.is_empty(), "{left:?}");
}

#[tokio::test]
async fn the_integrity_check_reports_a_result_key_without_ttl() {
    let (_server, client, queue) = start_queue("forever", Duration::from_millis(50), |b| b).await;
    let id = queue.send("x").await.unwrap();
    let consumer = queue
        .start_consume(|msg: Message| async move {
            msg.log("kept with a TTL").await?;
            Ok::<_, HandlerError>("result")
        })
        .await
        .unwrap();
    assert_result(&queue, &id, b"result").await;
    consumer.shutdown().await.unwrap();
    assert!(
        queue.check_integrity().await.unwrap().is_clean(),
        "results and logs expire"
    );

    let _: () = client
        .set("dq:{forever}:result:stray", "x", None, None, false)
        .await
        .unwrap();
    let report = queue.check_integrity().await.unwrap();
    assert_eq!(
        report.anomalies,
        vec![Anomaly::KeptForever {
            id: "stray".into(),
            key: "result"
        }]
    );
}

#[tokio::test]
async fn a_batch_handler_and_a_tower_service_return_results_per_message() {
    let (_server, _client, queue) = start_queue("carried", Duration::from_millis(50), |b| b).await;
    let ids = [queue.send("a").await.unwrap(), queue.send("bb").await.unwrap()];
    let consumer = queue
        .consume_batch(|batch: Vec<Message>| async move {
            batch
                .iter()
                .map(|m| Ok::<_, HandlerError>(format!("{} bytes", m.payload().len())))
                .collect::<Vec<_>>()
        })
        .size(2)
        .await
        .unwrap();
    assert_result(&queue, &ids[0], b"1 bytes").await;
    assert_result(&queue, &ids[1], b"2 bytes").await;
    consumer.shutdown().await.unwrap();

    let id = queue.send("ccc").await.unwrap();
    let inner = tower::service_fn(|msg: Message| async move { Ok::<_, HandlerError>(Json(msg.payload().len())) });
    let stack = tower::ServiceBuilder::new()
        .timeout(Duration::from_secs(60))
        .service(inner);
    let consumer = queue.start_consume(delayqueue::service(stack)).await.unwrap();
    assert_result(&queue, &id, b"3").await;
    consumer.shutdown().await.unwrap();
}

/// Every key of the server but the consumers' receipts (`:claim:`), which
/// stay for their own TTL.
/// A cancelled message's progress and log go with it (written by a
/// delivery that failed), and purge takes the results, progress and logs
/// of the queue: no key is left.
#[tokio::test]
async fn cancel_and_purge_leave_no_result_progress_or_log() {
    let (_server, client, queue) = start_queue("gone", Duration::from_millis(50), |b| b).await;
    let (retried, acked) = (queue.send("retried").await.unwrap(), queue.send("acked").await.unwrap());
    let consumer = queue
        .start_consume(|msg: Message| async move {
            msg.progress(50).await?;
            msg.log("half way").await?;
            if msg.payload() == b"retried" {
                return Err(delayqueue::RetryAfter::new(Duration::from_secs(3600), "later").into());
            }
            Ok::<_, HandlerError>("result")
        })
        .await
        .unwrap();
    let both_ran = wait_for(WAIT, || async {
        let totals = queue.status().await.unwrap().totals;
        totals.acked == 1 && totals.failed == 1
    })
    .await;
    assert!(both_ran);
    consumer.shutdown().await.unwrap();
    let info = queue.get(&retried).await.unwrap().expect("waiting for its retry");
    assert_eq!((info.progress.as_deref(), info.log.len()), (Some("50"), 1));
    assert!(queue.cancel(&retried).await.unwrap());
    let left = keys_left(&client).await;
    assert!(
        !left.iter().any(|k| k.ends_with(&format!(":{retried}"))),
        "the cancelled message's keys: {left:?}"
    );
    assert_result(&queue, &acked, b"result").await;
    queue.purge().await.unwrap();
    let left = keys_left(&client).await;
    assert!(left.is_empty(), "{left:?}");
}

async fn keys_left(client: &delayqueue::fred::clients::Client) -> Vec<String> {
    all_keys(client)
        .await
        .into_iter()
        .filter(|k| !k.contains(":claim:"))
        .collect()
}

/// Script calls the server has run (`cmdstat_evalsha` of `INFO commandstats`).
fn script_calls(server: &support::RedisServer) -> u64 {
    server
        .raw_command(&["INFO", "commandstats"])
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|v| v.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

/// The notes of many running handlers go to Redis together: 32 handlers
/// writing progress at once take far fewer than 32 script calls, and each
/// note is still fenced by its own delivery's lease: the one whose lease
/// was taken meanwhile gets `LeaseLost`, the others' are written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notes_of_many_handlers_share_script_calls_each_fenced_by_its_lease() {
    const N: usize = 32;
    let (server, client, queue) = start_queue("together", SLOW_POLL, |b| b.concurrency(N)).await;
    let msgs = (0..N).map(|i| delayqueue::NewMessage::new(i.to_string()));
    let ids: Vec<_> = queue
        .send_batch(msgs)
        .await
        .unwrap()
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let (started, written) = (Arc::new(Barrier::new(N + 1)), Arc::new(Barrier::new(N + 1)));
    let (go, ready) = tokio::sync::watch::channel(false);
    let (end, ending) = tokio::sync::watch::channel(false);
    let outcomes: Arc<std::sync::Mutex<Vec<(String, bool)>>> = Arc::default();
    let (s, w, o) = (started.clone(), written.clone(), outcomes.clone());
    let consumer = queue
        .start_consume(move |msg: Message| {
            let (s, w, o) = (s.clone(), w.clone(), o.clone());
            let (mut ready, mut ending) = (ready.clone(), ending.clone());
            async move {
                // Warms the script cache, so the calls counted are notes alone.
                msg.log("started").await?;
                s.wait().await;
                let _ = ready.wait_for(|go| *go).await;
                // Handed over at once; its outcome comes once it is written.
                let wrote = match msg.progress(50).await {
                    Ok(()) => msg.notes_written().await,
                    failed => failed,
                };
                if let Err(e) = &wrote {
                    assert!(matches!(e, Error::LeaseLost { .. }), "{e}");
                }
                o.lock().unwrap().push((msg.id().to_string(), wrote.is_ok()));
                w.wait().await;
                let _ = ending.wait_for(|end| *end).await;
                Ok::<(), HandlerError>(())
            }
        })
        .await
        .unwrap();
    tokio::time::timeout(WAIT, started.wait())
        .await
        .expect("all handlers running");
    // Another consumer took the first message meanwhile: its lease is another.
    let taken = ids[0].to_string();
    let _: i64 = client
        .zadd("dq:{together}:unack", None, None, false, false, (1.0, taken.as_str()))
        .await
        .unwrap();
    let before = script_calls(&server);
    go.send(true).unwrap();
    tokio::time::timeout(WAIT, written.wait())
        .await
        .expect("all handlers wrote");
    let calls = script_calls(&server) - before;
    assert!(calls <= N as u64 / 2, "{calls} script calls for {N} notes");
    let mut outcomes = outcomes.lock().unwrap().clone();
    outcomes.sort();
    let lost: Vec<_> = outcomes
        .iter()
        .filter(|(_, ok)| !ok)
        .map(|(id, _)| id.clone())
        .collect();
    assert_eq!(
        lost,
        vec![taken.clone()],
        "only the note of the taken lease is fenced out"
    );
    for id in &ids[1..] {
        let info = queue.get(id).await.unwrap().expect("processing");
        assert_eq!(info.progress.as_deref(), Some("50"), "{id}");
    }
    assert_eq!(queue.get(&ids[0]).await.unwrap().expect("kept").progress, None);
    end.send(true).unwrap();
    consumer.shutdown().await.unwrap();
}

/// A log line a handler writes right before it returns is stored before
/// its message is acked: the ack finds it and gives it the result
/// retention (a note stored after the ack would keep its longer TTL).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_last_log_line_is_stored_before_the_ack() {
    const N: usize = 200;
    let retention = Duration::from_secs(600);
    let (_server, client, queue) = start_queue("last", Duration::from_millis(50), |b| {
        b.concurrency(16).result_retention(retention)
    })
    .await;
    let msgs = (0..N).map(|i| delayqueue::NewMessage::new(i.to_string()));
    for r in queue.send_batch(msgs).await.unwrap() {
        r.unwrap();
    }
    let consumer = queue
        .start_consume(|msg: Message| async move {
            msg.log("last words").await?;
            Ok::<(), HandlerError>(())
        })
        .await
        .unwrap();
    assert!(
        wait_for(WAIT, || async {
            queue.status().await.unwrap().totals.acked == N as u64
        })
        .await
    );
    consumer.shutdown().await.unwrap();
    let logs: Vec<String> = keys_left(&client)
        .await
        .into_iter()
        .filter(|k| k.contains(":log:"))
        .collect();
    assert_eq!(logs.len(), N, "{logs:?}");
    for key in logs {
        let ttl: i64 = client.pttl(&key).await.unwrap();
        assert!(ttl > 0 && ttl <= retention.as_millis() as i64, "{key}: {ttl} ms");
    }
}

/// `progress` and `log` hand their note over without waiting for Redis:
/// they return while Redis runs no script at all (`CLIENT PAUSE`), and
/// the notes are written once it does; `notes_written` waits for them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notes_return_before_redis_has_them_and_notes_written_waits() {
    let (server, client, queue) = start_queue("handed", SLOW_POLL, |b| b).await;
    let id = queue.send("x").await.unwrap();
    let (running, returned) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let (go, ready) = tokio::sync::watch::channel(false);
    let outcome: Arc<std::sync::Mutex<Option<Result<(), String>>>> = Arc::default();
    let (r, d, o) = (running.clone(), returned.clone(), outcome.clone());
    let consumer = queue
        .start_consume(move |msg: Message| {
            let (r, d, o, mut ready) = (r.clone(), d.clone(), o.clone(), ready.clone());
            async move {
                r.notify_one();
                let _ = ready.wait_for(|go| *go).await;
                msg.progress(70).await?;
                msg.log("handed over").await?;
                d.notify_one();
                let written = msg.notes_written().await.map_err(|e| e.to_string());
                *o.lock().unwrap() = Some(written);
                Ok::<(), HandlerError>(())
            }
        })
        .await
        .unwrap();
    tokio::time::timeout(WAIT, running.notified()).await.expect("running");
    // No script runs while paused (each may write), and the pause outlasts the test's waits.
    server.raw_command(&["CLIENT", "PAUSE", "120000", "WRITE"]);
    go.send(true).unwrap();
    tokio::time::timeout(WAIT, returned.notified())
        .await
        .expect("progress and log returned while Redis was paused");
    assert!(outcome.lock().unwrap().is_none(), "notes_written waits for Redis");
    server.raw_command(&["CLIENT", "UNPAUSE"]);
    assert!(wait_for(WAIT, || async { queue.status().await.unwrap().totals.acked == 1 }).await);
    assert_eq!(outcome.lock().unwrap().clone(), Some(Ok(())));
    // Acked: its progress and log stay for the result retention.
    let progress: Option<String> = client.get(format!("dq:{{handed}}:progress:{id}")).await.unwrap();
    assert_eq!(progress.as_deref(), Some("70"));
    let log: Vec<String> = client.lrange(format!("dq:{{handed}}:log:{id}"), 0, -1).await.unwrap();
    assert_eq!(log, vec!["handed over".to_string()]);
    consumer.shutdown().await.unwrap();
}

/// The last line of a failing handler is written before its nack ends the
/// lease, with a lease the handler keeps as with one it renews: the
/// retried message and the dead letter show every attempt's line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_handlers_last_line_is_written_before_its_nack() {
    for renewed in [false, true] {
        let name = if renewed { "lastfail-renewed" } else { "lastfail" };
        let (_server, _client, queue) = start_queue(name, Duration::from_millis(50), |b| {
            let b = b
                .default_retry_count(1)
                .backoff(delayqueue::Backoff::fixed(Duration::ZERO));
            if renewed {
                b.max_consume_duration(Duration::from_secs(2))
                    .handler_timeout(Duration::from_secs(60))
            } else {
                b
            }
        })
        .await;
        let id = queue.send("x").await.unwrap();
        let consumer = queue
            .start_consume(|msg: Message| async move {
                msg.log(format!("attempt {} failed", msg.attempt())).await?;
                Err::<(), HandlerError>(HandlerError::from("boom"))
            })
            .await
            .unwrap();
        assert!(
            wait_for(WAIT, || async { queue.status().await.unwrap().counts.dead == 1 }).await,
            "{name}: dead"
        );
        let info = queue.get(&id).await.unwrap().expect("a dead letter");
        assert_eq!(
            info.log,
            vec!["attempt 1 failed".to_string(), "attempt 2 failed".to_string()],
            "{name}"
        );
        consumer.shutdown().await.unwrap();
    }
}
