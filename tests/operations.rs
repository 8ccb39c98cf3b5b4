//! Operating a queue: retry backoff, dead letters, inspection and events,
//! end to end against a real redis-server (metrics: `tests/observability.rs`).

mod helpers;
use delayqueue_test_support as support;

use std::collections::HashMap;
use std::time::Duration;

use delayqueue::{
    Backoff, Counts, Event, HandlerError, Message, MessageId, MessageState, NewMessage, RetryAfter, SkipRetry,
};
use helpers::{acking, ok_else_fail, recording, start_queue, wait_stats, Log};
use support::{all_keys, wait_until, WAIT};
use tokio::sync::broadcast;

/// How often the consumers in these tests poll.
const FETCH_INTERVAL: Duration = Duration::from_millis(100);

/// Gaps between the deliveries of `id`, in order.
fn gaps(log: &Log, id: &MessageId) -> Vec<Duration> {
    let times: Vec<_> = log.snapshot().into_iter().filter(|d| &d.0 == id).map(|d| d.2).collect();
    times.windows(2).map(|w| w[1] - w[0]).collect()
}

/// The events `events` has received so far.
fn received(events: &mut broadcast::Receiver<Event>) -> Vec<Event> {
    std::iter::from_fn(|| events.try_recv().ok()).collect()
}

/// The next event, waiting for it up to `WAIT`.
async fn next_event(events: &mut broadcast::Receiver<Event>) -> Event {
    tokio::time::timeout(WAIT, events.recv())
        .await
        .expect("no event came")
        .expect("events were missed")
}

/// The `retry_in` of each `Failed` event of `id` in `seen`, in order.
fn retry_ins(seen: &[Event], id: &MessageId) -> Vec<Duration> {
    seen.iter()
        .filter_map(|e| match e {
            Event::Failed { id: of, retry_in, .. } if of == id => Some(*retry_in),
            _ => None,
        })
        .collect()
}

fn failing() -> impl Fn(Message) -> std::future::Ready<Result<(), HandlerError>> {
    |_msg| std::future::ready(Err("HTTP 503 from the webhook".into()))
}

#[tokio::test]
async fn the_default_backoff_doubles_from_one_second() {
    let (_server, _client, q) = start_queue("backoff", FETCH_INTERVAL, |b| b.default_retry_count(2)).await;
    let log = Log::default();
    let mut events = q.events();
    let consumer = q.start_consume(recording(&log, failing())).await.unwrap();
    let id = q.send("x").await.unwrap();
    assert!(wait_until(WAIT, || log.len() == 3).await, "{}", log.len());
    consumer.shutdown().await.unwrap();
    // 1 s then 2 s, each up to a quarter shorter (jitter), as scheduled.
    let delays = retry_ins(&received(&mut events), &id);
    assert_eq!(delays.len(), 2, "{delays:?}");
    let ms = |d: Duration| d.as_millis();
    assert!((750..=1000).contains(&ms(delays[0])), "{delays:?}");
    assert!((1500..=2000).contains(&ms(delays[1])), "{delays:?}");
    // And never delivered before that (10 ms for Redis' clock against ours).
    // How much later is scheduling, not the backoff: not checked here.
    let gaps = gaps(&log, &id);
    for (gap, delay) in gaps.iter().zip(&delays) {
        assert!(*gap + Duration::from_millis(10) >= *delay, "{gaps:?} {delays:?}");
    }
}

#[tokio::test]
async fn per_message_backoff_and_retry_after_override_the_queue() {
    // Far longer than the test waits: a retry that comes at all did not use it.
    let (_server, _client, q) = start_queue("override", FETCH_INTERVAL, |b| {
        b.backoff(Backoff::fixed(Duration::from_secs(3600)))
            .default_retry_count(2)
    })
    .await;
    let log = Log::default();
    let mut events = q.events();
    let consumer = q
        .start_consume(recording(&log, |msg: Message| async move {
            if msg.payload() == b"asks" {
                return Err(RetryAfter::new(Duration::from_millis(300), "rate limited").into());
            }
            Err::<(), HandlerError>("fails".into())
        }))
        .await
        .unwrap();
    let own = q
        .send("own")
        .backoff(Backoff::exponential(Duration::from_millis(200), Duration::from_secs(1)).jitter(0.0))
        .await
        .unwrap();
    let asks = q.send("asks").await.unwrap();
    assert!(wait_until(WAIT, || log.len() == 6).await, "{:?}", log.counts());
    // Scheduled as the message's backoff and the handler's RetryAfter say,
    // and not delivered before (5 ms for Redis' clock against ours).
    let seen = received(&mut events);
    let (own_delays, asks_delays) = (retry_ins(&seen, &own), retry_ins(&seen, &asks));
    let ms = |d: &[Duration]| d.iter().map(Duration::as_millis).collect::<Vec<_>>();
    assert_eq!(ms(&own_delays), vec![200, 400]);
    assert_eq!(ms(&asks_delays), vec![300, 300]);
    for (id, delays) in [(&own, &own_delays), (&asks, &asks_delays)] {
        let gaps = gaps(&log, id);
        for (gap, delay) in gaps.iter().zip(delays) {
            assert!(*gap + Duration::from_millis(5) >= *delay, "{id}: {gaps:?} {delays:?}");
        }
    }
    // A custom backoff cannot travel with a message.
    let custom = q.send("x").backoff(Backoff::custom(|_| Duration::ZERO)).await;
    assert!(
        matches!(custom, Err(delayqueue::Error::InvalidArgument(_))),
        "{custom:?}"
    );
    consumer.shutdown().await.unwrap();
}

