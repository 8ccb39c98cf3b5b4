//! Message priorities through the public API: a due backlog is handled
//! highest priority first and in due order within one priority; every
//! operator view (counts, list, get, integrity check) sees the messages
//! waiting by priority, and cancel, requeue and purge reach them.

mod helpers;
use delayqueue_test_support as support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use delayqueue::{DelayQueue, Error, HandlerError, Message, MessageState, NewMessage, Order, MAX_PRIORITY};
use helpers::start_queue;
use support::{wait_for, wait_until, WAIT};

const FETCH: Duration = Duration::from_millis(200);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backlog_of_mixed_priorities_is_handled_in_priority_order() {
    const N: usize = 60;
    let (_server, _client, queue) = start_queue("prio", FETCH, |b| b.concurrency(1)).await;
    // Several sends, so due times differ within one priority.
    for chunk in 0..6 {
        let msgs = (0..10).map(|i| {
            let n = chunk * 10 + i;
            NewMessage::new(format!("m{n}")).priority((n * 7 % 10) as u8)
        });
        for sent in queue.send_batch(msgs).await.unwrap() {
            sent.unwrap();
        }
    }
    // Paused, the consumer promotes the whole backlog but leases nothing.
    queue.pause().await.unwrap();
    let handled: Arc<Mutex<Vec<(u8, SystemTime, String)>>> = Arc::default();
    let log = handled.clone();
    let consumer = queue
        .start_consume(move |msg: Message| {
            let log = log.clone();
            async move {
                let payload = String::from_utf8(msg.payload().to_vec()).unwrap();
                log.lock().unwrap().push((msg.priority(), msg.due_at(), payload));
                Ok::<(), HandlerError>(())
            }
        })
        .await
        .unwrap();
    assert!(
        wait_for(WAIT, || async { queue.counts().await.unwrap().ready == N as u64 }).await,
        "the backlog is promoted: {:?}",
        queue.counts().await
    );
    queue.resume().await.unwrap();
    assert!(wait_until(WAIT, || handled.lock().unwrap().len() == N).await);
    consumer.shutdown().await.unwrap();
    let handled = handled.lock().unwrap().clone();
    for pair in handled.windows(2) {
        let ((p1, due1, m1), (p2, due2, m2)) = (&pair[0], &pair[1]);
        assert!(
            p1 > p2 || (p1 == p2 && due1 <= due2),
            "{m1} (priority {p1}, due {due1:?}) before {m2} (priority {p2}, due {due2:?})"
        );
    }
    for (p, _, m) in &handled {
        let n: usize = m[1..].parse().unwrap();
        assert_eq!(usize::from(*p), n * 7 % 10, "{m} kept its priority");
    }
}

/// One handled message: (priority, due time, id, payload).
type Handled = (u8, SystemTime, String, String);

/// Starts a `concurrency(1)` consumer on `queue`, whose messages are all
/// due, and returns the `n` messages it handles, in the order it handled them.
async fn handle_all(queue: &DelayQueue, n: usize) -> Vec<Handled> {
    let handled: Arc<Mutex<Vec<Handled>>> = Arc::default();
    let log = handled.clone();
    let consumer = queue
        .start_consume(move |msg: Message| {
            let payload = String::from_utf8(msg.payload().to_vec()).unwrap();
            log.lock()
                .unwrap()
                .push((msg.priority(), msg.due_at(), msg.id().to_string(), payload));
            async { Ok::<(), HandlerError>(()) }
        })
        .await
        .unwrap();
    assert!(
        wait_until(WAIT, || handled.lock().unwrap().len() == n).await,
        "{:?}",
        queue.counts().await
    );
    consumer.shutdown().await.unwrap();
    let handled = handled.lock().unwrap().clone();
    handled
}

