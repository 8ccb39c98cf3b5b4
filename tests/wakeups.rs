//! Wake-ups, batch send and batched claim/ack through the public API,
//! against a real redis-server.
//!
//! The consumers here poll rarely (`SLOW_POLL`), so a prompt delivery can
//! only come from a wake-up: each test's time bound is far below the poll
//! interval. These bounds check that a wake-up happened, not how fast.

mod helpers;
use delayqueue_test_support as support;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use delayqueue::{Counts, Error, MessageId, NewMessage, Schedule};
use helpers::crashing::Crashing;
use helpers::{acking, queue_builder, recording, start_queue, wait_stats, Log};
use support::proxy::Proxy;
use support::{all_keys, client_for, wait_until, RedisServer, WAIT};

/// Far longer than any wait below (`WAIT`): without a wake-up nothing
/// arrives in time.
const SLOW_POLL: Duration = Duration::from_secs(600);

#[tokio::test]
async fn a_send_from_another_client_wakes_an_idle_consumer() {
    let (server, _client, q) = start_queue("idle", SLOW_POLL, |b| b).await;
    let log = Log::default();
    let consumer = q.start_consume(acking(&log)).await.unwrap();
    // Once a first message went through, the first sweep has passed and
    // the consumer is asleep until SLOW_POLL.
    q.send("first").await.unwrap();
    assert!(wait_until(WAIT, || log.len() == 1).await);
    // Another process: its own connection and queue handle.
    let other = server.client().await;
    let producer = queue_builder("idle", &other, SLOW_POLL).build().unwrap();
    let sent = Instant::now();
    producer.send("now").await.unwrap();
    producer.send("soon").delay(Duration::from_millis(300)).await.unwrap();
    assert!(
        wait_until(WAIT, || log.len() == 3).await,
        "no wake-up: {} delivered",
        log.len()
    );
    let soon = log.snapshot().into_iter().find(|d| d.3 == b"soon").unwrap();
    assert!(
        soon.2 - sent >= Duration::from_millis(295),
        "early: {:?}",
        soon.2 - sent
    );
    consumer.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_message_due_before_the_known_head_wakes_the_consumer_earlier() {
    let (_server, _client, q) = start_queue("head", SLOW_POLL, |b| b).await;
    let log = Log::default();
    let consumer = q.start_consume(acking(&log)).await.unwrap();
    // The consumer learns of a message due after SLOW_POLL and sleeps until then.
    q.send("late").delay(SLOW_POLL).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    q.send("early").delay(Duration::from_millis(200)).await.unwrap();
    assert!(wait_until(WAIT, || log.len() == 1).await);
    assert_eq!(log.snapshot()[0].3, b"early");
    consumer.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_failed_delivery_is_retried_at_once_through_a_wake_up() {
    let (_server, _client, q) = start_queue("retry", SLOW_POLL, |b| b.default_retry_count(1)).await;
    let log = Log::default();
    let l = log.clone();
    let consumer = q
        .start_consume(move |msg: delayqueue::Message| {
            l.record(&msg);
            async move {
                if msg.payload() == b"x" && msg.attempt() == 1 {
                    Err("first attempt fails".into())
                } else {
                    Ok(())
                }
            }
        })
        .await
        .unwrap();
    // Past the first sweep once a first message went through.
    q.send("first").await.unwrap();
    assert!(wait_until(WAIT, || log.len() == 1).await);
    let id = q.send("x").await.unwrap();
    assert!(wait_until(WAIT, || log.len() == 3).await);
    assert_eq!(log.attempts(&id), vec![1, 2]);
    consumer.shutdown().await.unwrap();
}

#[tokio::test]
async fn wake_ups_resume_after_the_subscriber_connection_is_killed() {
    let (server, client, q) = start_queue("killed", Duration::from_secs(1), |b| b).await;
    let log = Log::default();
    let consumer = q.start_consume(acking(&log)).await.unwrap();
    let killed = server.raw_command(&["CLIENT", "KILL", "TYPE", "pubsub"]);
    assert_eq!(killed, "1", "expected one subscriber connection");
    // Whether the wake-up is lost (then the probe every loop makes once
    // resubscribed finds it) or arrives on the resubscribed connection,
    // the message is delivered.
    tokio::time::sleep(Duration::from_millis(100)).await;
    q.send("after kill").await.unwrap();
    assert!(wait_until(WAIT, || log.len() == 1).await);
    // The subscriber came back: the next wake-up is delivered without a sweep.
    assert!(
        wait_until(WAIT, || server
            .raw_command(&["PUBSUB", "NUMSUB", "dq:{killed}:wake"])
            .ends_with('1'))
        .await
    );
    consumer.shutdown().await.unwrap();
    drop(client);
}

/// fred answers a `SUBSCRIBE` once it has written it; a consumer starts
/// only once Redis has run it, so a message sent right after it started
/// wakes it (here a `SUBSCRIBE` waits half a second on its way to Redis).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_starts_once_redis_runs_its_subscription() {
    let server = RedisServer::start().await;
    let proxy = Proxy::start(server.port()).await;
    let client = proxy.client().await;
    // The first consumer opens the connection that the second one's
    // channel is then subscribed on.
    let first = queue_builder("first", &client, SLOW_POLL).build().unwrap();
    let first = first.start_consume(acking(&Log::default())).await.unwrap();
    proxy.hold_requests("SUBSCRIBE", Duration::from_millis(500));
    let q = queue_builder("second", &client, SLOW_POLL).build().unwrap();
    let log = Log::default();
    let consumer = q.start_consume(acking(&log)).await.unwrap();
    let subscribers = server.raw_command(&["PUBSUB", "NUMSUB", "dq:{second}:wake"]);
    assert!(
        subscribers.ends_with('1'),
        "started before Redis ran its SUBSCRIBE: {subscribers}"
    );
    // Another process sends: only the wake-up tells the idle consumer.
    let other = server.client().await;
    queue_builder("second", &other, SLOW_POLL)
        .build()
        .unwrap()
        .send("now")
        .await
        .unwrap();
    assert!(wait_until(WAIT, || log.len() == 1).await, "no wake-up");
    consumer.shutdown().await.unwrap();
    first.shutdown().await.unwrap();
}

#[tokio::test]
async fn send_batch_reports_each_message_and_all_are_delivered_once() {
    // batch_size 100: 250 messages are three script calls.
    let (_server, client, q) = start_queue("batch", Duration::from_millis(200), |b| {
        b.batch_size(100).concurrency(8)
    })
    .await;
    q.send("taken").delay(Duration::from_secs(60)).id("dup").await.unwrap();
    let mut msgs: Vec<NewMessage> = (0..250)
        .map(|i| NewMessage::new(format!("m{i}")).delay(Duration::from_millis(i % 50)))
        .collect();
    msgs.insert(10, NewMessage::new("again").id("dup"));
    msgs.push(NewMessage::new("mine").id("custom-1"));
    let results = q.send_batch(msgs).await.unwrap();
    assert_eq!(results.len(), 252);
    assert!(matches!(&results[10], Err(Error::Duplicate { id, .. }) if id.as_str() == "dup"));
    assert_eq!(results[251].as_ref().unwrap().as_str(), "custom-1");
    let sent: HashSet<MessageId> = results.into_iter().filter_map(Result::ok).collect();
    assert_eq!(sent.len(), 251);

    // One invalid message fails the whole call before anything is written.
    let before = q.counts().await.unwrap();
    let bad = vec![NewMessage::new("fine"), NewMessage::new("bad id").id("has space")];
    assert!(matches!(q.send_batch(bad).await, Err(Error::InvalidMessageId { .. })));
    // Live, not per state: messages of the batch become due (ready) meanwhile.
    assert_eq!(q.counts().await.unwrap().live(), before.live());

    assert!(q.cancel("dup").await.unwrap());
    let log = Log::default();
    let consumer = q.start_consume(acking(&log)).await.unwrap();
    assert!(wait_until(WAIT, || log.len() >= 251).await);
    assert_eq!(wait_stats(&q, WAIT, Counts::default()).await, Counts::default());
    consumer.shutdown().await.unwrap();
    // Exactly once each, every id sent, nothing left behind.
    assert_eq!(log.len(), 251);
    assert_eq!(log.ids(), sent);
    assert!(all_keys(&client).await.is_empty(), "{:?}", all_keys(&client).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_backlog_drains_through_batched_claims_and_acks_exactly_once() {
    let (_server, client, q) = start_queue("drain", Duration::from_millis(200), |b| b.concurrency(16)).await;
    let n = 3000;
    let results = q
        .send_batch((0..n).map(|i| NewMessage::new(format!("{i}"))))
        .await
        .unwrap();
    let sent: HashSet<MessageId> = results.into_iter().map(Result::unwrap).collect();
    let log = Log::default();
    // Two consumers compete for the same backlog.
    let a = q.start_consume(acking(&log)).await.unwrap();
    let b = q.start_consume(acking(&log)).await.unwrap();
    assert!(wait_until(2 * WAIT, || log.len() >= n).await, "{}", log.len());
    assert_eq!(wait_stats(&q, WAIT, Counts::default()).await, Counts::default());
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
    assert_eq!(log.len(), n, "a message was delivered twice");
    assert_eq!(log.ids(), sent);
    assert!(log.snapshot().iter().all(|d| d.1 == 1), "a delivery was repeated");
    assert!(all_keys(&client).await.is_empty(), "{:?}", all_keys(&client).await);
}

/// Two consumers: `busy` (one handler, held by a message that does not
/// end) and `free`. At a message's due time both promote; should the busy
/// one move it, the free one must hear of it at once, not at its next poll.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_promoted_by_a_busy_consumer_reaches_a_free_one() {
    // Its lease outlasts the test: the held handler is never cut short.
    let (server, _client, q) =
        start_queue("busy", SLOW_POLL, |b| b.concurrency(1).max_consume_duration(SLOW_POLL)).await;
    let held = Log::default();
    let release = Arc::new(tokio::sync::Notify::new());
    let gate = release.clone();
    let busy = q
        .start_consume(recording(&held, move |_msg| {
            let gate = gate.clone();
            async move {
                gate.notified().await;
                Ok(())
            }
        }))
        .await
        .unwrap();
    q.send("hold").await.unwrap();
    assert!(
        wait_until(WAIT, || held.len() == 1).await,
        "the busy consumer never started"
    );
    let other = server.client().await;
    let free_queue = queue_builder("busy", &other, SLOW_POLL).concurrency(4).build().unwrap();
    let log = Log::default();
    let free = free_queue.start_consume(acking(&log)).await.unwrap();
    // Each round, both consumers race to promote; over the rounds the busy
    // one wins some.
    for round in 0..8 {
        q.send(format!("m{round}"))
            .delay(Duration::from_millis(150))
            .await
            .unwrap();
        assert!(
            wait_until(WAIT, || log.len() == round + 1).await,
            "round {round}: the due message never reached the free consumer within {WAIT:?} \
             (the busy one started {} handlers)",
            held.len()
        );
    }
    assert_eq!(held.len(), 1, "the busy consumer started more than it could");
    release.notify_one();
    free.shutdown().await.unwrap();
    busy.shutdown().await.unwrap();
}

/// The commands `server` has run so far (`INFO commandstats`), but the
/// `INFO` calls that ask.
/// Longer than any test: no heartbeat of the process's entry falls in it.
const HOUR: Duration = Duration::from_secs(3600);

fn commands_run(server: &RedisServer) -> u64 {
    server
        .raw_command(&["INFO", "commandstats"])
        .lines()
        .filter_map(|l| l.strip_prefix("cmdstat_")?.split_once(":calls="))
        .filter(|(name, _)| *name != "info")
        .filter_map(|(_, rest)| rest.split(',').next()?.parse::<u64>().ok())
        .sum()
}

/// Once its queue is empty a consumer sleeps until a wake-up, a due time
/// it knows of, or its idle probe (300 `fetch_interval`s): over a window
/// of 20 intervals it makes a few commands at most, where a probe every
/// interval makes two per interval (the script call and its `EXISTS`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_consumer_makes_almost_no_commands() {
    const INTERVAL: Duration = Duration::from_millis(100);
    // The process's heartbeat (docs/operations.md, "Live consumers") is
    // not the queue's cost: kept out of the window.
    let (server, _client, q) = start_queue("quiet", INTERVAL, |b| b.heartbeat(HOUR)).await;
    let log = Log::default();
    let consumer = q.start_consume(acking(&log)).await.unwrap();
    q.send("first").await.unwrap();
    assert!(wait_until(WAIT, || log.len() == 1).await);
    assert_eq!(wait_stats(&q, WAIT, Counts::default()).await, Counts::default());
    // The probe an interval after the delivery finds the queue idle.
    tokio::time::sleep(3 * INTERVAL).await;
    let before = commands_run(&server);
    let window = 20 * INTERVAL;
    tokio::time::sleep(window).await;
    let made = commands_run(&server) - before;
    assert!(made <= 6, "{made} commands in {window:?} of idling");
    consumer.shutdown().await.unwrap();
}

/// A wake-up that never comes (the producer's user may not publish on the
/// wake-up channel, and its send ignores the refusal) costs at most the
/// idle probe (300 intervals: 6 s here): the message is still delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_whose_wake_up_is_lost_is_found_by_the_idle_probe() {
    const INTERVAL: Duration = Duration::from_millis(20);
    let (server, _client, q) = start_queue("lost", INTERVAL, |b| b).await;
    let log = Log::default();
    let consumer = q.start_consume(acking(&log)).await.unwrap();
    q.send("first").await.unwrap();
    assert!(wait_until(WAIT, || log.len() == 1).await);
    send_unannounced(&server, "lost", INTERVAL).await;
    assert!(
        wait_until(WAIT, || log.len() == 2).await,
        "the idle probe never found the message"
    );
    consumer.shutdown().await.unwrap();
}

