//! Flows through the public API (docs/workflows.md): a parent waits for
//! its children across queues, never runs before them and always runs
//! once they finished (a consumer that dies between a child's ack and the
//! relay included); the dead-child policies; cancelling a parent cancels
//! its unfinished children; a re-sent flow is idempotent; no flow key is
//! left once a flow completed or was cancelled; a parent of 10,000
//! children completes.

mod helpers;
use delayqueue_test_support as support;

use std::time::Duration;

use delayqueue::fred::clients::Client;
use delayqueue::{
    ChildOutcome, ChildPolicy, DelayQueue, Error, Flow, HandlerError, Message, MessageRef, MessageState, NewMessage,
    SkipRetry,
};
use helpers::{acking, flow_keys, start_queues, Log};
use support::{wait_for, wait_until, RedisServer, WAIT};

const FETCH: Duration = Duration::from_millis(100);

async fn no_flow_key_left(client: &Client) {
    let gone = wait_for(WAIT, || async { flow_keys(client).await.is_empty() }).await;
    assert!(gone, "flow keys left: {:?}", flow_keys(client).await);
}

async fn state(q: &DelayQueue, id: &str) -> Option<MessageState> {
    q.get(id).await.unwrap().map(|info| info.state)
}

/// Index of the delivery of `payload` in `log`.
fn at(log: &Log, payload: &str) -> usize {
    log.snapshot()
        .iter()
        .position(|d| d.3 == payload.as_bytes())
        .unwrap_or_else(|| panic!("{payload} not delivered"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_two_level_flow_across_two_queues_runs_each_parent_after_its_children() {
    let (_server, client, qs) = start_queues(&["orders", "mail"], FETCH).await;
    let (orders, mail) = (&qs[0], &qs[1]);
    let flow = Flow::new(orders, NewMessage::new("close"))
        .child(Flow::new(orders, NewMessage::new("charge")))
        .child(
            Flow::new(mail, NewMessage::new("email"))
                .child(Flow::new(mail, NewMessage::new("render")))
                .child(Flow::new(orders, NewMessage::new("ledger"))),
        );
    let root = flow.send().await.unwrap();
    assert_eq!(state(orders, root.as_str()).await, Some(MessageState::Waiting));
    assert_eq!(orders.counts().await.unwrap().waiting, 1);
    // A waiting parent is a message in a state of its own, no orphan.
    for q in [orders, mail] {
        let report = q.check_integrity().await.unwrap();
        assert!(report.is_clean(), "{report}");
    }
    assert!(matches!(
        orders.list(MessageState::Waiting, 0, 10).await,
        Err(Error::InvalidArgument(_))
    ));
    let log = Log::default();
    let a = orders.start_consume(acking(&log)).await.unwrap();
    let b = mail.start_consume(acking(&log)).await.unwrap();
    assert!(wait_until(WAIT, || log.len() == 5).await, "{} delivered", log.len());
    assert!(at(&log, "render") < at(&log, "email"));
    assert!(at(&log, "ledger") < at(&log, "email"));
    assert!(at(&log, "email") < at(&log, "close"));
    assert!(at(&log, "charge") < at(&log, "close"));
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
    no_flow_key_left(&client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parent_reads_its_childrens_outcomes_and_waits_for_existing_messages() {
    let (_server, client, qs) = start_queues(&["p", "c"], FETCH).await;
    let (p, c) = (&qs[0], &qs[1]);
    let one = c.send("one").await.unwrap();
    let two = p.send("two").await.unwrap();
    // Unknown: taken as finished.
    let parent = p
        .send("parent")
        .id("parent-1")
        .after([
            MessageRef::new(c, one.clone()),
            MessageRef::from(two.clone()),
            MessageRef::new(c, "never-sent"),
        ])
        .await
        .unwrap();
    assert_eq!(state(p, parent.as_str()).await, Some(MessageState::Waiting));
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let record = seen.clone();
    let queue = p.clone();
    let handler = move |msg: Message| {
        let (record, queue) = (record.clone(), queue.clone());
        async move {
            if msg.payload() == b"parent" {
                let page = queue.children_results(msg.id(), None).await.unwrap();
                assert!(page.next.is_none());
                let mut children: Vec<(String, String, ChildOutcome)> = page
                    .items
                    .into_iter()
                    .map(|c| (c.queue, c.id.to_string(), c.outcome))
                    .collect();
                children.sort_by(|a, b| a.1.cmp(&b.1));
                record.lock().unwrap().extend(children);
            }
            Ok::<(), HandlerError>(())
        }
    };
    let a = p.start_consume(handler.clone()).await.unwrap();
    let b = c.start_consume(handler).await.unwrap();
    assert!(wait_until(WAIT, || seen.lock().unwrap().len() == 3).await);
    let mut want = vec![
        ("c".to_string(), one.to_string(), ChildOutcome::Acked),
        ("p".to_string(), two.to_string(), ChildOutcome::Acked),
        ("c".to_string(), "never-sent".to_string(), ChildOutcome::Acked),
    ];
    want.sort_by(|a, b| a.1.cmp(&b.1));
    assert_eq!(*seen.lock().unwrap(), want);
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
    no_flow_key_left(&client).await;
}

/// Sends a parent waiting for a child that dies and one that succeeds,
/// under `policy`; returns the queue, the parent's and the dead child's ids.
async fn dead_child(policy: ChildPolicy, name: &str) -> (RedisServer, Client, DelayQueue, String, String) {
    let (server, client, qs) = start_queues(&[name], FETCH).await;
    let q = qs[0].clone();
    let bad = q.send("bad").retry_count(0).await.unwrap();
    let good = q.send("good").await.unwrap();
    let parent = q
        .send("parent")
        .after([bad.clone(), good])
        .on_dead_child(policy)
        .await
        .unwrap();
    (server, client, q, parent.to_string(), bad.to_string())
}

fn failing_bad(log: &Log) -> impl delayqueue::Handler {
    let log = log.clone();
    move |msg: Message| {
        let log = log.clone();
        async move {
            log.record(&msg);
            match msg.payload() {
                b"bad" => Err(HandlerError::from(SkipRetry::new("broken"))),
                _ => Ok(()),
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_child_fails_its_parent_under_fail() {
    let (_server, client, q, parent, bad) = dead_child(ChildPolicy::Fail, "fail").await;
    let log = Log::default();
    let consumer = q.start_consume(failing_bad(&log)).await.unwrap();
    assert!(wait_for(WAIT, || async { state(&q, &parent).await == Some(MessageState::Dead) }).await);
    let info = q.get(&parent).await.unwrap().unwrap();
    assert_eq!(
        info.last_error.as_deref(),
        Some(format!("child fail/{bad} dead").as_str())
    );
    consumer.shutdown().await.unwrap();
    assert!(log.snapshot().iter().all(|d| d.3 != b"parent"));
    q.delete_all_dead().await.unwrap();
    no_flow_key_left(&client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_child_is_ignored_under_ignore() {
    let (_server, client, q, parent, _bad) = dead_child(ChildPolicy::Ignore, "ignore").await;
    let log = Log::default();
    let consumer = q.start_consume(failing_bad(&log)).await.unwrap();
    assert!(wait_until(WAIT, || log.snapshot().iter().any(|d| d.3 == b"parent")).await);
    consumer.shutdown().await.unwrap();
    assert_eq!(state(&q, &parent).await, None);
    q.delete_all_dead().await.unwrap();
    no_flow_key_left(&client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parent_waits_for_a_requeued_child_under_wait() {
    let (_server, client, q, parent, bad) = dead_child(ChildPolicy::Wait, "wait").await;
    let log = Log::default();
    let consumer = q.start_consume(failing_bad(&log)).await.unwrap();
    assert!(wait_for(WAIT, || async { state(&q, &bad).await == Some(MessageState::Dead) }).await);
    assert!(wait_until(WAIT, || log.snapshot().iter().any(|d| d.3 == b"good")).await);
    consumer.shutdown().await.unwrap();
    assert_eq!(state(&q, &parent).await, Some(MessageState::Waiting));
    // Requeued, it succeeds this time: the parent runs.
    assert!(q.requeue_dead(&bad).await.unwrap());
    let log = Log::default();
    let consumer = q.start_consume(acking(&log)).await.unwrap();
    assert!(wait_until(WAIT, || log.snapshot().iter().any(|d| d.3 == b"parent")).await);
    assert!(at(&log, "bad") < at(&log, "parent"));
    consumer.shutdown().await.unwrap();
    no_flow_key_left(&client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_parent_cancels_its_unfinished_children_and_leaves_nothing() {
    let (_server, client, qs) = start_queues(&["cp", "cc"], FETCH).await;
    let (p, c) = (&qs[0], &qs[1]);
    let flow = Flow::new(p, NewMessage::new("parent"))
        .child(Flow::new(
            c,
            NewMessage::new("child a").delay(Duration::from_secs(3600)),
        ))
        .child(Flow::new(c, NewMessage::new("child b")).child(Flow::new(
            c,
            NewMessage::new("grandchild").delay(Duration::from_secs(3600)),
        )));
    let root = flow.send().await.unwrap();
    assert_eq!(c.counts().await.unwrap().waiting, 1);
    assert!(p.cancel(&root).await.unwrap());
    assert_eq!(state(p, root.as_str()).await, None);
    // The child b is a parent itself: its own children go through its
    // queue's outbox, relayed by its consumer.
    let log = Log::default();
    let consumer = c.start_consume(acking(&log)).await.unwrap();
    assert!(
        wait_for(WAIT, || async {
            c.counts().await.unwrap().live() + c.counts().await.unwrap().waiting == 0
        })
        .await
    );
    // Their own completions go through the outbox too, on the next ticks.
    no_flow_key_left(&client).await;
    consumer.shutdown().await.unwrap();
    assert!(log.is_empty(), "delivered {:?}", log.snapshot());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_re_sent_flow_sends_nothing_twice() {
    let (_server, client, qs) = start_queues(&["again"], FETCH).await;
    let q = &qs[0];
    let flow = Flow::new(q, NewMessage::new("parent"))
        .child(Flow::new(q, NewMessage::new("a")))
        .child(Flow::new(q, NewMessage::new("b")));
    flow.send().await.unwrap();
    flow.send().await.unwrap();
    let counts = q.counts().await.unwrap();
    assert_eq!((counts.waiting, counts.ready + counts.pending), (1, 2));
    let log = Log::default();
    let consumer = q.start_consume(acking(&log)).await.unwrap();
    assert!(wait_until(WAIT, || log.len() == 3).await);
    consumer.shutdown().await.unwrap();
    assert_eq!(log.len(), 3);
    assert_eq!(at(&log, "parent"), 2);
    no_flow_key_left(&client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_flows_are_refused_with_typed_errors() {
    let (_server, _client, qs) = start_queues(&["bad"], FETCH).await;
    let q = &qs[0];
    let err = q
        .send("p")
        .id("x")
        .unique_for(Duration::from_secs(1))
        .after(["a"])
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidFlow { .. }), "{err}");
    let err = q.send("p").id("self").after(["self"]).await.unwrap_err();
    assert!(matches!(err, Error::InvalidFlow { .. }), "{err}");
    let mut deep = Flow::new(q, NewMessage::new("leaf"));
    for _ in 0..delayqueue::MAX_FLOW_DEPTH {
        deep = Flow::new(q, NewMessage::new("node")).child(deep);
    }
    assert!(matches!(deep.send().await, Err(Error::InvalidFlow { .. })));
    // A child's dedup needs an id of its own, as any send's does: refused
    // before the parent is stored.
    let unique = Flow::new(q, NewMessage::new("p"))
        .child(Flow::new(q, NewMessage::new("kid").unique_for(Duration::from_secs(60))));
    let err = unique.send().await.unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    let counts = q.counts().await.unwrap();
    assert_eq!((counts.live(), counts.waiting), (0, 0), "{counts:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parent_of_ten_thousand_children_completes() {
    let (_server, client, qs) = start_queues(&["wide", "kids"], FETCH).await;
    let (p, c) = (&qs[0], &qs[1]);
    let mut flow = Flow::new(p, NewMessage::new("parent"));
    for i in 0..10_000 {
        flow = flow.child(Flow::new(c, NewMessage::new(format!("kid {i}"))));
    }
    flow.send().await.unwrap();
    let log = Log::default();
    let a = p.start_consume(acking(&log)).await.unwrap();
    let b = c.start_consume(acking(&log)).await.unwrap();
    assert!(
        wait_until(Duration::from_secs(120), || log.len() == 10_001).await,
        "{} delivered",
        log.len()
    );
    assert_eq!(at(&log, "parent"), 10_000);
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
    no_flow_key_left(&client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parent_reads_the_results_its_children_returned() {
    let (_server, client, qs) = start_queues(&["rp", "rc"], FETCH).await;
    let (p, c) = (&qs[0], &qs[1]);
    let flow = Flow::new(p, NewMessage::new("sum").id("sum-1"))
        .child(Flow::new(c, NewMessage::new("2").id("two")))
        .child(Flow::new(c, NewMessage::new("3").id("three")));
    flow.send().await.unwrap();
    let children = c
        .start_consume(|msg: Message| async move { Ok::<_, HandlerError>(msg.payload().repeat(2)) })
        .await
        .unwrap();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let record = seen.clone();
    let parent = p
        .start_consume(move |msg: Message| {
            let record = record.clone();
            async move {
                let page = msg.children_results(None).await?;
                let mut got: Vec<(String, Option<Vec<u8>>)> =
                    page.items.into_iter().map(|c| (c.id.to_string(), c.result)).collect();
                got.sort();
                record.lock().unwrap().extend(got);
                Ok::<(), HandlerError>(())
            }
        })
        .await
        .unwrap();
    assert!(wait_until(WAIT, || seen.lock().unwrap().len() == 2).await);
    assert_eq!(
        *seen.lock().unwrap(),
        vec![
            ("three".to_string(), Some(b"33".to_vec())),
            ("two".to_string(), Some(b"22".to_vec())),
        ]
    );
    parent.shutdown().await.unwrap();
    children.shutdown().await.unwrap();
    no_flow_key_left(&client).await;
}

/// A finished child as a parent reads it: id, outcome, result.
type Read = (String, ChildOutcome, Option<Vec<u8>>);

/// Each finished child of `parent`, sorted by id.
async fn results_of(q: &DelayQueue, parent: &str) -> Vec<Read> {
    let page = q.children_results(parent, None).await.unwrap();
    let mut got: Vec<_> = page
        .items
        .into_iter()
        .map(|c| (c.id.to_string(), c.outcome, c.result))
        .collect();
    got.sort_by(|a, b| a.0.cmp(&b.0));
    got
}

/// A handler that returns the payload as the result, fails `bad` for
/// good, and records in `seen` what a `parent` reads of its children.
fn returning(seen: &std::sync::Arc<std::sync::Mutex<Vec<Vec<Read>>>>, q: &DelayQueue) -> impl delayqueue::Handler {
    let (seen, q) = (seen.clone(), q.clone());
    move |msg: Message| {
        let (seen, q) = (seen.clone(), q.clone());
        async move {
            match msg.payload() {
                b"bad" => Err(HandlerError::from(SkipRetry::new("broken"))),
                b"parent" => {
                    let got = results_of(&q, msg.id().as_str()).await;
                    seen.lock().unwrap().push(got);
                    Ok(Vec::new())
                }
                other => Ok(other.to_vec()),
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parent_failed_by_a_dead_child_keeps_its_childrens_results_until_acked_or_deleted() {
    let (_server, client, qs) = start_queues(&["kept"], FETCH).await;
    let q = &qs[0];
    q.send("r1").id("c1").await.unwrap();
    q.send("bad")
        .id("c2")
        .retry_count(0)
        .delay(Duration::from_millis(300))
        .await
        .unwrap();
    q.send("parent").id("p").after(["c1", "c2"]).await.unwrap();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let consumer = q.start_consume(returning(&seen, q)).await.unwrap();
    assert!(wait_for(WAIT, || async { state(q, "p").await == Some(MessageState::Dead) }).await);
    let want = vec![
        ("c1".to_string(), ChildOutcome::Acked, Some(b"r1".to_vec())),
        ("c2".to_string(), ChildOutcome::Dead, None),
    ];
    assert_eq!(results_of(q, "p").await, want, "the dead parent's children");
    // Requeued, it runs without waiting and reads them; its ack deletes them.
    assert!(q.requeue_dead("p").await.unwrap());
    assert!(wait_until(WAIT, || seen.lock().unwrap().len() == 1).await);
    assert_eq!(seen.lock().unwrap()[0], want, "what the requeued parent read");
    assert!(wait_for(WAIT, || async { state(q, "p").await.is_none() }).await);
    consumer.shutdown().await.unwrap();
    q.delete_all_dead().await.unwrap();
    no_flow_key_left(&client).await;

    // A dead parent deleted takes its children's results with it.
    q.send("r1").id("d1").await.unwrap();
    q.send("bad")
        .id("d2")
        .retry_count(0)
        .delay(Duration::from_millis(300))
        .await
        .unwrap();
    q.send("parent").id("p2").after(["d1", "d2"]).await.unwrap();
    let consumer = q.start_consume(returning(&seen, q)).await.unwrap();
    assert!(wait_for(WAIT, || async { state(q, "p2").await == Some(MessageState::Dead) }).await);
    consumer.shutdown().await.unwrap();
    assert_eq!(results_of(q, "p2").await.len(), 2);
    assert_eq!(q.delete_all_dead().await.unwrap(), 2);
    no_flow_key_left(&client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parent_sent_after_a_child_that_finished_reads_its_kept_result() {
    let (_server, client, qs) = start_queues(&["late", "latekids"], FETCH).await;
    let (p, c) = (&qs[0], &qs[1]);
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let children = c.start_consume(returning(&seen, c)).await.unwrap();
    c.send("r1").id("early").await.unwrap();
    assert_eq!(c.wait_result("early", WAIT).await.unwrap(), Some(b"r1".to_vec()));
    p.send("parent")
        .id("p")
        .after([MessageRef::new(c, "early")])
        .await
        .unwrap();
    let parent = p.start_consume(returning(&seen, p)).await.unwrap();
    assert!(wait_until(WAIT, || seen.lock().unwrap().len() == 1).await);
    assert_eq!(
        seen.lock().unwrap()[0],
        vec![("early".to_string(), ChildOutcome::Acked, Some(b"r1".to_vec()))]
    );
    parent.shutdown().await.unwrap();
    children.shutdown().await.unwrap();
    no_flow_key_left(&client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_re_send_refused_as_duplicate_writes_nothing_and_makes_no_cycle() {
    let (_server, client, qs) = start_queues(&["cycle"], FETCH).await;
    let q = &qs[0];
    q.send("x").id("x").delay(Duration::from_millis(300)).await.unwrap();
    q.send("a").id("a").after(["x"]).await.unwrap();
    q.send("b").id("b").after(["a"]).await.unwrap();
    use delayqueue::fred::prelude::{HashesInterface, SetsInterface};
    let links = || async {
        let links: std::collections::BTreeMap<String, String> = client.hgetall("dq:{cycle}:parents").await.unwrap();
        links
    };
    let before = links().await;
    let err = q.send("a").id("a").after(["b"]).await.unwrap_err();
    assert!(matches!(err, Error::Duplicate { .. }), "{err}");
    assert_eq!(links().await, before, "the children's links");
    let deps: Vec<String> = client.smembers("dq:{cycle}:deps:a").await.unwrap();
    assert_eq!(deps, vec!["dq:{cycle}: x".to_string()], "a's children");
    let log = Log::default();
    let consumer = q.start_consume(acking(&log)).await.unwrap();
    assert!(wait_until(WAIT, || log.len() == 3).await, "{} delivered", log.len());
    assert!(at(&log, "x") < at(&log, "a") && at(&log, "a") < at(&log, "b"));
    consumer.shutdown().await.unwrap();
    no_flow_key_left(&client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_child_in_a_sharded_queue_names_its_queue_in_the_reason() {
    let server = RedisServer::start().await;
    let client = server.client().await;
    let p = helpers::queue_builder("sp", &client, FETCH).build().unwrap();
    let kids = helpers::queue_builder("kids", &client, FETCH)
        .shards(2)
        .build()
        .unwrap();
    let bad = kids.send("bad").id("C").retry_count(0).await.unwrap();
    p.send("parent")
        .id("P")
        .after([MessageRef::new(&kids, bad)])
        .await
        .unwrap();
    let log = Log::default();
    let consumer = kids.start_consume(failing_bad(&log)).await.unwrap();
    assert!(wait_for(WAIT, || async { state(&p, "P").await == Some(MessageState::Dead) }).await);
    consumer.shutdown().await.unwrap();
    let info = p.get("P").await.unwrap().unwrap();
    assert_eq!(info.last_error.as_deref(), Some("child kids/C dead"));
}

/// Flows sent while consumers run and the script cache is flushed before
/// every other flow: a flow's parent's set is filled in the round trip of
/// its send, and its children linked in the round trip of theirs, so a
/// reload (NOSCRIPT, then EVAL) may run a call before the one it was sent
/// behind. Each parent still runs once, after all of its children, and
/// reads every child's outcome.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flows_sent_while_scripts_are_flushed_wait_for_every_child() {
    const FLOWS: usize = 40;
    const CHILDREN: usize = 4;
    let (server, client, qs) = start_queues(&["p", "c"], FETCH).await;
    let (p, c) = (&qs[0], &qs[1]);
    let log = Log::default();
    let short = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let parents = {
        let short = short.clone();
        helpers::recording(&log, move |msg: Message| {
            let short = short.clone();
            async move {
                if msg.payload().starts_with(b"p") {
                    let page = msg.children_results(None).await?;
                    let acked = page.items.iter().filter(|r| r.outcome == ChildOutcome::Acked).count();
                    if acked != CHILDREN {
                        short.lock().unwrap().push(format!("{:?}: {page:?}", msg.payload()));
                    }
                }
                Ok(())
            }
        })
    };
    let a = p.start_consume(parents).await.unwrap();
    let b = c.start_consume(acking(&log)).await.unwrap();
    for i in 0..FLOWS {
        if i % 2 == 0 {
            assert_eq!(server.raw_command(&["SCRIPT", "FLUSH"]), "OK");
        }
        let mut flow = Flow::new(p, NewMessage::new(format!("p{i}")));
        for j in 0..CHILDREN {
            // Half in the parent's own queue, half in another.
            let q = if j % 2 == 0 { p } else { c };
            flow = flow.child(Flow::new(q, NewMessage::new(format!("c{i}-{j}"))));
        }
        flow.send().await.unwrap();
    }
    let all = FLOWS * (CHILDREN + 1);
    assert!(
        wait_until(WAIT, || log.len() >= all).await,
        "{} of {all} delivered",
        log.len()
    );
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
    assert_eq!(log.len(), all, "each message once");
    for i in 0..FLOWS {
        let parent = at(&log, &format!("p{i}"));
        for j in 0..CHILDREN {
            assert!(at(&log, &format!("c{i}-{j}")) < parent, "p{i} ran before c{i}-{j}");
        }
    }
    assert!(short.lock().unwrap().is_empty(), "{:?}", short.lock().unwrap());
    no_flow_key_left(&client).await;
}

/// A flow's parent goes out with its children and their links in one
/// round trip. A parent whose payload is staged (over 4 KiB) is sent once
/// its staged value is written, behind its children's links, which find
/// it not stored yet (a child finishing before it is stored is the script
/// test `a_child_that_finishes_before_its_parent_is_stored_marks_its_set_for_the_send`).
/// Each parent still runs once, after its children, and reads every
/// child's outcome.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parents_sent_behind_their_childrens_links_read_every_child() {
    const FLOWS: usize = 6;
    const CHILDREN: usize = 3;
    let server = RedisServer::start().await;
    let client = server.client().await;
    let p = helpers::queue_builder("p", &client, FETCH)
        .max_payload_size(4 << 20)
        .build()
        .unwrap();
    let c = helpers::queue_builder("c", &client, FETCH).build().unwrap();
    let log = Log::default();
    let short = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let parents = {
        let short = short.clone();
        move |msg: Message| {
            let short = short.clone();
            async move {
                let page = msg.children_results(None).await?;
                let acked = page.items.iter().filter(|r| r.outcome == ChildOutcome::Acked).count();
                let name = msg.payload().split(|&b| b == b'.').next().unwrap_or_default().to_vec();
                short.lock().unwrap().push((name, acked));
                Ok::<(), HandlerError>(())
            }
        }
    };
    let a = p.start_consume(parents).await.unwrap();
    let b = c.start_consume(acking(&log)).await.unwrap();
    for i in 0..FLOWS {
        let mut payload = format!("parent{i}").into_bytes();
        payload.resize(1 << 20, b'.');
        let mut flow = Flow::new(&p, NewMessage::new(payload));
        for j in 0..CHILDREN {
            flow = flow.child(Flow::new(&c, NewMessage::new(format!("c{i}-{j}"))));
        }
        flow.send().await.unwrap();
    }
    let ran = wait_until(WAIT, || short.lock().unwrap().len() >= FLOWS).await;
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
    assert!(ran, "{} of {FLOWS} parents ran", short.lock().unwrap().len());
    let mut seen = short.lock().unwrap().clone();
    seen.sort();
    let want: Vec<(Vec<u8>, usize)> = (0..FLOWS)
        .map(|i| (format!("parent{i}").into_bytes(), CHILDREN))
        .collect();
    assert_eq!(seen, want, "each parent once, with every child acked");
    assert_eq!(log.len(), FLOWS * CHILDREN);
    no_flow_key_left(&client).await;
}

/// A flow as deep as allowed is sent from a thread of 1 MiB of stack, in
/// the test's own (debug) build: each script call's client future is
/// boxed, so a send's futures, and a debug build's poll frames, stay
/// small. (A thread's stack is 2 MiB by default; a depth-3 flow once took
/// 900 KiB of it here.)
#[test]
fn a_flow_as_deep_as_allowed_sends_within_a_small_stack() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (_server, client, qs) = runtime.block_on(start_queues(&["deep", "leaves"], FETCH));
    let sender = std::thread::Builder::new()
        .stack_size(1 << 20)
        .spawn(move || {
            let local = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            local.block_on(async {
                let mut flow = Flow::new(&qs[1], NewMessage::new("bottom"));
                for level in 1..delayqueue::MAX_FLOW_DEPTH {
                    flow = Flow::new(&qs[level % 2], NewMessage::new(format!("level {level}")))
                        .child(flow)
                        .child(Flow::new(&qs[1], NewMessage::new("leaf")));
                }
                flow.send().await.unwrap();
                qs[0].counts().await.unwrap().waiting + qs[1].counts().await.unwrap().waiting
            })
        })
        .unwrap();
    let waiting = sender.join().expect("the send overflowed its stack or failed");
    assert_eq!(waiting as usize, delayqueue::MAX_FLOW_DEPTH - 1);
    drop(client);
}

/// A parent's send runs before the `flow_deps` call sent ahead of it in
/// the same round trip (only `send.lua` is in the script cache, so the
/// other call goes again as EVAL after it): the send finds the parent's
/// set empty and stores nothing, and goes again once the set is filled.
/// The parent still waits for its child and reads its result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parent_sent_before_its_set_was_filled_is_sent_again_and_waits() {
    let (server, _client, qs) = start_queues(&["p", "c"], FETCH).await;
    let (p, c) = (&qs[0], &qs[1]);
    let child = c.send("child").await.unwrap();
    assert_eq!(server.raw_command(&["SCRIPT", "FLUSH"]), "OK");
    let send_lua = format!(
        "{}/producers/python/src/delayqueue_producer/generated/send.lua",
        env!("CARGO_MANIFEST_DIR")
    );
    let source = std::fs::read_to_string(send_lua).unwrap();
    server.raw_command(&["SCRIPT", "LOAD", &source]);
    let parent = p
        .send("parent")
        .after(vec![MessageRef::new(c, child.clone())])
        .await
        .unwrap();
    assert_eq!(state(p, parent.as_str()).await, Some(MessageState::Waiting));
    let log = Log::default();
    let a = p.start_consume(acking(&log)).await.unwrap();
    let b = c.start_consume(acking(&log)).await.unwrap();
    assert!(wait_until(WAIT, || log.len() == 2).await, "{} delivered", log.len());
    assert!(at(&log, "child") < at(&log, "parent"));
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flow_sent_again_leaves_a_child_that_died_as_it_is() {
    let (_server, _client, qs) = start_queues(&["parents", "kids"], FETCH).await;
    let (p, c) = (&qs[0], &qs[1]);
    // The child's id is generated by the flow: a dead letter of it can only
    // be this child's own earlier send.
    let child = Flow::new(c, NewMessage::new("kid").retry_count(0));
    let kid = child.id().clone();
    let flow = Flow::new(p, NewMessage::new("parent").id("the-parent")).child(child);
    flow.send().await.unwrap();
    let consumer = c
        .start_consume(|_: Message| async move { Err::<(), _>(HandlerError::from(SkipRetry::new("broken"))) })
        .await
        .unwrap();
    let died = wait_for(WAIT, || async {
        state(c, kid.as_str()).await == Some(MessageState::Dead)
    })
    .await;
    assert!(died, "the child is {:?}", state(c, kid.as_str()).await);
    consumer.shutdown().await.unwrap();
    flow.send().await.unwrap();
    assert_eq!(state(c, kid.as_str()).await, Some(MessageState::Dead), "not sent again");
    assert_eq!(c.counts().await.unwrap().live(), 0);
}

/// Grouped messages of a flow on queues of several shards, none with an
/// id of its own: a group lives in one shard, so the flow generates each
/// one's id in its group's shard, and the flow runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grouped_messages_of_a_flow_on_sharded_queues_get_ids_of_their_groups_shards() {
    let server = RedisServer::start().await;
    let client = server.client().await;
    let sharded = |name: &str| helpers::queue_builder(name, &client, FETCH).shards(4).build().unwrap();
    let (p, c) = (sharded("gparents"), sharded("gkids"));
    // Eight groups: with four shards an id generated without regard to the
    // group falls in another shard three times in four.
    let mut flow = Flow::new(&p, NewMessage::new("parent").group("tenant-p"));
    for i in 0..8 {
        flow = flow.child(Flow::new(
            &c,
            NewMessage::new(format!("kid {i}")).group(format!("tenant-{i}")),
        ));
    }
    let root = flow.send().await.unwrap();
    assert_eq!(state(&p, root.as_str()).await, Some(MessageState::Waiting));
    let log = Log::default();
    let consumers = [
        c.start_consume(acking(&log)).await.unwrap(),
        p.start_consume(acking(&log)).await.unwrap(),
    ];
    assert!(
        wait_for(WAIT, || async { log.snapshot().len() == 9 }).await,
        "delivered: {}",
        log.snapshot().len()
    );
    assert_eq!(at(&log, "parent"), 8, "the parent runs after its eight children");
    for consumer in consumers {
        consumer.shutdown().await.unwrap();
    }
    no_flow_key_left(&client).await;
}
