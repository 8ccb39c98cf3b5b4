//! The queue on a Redis Cluster, what only a cluster has: a fred cluster
//! client against 3 local primaries (`tests/support/cluster.rs`), with
//! queues whose hash tags land on different primaries, a slot migration
//! while producers and consumers run, and `SCRIPT FLUSH` on every node.
//! The end-to-end scenarios run on a cluster as well, in `tests/e2e.rs`.

mod helpers;
use delayqueue_test_support as support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use delayqueue::{Counts, DelayQueue, Error, HandlerError, Message, MessageId, NewMessage};
use helpers::{recording, wait_stats, Log};
use support::cluster::RedisCluster;
use support::logs::Logs;
use support::{wait_until, WAIT};

/// Primaries in every test cluster.
const PRIMARIES: usize = 3;

/// One queue per primary, run at once: each queue's keys stay on its own
/// primary and nowhere else, and each delivers on its own. (What a queue
/// does on a cluster is the end-to-end scenarios' job: `tests/e2e.rs`
/// runs all of them on a cluster too.)
#[tokio::test]
async fn queues_on_every_primary_keep_their_keys_there() {
    let cluster = RedisCluster::start(PRIMARIES).await;
    let client = cluster.client().await;
    let runs = (0..PRIMARIES).map(|node| {
        let name = cluster.queue_on(node, "home");
        let q = DelayQueue::builder(name.as_str(), client.clone())
            .concurrency(4)
            .fetch_interval(Duration::from_millis(100))
            .build()
            .unwrap();
        placement(&cluster, node, q)
    });
    futures::future::join_all(runs).await;
    assert_eq!(cluster.all_keys(), Vec::<String>::new(), "keys left in the cluster");
}

async fn placement(cluster: &RedisCluster, node: usize, q: DelayQueue) {
    let name = q.name().to_string();
    let log = Log::default();
    let consumer = q.start_consume(helpers::acking(&log)).await.unwrap();
    let later = q
        .send_batch((0..20).map(|i| {
            NewMessage::new("later")
                .delay(Duration::from_secs(600))
                .id(format!("later-{i}"))
        }))
        .await
        .unwrap();
    let later: Vec<MessageId> = later.into_iter().map(Result::unwrap).collect();
    let tag = format!("{{{name}}}");
    for i in 0..cluster.nodes().len() {
        let here = cluster.keys_of(i).iter().filter(|k| k.contains(&tag)).count();
        if i == node {
            assert!(here >= 21, "queue {name}: {here} keys on its own node {i}");
        } else {
            assert_eq!(here, 0, "queue {name}: keys on node {i}, not its node {node}");
        }
    }
    let mut ids = Vec::new();
    for i in 0..50 {
        ids.push(
            q.send(format!("s{i}"))
                .delay(Duration::from_millis(i % 20))
                .await
                .unwrap(),
        );
    }
    assert!(
        wait_until(WAIT, || log.len() >= ids.len()).await,
        "queue {name}: {} of {} delivered",
        log.len(),
        ids.len()
    );
    let counts = log.counts();
    assert!(ids.iter().all(|id| counts.get(id) == Some(&1)), "queue {name}");
    for id in &later {
        assert!(q.cancel(id).await.unwrap(), "queue {name}: {id}");
    }
    consumer.shutdown().await.unwrap();
    assert_eq!(q.counts().await.unwrap(), Counts::default(), "queue {name}");
    assert_eq!(cluster.owner_of_queue(&name), node);
}

/// What a producer saw while sending ids `m0..m{total}` with retries.
#[derive(Default)]
struct Sent {
    /// Ids whose send returned `Ok` or `Duplicate` (stored before).
    acknowledged: Vec<MessageId>,
    /// Failed send calls by error text (their messages were sent again).
    errors: HashMap<String, usize>,
}

