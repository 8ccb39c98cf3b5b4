//! Groups through the public API (docs/groups.md): fair turns between
//! groups (in claims and in the consumer's handler slots), per-group concurrency across consumers and shards, ordered
//! groups with a failure, pausing one group, invalid names, and no group
//! key left once everything is acked; and groups with the rest of the
//! product: priorities, headers, reschedule, expiry and dead letters
//! requeued.

mod helpers;
use delayqueue_test_support as support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use delayqueue::fred::prelude::ClientLike;
use delayqueue::{Backoff, Error, HandlerError, Message, MessageState, NewMessage, MAX_GROUP_LEN};
use helpers::{acking, start_queue, Log};
use support::{wait_for, wait_until, WAIT};

const FETCH: Duration = Duration::from_millis(100);

/// The keys of queue `name` whose names say they are a group's.
async fn group_keys(client: &delayqueue::fred::clients::Client, name: &str) -> Vec<String> {
    let pattern = format!("dq:{{{name}*}}:g*");
    let mut keys: Vec<String> = client
        .custom(delayqueue::fred::cmd!("KEYS"), vec![pattern])
        .await
        .unwrap();
    keys.sort();
    keys
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_big_backlog_delays_another_groups_message_by_one_turn_at_most() {
    let (_server, client, queue) = start_queue("fair", FETCH, |b| b.concurrency(1)).await;
    queue
        .send_batch((0..300).map(|i| NewMessage::new(format!("a{i}")).group("A")))
        .await
        .unwrap();
    queue.send("b").group("B").await.unwrap();
    queue.send("plain").await.unwrap();
    let log = Log::default();
    let consumer = queue.start_consume(acking(&log)).await.unwrap();
    assert!(wait_until(WAIT, || log.len() == 302).await, "{} delivered", log.len());
    consumer.shutdown().await.unwrap();
    let order: Vec<Vec<u8>> = log.snapshot().into_iter().map(|d| d.3).collect();
    let at = |p: &[u8]| order.iter().position(|x| x == p).expect("delivered");
    // One handler claims one at a time: A, B and the messages without a
    // group take turns, so B's and the plain one come within the first turn.
    assert!(at(b"b") < 3, "b delivered {}th", at(b"b") + 1);
    assert!(at(b"plain") < 3, "plain delivered {}th", at(b"plain") + 1);
    // A's own messages in due order.
    let a: Vec<&Vec<u8>> = order.iter().filter(|p| p.starts_with(b"a")).collect();
    let want: Vec<Vec<u8>> = (0..300).map(|i| format!("a{i}").into_bytes()).collect();
    assert_eq!(a, want.iter().collect::<Vec<_>>());
    assert!(wait_for(WAIT, || async { group_keys(&client, "fair").await.is_empty() }).await);
}

/// In the consumer, a group's message claimed while another group's batch
/// waits for the handler slot starts at the next free slot, not after that
/// batch: the slots go to the groups' lines in turn (docs/groups.md).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_claimed_behind_another_groups_batch_starts_at_the_next_free_slot() {
    let (_server, _client, queue) = start_queue("slots", FETCH, |b| b.concurrency(1)).await;
    queue
        .send_batch((0..50).map(|i| NewMessage::new(format!("a{i}")).group("A")))
        .await
        .unwrap();
    let log = Log::default();
    // a1 holds the only handler slot until the gate opens.
    let (open, opened) = tokio::sync::watch::channel(false);
    let handler = helpers::recording(&log, move |msg: Message| {
        let mut opened = opened.clone();
        async move {
            if msg.payload() == b"a1" {
                let _ = opened.wait_for(|o| *o).await;
            }
            Ok(())
        }
    });
    let consumer = queue.start_consume(handler).await.unwrap();
    let leased = |n| {
        let queue = &queue;
        move || async move { queue.counts().await.unwrap().processing == n }
    };
    // a0 handled, a1 running, a2 to a49 claimed and waiting for the slot.
    assert!(wait_for(WAIT, leased(49)).await, "{:?}", queue.counts().await);
    queue.send("b").group("B").await.unwrap();
    assert!(
        wait_for(WAIT, leased(50)).await,
        "b not claimed: {:?}",
        queue.counts().await
    );
    open.send(true).unwrap();
    assert!(wait_until(WAIT, || log.len() == 51).await, "{} delivered", log.len());
    consumer.shutdown().await.unwrap();
    let order: Vec<Vec<u8>> = log.snapshot().into_iter().map(|d| d.3).collect();
    let first: Vec<&[u8]> = order[..4].iter().map(Vec::as_slice).collect();
    assert_eq!(first, [&b"a0"[..], b"a1", b"a2", b"b"], "A's turn, then B's");
}

/// Each group's messages running now and the most seen at once, and the
/// deliveries handled.
#[derive(Default)]
struct Seen {
    now: HashMap<String, usize>,
    most: HashMap<String, usize>,
    done: usize,
}

#[derive(Clone, Default)]
struct Running(Arc<Mutex<Seen>>);

impl Running {
    fn handler(&self, hold: Duration) -> impl delayqueue::Handler {
        let me = self.clone();
        move |msg: Message| {
            let me = me.clone();
            async move {
                let group = msg.group().unwrap_or("").to_string();
                {
                    let mut s = me.0.lock().unwrap();
                    let now = {
                        let n = s.now.entry(group.clone()).or_insert(0);
                        *n += 1;
                        *n
                    };
                    let most = s.most.entry(group.clone()).or_insert(0);
                    *most = (*most).max(now);
                }
                tokio::time::sleep(hold).await;
                let mut s = me.0.lock().unwrap();
                *s.now.get_mut(&group).unwrap() -= 1;
                s.done += 1;
                Ok::<(), HandlerError>(())
            }
        }
    }

