//! No silent expiry: a message waits for a consumer however long that takes,
//! unless its send asked for `expire_after`; then it is discarded visibly
//! (event, warning, totals, dead letter). Also: a stopping consumer over a
//! large backlog, and the keys a drained queue leaves.

mod helpers;
use delayqueue_test_support as support;

use std::sync::Arc;
use std::time::Duration;

use delayqueue::{Counts, Event, HandlerError, Message, MessageId, MessageState};
use fred::prelude::*;
use helpers::{acking, recording, start_queue, wait_stats, Log};
use support::logs::Logs;
use support::{all_keys, wait_until, RawReply, WAIT};
use tokio::sync::Semaphore;

/// How often the consumers in these tests poll.
const FETCH_INTERVAL: Duration = Duration::from_millis(50);

#[tokio::test]
async fn a_message_sent_with_default_settings_never_expires_while_no_consumer_runs() {
    let (server, client, q) = start_queue("keep", FETCH_INTERVAL, |b| b).await;
    let id = q
        .send("close order 7")
        .delay(Duration::from_millis(200))
        .id("order-7")
        .await
        .unwrap();
    let key = format!("dq:{{keep}}:m:{id}");
    let pttl: i64 = client.pttl(&key).await.unwrap();
    assert_eq!(pttl, -1, "a live payload must not carry a TTL");
    // No consumer for a while: the message is overdue and still whole.
    let due = server.now_ms() + 1_200;
    assert!(wait_until(WAIT, || server.now_ms() > due).await);
    let pttl: i64 = client.pttl(&key).await.unwrap();
    assert_eq!(pttl, -1);
    let info = q.get(&id).await.unwrap().expect("still there");
    // Due: ready, though no consumer moved it out of pending.
    assert_eq!(
        (info.state, info.expires_at, info.expires_in),
        (MessageState::Ready, None, None)
    );

    let log = Log::default();
    let consumer = q.start_consume(acking(&log)).await.unwrap();
    assert!(wait_until(WAIT, || log.len() == 1).await, "not delivered");
    assert_eq!(
        (log.snapshot()[0].0.clone(), log.snapshot()[0].3.clone()),
        (id, b"close order 7".to_vec())
    );
    consumer.shutdown().await.unwrap();
    let status = q.status().await.unwrap();
    assert_eq!((status.totals.acked, status.totals.expired), (1, 0));
}

#[tokio::test]
async fn a_message_past_its_expire_after_is_not_delivered_but_counted_emitted_logged_and_kept_dead() {
    let (server, client, q) = start_queue("expire", FETCH_INTERVAL, |b| b).await;
    let id = q
        .send("meeting reminder")
        .expire_after(Duration::from_secs(1))
        .id("reminder-1")
        .await
        .unwrap();
    let kept = q.send("keep me").await.unwrap();
    let deadline = q.get(&id).await.unwrap().unwrap().expires_at.expect("a deadline");
    let deadline_ms = deadline.duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
    // No consumer for more than a second (by Redis's clock).
    assert!(wait_until(WAIT, || server.now_ms() > deadline_ms).await);

    let logs = Logs::capture("expire");
    let mut events = q.events();
    let log = Log::default();
    let consumer = q.start_consume(acking(&log)).await.unwrap();
    assert!(wait_until(WAIT, || log.len() == 1).await);
    let expired = tokio::time::timeout(WAIT, async {
        loop {
            match events.recv().await {
                Ok(Event::Expired { id }) => return id,
                Ok(_) => {}
                Err(e) => panic!("events: {e:?}"),
            }
        }
    })
    .await
    .expect("no Event::Expired");
    assert_eq!(expired, id);
    let mut dead = Counts::default();
    dead.dead = 1;
    assert_eq!(wait_stats(&q, WAIT, dead).await, dead);
    consumer.shutdown().await.unwrap();
    assert_eq!(
        log.snapshot().iter().map(|d| d.0.clone()).collect::<Vec<MessageId>>(),
        vec![kept]
    );
    assert_eq!(q.status().await.unwrap().totals.expired, 1);
    let warned = logs.warnings();
    assert!(
        warned.iter().any(|l| l.contains("reminder-1") && l.contains("expired")),
        "{warned:?}"
    );
    // A dead letter with reason "expired", payload kept for the retention.
    let page = q.list(MessageState::Dead, 0, 10).await.unwrap();
    assert_eq!(page.items.len(), 1);
    let letter = &page.items[0];
    assert_eq!((&letter.id, letter.last_error.as_deref()), (&id, Some("expired")));
    assert_eq!(letter.payload, b"meeting reminder");
    assert!(letter.expires_in.is_some(), "retention TTL");
    // Requeued, it is delivered: the operator overrides the deadline.
    assert!(q.requeue_dead(&id).await.unwrap());
    let consumer = q.start_consume(acking(&log)).await.unwrap();
    assert!(wait_until(WAIT, || log.len() == 2).await);
    consumer.shutdown().await.unwrap();
    assert!(all_keys(&client).await.is_empty(), "{:?}", all_keys(&client).await);
}