/// A wake-up lost while the subscriber connection is up (the producer may
/// not publish), then a reconnect of that connection: every loop probes
/// once resubscribed, as wake-ups may have been lost, so the message is
/// delivered then, long before its idle probe.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnect_of_the_subscriber_finds_what_a_lost_wake_up_announced() {
    let (server, _client, q) = start_queue("relook", SLOW_POLL, |b| b).await;
    let log = Log::default();
    let consumer = q.start_consume(acking(&log)).await.unwrap();
    q.send("first").await.unwrap();
    assert!(wait_until(WAIT, || log.len() == 1).await);
    send_unannounced(&server, "relook", SLOW_POLL).await;
    assert_eq!(server.raw_command(&["CLIENT", "KILL", "TYPE", "pubsub"]), "1");
    assert!(
        wait_until(WAIT, || log.len() == 2).await,
        "the reconnect did not make the loop look"
    );
    consumer.shutdown().await.unwrap();
}

/// Sends "unannounced" to queue `name` as a user that may not publish on
/// its wake-up channel: the send succeeds, its wake-up is refused.
async fn send_unannounced(server: &RedisServer, name: &str, interval: Duration) {
    let user = [
        "ACL",
        "SETUSER",
        "mute",
        "on",
        ">mute-secret",
        "~*",
        "+@all",
        "resetchannels",
    ];
    assert_eq!(server.raw_command(&user), "OK");
    let mute = client_for(&format!("redis://mute:mute-secret@127.0.0.1:{}", server.port())).await;
    let producer = queue_builder(name, &mute, interval).build().unwrap();
    producer.send("unannounced").await.unwrap();
    let log = server.raw_command(&["ACL", "LOG"]);
    assert!(
        log.contains(&format!("dq:{{{name}}}:wake")),
        "the wake-up was not refused: {log}"
    );
}