#[tokio::test]
async fn dead_letters_keep_their_reason_and_can_be_requeued_or_deleted() {
    let (_server, client, q) = start_queue("dead", FETCH_INTERVAL, |b| {
        b.nack_redelivery_delay(Duration::ZERO).default_retry_count(1)
    })
    .await;
    let log = Log::default();
    let consumer = q
        .start_consume(recording(&log, |msg: Message| async move {
            match msg.payload() {
                b"skip" => Err(SkipRetry::new("order 7 no longer exists").into()),
                b"panic" => panic!("bug in the handler"),
                _ => Err::<(), HandlerError>("HTTP 503 from the webhook".into()),
            }
        }))
        .await
        .unwrap();
    let flaky = q.send("flaky").await.unwrap();
    let skip = q.send("skip").await.unwrap();
    let panics = q.send("panic").await.unwrap();
    let mut want = Counts::default();
    want.dead = 3;
    assert_eq!(wait_stats(&q, WAIT, want).await, want);
    assert_eq!(log.attempts(&flaky), vec![1, 2]);
    assert_eq!(log.attempts(&skip), vec![1], "SkipRetry is not retried");
    consumer.shutdown().await.unwrap();

    let page = q.list(MessageState::Dead, 0, 10).await.unwrap();
    assert_eq!((page.total, page.items.len(), page.next), (3, 3, None));
    let reasons: HashMap<MessageId, (u32, Option<String>)> = page
        .items
        .into_iter()
        .map(|m| (m.id, (m.attempts, m.last_error)))
        .collect();
    assert_eq!(reasons[&flaky], (2, Some("HTTP 503 from the webhook".into())));
    assert_eq!(
        reasons[&skip],
        (1, Some("order 7 no longer exists (not retried)".into()))
    );
    assert_eq!(reasons[&panics], (2, Some("panic: bug in the handler".into())));
    let shown = q.get(&flaky).await.unwrap().unwrap();
    assert_eq!(
        (shown.state, shown.payload.as_slice()),
        (MessageState::Dead, &b"flaky"[..])
    );
    assert!(shown.dead_since.is_some() && shown.deliveries_left() == Some(0));
    let status = q.status().await.unwrap();
    assert_eq!(
        (status.totals.sent, status.totals.failed, status.totals.dead),
        (3, 5, 3)
    );
    assert!(status.oldest_dead.is_some());

    // Requeue one: delivered again with its retries restored; this time it works.
    assert!(q.requeue_dead(&flaky).await.unwrap());
    assert!(!q.requeue_dead(&flaky).await.unwrap(), "no longer dead");
    let consumer = q.start_consume(acking(&log)).await.unwrap();
    assert!(wait_until(WAIT, || log.attempts(&flaky) == vec![1, 2, 1]).await);
    let mut want = Counts::default();
    want.dead = 2;
    assert_eq!(wait_stats(&q, WAIT, want).await, want);
    // Requeue all, then nothing is dead; they are acked this time.
    assert_eq!(q.requeue_all_dead().await.unwrap(), 2);
    assert_eq!(wait_stats(&q, WAIT, Counts::default()).await, Counts::default());
    consumer.shutdown().await.unwrap();
    assert_eq!(q.status().await.unwrap().totals.acked, 3);
    assert!(all_keys(&client).await.is_empty(), "{:?}", all_keys(&client).await);
}