/// Sends `total` messages with caller-given ids in batches of `batch`,
/// one batch every `every`, due within `spread`, two of every three with a
/// priority (so promote and claim use the priority zset while the slot
/// moves); a call failed by a moving slot ([`Error::is_slot_moving`]) is
/// repeated with the same ids (a retry is idempotent) until `limit`
/// passes, any other failure fails the test.
async fn produce(q: DelayQueue, total: usize, batch: usize, every: Duration, spread: u64, limit: Duration) -> Sent {
    let mut sent = Sent::default();
    let deadline = Instant::now() + limit;
    for start in (0..total).step_by(batch) {
        let ids: Vec<String> = (start..(start + batch).min(total)).map(|i| format!("m{i}")).collect();
        loop {
            let msgs = ids.iter().enumerate().map(|(k, id)| {
                NewMessage::new(format!("payload of {id}"))
                    .delay(Duration::from_millis((start + k) as u64 % spread))
                    .priority(((start + k) % 3) as u8)
                    .id(id.as_str())
            });
            match q.send_batch(msgs).await {
                Ok(results) => {
                    for (id, result) in ids.iter().zip(results) {
                        match result {
                            Ok(_) | Err(Error::Duplicate { .. }) => {
                                sent.acknowledged.push(MessageId::from(id.as_str()))
                            }
                            Err(e) => panic!("{id}: {e:?}"),
                        }
                    }
                    break;
                }
                // The move, and only the move, fails a send; nothing of it was written.
                Err(e) if e.is_slot_moving() => {
                    let kind = e.to_string().chars().take(60).collect::<String>();
                    *sent.errors.entry(kind).or_insert(0) += 1;
                    assert!(
                        Instant::now() < deadline,
                        "sends kept failing: {e:?}; errors so far {:?}",
                        sent.errors
                    );
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                Err(e) => panic!("a send failed other than by the move: {e:?}"),
            }
        }
        tokio::time::sleep(every).await;
    }
    sent
}

/// A queue's slot moves to another primary while a producer sends and a
/// consumer consumes (clients get ASK, TRYAGAIN and finally MOVED): every
/// acknowledged message is delivered, duplicates are counted, and the
/// queue ends clean on its new node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_migration_during_a_run_loses_nothing() {
    let cluster = RedisCluster::start(PRIMARIES).await;
    // The crate's own connect(): on a cluster it gives commands more
    // attempts than redirections, without which the fred client dies at the
    // first command that is redirected with ASK too often (see connect).
    let client = delayqueue::connect(&cluster.url()).await.unwrap();
    let name = cluster.queue_on(0, "mig");
    let slot = RedisCluster::slot_of(&format!("dq:{{{name}}}:pending"));
    let q = DelayQueue::builder(name.as_str(), client.clone())
        .concurrency(16)
        .fetch_interval(Duration::from_millis(100))
        .max_consume_duration(Duration::from_secs(2))
        .build()
        .unwrap();
    let logs = Logs::capture(&name);
    let log = Log::default();
    let consumer = q
        .start_consume(recording(&log, |_msg: Message| async move {
            tokio::time::sleep(Duration::from_millis(1)).await;
            Ok::<(), HandlerError>(())
        }))
        .await
        .unwrap();

    const TOTAL: usize = 6000;
    let started = Instant::now();
    // 50 messages every 20 ms, due within 1.5 s: about 2.5 s of sending,
    // with a few thousand messages (and so payload keys) live in the slot.
    let producer = tokio::spawn(produce(q.clone(), TOTAL, 50, Duration::from_millis(20), 1500, 2 * WAIT));
    // Two moves while the producer sends: node 0 -> 1, then 1 -> 2.
    let mut moves = Vec::new();
    for (at, to) in [(Duration::from_millis(700), 1), (Duration::from_millis(1600), 2)] {
        tokio::time::sleep(at.saturating_sub(started.elapsed())).await;
        let stats = q.counts().await.unwrap();
        let m = cluster.migrate_slot(slot, to, 50, Duration::from_millis(5)).await;
        moves.push(format!(
            "node {} -> {}: {} keys in {} MIGRATE batches, {:?}, {:?} into the run, with {} pending",
            m.from,
            m.to,
            m.keys,
            m.batches,
            m.elapsed,
            started.elapsed() - m.elapsed,
            stats.pending
        ));
        assert!(m.keys > 0, "nothing was in the slot when it moved");
    }
    let sent = producer.await.unwrap();
    assert_eq!(sent.acknowledged.len(), TOTAL);
    assert_eq!(cluster.owner_of_queue(&name), 2);

    let delivered = wait_until(2 * WAIT, || {
        let ids = log.ids();
        sent.acknowledged.iter().all(|id| ids.contains(id))
    })
    .await;
    let ids = log.ids();
    let lost: Vec<&MessageId> = sent.acknowledged.iter().filter(|id| !ids.contains(id)).collect();
    let duplicates = log.counts().values().filter(|n| **n > 1).count();
    let warnings = logs.warnings();
    let mut consumer_warnings: HashMap<String, usize> = HashMap::new();
    for w in &warnings {
        let what = [
            "consumer step failed",
            "ack failed",
            "nack failed",
            "exceeded max_consume_duration",
        ]
        .into_iter()
        .find(|k| w.contains(k))
        .unwrap_or("other");
        *consumer_warnings.entry(what.to_string()).or_insert(0) += 1;
    }
    println!(
        "slot {slot} of queue {name} moved {}; sends repeated after an error: {:?}; consumer warnings: \
         {consumer_warnings:?}; {} messages, {} lost, {duplicates} delivered more than once, {} deliveries",
        moves.join("; "),
        sent.errors,
        sent.acknowledged.len(),
        lost.len(),
        log.len(),
    );
    assert!(
        delivered && lost.is_empty(),
        "lost {} messages: {:?}",
        lost.len(),
        &lost[..lost.len().min(10)]
    );
    assert_eq!(wait_stats(&q, WAIT, Counts::default()).await, Counts::default());
    let report = q.check_integrity().await.unwrap();
    assert!(report.is_clean(), "{report}");
    consumer.shutdown().await.unwrap();
    assert_eq!(cluster.all_keys(), Vec::<String>::new());
}