/// A message pending before the consumer starts is learned of from its
/// first probe, and delivered at its due time, not earlier, though no
/// probe follows within the test.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_due_while_the_consumer_idles_is_delivered_at_its_due_time() {
    let (_server, _client, q) = start_queue("due", SLOW_POLL, |b| b).await;
    let delay = Duration::from_millis(800);
    let sent = Instant::now();
    q.send("later").delay(delay).await.unwrap();
    let log = Log::default();
    let consumer = q.start_consume(acking(&log)).await.unwrap();
    assert!(wait_until(WAIT, || log.len() == 1).await, "never delivered");
    let took = log.snapshot()[0].2 - sent;
    assert!(took >= delay - Duration::from_millis(5), "early: {took:?}");
    consumer.shutdown().await.unwrap();
}

/// A consumer that crashes holding a message (its runtime dropped with
/// its tasks: no nack, no more renewals) while another consumer idles:
/// the idle one saw the lease at its probe, sleeps until the lease's end
/// rather than until its next probe (`fetch_interval` far beyond the
/// test), and takes the message back then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_consumer_takes_back_a_crashed_consumers_message_at_its_leases_end() {
    const VIS: Duration = Duration::from_secs(2);
    const INTERVAL: Duration = Duration::from_secs(60);
    let (server, client, q) = start_queue("crashed", INTERVAL, |b| b.max_consume_duration(VIS)).await;
    // Renewed leases: alive, it keeps the message however long B waits.
    let mut a = Crashing::start(server.url(), "crashed", INTERVAL, VIS);
    let id = q.send("x").await.unwrap();
    a.wait_started().await;
    let log = Log::default();
    let b = q.start_consume(acking(&log)).await.unwrap();
    a.crash();
    assert!(
        wait_until(WAIT, || log.len() == 1).await,
        "not taken back within {WAIT:?}"
    );
    assert_eq!(log.attempts(&id), vec![2]);
    assert_eq!(wait_stats(&q, WAIT, Counts::default()).await, Counts::default());
    b.shutdown().await.unwrap();
    assert!(all_keys(&client).await.is_empty());
}