/// The payloads of `handled`, and the same in the promised order: priority
/// high to low, then due time, then id.
fn handled_and_promised(handled: &[Handled]) -> (Vec<String>, Vec<String>) {
    let mut promised = handled.to_vec();
    promised.sort_by(|a, b| (b.0, &a.1, &a.2).cmp(&(a.0, &b.1, &b.2)));
    let payloads = |v: &[Handled]| v.iter().map(|h| h.3.clone()).collect();
    (payloads(handled), payloads(&promised))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_handler_takes_a_due_backlog_in_priority_then_due_order_on_every_run() {
    let (_server, client, _queue) = start_queue("prio-runs", FETCH, |b| b).await;
    for run in 0..3 {
        let queue = helpers::queue_builder(&format!("prio-run-{run}"), &client, FETCH)
            .concurrency(1)
            .build()
            .unwrap();
        for i in 0..5 {
            for p in [0u8, 5, 9] {
                queue.send(format!("{p}-{i}")).priority(p).await.unwrap();
            }
        }
        let handled = handle_all(&queue, 15).await;
        let (got, want) = handled_and_promised(&handled);
        assert_eq!(got, want, "run {run}: handled in priority, then due order");
        assert_eq!(&got[..5], ["9-0", "9-1", "9-2", "9-3", "9-4"], "run {run}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_handler_takes_a_due_backlog_in_due_order_on_every_run() {
    const N: usize = 40;
    let (_server, client, _queue) = start_queue("due-runs", FETCH, |b| b).await;
    for run in 0..3 {
        let queue = helpers::queue_builder(&format!("due-run-{run}"), &client, FETCH)
            .concurrency(1)
            .build()
            .unwrap();
        let msgs = (0..N).map(|i| NewMessage::new(format!("{i:03}")).delay(Duration::from_millis(3 * i as u64)));
        let mut last = None;
        for sent in queue.send_batch(msgs).await.unwrap() {
            last = Some(sent.unwrap());
        }
        let last_due = queue.get(&last.unwrap()).await.unwrap().unwrap().due.unwrap();
        assert!(wait_until(WAIT, || SystemTime::now() > last_due).await);
        let handled = handle_all(&queue, N).await;
        let (got, want) = handled_and_promised(&handled);
        let sent: Vec<String> = (0..N).map(|i| format!("{i:03}")).collect();
        assert_eq!(want, sent, "run {run}: due times 3 ms apart");
        assert_eq!(got, want, "run {run}: handled in due order");
    }
}

#[tokio::test]
async fn a_priority_above_the_maximum_is_a_typed_error() {
    let (_server, _client, queue) = start_queue("prio-bad", FETCH, |b| b).await;
    let err = queue.send("x").priority(MAX_PRIORITY + 1).await.unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
    let err = queue
        .send_batch([NewMessage::new("a"), NewMessage::new("b").priority(200)])
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
    assert_eq!(queue.counts().await.unwrap().pending, 0, "nothing of the batch sent");
    queue.send("top").priority(MAX_PRIORITY).await.unwrap();
}

#[tokio::test]
async fn operator_views_and_operations_reach_messages_waiting_by_priority() {
    let (_server, _client, queue) = start_queue("prio-ops", FETCH, |b| b).await;
    // Promoted by a consumer of a paused queue, which leases nothing.
    let low = queue.send("low").await.unwrap();
    let high = queue.send("high").priority(8).await.unwrap();
    let gone = queue.send("gone").priority(3).await.unwrap();
    queue.pause().await.unwrap();
    let consumer = queue
        .start_consume(|_msg: Message| async { Ok::<(), HandlerError>(()) })
        .await
        .unwrap();
    assert!(wait_for(WAIT, || async { queue.counts().await.unwrap().ready == 3 }).await);
    consumer.shutdown().await.unwrap();

    let info = queue.get(&high).await.unwrap().unwrap();
    assert_eq!((info.state, info.priority), (MessageState::Ready, 8));
    let page = queue.list(MessageState::Ready, 0, 10).await.unwrap();
    let ids: Vec<_> = page.items.iter().map(|i| i.id.clone()).collect();
    assert_eq!(
        ids,
        [high.clone(), gone.clone(), low.clone()],
        "in the order claim takes them"
    );
    assert_eq!(page.total, 3);
    let second: Vec<_> = queue
        .list(MessageState::Ready, 1, 1)
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|i| i.id)
        .collect();
    assert_eq!(second, std::slice::from_ref(&gone));
    // Browse walks the same sequence, a page of one at a time, both ways.
    for order in [Order::Asc, Order::Desc] {
        let (walked, _) = helpers::browse_all(&queue, MessageState::Ready, order, 1, 3).await;
        let mut want = vec![high.to_string(), gone.to_string(), low.to_string()];
        if order == Order::Desc {
            want.reverse();
        }
        assert_eq!(walked, want, "{order:?}");
    }
    let found = queue.search(MessageState::Ready, "gon").await.unwrap();
    let found: Vec<_> = found.items.into_iter().map(|m| m.id).collect();
    assert_eq!(found, std::slice::from_ref(&gone));
    let report = queue.check_integrity().await.unwrap();
    assert!(report.is_clean(), "{report}");

    assert!(queue.cancel(&gone).await.unwrap());
    assert!(queue.get(&gone).await.unwrap().is_none());
    let report = queue.check_integrity().await.unwrap();
    assert!(report.is_clean(), "{report}");

    // Two messages and the entry the cancel left for claim to skip.
    assert_eq!(queue.purge().await.unwrap(), 3);
    assert_eq!(queue.counts().await.unwrap().ready, 0);
    assert!(queue.list(MessageState::Ready, 0, 10).await.unwrap().items.is_empty());
    let report = queue.check_integrity().await.unwrap();
    assert!(report.is_clean(), "{report}");
}

#[tokio::test]
async fn a_requeued_dead_letter_keeps_its_priority() {
    let (_server, _client, queue) = start_queue("prio-dead", FETCH, |b| b).await;
    let id = queue.send("d").priority(6).retry_count(0).await.unwrap();
    let consumer = queue
        .start_consume(|_msg: Message| async { Err::<(), HandlerError>("boom".into()) })
        .await
        .unwrap();
    assert!(wait_for(WAIT, || async { queue.counts().await.unwrap().dead == 1 }).await);
    consumer.shutdown().await.unwrap();
    let low = queue.send("low").await.unwrap();
    queue.pause().await.unwrap();
    let consumer = queue
        .start_consume(|_msg: Message| async { Ok::<(), HandlerError>(()) })
        .await
        .unwrap();
    assert!(wait_for(WAIT, || async { queue.counts().await.unwrap().ready == 1 }).await);
    consumer.shutdown().await.unwrap();
    assert!(queue.requeue_dead(&id).await.unwrap());
    let ids: Vec<_> = queue
        .list(MessageState::Ready, 0, 10)
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|i| (i.id, i.priority))
        .collect();
    assert_eq!(ids, [(id, 6), (low, 0)], "ahead of the earlier message of priority 0");
    let report = queue.check_integrity().await.unwrap();
    assert!(report.is_clean(), "{report}");
}

/// Priorities where they meet stalled handlers: a consumer whose one
/// handler is held by a slow run claimed a batch of every priority ahead
/// of it; it hands the batch back message by message once it stalls, and
/// another consumer of one handler then starts them highest priority
/// first, as if never claimed (a hand-back puts a first delivery back by
/// its priority, not in hand-back order).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_handed_back_by_a_stalled_consumer_is_claimed_again_in_priority_order() {
    let (_server, _client, queue) = start_queue("stalled", FETCH, |b| {
        b.concurrency(1).max_consume_duration(Duration::from_secs(120))
    })
    .await;
    let hold = Arc::new(tokio::sync::Semaphore::new(0));
    let on_a = helpers::Log::default();
    let a = queue.start_consume(helpers::stalling(&on_a, &hold)).await.unwrap();
    queue.send("warm").await.unwrap();
    assert!(wait_for(WAIT, || async { queue.status().await.unwrap().totals.acked == 1 }).await);
    let batch = std::iter::once(NewMessage::new("slow").priority(MAX_PRIORITY))
        .chain((0..30).map(|n| NewMessage::new(format!("m{n}")).priority((n * 7 % 10) as u8)));
    assert!(queue.send_batch(batch).await.unwrap().iter().all(Result::is_ok));
    assert!(wait_for(WAIT, || async { queue.status().await.unwrap().counts.processing == 31 }).await);
    // Handed back, and not claimed again while the handler stalls.
    assert!(wait_for(WAIT, || async { queue.status().await.unwrap().counts.processing == 1 }).await);
    let log = Arc::new(Mutex::new(Vec::new()));
    let b_log = log.clone();
    let b = queue
        .start_consume(move |msg: Message| {
            b_log.lock().unwrap().push(msg.priority());
            async { Ok::<(), HandlerError>(()) }
        })
        .await
        .unwrap();
    assert!(
        wait_until(WAIT, || log.lock().unwrap().len() == 30).await,
        "{:?}",
        log.lock().unwrap()
    );
    assert_eq!(on_a.len(), 2, "a started only warm and slow");
    let got = log.lock().unwrap().clone();
    let mut want = got.clone();
    want.sort_by(|x, y| y.cmp(x));
    assert_eq!(got, want, "started highest priority first");
    hold.add_permits(1);
    assert!(wait_for(WAIT, || async { queue.status().await.unwrap().totals.acked == 32 }).await);
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}