#[tokio::test]
async fn stopping_a_consumer_over_10000_ready_messages_deletes_its_receipt_and_leaves_them_ready() {
    // A long tick: the consumer claims on wake-ups only, so messages put in
    // ready without one stay there.
    let (server, client, q) = start_queue("stop", Duration::from_secs(3600), |b| {
        b.max_consume_duration(Duration::from_secs(60))
    })
    .await;
    let receipts = || match server.raw_reply(&["KEYS", "dq:{stop}:claim:*"]) {
        RawReply::Array(keys) => keys.len(),
        other => panic!("KEYS -> {other:?}"),
    };
    // A running delivery keeps its claim's receipt (TTL: the visibility
    // timeout) until the stop.
    let gate = Arc::new(Semaphore::new(0));
    let log = Log::default();
    let held = gate.clone();
    let handler = recording(&log, move |_msg: Message| {
        let held = held.clone();
        async move {
            let _ = held.acquire().await;
            Ok::<(), HandlerError>(())
        }
    });
    let consumer = q.start_consume(handler).await.unwrap();
    q.send("first").await.unwrap();
    assert!(wait_until(WAIT, || log.len() == 1).await);
    assert_eq!(receipts(), 1);
    const N: usize = 10_000;
    for chunk in (0..N).collect::<Vec<_>>().chunks(1000) {
        let mut mset = vec!["MSET".to_string()];
        let mut rpush = vec!["RPUSH".to_string(), "dq:{stop}:ready".to_string()];
        for i in chunk {
            mset.extend([format!("dq:{{stop}}:m:m{i}"), "3:x".to_string()]);
            rpush.push(format!("m{i}"));
        }
        for cmd in [mset, rpush] {
            let args: Vec<&str> = cmd.iter().map(String::as_str).collect();
            assert!(!server.raw_command(&args).starts_with('-'));
        }
    }
    // The stop's claim of nothing deletes the receipt while the handler
    // still runs; then the handler may finish.
    let stopping = tokio::spawn(consumer.shutdown());
    let deleted = wait_until(WAIT, || receipts() == 0).await;
    gate.add_permits(1);
    stopping.await.unwrap().unwrap();
    assert!(deleted, "the stopping consumer left its claim receipt");
    assert_eq!(log.len(), 1, "nothing more was delivered");
    assert_eq!(q.counts().await.unwrap().ready, N as u64);
    let odd: Vec<String> = all_keys(&client)
        .await
        .into_iter()
        .filter(|k| k != "dq:{stop}:ready" && !k.starts_with("dq:{stop}:m:"))
        .collect();
    assert!(odd.is_empty(), "keys left beside the messages: {odd:?}");
}

#[tokio::test]
async fn a_drained_queue_of_caller_id_messages_leaves_only_its_totals() {
    let (_server, client, q) = start_queue("drain", FETCH_INTERVAL, |b| b).await;
    let log = Log::default();
    let consumer = q.start_consume(acking(&log)).await.unwrap();
    for i in 0..20 {
        let delay = Duration::from_millis(if i % 2 == 0 { 0 } else { 100 });
        q.send("x").delay(delay).id(format!("order-{i}")).await.unwrap();
    }
    assert!(wait_until(WAIT, || log.len() == 20).await, "{}", log.len());
    assert_eq!(wait_stats(&q, WAIT, Counts::default()).await, Counts::default());
    consumer.shutdown().await.unwrap();
    // all_keys leaves the totals out: nothing else may remain.
    assert!(all_keys(&client).await.is_empty(), "{:?}", all_keys(&client).await);
}

/// A caller-id message cancelled while no consumer runs leaves nothing
/// behind: no stale mark waits for a claim that may never come.
#[tokio::test]
async fn a_cancelled_caller_id_message_leaves_only_the_totals_without_a_consumer() {
    let (_server, client, q) = start_queue("cancelled", FETCH_INTERVAL, |b| b).await;
    for i in 0..5 {
        q.send("x")
            .delay(Duration::from_secs(60))
            .id(format!("order-{i}"))
            .await
            .unwrap();
        assert!(q.cancel(format!("order-{i}")).await.unwrap());
    }
    assert!(all_keys(&client).await.is_empty(), "{:?}", all_keys(&client).await);
}