/// A schedule set on a queue whose consumer idles wakes it: its
/// scheduler reads the schedule and the first fire is delivered, though
/// the consumer's next probe (300 `fetch_interval`s) is far beyond the test.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_set_while_the_consumer_idles_fires() {
    const INTERVAL: Duration = Duration::from_secs(2);
    // No heartbeat within the test, which waits for a quiet window.
    let (server, _client, q) = start_queue("sched", INTERVAL, |b| b.heartbeat(HOUR)).await;
    let log = Log::default();
    let consumer = q.start_consume(acking(&log)).await.unwrap();
    // Past its first probe, which found the queue empty: no command for
    // longer than an interval.
    assert!(wait_quiet(&server, INTERVAL * 5 / 2).await, "never idle");
    assert!(q
        .set_schedule("tick", Schedule::every(Duration::from_secs(1), "t"))
        .await
        .unwrap());
    assert!(
        wait_until(WAIT, || log.snapshot().iter().any(|d| d.3 == b"t")).await,
        "the schedule never fired"
    );
    consumer.shutdown().await.unwrap();
}

/// Waits (up to `WAIT`) until `server` ran no command for `span`.
async fn wait_quiet(server: &RedisServer, span: Duration) -> bool {
    let until = Instant::now() + WAIT;
    let mut seen = commands_run(server);
    while Instant::now() < until {
        tokio::time::sleep(span).await;
        let now = commands_run(server);
        if now == seen {
            return true;
        }
        seen = now;
    }
    false
}