    fn done(&self) -> usize {
        self.0.lock().unwrap().done
    }

    fn most(&self, group: &str) -> usize {
        self.0.lock().unwrap().most.get(group).copied().unwrap_or(0)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_concurrency_holds_across_consumers_and_shards() {
    let (_server, client, queue) = start_queue("gc", FETCH, |b| b.shards(2).concurrency(8).group_concurrency(2)).await;
    // Groups A and B at the default 2, C at its own 3.
    let msgs = (0..20).flat_map(|i| ["A", "B", "C"].map(|g| NewMessage::new(format!("{g}{i}")).group(g)));
    queue.send_batch(msgs).await.unwrap();
    let running = Running::default();
    let a = queue
        .start_consume(running.handler(Duration::from_millis(10)))
        .await
        .unwrap();
    assert!(queue.set_group_concurrency("C", Some(3)).await.unwrap());
    let b = queue
        .start_consume(running.handler(Duration::from_millis(10)))
        .await
        .unwrap();
    assert!(
        wait_until(WAIT, || running.done() == 60).await,
        "{} done",
        running.done()
    );
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
    for g in ["A", "B"] {
        assert!((1..=2).contains(&running.most(g)), "{g}: {} at once", running.most(g));
    }
    assert!((1..=3).contains(&running.most("C")), "C: {} at once", running.most("C"));
    // The settings stay (the default in each shard, C's own, C known for
    // it); the rest of the group keys went with the messages.
    let settings = |keys: &[String]| keys.iter().all(|k| k.ends_with(":glimits") || k.ends_with(":gknown"));
    assert!(wait_for(WAIT, || async { settings(&group_keys(&client, "gc").await) }).await);
    assert_eq!(queue.groups(0, 10).await.unwrap().items.len(), 1, "C, for its setting");
    assert_eq!(queue.status().await.unwrap().totals.acked, 60);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ordered_group_runs_one_at_a_time_in_order_and_waits_for_a_failed_one() {
    let (_server, _client, queue) = start_queue("ordered", FETCH, |b| {
        b.concurrency(4)
            .ordered()
            .backoff(Backoff::fixed(Duration::from_millis(50)))
    })
    .await;
    queue
        .send_batch((0..8).map(|i| NewMessage::new(format!("m{i}")).group("ledger")))
        .await
        .unwrap();
    let seen: Arc<Mutex<Vec<(String, u32)>>> = Arc::default();
    let running = Running::default();
    let (record, inner) = (seen.clone(), running.handler(Duration::from_millis(5)));
    let inner = Arc::new(inner);
    let handler = move |msg: Message| {
        let (record, inner) = (record.clone(), inner.clone());
        async move {
            let payload = String::from_utf8_lossy(msg.payload()).into_owned();
            record.lock().unwrap().push((payload.clone(), msg.attempt()));
            if payload == "m3" && msg.attempt() == 1 {
                return Err(HandlerError::from("not yet"));
            }
            delayqueue::Handler::handle(&*inner, msg).await
        }
    };
    let consumer = queue.start_consume(handler).await.unwrap();
    assert!(
        wait_until(WAIT, || running.done() == 8).await,
        "{} done",
        running.done()
    );
    consumer.shutdown().await.unwrap();
    let seen = seen.lock().unwrap().clone();
    let want: Vec<(String, u32)> = [0, 1, 2, 3]
        .iter()
        .map(|i| (format!("m{i}"), 1))
        .chain([("m3".to_string(), 2)])
        .chain((4..8).map(|i| (format!("m{i}"), 1)))
        .collect();
    assert_eq!(seen, want, "in due order, the failed one retried before the next");
    assert_eq!(running.most("ledger"), 1);
}

/// (payload, attempt) of each delivery `log` saw, in order.
fn handled(log: &Log) -> Vec<(String, u32)> {
    log.snapshot()
        .into_iter()
        .map(|(_, attempt, _, payload)| (String::from_utf8_lossy(&payload).into_owned(), attempt))
        .collect()
}

/// A handler that records each delivery in `log` and fails those `fails`
/// picks by (payload, attempt).
fn failing(log: &Log, fails: fn(&str, u32) -> bool) -> impl delayqueue::Handler {
    helpers::recording(log, move |msg: Message| {
        let fail = fails(&String::from_utf8_lossy(msg.payload()), msg.attempt());
        async move {
            match fail {
                true => Err::<(), HandlerError>("not yet".into()),
                false => Ok(()),
            }
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ordered_groups_failed_head_goes_before_a_higher_priority_sent_during_its_backoff() {
    let (_server, client, queue) = start_queue("ohead", FETCH, |b| {
        b.ordered().backoff(Backoff::fixed(Duration::from_millis(800)))
    })
    .await;
    let log = Log::default();
    let consumer = queue
        .start_consume(failing(&log, |p, attempt| p == "m1" && attempt == 1))
        .await
        .unwrap();
    let m1 = queue.send("m1").group("g").await.unwrap();
    // m1's first delivery failed: it waits out its backoff.
    assert!(
        wait_for(WAIT, || async {
            !log.is_empty() && queue.get(&m1).await.unwrap().map(|m| m.state) != Some(MessageState::Processing)
        })
        .await
    );
    queue.send("m2").group("g").priority(9).await.unwrap();
    assert!(wait_until(WAIT, || log.len() == 3).await, "{:?}", handled(&log));
    consumer.shutdown().await.unwrap();
    assert_eq!(handled(&log), [("m1".into(), 1), ("m1".into(), 2), ("m2".into(), 1)]);
    assert_drained(&client, &queue, "ohead").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ordered_groups_head_failed_twice_is_retried_before_the_messages_behind_it() {
    let (_server, client, queue) = start_queue("otwice", FETCH, |b| {
        b.ordered().backoff(Backoff::fixed(Duration::from_millis(300)))
    })
    .await;
    queue
        .send_batch((1..=10).map(|i| NewMessage::new(i.to_string()).group("g")))
        .await
        .unwrap();
    let log = Log::default();
    let consumer = queue
        .start_consume(failing(&log, |p, attempt| p == "3" && attempt <= 2))
        .await
        .unwrap();
    assert!(wait_until(WAIT, || log.len() == 12).await, "{:?}", handled(&log));
    consumer.shutdown().await.unwrap();
    let order: Vec<String> = handled(&log).into_iter().map(|(p, _)| p).collect();
    assert_eq!(order, ["1", "2", "3", "3", "3", "4", "5", "6", "7", "8", "9", "10"]);
    assert_drained(&client, &queue, "otwice").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_group_waits_while_other_groups_are_served() {
    let (_server, _client, queue) = start_queue("gpause", FETCH, |b| b).await;
    assert!(queue.pause_group("A").await.unwrap());
    assert!(!queue.pause_group("A").await.unwrap(), "paused already");
    let a = queue.send("a1").group("A").await.unwrap();
    queue.send("b1").group("B").await.unwrap();
    let log = Log::default();
    let consumer = queue.start_consume(acking(&log)).await.unwrap();
    assert!(wait_until(WAIT, || log.len() == 1).await);
    // Another message of B, sent after a1 and handled: a1 still waits.
    queue.send("b2").group("B").await.unwrap();
    assert!(wait_until(WAIT, || log.len() == 2).await);
    let info = queue.get(&a).await.unwrap().expect("waiting");
    assert_eq!((info.state, info.group.as_deref()), (MessageState::Ready, Some("A")));
    assert_eq!(log.len(), 2);
    // A message waiting in its group is in a state, not an orphan.
    let report = queue.check_integrity().await.unwrap();
    assert!(report.is_clean() && report.scanned >= 1, "{report}");
    assert_eq!(queue.counts().await.unwrap().ready, 1, "counted as ready");
    assert!(queue.resume_group("A").await.unwrap());
    assert!(wait_until(WAIT, || log.len() == 3).await);
    assert_eq!(log.snapshot()[2].3, b"a1");
    consumer.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_group_names_are_refused_with_a_typed_error() {
    let (_server, client, queue) = start_queue("gbad", FETCH, |b| b).await;
    let long = "g".repeat(MAX_GROUP_LEN + 1);
    for bad in ["", "a b", "tenant:1", "t{1}", "é", long.as_str()] {
        let e = queue.send("x").group(bad).await.unwrap_err();
        assert!(
            matches!(&e, Error::InvalidGroup { group, .. } if group == bad),
            "{bad:?}: {e}"
        );
        assert!(matches!(queue.pause_group(bad).await, Err(Error::InvalidGroup { .. })));
        assert!(matches!(
            queue.set_group_concurrency(bad, Some(1)).await,
            Err(Error::InvalidGroup { .. })
        ));
    }
    assert!(queue.send("x").group("g".repeat(MAX_GROUP_LEN)).await.is_ok());
    assert!(queue.send("y").group("Tenant_4.2-x").await.is_ok());
    assert!(matches!(
        queue.set_group_concurrency("g", Some(0)).await,
        Err(Error::InvalidArgument(_))
    ));
    let _ = client;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_rate_paces_its_group_alone() {
    let per = Duration::from_millis(500);
    let (_server, _client, queue) = start_queue("grate", FETCH, |b| b.concurrency(8)).await;
    assert!(queue
        .set_group_rate("slow", Some(delayqueue::RateLimit::new(4, per)))
        .await
        .unwrap());
    let msgs = (0..12).flat_map(|i| {
        [
            NewMessage::new(format!("s{i}")).group("slow"),
            NewMessage::new(format!("f{i}")).group("fast"),
        ]
    });
    queue.send_batch(msgs).await.unwrap();
    let log = Log::default();
    let start = std::time::Instant::now();
    let consumer = queue.start_consume(acking(&log)).await.unwrap();
    assert!(wait_until(WAIT, || log.len() == 24).await, "{} delivered", log.len());
    consumer.shutdown().await.unwrap();
    let at = |p: &str| {
        let d = log
            .snapshot()
            .into_iter()
            .find(|d| d.3 == p.as_bytes())
            .expect("delivered");
        d.2.duration_since(start)
    };
    // 12 at 4 per 500 ms: the last starts at least two periods after the first.
    assert!(
        at("s11") >= at("s0") + per * 2,
        "s0 {:?}, s11 {:?}",
        at("s0"),
        at("s11")
    );
    // The other group is not held back by it: all of it before slow's last.
    assert!(at("f11") < at("s11"), "f11 {:?}, s11 {:?}", at("f11"), at("s11"));
    assert!(matches!(
        queue
            .set_group_rate("slow", Some(delayqueue::RateLimit::new(0, per)))
            .await,
        Err(Error::InvalidArgument(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn groups_lists_every_shard_s_groups_in_pages() {
    let (_server, client, queue) = start_queue("glist", FETCH, |b| b.shards(3).group_concurrency(4)).await;
    let names: Vec<String> = (0..12).map(|i| format!("t{i:02}")).collect();
    queue
        .send_batch(names.iter().map(|g| NewMessage::new("x").group(g.as_str())))
        .await
        .unwrap();
    assert!(queue.pause_group("t03").await.unwrap());
    // Nothing consumes: the messages are still pending until promoted, so
    // the groups are known once a consumer has promoted them.
    let log = Log::default();
    assert!(queue.pause().await.unwrap());
    let consumer = queue.start_consume(acking(&log)).await.unwrap();
    assert!(wait_for(WAIT, || async { queue.groups(0, 1).await.unwrap().total == 12 }).await);
    let (mut seen, mut offset) = (Vec::new(), 0);
    for _ in 0..10 {
        let page = queue.groups(offset, 5).await.unwrap();
        assert_eq!((page.total, page.default_concurrency), (12, Some(4)));
        if page.items.is_empty() {
            break;
        }
        offset += page.items.len() as u64;
        seen.extend(page.items);
    }
    let mut listed: Vec<&str> = seen.iter().map(|g| g.name.as_str()).collect();
    listed.sort_unstable();
    assert_eq!(
        listed,
        names.iter().map(String::as_str).collect::<Vec<_>>(),
        "each once"
    );
    assert!(seen.iter().all(|g| g.ready == 1 && g.processing == 0));
    assert!(seen.iter().find(|g| g.name == "t03").unwrap().paused);
    assert!(queue.resume().await.unwrap());
    assert!(wait_until(WAIT, || log.len() == 11).await, "all but the paused group's");
    assert!(queue.resume_group("t03").await.unwrap());
    assert!(wait_until(WAIT, || log.len() == 12).await);
    consumer.shutdown().await.unwrap();
    assert!(wait_for(WAIT, || async { queue.groups(0, 10).await.unwrap().total == 0 }).await);
    assert!(matches!(queue.groups(0, 0).await, Err(Error::InvalidArgument(_))));
    // Only the default's setting is left of the groups.
    assert!(group_keys(&client, "glist")
        .await
        .iter()
        .all(|k| k.ends_with(":glimits")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_sends_its_fires_in_its_group() {
    let (_server, _client, queue) = start_queue("gsched", FETCH, |b| b).await;
    let daily = delayqueue::Schedule::cron("0 3 * * *", "report").group("tenant-7");
    assert!(queue.set_schedule("nightly", daily).await.unwrap());
    assert!(matches!(
        queue
            .set_schedule("bad", delayqueue::Schedule::cron("0 3 * * *", "x").group("a b"))
            .await,
        Err(Error::InvalidGroup { .. })
    ));
    let id = queue.trigger_schedule("nightly").await.unwrap();
    let info = queue.get(&id).await.unwrap().expect("sent");
    assert_eq!(info.group.as_deref(), Some("tenant-7"));
    let groups: Arc<Mutex<Vec<Option<String>>>> = Arc::default();
    let seen = groups.clone();
    let consumer = queue
        .start_consume(move |msg: Message| {
            let seen = seen.clone();
            async move {
                seen.lock().unwrap().push(msg.group().map(str::to_string));
                Ok::<(), HandlerError>(())
            }
        })
        .await
        .unwrap();
    assert!(wait_until(WAIT, || !groups.lock().unwrap().is_empty()).await);
    consumer.shutdown().await.unwrap();
    assert_eq!(*groups.lock().unwrap(), vec![Some("tenant-7".to_string())]);
}

/// Pauses queue `name`, starts a consumer with `handler` and waits until
/// it has promoted every due message (into its group or list), so that
/// the first claim after the resume sees them all; then resumes.
async fn start_with_all_promoted(
    client: &delayqueue::fred::clients::Client,
    queue: &delayqueue::DelayQueue,
    name: &str,
    handler: impl delayqueue::Handler,
) -> delayqueue::Consumer {
    assert!(queue.pause().await.unwrap());
    let consumer = queue.start_consume(handler).await.unwrap();
    assert!(wait_for(WAIT, || async { pending_len(client, name).await == 0 }).await);
    assert!(queue.resume().await.unwrap());
    consumer
}

/// How many messages of queue `name` are in its pending zset, due or not
/// (`counts` counts the due ones as ready).
async fn pending_len(client: &delayqueue::fred::clients::Client, name: &str) -> u64 {
    use delayqueue::fred::prelude::SortedSetsInterface;
    client.zcard(format!("dq:{{{name}}}:pending")).await.unwrap()
}

/// Once everything is acked: no group key left but the defaults'
/// settings, no count left, the integrity check clean.
async fn assert_drained(client: &delayqueue::fred::clients::Client, queue: &delayqueue::DelayQueue, name: &str) {
    let state_keys = || async {
        let mut keys = group_keys(client, name).await;
        keys.retain(|k| !k.ends_with(":glimits") && !k.ends_with(":grates"));
        keys
    };
    assert!(
        wait_for(WAIT, || async { state_keys().await.is_empty() }).await,
        "{:?}",
        state_keys().await
    );
    assert_eq!(queue.counts().await.unwrap(), delayqueue::Counts::default());
    let report = queue.check_integrity().await.unwrap();
    assert!(report.is_clean(), "{report}");
}

/// A queue whose groups run two messages at once, retried after `backoff`.
async fn start_two_at_once(
    name: &str,
    backoff: Duration,
) -> (
    support::RedisServer,
    delayqueue::fred::clients::Client,
    delayqueue::DelayQueue,
) {
    start_queue(name, FETCH, |b| b.group_concurrency(2).backoff(Backoff::fixed(backoff))).await
}

/// What a [`grouped`] handler saw of one delivery.
#[derive(Debug, Clone, PartialEq)]
struct Carried {
    payload: String,
    group: Option<String>,
    priority: u8,
    headers: Vec<(String, String)>,
}

/// Each delivery a [`grouped`] handler saw, in order.
type CarriedLog = Arc<Mutex<Vec<Carried>>>;

/// A handler that records each delivery in `log` and what it carries
/// in the returned list, and fails ("broken") those `fails` picks.
fn grouped(
    log: &Log,
    fails: impl Fn(&Message) -> bool + Send + Sync + 'static,
) -> (impl delayqueue::Handler, CarriedLog) {
    let all = CarriedLog::default();
    let seen = all.clone();
    let handler = helpers::recording(log, move |msg: Message| {
        seen.lock().unwrap().push(Carried {
            payload: String::from_utf8_lossy(msg.payload()).into_owned(),
            group: msg.group().map(str::to_string),
            priority: msg.priority(),
            headers: msg.headers().to_vec(),
        });
        let fail = fails(&msg);
        async move {
            match fail {
                true => Err::<(), HandlerError>("broken".into()),
                false => Ok(()),
            }
        }
    });
    (handler, all)
}

/// The groups of `n` deliveries, all `g`.
fn in_group(g: &str, n: usize) -> Vec<Option<String>> {
    vec![Some(g.to_string()); n]
}

/// The groups of the deliveries `seen` recorded.
fn groups_of(seen: &CarriedLog) -> Vec<Option<String>> {
    seen.lock().unwrap().iter().map(|d| d.group.clone()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_priority_orders_messages_within_their_group_while_groups_still_alternate() {
    let (_server, client, queue) = start_queue("gprio", FETCH, |b| b.concurrency(1).fetch_limit(1)).await;
    let msgs = [
        ("a-low", 0, "A"),
        ("a-high", 9, "A"),
        ("a-mid", 5, "A"),
        ("b1", 0, "B"),
        ("b2", 0, "B"),
        ("p-low", 0, ""),
        ("p-high", 9, ""),
    ];
    let batch = msgs.iter().map(|(p, prio, g)| {
        let m = NewMessage::new(*p).priority(*prio);
        if g.is_empty() {
            m
        } else {
            m.group(*g)
        }
    });
    queue.send_batch(batch).await.unwrap();
    let log = Log::default();
    let (handler, seen) = grouped(&log, |_| false);
    let consumer = start_with_all_promoted(&client, &queue, "gprio", handler).await;
    assert!(wait_until(WAIT, || log.len() == 7).await);
    consumer.shutdown().await.unwrap();
    // (group, payload, priority) of each delivery.
    let order: Vec<(String, String, u8)> = seen
        .lock()
        .unwrap()
        .iter()
        .map(|s| (s.group.clone().unwrap_or_default(), s.payload.clone(), s.priority))
        .collect();
    // Within a group (and within the messages without one, the member
    // ''): priority 9 down to 0, each delivered with its priority.
    let of = |g: &str| -> Vec<(&str, u8)> { order.iter().filter(|d| d.0 == g).map(|d| (d.1.as_str(), d.2)).collect() };
    assert_eq!(of("A"), [("a-high", 9), ("a-mid", 5), ("a-low", 0)], "{order:?}");
    assert_eq!(of(""), [("p-high", 9), ("p-low", 0)], "{order:?}");
    // A consumer claiming one at a time gives each of the three members a
    // turn while all have messages: no priority 9 lets A or '' go twice
    // before the others' turns.
    for turn in order[..6].windows(3) {
        let mut members: Vec<&str> = turn.iter().map(|d| d.0.as_str()).collect();
        members.sort_unstable();
        assert_eq!(members, ["", "A", "B"], "{order:?}");
    }
    assert_drained(&client, &queue, "gprio").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grouped_message_keeps_its_headers_and_group_through_a_retry() {
    let (_server, client, queue) = start_two_at_once("ghead", Duration::from_millis(20)).await;
    let id = queue
        .send("fail once")
        .header("tenant", "t-42")
        .header("trace", "abc")
        .group("A")
        .await
        .unwrap();
    let want = vec![
        ("tenant".to_string(), "t-42".to_string()),
        ("trace".to_string(), "abc".to_string()),
    ];
    let info = queue.get(&id).await.unwrap().expect("sent");
    assert_eq!((info.group.as_deref(), &info.headers), (Some("A"), &want));
    let log = Log::default();
    let (handler, seen) = grouped(&log, |msg| msg.attempt() == 1);
    let consumer = queue.start_consume(handler).await.unwrap();
    assert!(wait_until(WAIT, || log.len() == 2).await);
    assert!(wait_for(WAIT, || async { queue.status().await.unwrap().totals.acked == 1 }).await);
    consumer.shutdown().await.unwrap();
    assert_eq!(log.attempts(&id), vec![1, 2]);
    let expect = Carried {
        payload: "fail once".to_string(),
        group: Some("A".to_string()),
        priority: 0,
        headers: want,
    };
    assert_eq!(*seen.lock().unwrap(), vec![expect.clone(), expect]);
    assert_drained(&client, &queue, "ghead").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rescheduled_pending_grouped_message_is_delivered_in_its_group() {
    let (_server, client, queue) = start_queue("gresched", FETCH, |b| b.group_concurrency(1)).await;
    let hour = Duration::from_secs(3600);
    let late = queue.send("late").delay(hour).group("A").await.unwrap();
    let soon = queue.send("soon").delay(hour).group("A").await.unwrap();
    // Later: its due time moves out, it stays pending in its group.
    let before = queue.get(&late).await.unwrap().unwrap().due.expect("a due time");
    assert!(queue.reschedule(&late, hour * 2).await.unwrap());
    let info = queue.get(&late).await.unwrap().unwrap();
    assert_eq!((info.state, info.group.as_deref()), (MessageState::Pending, Some("A")));
    assert!(
        info.due.unwrap() >= before + hour / 2,
        "{:?} then {:?}",
        before,
        info.due
    );
    // Sooner: due now, delivered in its group; the other one still waits.
    assert!(queue.reschedule(&soon, Duration::ZERO).await.unwrap());
    let log = Log::default();
    let (handler, seen) = grouped(&log, |_| false);
    let consumer = queue.start_consume(handler).await.unwrap();
    assert!(wait_until(WAIT, || log.len() == 1).await);
    assert!(wait_for(WAIT, || async { queue.status().await.unwrap().totals.acked == 1 }).await);
    assert_eq!(log.snapshot()[0].0, soon);
    assert_eq!(groups_of(&seen), in_group("A", 1));
    let counts = queue.counts().await.unwrap();
    assert_eq!((counts.pending, counts.ready, counts.processing), (1, 0, 0));
    assert!(
        wait_for(WAIT, || async {
            let page = queue.groups(0, 10).await.unwrap();
            page.total == 0 && page.items.is_empty()
        })
        .await,
        "A idle: nothing of it due or processing"
    );
    // Once due, a message in its group is no longer pending: reschedule
    // leaves it alone, and it is delivered.
    assert!(queue.pause().await.unwrap());
    assert!(queue.reschedule(&late, Duration::ZERO).await.unwrap());
    assert!(wait_for(WAIT, || async { pending_len(&client, "gresched").await == 0 }).await);
    assert!(!queue.reschedule(&late, hour).await.unwrap(), "ready, not pending");
    assert_eq!(queue.groups(0, 10).await.unwrap().items[0].ready, 1);
    assert!(queue.resume().await.unwrap());
    assert!(wait_until(WAIT, || log.len() == 2).await);
    consumer.shutdown().await.unwrap();
    assert_eq!(log.snapshot()[1].0, late);
    assert_eq!(queue.status().await.unwrap().totals.acked, 2);
    assert_drained(&client, &queue, "gresched").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grouped_message_past_its_deadline_is_buried_as_expired_and_its_group_cleaned_up() {
    let (server, client, queue) = start_queue("gexpire", FETCH, |b| b.ordered()).await;
    let second = Duration::from_secs(1);
    // A's head expires and its next message is kept; B has only one, expired.
    let gone = queue
        .send("gone")
        .expire_after(second)
        .header("tenant", "t-1")
        .group("A")
        .await
        .unwrap();
    let kept = queue.send("kept").group("A").await.unwrap();
    let b_gone = queue.send("b-gone").expire_after(second).group("B").await.unwrap();
    let deadline = queue.get(&gone).await.unwrap().unwrap().expires_at.expect("a deadline");
    let deadline_ms = deadline.duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
    assert!(wait_until(WAIT, || server.now_ms() > deadline_ms + 100).await);
    let log = Log::default();
    let consumer = queue.start_consume(acking(&log)).await.unwrap();
    assert!(wait_until(WAIT, || log.len() == 1).await);
    assert!(wait_for(WAIT, || async { queue.counts().await.unwrap().dead == 2 }).await);
    consumer.shutdown().await.unwrap();
    assert_eq!(log.snapshot()[0].0, kept);
    let status = queue.status().await.unwrap();
    assert_eq!((status.totals.expired, status.totals.acked), (2, 1));
    for (id, group) in [(&gone, "A"), (&b_gone, "B")] {
        let letter = queue.get(id).await.unwrap().expect("a dead letter");
        assert_eq!(
            (letter.state, letter.last_error.as_deref(), letter.group.as_deref()),
            (MessageState::Dead, Some("expired"), Some(group))
        );
    }
    // Nothing of either group is due or processing: only the ordered
    // default is left of the groups, and the check is clean.
    assert!(wait_for(WAIT, || async { queue.groups(0, 10).await.unwrap().total == 0 }).await);
    let report = queue.check_integrity().await.unwrap();
    assert!(report.is_clean(), "{report}");
    // Requeued, the expired one is delivered in its group, headers kept;
    // the other dead letter is deleted.
    assert!(queue.requeue_dead(&gone).await.unwrap());
    let (handler, seen) = grouped(&log, |_| false);
    let consumer = queue.start_consume(handler).await.unwrap();
    assert!(wait_until(WAIT, || log.len() == 2).await);
    assert!(wait_for(WAIT, || async { queue.status().await.unwrap().totals.acked == 2 }).await);
    consumer.shutdown().await.unwrap();
    assert_eq!(log.snapshot()[1].0, gone);
    let want = Carried {
        payload: "gone".to_string(),
        group: Some("A".to_string()),
        priority: 0,
        headers: vec![("tenant".to_string(), "t-1".to_string())],
    };
    assert_eq!(*seen.lock().unwrap(), vec![want]);
    assert!(queue.delete_dead(&b_gone).await.unwrap());
    assert_drained(&client, &queue, "gexpire").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grouped_dead_letter_requeued_is_delivered_again_in_its_group() {
    let (_server, client, queue) = start_queue("gdead", FETCH, |b| {
        b.ordered().backoff(Backoff::fixed(Duration::from_millis(20)))
    })
    .await;
    let bad = queue.send("bad").retry_count(1).priority(3).group("A").await.unwrap();
    let next = queue.send("next").group("A").await.unwrap();
    let failing = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let log = Log::default();
    let fail = failing.clone();
    let (handler, seen) = grouped(&log, move |msg| {
        msg.payload() == b"bad" && fail.load(std::sync::atomic::Ordering::SeqCst)
    });
    let consumer = queue.start_consume(handler).await.unwrap();
    // Two deliveries of bad (retry count 1), then dead; the ordered group
    // goes on with its next message.
    assert!(wait_until(WAIT, || log.len() == 3).await, "{} delivered", log.len());
    assert!(wait_for(WAIT, || async { queue.status().await.unwrap().totals.acked == 1 }).await);
    assert_eq!(log.attempts(&bad), vec![1, 2]);
    assert_eq!(log.snapshot()[2].0, next);
    let letter = queue.get(&bad).await.unwrap().expect("a dead letter");
    assert_eq!(
        (letter.state, letter.last_error.as_deref(), letter.group.as_deref()),
        (MessageState::Dead, Some("broken"), Some("A"))
    );
    // Nothing of A processing: the group's count went back to 0.
    assert!(wait_for(WAIT, || async { queue.groups(0, 10).await.unwrap().total == 0 }).await);
    failing.store(false, std::sync::atomic::Ordering::SeqCst);
    assert!(queue.requeue_dead(&bad).await.unwrap());
    assert!(wait_until(WAIT, || log.len() == 4).await);
    assert!(wait_for(WAIT, || async { queue.status().await.unwrap().totals.acked == 2 }).await);
    consumer.shutdown().await.unwrap();
    assert_eq!(log.attempts(&bad), vec![1, 2, 1], "its full deliveries again");
    assert_eq!(groups_of(&seen), in_group("A", 4));
    assert_eq!(seen.lock().unwrap()[3].priority, 3, "its priority kept");
    assert!(wait_for(WAIT, || async { queue.groups(0, 10).await.unwrap().total == 0 }).await);
    assert_drained(&client, &queue, "gdead").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grouped_retry_waiting_its_backoff_can_be_rescheduled_to_now() {
    let (_server, client, queue) = start_two_at_once("gretry", Duration::from_secs(3600)).await;
    let id = queue.send("once more").priority(2).group("A").await.unwrap();
    let log = Log::default();
    let (handler, seen) = grouped(&log, |msg| msg.attempt() == 1);
    let consumer = queue.start_consume(handler).await.unwrap();
    // Failed once, it waits its hour of backoff in pending.
    assert!(wait_until(WAIT, || log.len() == 1).await);
    assert!(wait_for(WAIT, || async { queue.counts().await.unwrap().pending == 1 }).await);
    let info = queue.get(&id).await.unwrap().unwrap();
    assert_eq!(
        (info.state, info.group.as_deref(), info.attempts),
        (MessageState::Pending, Some("A"), 1)
    );
    assert!(wait_for(WAIT, || async { queue.groups(0, 10).await.unwrap().total == 0 }).await);
    assert!(queue.reschedule(&id, Duration::ZERO).await.unwrap());
    assert!(wait_until(WAIT, || log.len() == 2).await);
    assert!(wait_for(WAIT, || async { queue.status().await.unwrap().totals.acked == 1 }).await);
    consumer.shutdown().await.unwrap();
    assert_eq!(log.attempts(&id), vec![1, 2]);
    assert_eq!(groups_of(&seen), in_group("A", 2));
    assert!(seen.lock().unwrap().iter().all(|d| d.priority == 2));
    assert_drained(&client, &queue, "gretry").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requeuing_all_dead_letters_sends_each_back_to_its_group_or_list() {
    let (_server, client, queue) = start_queue("gdeadall", FETCH, |b| b.group_concurrency(1)).await;
    let msgs = [
        ("a-prio", 4, Some("A")),
        ("a", 0, Some("A")),
        ("b", 0, Some("B")),
        ("p-prio", 7, None),
        ("p", 0, None),
    ];
    let batch = msgs.iter().map(|(p, prio, g)| {
        let m = NewMessage::new(*p).priority(*prio).retry_count(0);
        match g {
            Some(g) => m.group(*g),
            None => m,
        }
    });
    queue.send_batch(batch).await.unwrap();
    let failing = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let log = Log::default();
    let fail = failing.clone();
    let (handler, seen) = grouped(&log, move |_| fail.load(std::sync::atomic::Ordering::SeqCst));
    let consumer = queue.start_consume(handler).await.unwrap();
    assert!(wait_for(WAIT, || async { queue.counts().await.unwrap().dead == 5 }).await);
    assert!(wait_for(WAIT, || async { queue.groups(0, 10).await.unwrap().total == 0 }).await);
    failing.store(false, std::sync::atomic::Ordering::SeqCst);
    assert_eq!(queue.requeue_all_dead().await.unwrap(), 5);
    assert!(wait_until(WAIT, || log.len() == 10).await, "{} delivered", log.len());
    assert!(wait_for(WAIT, || async { queue.status().await.unwrap().totals.acked == 5 }).await);
    consumer.shutdown().await.unwrap();
    // Each delivered once more with its group and priority.
    let mut second: Vec<(String, Option<String>, u8)> = seen.lock().unwrap()[5..]
        .iter()
        .map(|s| (s.payload.clone(), s.group.clone(), s.priority))
        .collect();
    second.sort();
    let mut want: Vec<(String, Option<String>, u8)> = msgs
        .iter()
        .map(|(p, prio, g)| (p.to_string(), g.map(str::to_string), *prio))
        .collect();
    want.sort();
    assert_eq!(second, want);
    assert_drained(&client, &queue, "gdeadall").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_latency_of_a_grouped_queue_without_consumer_grows() {
    let (_server, _client, queue) = start_queue("unserved", FETCH, |b| b).await;
    let sent = std::time::Instant::now();
    queue
        .send_batch((0..200).map(|i| NewMessage::new(format!("m{i}")).group(format!("tenant-{}", i % 40))))
        .await
        .unwrap();
    let first = queue.status().await.unwrap();
    assert_eq!(first.counts.ready, 200, "{first:?}");
    let first = first.latency.expect("due messages wait to start");
    let later = std::cell::Cell::new(None);
    assert!(
        wait_for(WAIT, || async {
            later.set(queue.status().await.unwrap().latency);
            later.get().is_some_and(|l| l >= first + Duration::from_millis(300))
        })
        .await,
        "no consumer, yet the oldest due message's wait did not grow: {first:?} then {later:?}"
    );
    let later = later.get().unwrap();
    assert!(later <= sent.elapsed(), "{later:?} > {:?}", sent.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_builders_group_defaults_show_before_a_consumer_stores_them() {
    let per = Duration::from_secs(1);
    let (_server, client, queue) =
        start_queue("defaults", FETCH, |b| b.group_concurrency(3).group_rate_limit(5, per)).await;
    queue.send("m").group("a").await.unwrap();
    let page = queue.groups(0, 10).await.unwrap();
    assert_eq!(
        (page.default_concurrency, page.default_rate),
        (Some(3), Some(delayqueue::RateLimit::new(5, per))),
        "no consumer started yet: the builder's"
    );
    // A handle without defaults of its own (the CLI's) has Redis's: none yet.
    let plain = delayqueue::DelayQueue::builder("defaults", client).build().unwrap();
    let page = plain.groups(0, 10).await.unwrap();
    assert_eq!((page.default_concurrency, page.default_rate), (None, None));
    // Stored (as a consumer does when it starts), Redis's win.
    plain.set_default_group_concurrency(Some(7)).await.unwrap();
    assert_eq!(queue.groups(0, 10).await.unwrap().default_concurrency, Some(7));
}

/// A fetch_interval no test below may wait for: each finishes well within
/// [`SOON`] only when a group's next message starts on its own wake-up
/// (its ack, its window opening), never on the consumer's tick.
const TICK: Duration = Duration::from_secs(60);
/// A generous bound for work that takes well under a second when each
/// group's next message starts as soon as its limit allows.
const SOON: Duration = Duration::from_secs(15);

/// Handles `n` messages of group `g` on a queue built with `configure` and
/// the fetch_interval [`TICK`], 1 ms each; returns the most of `g` that
/// ran at once, failing unless all are handled within [`SOON`].
async fn drain_one_group(
    name: &str,
    g: &str,
    n: usize,
    configure: impl FnOnce(delayqueue::DelayQueueBuilder) -> delayqueue::DelayQueueBuilder,
) -> usize {
    let (_server, _client, queue) = start_queue(name, TICK, |b| configure(b.concurrency(8))).await;
    queue
        .send_batch((0..n).map(|i| NewMessage::new(format!("{g}{i}")).group(g)))
        .await
        .unwrap();
    let running = Running::default();
    let consumer = queue
        .start_consume(running.handler(Duration::from_millis(1)))
        .await
        .unwrap();
    let done = wait_until(SOON, || running.done() == n).await;
    consumer.shutdown().await.unwrap();
    assert!(
        done,
        "{} of {n} handled within {SOON:?}: the group waited for the tick",
        running.done()
    );
    running.most(g)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_at_its_concurrency_starts_its_next_message_when_one_finishes_not_at_the_tick() {
    assert_eq!(drain_one_group("gfreed", "A", 20, |b| b.group_concurrency(2)).await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ordered_group_starts_its_next_message_when_one_finishes_not_at_the_tick() {
    assert_eq!(drain_one_group("gnext", "L", 10, |b| b.ordered()).await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_held_by_its_rate_starts_again_when_its_window_opens_not_at_the_tick() {
    let (_server, _client, queue) = start_queue("gopens", TICK, |b| b.concurrency(8)).await;
    let per = Duration::from_secs(1);
    assert!(queue
        .set_group_rate("R", Some(delayqueue::RateLimit::new(10, per)))
        .await
        .unwrap());
    queue
        .send_batch((0..12).map(|i| NewMessage::new(format!("r{i}")).group("R")))
        .await
        .unwrap();
    let log = Log::default();
    let consumer = queue.start_consume(acking(&log)).await.unwrap();
    let done = wait_until(SOON, || log.len() == 12).await;
    consumer.shutdown().await.unwrap();
    assert!(
        done,
        "{} of 12 handled within {SOON:?}: the group waited for the tick",
        log.len()
    );
    // Still at its rate: the 11th waited for the first to leave the window.
    let starts: Vec<_> = log.snapshot().into_iter().map(|d| d.2).collect();
    assert!(
        starts[10] >= starts[0] + per / 2,
        "11th {:?} after the first",
        starts[10] - starts[0]
    );
}

/// The ack that frees a group's slot comes from a consumer of another
/// client (another process, say) whose loop has stopped: the consumer
/// that starts the group's next message learns of it through the wake-up
/// the ack publishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_freed_by_another_consumers_ack_starts_its_next_message_at_once() {
    let (server, client, queue) = start_queue("gother", TICK, |b| b.ordered()).await;
    queue
        .send_batch((0..2).map(|i| NewMessage::new(format!("a{i}")).group("A")))
        .await
        .unwrap();
    let (open, opened) = tokio::sync::watch::channel(false);
    let first = Log::default();
    let holding = helpers::recording(&first, move |_msg: Message| {
        let mut opened = opened.clone();
        async move {
            let _ = opened.wait_for(|o| *o).await;
            Ok(())
        }
    });
    let a = queue.start_consume(holding).await.unwrap();
    assert!(wait_until(WAIT, || first.len() == 1).await);
    // The first consumer stops claiming (its loop deletes its claim
    // receipt) while a0 still runs; it acks a0 once the gate opens.
    let stopping = tokio::spawn(a.shutdown());
    let receipts = || async {
        let keys: Vec<String> = client
            .custom(delayqueue::fred::cmd!("KEYS"), vec!["dq:{gother}:claim:*"])
            .await
            .unwrap();
        keys.len()
    };
    assert!(wait_for(WAIT, || async { receipts().await == 0 }).await);
    let other = server.client().await;
    let queue_b = helpers::queue_builder("gother", &other, TICK)
        .ordered()
        .build()
        .unwrap();
    let second = Log::default();
    let b = queue_b.start_consume(acking(&second)).await.unwrap();
    // The second consumer handles a message without a group: it has
    // claimed since a1 waits behind a0, and now sleeps until its tick.
    queue.send("x").await.unwrap();
    assert!(wait_until(WAIT, || second.len() == 1).await);
    open.send(true).unwrap();
    stopping.await.unwrap().unwrap();
    let started = wait_until(SOON, || second.len() == 2).await;
    b.shutdown().await.unwrap();
    assert!(
        started,
        "a1 not started within {SOON:?} of a0's ack: it waited for the tick"
    );
    assert_eq!(second.snapshot()[1].3, b"a1");
}