/// `SCRIPT FLUSH` on every primary, repeatedly, while queues on each of
/// them send and consume: no call fails (NOSCRIPT falls back to `EVAL` on
/// the node the call was routed to) and every message is delivered once.
#[tokio::test]
async fn script_flush_on_every_node_is_survived() {
    let cluster = RedisCluster::start(PRIMARIES).await;
    let client = cluster.client().await;
    let stop = AtomicBool::new(false);
    let mut runs = Vec::new();
    for node in 0..PRIMARIES {
        let q = DelayQueue::builder(cluster.queue_on(node, "flush").as_str(), client.clone())
            .concurrency(4)
            .fetch_interval(Duration::from_millis(100))
            .build()
            .unwrap();
        runs.push(async move {
            let log = Log::default();
            let consumer = q.start_consume(helpers::acking(&log)).await.unwrap();
            let mut ids = Vec::new();
            for i in 0..300u64 {
                ids.push(
                    q.send(format!("f{i}"))
                        .delay(Duration::from_millis(i % 50))
                        .await
                        .unwrap(),
                );
                if i % 10 == 0 {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
            assert!(
                wait_until(WAIT, || log.len() >= ids.len()).await,
                "queue {}: {} of {} delivered",
                q.name(),
                log.len(),
                ids.len()
            );
            let counts = log.counts();
            assert!(ids.iter().all(|id| counts.get(id) == Some(&1)), "queue {}", q.name());
            consumer.shutdown().await.unwrap();
            let report = q.check_integrity().await.unwrap();
            assert!(report.is_clean(), "{report}");
            assert_eq!(q.counts().await.unwrap(), Counts::default());
        });
    }
    // Raw commands on the test's own thread: each blocks it for well under a
    // millisecond.
    let flusher = async {
        let mut flushes = 0;
        while !stop.load(Ordering::Relaxed) {
            cluster.script_flush_all();
            flushes += 1;
            tokio::time::sleep(Duration::from_millis(30)).await;
        }
        flushes
    };
    let runs = async {
        futures::future::join_all(runs).await;
        stop.store(true, Ordering::Relaxed);
    };
    let ((), flushes) = tokio::join!(runs, flusher);
    println!("{flushes} rounds of SCRIPT FLUSH on all {PRIMARIES} primaries");
    assert!(flushes >= 3, "only {flushes} flush rounds ran");
    assert_eq!(cluster.all_keys(), Vec::<String>::new());
}

/// A flow whose parent's queue is on one primary and whose children's
/// queues are on the others (docs/workflows.md): completions cross slots
/// and nodes only through the outbox and the relay, never a cross-slot
/// script; the parent runs after its children and nothing is left.
#[tokio::test]
async fn a_flow_across_primaries_completes_and_leaves_no_key() {
    use delayqueue::Flow;
    let cluster = RedisCluster::start(PRIMARIES).await;
    let client = cluster.client().await;
    let q: Vec<DelayQueue> = (0..PRIMARIES)
        .map(|node| {
            let name = cluster.queue_on(node, "flow");
            DelayQueue::builder(name.as_str(), client.clone())
                .fetch_interval(Duration::from_millis(100))
                .build()
                .unwrap()
        })
        .collect();
    let mut flow = Flow::new(&q[0], NewMessage::new("parent"));
    for i in 0..20 {
        let mid = Flow::new(&q[1], NewMessage::new(format!("mid {i}"))).child(Flow::new(
            &q[2],
            NewMessage::new(format!("leaf {i}")).id(format!("leaf-{i}")),
        ));
        flow = flow.child(mid);
    }
    flow.send().await.unwrap();
    // Read as a tree from a leaf: up and down across the three primaries.
    let tree = q[2].flow("leaf-3").await.unwrap().expect("a flow");
    let up: Vec<&str> = tree.path.iter().map(|p| p.queue.as_str()).collect();
    assert_eq!(up, [q[1].name(), q[0].name()]);
    assert_eq!((tree.root.unfinished, tree.root.children.len()), (20, 20));
    assert!(tree
        .root
        .children
        .iter()
        .all(|mid| mid.children.len() == 1 && mid.children[0].queue == q[2].name()));
    let log = Log::default();
    let mut consumers = Vec::new();
    for queue in &q {
        consumers.push(queue.start_consume(helpers::acking(&log)).await.unwrap());
    }
    assert!(wait_until(WAIT, || log.len() == 41).await, "{} delivered", log.len());
    let order: Vec<Vec<u8>> = log.snapshot().into_iter().map(|d| d.3).collect();
    assert_eq!(order.last().map(Vec::as_slice), Some(&b"parent"[..]));
    for i in 0..20 {
        let at = |p: String| order.iter().position(|x| *x == p.as_bytes()).unwrap();
        assert!(at(format!("leaf {i}")) < at(format!("mid {i}")));
    }
    // The last completions are relayed right after their acks.
    assert!(
        support::wait_for(WAIT, || async { cluster.all_keys().is_empty() }).await,
        "keys left in the cluster: {:?}",
        cluster.all_keys()
    );
    for c in consumers {
        c.shutdown().await.unwrap();
    }
}

/// A flow whose parent's queue is on one primary and whose 400 children
/// are in a queue on another: while the children are being acked, the
/// parent's slot moves (keys one by one, so it stays half-moved a while),
/// then the children's. Acks, relays and completions fail during the moves
/// and are retried: the parent runs exactly once, after every child,
/// reading every child's result; nothing is left in the cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_migration_in_the_middle_of_a_flow_loses_nothing() {
    use delayqueue::{ChildOutcome, Flow};
    use std::sync::{Arc, Mutex};
    const CHILDREN: usize = 400;
    /// Children acked before the moves start; the rest wait for them.
    const BEFORE: usize = 100;
    let cluster = RedisCluster::start(PRIMARIES).await;
    let client = delayqueue::connect(&cluster.url()).await.unwrap();
    let queue = |node: usize, base: &str| {
        let name = cluster.queue_on(node, base);
        DelayQueue::builder(name.as_str(), client.clone())
            .concurrency(4)
            .fetch_interval(Duration::from_millis(100))
            .max_consume_duration(Duration::from_secs(60))
            .build()
            .unwrap()
    };
    let (parents, children) = (queue(0, "mparent"), queue(1, "mchild"));
    // The relay runs in the children's consumer.
    let logs = Logs::capture(children.name());
    let mut flow = Flow::new(&parents, NewMessage::new("parent").id("parent"));
    for i in 0..CHILDREN {
        flow = flow.child(Flow::new(
            &children,
            NewMessage::new(format!("c{i}")).id(format!("c{i}")),
        ));
    }
    flow.send().await.unwrap();

    let done: Arc<Mutex<Vec<String>>> = Arc::default();
    let go = Arc::new(AtomicBool::new(false));
    let (record, gate) = (done.clone(), go.clone());
    let child_consumer = children
        .start_consume(move |msg: Message| {
            let (record, gate) = (record.clone(), gate.clone());
            async move {
                if record.lock().unwrap().len() >= BEFORE {
                    assert!(
                        wait_until(WAIT, || gate.load(Ordering::Relaxed)).await,
                        "never released"
                    );
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
                record.lock().unwrap().push(msg.id().to_string());
                // The result: the payload, relayed to the parent.
                Ok::<_, HandlerError>(msg.payload().to_vec())
            }
        })
        .await
        .unwrap();
    // Each parent delivery: how many child handlers had returned, and the
    // children it read.
    type Seen = (usize, Vec<(String, ChildOutcome, Option<Vec<u8>>)>);
    let runs: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let (record, finished) = (runs.clone(), done.clone());
    let parent_consumer = parents
        .start_consume(move |msg: Message| {
            let (record, finished) = (record.clone(), finished.clone());
            async move {
                let returned = finished.lock().unwrap().len();
                let (mut read, mut cursor) = (Vec::new(), None::<String>);
                for _ in 0..CHILDREN {
                    let page = msg.children_results(cursor.take()).await?;
                    read.extend(page.items.into_iter().map(|c| (c.id.to_string(), c.outcome, c.result)));
                    cursor = page.next;
                    if cursor.is_none() {
                        break;
                    }
                }
                record.lock().unwrap().push((returned, read));
                Ok::<(), HandlerError>(())
            }
        })
        .await
        .unwrap();

    assert!(
        wait_until(WAIT, || done.lock().unwrap().len() >= BEFORE).await,
        "{} children acked before the moves",
        done.lock().unwrap().len()
    );
    go.store(true, Ordering::Relaxed);
    let mut moves = Vec::new();
    for (q, to, batch, pause) in [(&parents, 2, 1, 20), (&children, 0, 20, 10)] {
        let slot = RedisCluster::slot_of(&format!("dq:{{{}}}:pending", q.name()));
        let acked = done.lock().unwrap().len();
        let m = cluster
            .migrate_slot(slot, to, batch, Duration::from_millis(pause))
            .await;
        moves.push(format!(
            "{} (slot {slot}) node {} -> {}: {} keys in {} batches, {:?}, children acked {acked} -> {}",
            q.name(),
            m.from,
            m.to,
            m.keys,
            m.batches,
            m.elapsed,
            done.lock().unwrap().len()
        ));
    }
    println!("{}", moves.join("; "));
    let t0 = Instant::now();
    assert!(
        wait_until(2 * WAIT, || !runs.lock().unwrap().is_empty()).await,
        "the parent never ran: {} children acked",
        done.lock().unwrap().len()
    );
    // The last completion is relayed right after its ack; the keys go
    // then, but the children's results (kept for their retention) and the
    // consumers' claim receipts (which live as long as a lease).
    let left = || {
        let mut keys = cluster.all_keys();
        keys.retain(|k| !k.contains(":result:") && !k.contains(":claim:"));
        keys
    };
    assert!(
        support::wait_for(2 * WAIT, || async { left().is_empty() }).await,
        "keys left in the cluster: {:?}",
        left()
    );
    let text = logs.text();
    let failed = |what: &str| text.lines().filter(|l| l.contains(what)).count();
    println!(
        "the parent ran and the keys went {:?} after the moves; in the children's consumer: {} relays \
         failed, {} ack calls failed, {} steps failed (each retried)",
        t0.elapsed(),
        failed("relay failed"),
        failed("ack failed"),
        failed("consumer step failed")
    );
    child_consumer.shutdown().await.unwrap();
    parent_consumer.shutdown().await.unwrap();

    let runs = runs.lock().unwrap().clone();
    assert_eq!(runs.len(), 1, "the parent ran {} times", runs.len());
    let (returned, mut read) = runs.into_iter().next().unwrap();
    let mut acked = done.lock().unwrap().clone();
    acked.sort();
    acked.dedup();
    assert_eq!(acked.len(), CHILDREN, "every child ran");
    assert!(returned >= CHILDREN, "the parent ran after {returned} children");
    read.sort_by(|a, b| a.0.cmp(&b.0));
    let mut want: Vec<_> = (0..CHILDREN)
        .map(|i| (format!("c{i}"), ChildOutcome::Acked, Some(format!("c{i}").into_bytes())))
        .collect();
    want.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(read, want, "every child's outcome and result, once");
    for q in [&parents, &children] {
        let report = q.check_integrity().await.unwrap();
        assert!(report.is_clean(), "{}: {report}", q.name());
        assert_eq!(q.counts().await.unwrap(), Counts::default());
    }
    assert_eq!(left(), Vec::<String>::new());
}

/// What a process holds open on a cluster: beside the client it was given,
/// one connection per primary for the queues' commands and one per primary
/// whose queues it consumes for their wake-ups (docs/scaling.md), whatever
/// the number of queues and consumers; and none of them once the queues
/// and consumers are gone. Each wake-up channel is subscribed on the
/// primary of its queue, whose scripts publish on it: a `PUBLISH` crosses
/// the cluster bus to other nodes only while their link is up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_holds_one_connection_per_primary_and_one_for_wake_ups() {
    let cluster = RedisCluster::start(PRIMARIES).await;
    let client = delayqueue::connect(&cluster.url()).await.unwrap();
    // Connections to every node, this count's own (one per node) included.
    let connections = || -> usize {
        (0..cluster.nodes().len())
            .map(|i| cluster.node(i).raw_command(&["CLIENT", "LIST"]).lines().count())
            .sum()
    };
    let given = connections();
    let mut running = Vec::new();
    for node in 0..PRIMARIES {
        for n in 0..2 {
            let name = cluster.queue_on(node, &format!("conn{n}-"));
            // Said should a message not be delivered.
            let logs = Logs::capture(&name);
            let q = DelayQueue::builder(name.as_str(), client.clone())
                .concurrency(2)
                .build()
                .unwrap();
            let log = Log::default();
            let consumer = q.start_consume(helpers::acking(&log)).await.unwrap();
            q.send("hello").await.unwrap();
            running.push((q, log, consumer, logs));
        }
    }
    for (q, log, _, logs) in &running {
        if !wait_until(WAIT, || !log.is_empty()).await {
            let channels: Vec<String> = (0..PRIMARIES)
                .flat_map(|i| {
                    let on = cluster.node(i).raw_command(&["PUBSUB", "CHANNELS"]);
                    on.lines()
                        .map(|c| c.trim().trim_matches('"').to_string())
                        .filter(|c| !c.is_empty())
                        .map(|c| {
                            format!(
                                "{c} on node {i}, its primary node {}",
                                cluster.owner_of(RedisCluster::slot_of(&c))
                            )
                        })
                        .collect::<Vec<_>>()
                })
                .collect();
            panic!(
                "{}: not delivered; {:?}; subscribed: {channels:?}; its log:\n{}",
                q.name(),
                q.counts().await,
                logs.text()
            );
        }
    }
    for node in 0..PRIMARIES {
        let channels = cluster.node(node).raw_command(&["PUBSUB", "CHANNELS"]);
        let channels: Vec<&str> = channels
            .lines()
            .map(|l| l.trim().trim_matches('"'))
            .filter(|l| !l.is_empty())
            .collect();
        assert_eq!(channels.len(), 2, "node {node}: its two queues' channels: {channels:?}");
        for channel in channels {
            let owner = cluster.owner_of(RedisCluster::slot_of(channel));
            assert_eq!(
                owner, node,
                "{channel} is subscribed on node {node}, its primary is node {owner}"
            );
        }
    }
    let held = connections() - given;
    println!("{PRIMARIES} primaries, 6 queues and consumers: {held} connections beside the given client's");
    assert_eq!(held, 2 * PRIMARIES, "one per primary for commands and one for wake-ups");
    for (_, _, consumer, _) in running.drain(..) {
        consumer.shutdown().await.unwrap();
    }
    let deadline = Instant::now() + WAIT;
    while connections() > given {
        assert!(Instant::now() < deadline, "connections left: {}", connections() - given);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
