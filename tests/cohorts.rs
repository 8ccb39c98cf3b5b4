//! Cohorts with callbacks through the public API (docs/workflows.md,
//! Cohorts): callbacks run once the cohort is closed and its members
//! finished, never before; on_success is removed when a member dies; the
//! callback reads the cohort's counts; members in another queue; nothing
//! left behind.

mod helpers;
use delayqueue_test_support as support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use delayqueue::{CohortStatus, DelayQueue, Error, HandlerError, Message, NewMessage, SkipRetry, COHORT_HEADER};
use helpers::{flow_keys, start_queues};
use support::{wait_for, wait_until, WAIT};

const FETCH: Duration = Duration::from_millis(100);

/// What each delivery saw: its payload and, for a callback, its cohort's status.
type Seen = Arc<Mutex<Vec<(String, Option<CohortStatus>)>>>;

/// Records deliveries; a callback reads its cohort's status; "bad" dies.
fn handler(queue: &DelayQueue, seen: &Seen) -> impl delayqueue::Handler {
    let (queue, seen) = (queue.clone(), seen.clone());
    move |msg: Message| {
        let (queue, seen) = (queue.clone(), seen.clone());
        async move {
            let status = match msg.header(COHORT_HEADER) {
                Some(cohort) => queue.cohort_status(cohort).await.unwrap(),
                None => None,
            };
            let payload = String::from_utf8_lossy(msg.payload()).into_owned();
            seen.lock().unwrap().push((payload.clone(), status));
            match payload.as_str() {
                "bad" => Err(HandlerError::from(SkipRetry::new("broken"))),
                _ => Ok(()),
            }
        }
    }
}

fn payloads(seen: &Seen) -> Vec<String> {
    seen.lock().unwrap().iter().map(|s| s.0.clone()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callbacks_run_after_the_batch_closed_and_its_members_finished() {
    let (_server, client, qs) = start_queues(&["b", "other"], FETCH).await;
    let (q, other) = (&qs[0], &qs[1]);
    let cohort = q
        .cohort()
        .id("import")
        .on_complete(NewMessage::new("complete"))
        .on_success(NewMessage::new("success"))
        .open()
        .await
        .unwrap();
    let seen = Seen::default();
    let a = q.start_consume(handler(q, &seen)).await.unwrap();
    let b = other.start_consume(handler(other, &seen)).await.unwrap();
    for i in 0..5 {
        cohort.send(NewMessage::new(format!("m{i}"))).await.unwrap();
    }
    cohort.send_to(other, NewMessage::new("elsewhere")).await.unwrap();
    assert!(wait_until(WAIT, || seen.lock().unwrap().len() == 6).await);
    // Their acks and completions follow their handlers.
    let done = wait_for(WAIT, || async {
        q.cohort_status("import").await.unwrap().is_some_and(|s| s.left == 0)
    });
    assert!(done.await);
    // Open: no callback yet, however long it takes.
    let status = q.cohort_status("import").await.unwrap().unwrap();
    assert_eq!((status.open, status.total, status.left, status.acked), (true, 6, 0, 6));
    assert!(!payloads(&seen).iter().any(|p| p == "complete" || p == "success"));
    cohort.close().await.unwrap();
    cohort.close().await.unwrap();
    assert!(wait_until(WAIT, || seen.lock().unwrap().len() == 8).await);
    let seen_now = seen.lock().unwrap().clone();
    for (payload, status) in &seen_now[6..] {
        assert!(payload == "complete" || payload == "success", "{payload}");
        let s = status.expect("the callback reads its cohort's counts");
        assert_eq!((s.open, s.total, s.acked, s.dead), (false, 6, 6, 0), "{payload}");
    }
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
    assert!(
        wait_for(WAIT, || async { flow_keys(&client).await.is_empty() }).await,
        "{:?}",
        flow_keys(&client).await
    );
    assert_eq!(q.cohort_status("import").await.unwrap(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_member_removes_on_success_and_on_complete_still_runs() {
    let (_server, client, qs) = start_queues(&["d"], FETCH).await;
    let q = &qs[0];
    let cohort = q
        .cohort()
        .on_complete(NewMessage::new("complete"))
        .on_success(NewMessage::new("success"))
        .open()
        .await
        .unwrap();
    cohort.send(NewMessage::new("good")).await.unwrap();
    cohort.send(NewMessage::new("bad").retry_count(0)).await.unwrap();
    cohort.close().await.unwrap();
    let seen = Seen::default();
    let consumer = q.start_consume(handler(q, &seen)).await.unwrap();
    assert!(wait_until(WAIT, || payloads(&seen).contains(&"complete".to_string())).await);
    consumer.shutdown().await.unwrap();
    let seen = seen.lock().unwrap().clone();
    assert!(!seen.iter().any(|s| s.0 == "success"), "{seen:?}");
    let (_, status) = seen.iter().find(|s| s.0 == "complete").unwrap();
    let s = status.unwrap();
    assert_eq!((s.total, s.acked, s.dead), (2, 1, 1));
    // on_success is gone, not a dead letter: only the member is.
    assert_eq!(q.counts().await.unwrap().dead, 1);
    q.delete_all_dead().await.unwrap();
    assert!(
        wait_for(WAIT, || async { flow_keys(&client).await.is_empty() }).await,
        "{:?}",
        flow_keys(&client).await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_without_callbacks_is_refused() {
    let (_server, _client, qs) = start_queues(&["n"], FETCH).await;
    assert!(matches!(qs[0].cohort().open().await, Err(Error::InvalidFlow { .. })));
}