#[tokio::test]
async fn dead_letters_go_after_their_retention_or_beyond_the_cap() {
    let (_server, client, q) = start_queue("retention", FETCH_INTERVAL, |b| {
        b.default_retry_count(0)
            // Long enough to see the cap at work first on a loaded machine.
            .dead_letter_retention(Duration::from_secs(8))
            .dead_letter_limit(3)
    })
    .await;
    let consumer = q.start_consume(failing()).await.unwrap();
    let mut ids = Vec::new();
    for i in 0..5 {
        ids.push(q.send(format!("m{i}")).await.unwrap());
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    // Five died; the sweep keeps the newest three.
    let mut capped = Counts::default();
    capped.dead = 3;
    assert_eq!(wait_stats(&q, WAIT, capped).await, capped);
    let kept: Vec<MessageId> = q
        .list(MessageState::Dead, 0, 10)
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|m| m.id)
        .collect();
    assert_eq!(kept, ids[2..].to_vec());
    // Then the retention passes: all gone, payloads and records too.
    assert_eq!(wait_stats(&q, WAIT, Counts::default()).await, Counts::default());
    consumer.shutdown().await.unwrap();
    assert!(all_keys(&client).await.is_empty(), "{:?}", all_keys(&client).await);
    let deleted = q.send("x").delay(Duration::from_secs(60)).await.unwrap();
    assert!(!q.delete_dead(&deleted).await.unwrap(), "pending is not dead");
}

#[tokio::test]
async fn events_tell_what_happened_in_order() {
    let (_server, _client, q) = start_queue("events", FETCH_INTERVAL, |b| {
        b.nack_redelivery_delay(Duration::from_millis(50))
            .default_retry_count(1)
    })
    .await;
    let mut events = q.events();
    let consumer = q.start_consume(ok_else_fail()).await.unwrap();
    let mut seen = Vec::new();
    // "bad" is sent once "ok" is done, so the order of the two is fixed.
    let ok = q.send("ok").await.unwrap();
    while seen.len() < 3 {
        seen.push(next_event(&mut events).await);
    }
    let bad = q.send("bad").delay(Duration::from_millis(200)).await.unwrap();
    while seen.len() < 8 {
        seen.push(next_event(&mut events).await);
    }
    consumer.shutdown().await.unwrap();
    let want = vec![
        Event::Sent { id: ok.clone() },
        Event::Delivered {
            id: ok.clone(),
            attempt: 1,
        },
        Event::Acked { id: ok },
        Event::Sent { id: bad.clone() },
        Event::Delivered {
            id: bad.clone(),
            attempt: 1,
        },
        Event::Failed {
            id: bad.clone(),
            attempt: 1,
            reason: "nope".into(),
            retry_in: Duration::from_millis(50),
        },
        Event::Delivered {
            id: bad.clone(),
            attempt: 2,
        },
        Event::Dead {
            id: bad,
            attempt: 2,
            reason: "nope".into(),
        },
    ];
    assert_eq!(seen, want);
}

#[tokio::test]
async fn find_queues_and_purge() {
    let (_server, client, q) = start_queue("alpha", FETCH_INTERVAL, |b| b).await;
    let beta = delayqueue::DelayQueue::builder("beta", client.clone()).build().unwrap();
    let other = delayqueue::DelayQueue::builder("gamma", client.clone())
        .key_prefix("other:")
        .build()
        .unwrap();
    assert!(delayqueue::find_queues(&client, "dq:").await.unwrap().is_empty());
    for i in 0..2500 {
        q.send(format!("{i}")).delay(Duration::from_secs(60)).await.unwrap();
    }
    beta.send("b").await.unwrap();
    other.send("c").await.unwrap();
    let sharded = delayqueue::DelayQueue::builder("delta", client.clone())
        .shards(3)
        .build()
        .unwrap();
    // Enough ids that every shard gets one.
    sharded
        .send_batch((0..30).map(|i| NewMessage::new(format!("{i}")).delay(Duration::from_secs(60))))
        .await
        .unwrap();
    let found = |prefix: &'static str| {
        let client = client.clone();
        async move {
            let found = delayqueue::find_queues(&client, prefix).await.unwrap();
            found.into_iter().map(|q| (q.name, q.shards)).collect::<Vec<_>>()
        }
    };
    let named = |names: &[(&str, usize)]| names.iter().map(|(n, s)| (n.to_string(), *s)).collect::<Vec<_>>();
    assert_eq!(found("dq:").await, named(&[("alpha", 1), ("beta", 1), ("delta", 3)]));
    assert_eq!(found("other:").await, named(&[("gamma", 1)]));
    assert_eq!(q.purge().await.unwrap(), 2500);
    assert_eq!(q.counts().await.unwrap(), Counts::default());
    assert_eq!(sharded.purge().await.unwrap(), 30);
    // A sharded queue keeps its recorded shard count, as a setting: its
    // running producers and consumers still agree with the next handle.
    assert_eq!(found("dq:").await, named(&[("beta", 1), ("delta", 3)]));
}
