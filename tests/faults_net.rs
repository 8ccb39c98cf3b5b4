//! Reliability under faults, server and network side (issue 4: nothing
//! lost): Redis killed and restarted mid-run, connections cut (also after a
//! request ran but before its reply came back, so fred re-sends it), and
//! scripts flushed, while producers and consumers keep going; and a slow
//! link that holds acks back.
//!
//! Every scenario runs producers that record each id whose send returned
//! `Ok` and two consumers that record every delivery, while a fault loop
//! strikes. Only Redis is ever restarted, never our producers or consumers.
//! Then: every recorded id was handled at least once, the queue drains, no
//! key is left once the consumers are shut down, and the integrity check is
//! clean. Each scenario prints one `FAULT ...` line (see it with
//! `--nocapture`).

mod helpers;
use delayqueue_test_support as support;

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use delayqueue::{Consumer, Counts, DelayQueue, DelayQueueBuilder, Message, MessageId, NewMessage};
use fred::clients::Client;
use helpers::{queue_builder, recording, start_queue_with, wait_stats, Log};
use support::logs::Logs;
use support::proxy::Proxy;
use support::{all_keys, wait_until, RedisServer, ServerOptions, WAIT};
use tokio::task::JoinHandle;

/// Short, so redeliveries after a fault come quickly.
const FETCH_INTERVAL: Duration = Duration::from_millis(100);
const MAX_CONSUME: Duration = Duration::from_millis(1500);
const CONSUMERS: usize = 2;
const CONCURRENCY: usize = 8;
const FETCH_LIMIT: usize = 32;
const PRODUCERS: usize = 2;
/// Most sends of one producer; it also stops when the fault window ends.
const SENDS_PER_PRODUCER: usize = 1500;
/// Pause between two sends of one producer.
const SEND_PACE: Duration = Duration::from_millis(3);
/// Messages are sent with a delay of 0 to this many ms.
const MAX_DELAY_MS: u64 = 500;
/// How long producers send and faults strike.
const FAULT_WINDOW: Duration = Duration::from_secs(3);
/// Longest wait, after the faults, for every sent message to be handled.
const DRAIN_LIMIT: Duration = Duration::from_secs(60);

/// The settings every scenario's queue uses.
fn configure(b: DelayQueueBuilder) -> DelayQueueBuilder {
    b.max_consume_duration(MAX_CONSUME)
        .concurrency(CONCURRENCY)
        .fetch_limit(FETCH_LIMIT)
}

/// xorshift64*: fault timing only needs to vary, not to be good.
struct Rng(u64);

impl Rng {
    fn new() -> Rng {
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64;
        Rng(nanos | 1)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }

    fn millis(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(lo + self.below(hi - lo))
    }
}

/// What the producers saw.
#[derive(Default)]
struct Sent {
    /// Ids whose send returned `Ok`.
    ok: Mutex<Vec<MessageId>>,
    errors: AtomicUsize,
    first_error: Mutex<Option<String>>,
}

/// Sends until `SENDS_PER_PRODUCER` messages or `until`, whichever comes
/// first, each with a random delay up to `MAX_DELAY_MS`.
async fn produce(queue: DelayQueue, sent: Arc<Sent>, producer: usize, until: Instant) {
    let mut rng = Rng::new();
    for i in 0..SENDS_PER_PRODUCER {
        if Instant::now() >= until {
            break;
        }
        let delay = Duration::from_millis(rng.below(MAX_DELAY_MS + 1));
        match queue.send(format!("p{producer}-{i}")).delay(delay).await {
            Ok(id) => sent.ok.lock().unwrap().push(id),
            Err(e) => {
                sent.errors.fetch_add(1, Ordering::Relaxed);
                sent.first_error.lock().unwrap().get_or_insert_with(|| e.to_string());
            }
        }
        tokio::time::sleep(SEND_PACE).await;
    }
}

/// Producers and consumers of one scenario, running.
struct Run {
    queue: DelayQueue,
    log: Log,
    sent: Arc<Sent>,
    consumers: Vec<Consumer>,
    producers: Vec<JoinHandle<()>>,
    started: Instant,
}

/// What a scenario ended with, for its own extra checks.
struct Outcome {
    sent: usize,
    send_errors: usize,
    first_send_error: Option<String>,
    duplicates: usize,
}

impl Run {
    /// Starts the consumers, then producers that send until `until`.
    async fn start(queue: &DelayQueue, until: Instant) -> Run {
        let log = Log::default();
        let mut consumers = Vec::new();
        for _ in 0..CONSUMERS {
            let handler = recording(&log, |_msg: Message| async move {
                tokio::time::sleep(Duration::from_millis(1)).await;
                Ok(())
            });
            consumers.push(queue.start_consume(handler).await.unwrap());
        }
        let sent = Arc::new(Sent::default());
        let producers = (0..PRODUCERS)
            .map(|p| tokio::spawn(produce(queue.clone(), sent.clone(), p, until)))
            .collect();
        Run {
            queue: queue.clone(),
            log,
            sent,
            consumers,
            producers,
            started: Instant::now(),
        }
    }

    /// Waits for the producers and for every sent message to be handled,
    /// shuts the consumers down, checks what Redis holds (through `direct`,
    /// a client that bypasses any proxy), prints the FAULT line (ending
    /// with `detail()`) and asserts nothing was lost.
    async fn finish(self, scenario: &str, direct: &Client, faults: &str, detail: impl FnOnce() -> String) -> Outcome {
        for p in self.producers {
            p.await.unwrap();
        }
        let sent: Vec<MessageId> = self.sent.ok.lock().unwrap().clone();
        let log = self.log.clone();
        let all_handled = || {
            let handled = log.ids();
            sent.iter().all(|id| handled.contains(id))
        };
        wait_until(DRAIN_LIMIT, all_handled).await;
        let checker = queue_builder(self.queue.name(), direct, FETCH_INTERVAL)
            .build()
            .unwrap();
        let stats = wait_stats(&checker, WAIT, Counts::default()).await;
        for c in self.consumers {
            c.shutdown().await.unwrap();
        }
        let keys = all_keys(direct).await;
        let integrity = checker.check_integrity().await.unwrap();

        let handled = self.log.ids();
        let deliveries = self.log.len();
        let sent_set: HashSet<&MessageId> = sent.iter().collect();
        let lost: Vec<&MessageId> = sent.iter().filter(|id| !handled.contains(*id)).collect();
        // Handled but not recorded as sent: a send that failed after all
        // (reply lost on every attempt) yet was stored.
        let extra = handled.iter().filter(|id| !sent_set.contains(id)).count();
        let duplicates = deliveries - handled.len();
        let send_errors = self.sent.errors.load(Ordering::Relaxed);
        println!(
            "FAULT scenario={scenario} sent={} handled={} lost={} duplicates={duplicates} faults={faults} \
             deliveries={deliveries} send_errors={send_errors} extra={extra} elapsed={:.1}s {}",
            sent.len(),
            handled.len(),
            lost.len(),
            self.started.elapsed().as_secs_f64(),
            detail(),
        );
        if !lost.is_empty() {
            for id in lost.iter().take(5) {
                eprintln!(
                    "lost {id}: {}",
                    helpers::whereabouts(direct, self.queue.name(), id.as_str()).await
                );
            }
        }
        assert!(
            lost.is_empty(),
            "{scenario}: {} of {} sent messages never handled",
            lost.len(),
            sent.len()
        );
        assert_eq!(stats, Counts::default(), "{scenario}: the queue did not drain");
        assert!(keys.is_empty(), "{scenario}: keys left after shutdown: {keys:?}");
        assert!(integrity.is_clean(), "{scenario}: {integrity}");
        Outcome {
            sent: sent.len(),
            send_errors,
            first_send_error: self.sent.first_error.lock().unwrap().clone(),
            duplicates,
        }
    }
}

/// SIGKILL and restart of a durable Redis, twice, while sends and
/// consumption run. With `appendfsync always` every acknowledged write
/// survives; the clients reconnect on their own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restarted_mid_run_loses_nothing() {
    let (mut server, client, q) =
        start_queue_with(ServerOptions::durable(), "restart", FETCH_INTERVAL, configure).await;
    let started = Instant::now();
    let run = Run::start(&q, started + FAULT_WINDOW).await;
    let mut took = Vec::new();
    for at in [FAULT_WINDOW / 4, FAULT_WINDOW * 2 / 3] {
        tokio::time::sleep_until((started + at).into()).await;
        let down = Instant::now();
        server.restart().await;
        took.push(down.elapsed().as_millis());
    }
    let restarts = took.len();
    run.finish("restart", &client, &format!("{restarts}"), || {
        format!("restart_ms={took:?}")
    })
    .await;
}

/// Connections cut through a proxy at random moments: sometimes all at
/// once, mostly right after a request reached Redis (its reply swallowed),
/// which makes fred re-send scripts that already ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_cut_mid_run_lose_nothing() {
    let server = RedisServer::start().await;
    let proxy = Proxy::start(server.port()).await;
    let via_proxy = proxy.client().await;
    let direct = server.client().await;
    let q = configure(queue_builder("cuts", &via_proxy, FETCH_INTERVAL))
        .build()
        .unwrap();
    let until = Instant::now() + FAULT_WINDOW;
    let run = Run::start(&q, until).await;
    let mut rng = Rng::new();
    let (mut cut_all, mut swallow) = (0u64, 0u64);
    while Instant::now() < until {
        tokio::time::sleep(rng.millis(30, 200)).await;
        if rng.below(3) == 0 {
            proxy.cut_all();
            cut_all += 1;
        } else {
            proxy.cut_replies_once();
            swallow += 1;
        }
    }
    let faults = format!("{} cut_all={cut_all} swallow={swallow}", cut_all + swallow);
    let out = run
        .finish("cuts", &direct, &faults, || {
            format!(
                "connections_cut={} replies_swallowed={}",
                proxy.cuts(),
                proxy.swallowed()
            )
        })
        .await;
    // Read after the drain: a connection armed near the end is cut at its next reply.
    let cuts = proxy.cuts();
    assert!(cuts > 0, "no connection was cut");
    // A duplicate needs a delivery whose ack never took effect (every
    // re-send of it cut too, until its lease ran out) or a send re-run after
    // its message was already handled. Claims are replayed, not leased again.
    // So each cut connection costs at most what the consumers held then
    // (CONSUMERS x FETCH_LIMIT) plus the sends in flight (PRODUCERS).
    let bound = cuts as usize * (CONSUMERS * FETCH_LIMIT + PRODUCERS);
    assert!(
        out.duplicates <= bound,
        "{} duplicates for {cuts} cut connections (bound {bound})",
        out.duplicates
    );
    assert!(out.sent > 0);
}

/// `SCRIPT FLUSH` again and again while sends and consumption run: every
/// script call that meets NOSCRIPT is repeated as EVAL, so nothing fails,
/// and nothing is warned about.
#[tokio::test(flavor = "current_thread")]
async fn script_flush_mid_run_fails_nothing() {
    let logs = Logs::capture("flush");
    // Flushes lose no delivery, so the visibility timeout is not needed
    // here: long, so that no lease of a stalled process runs out (a warning).
    let (server, client, q) = start_queue_with(ServerOptions::default(), "flush", FETCH_INTERVAL, |b| {
        configure(b).max_consume_duration(WAIT)
    })
    .await;
    let until = Instant::now() + FAULT_WINDOW;
    let run = Run::start(&q, until).await;
    let mut rng = Rng::new();
    let mut flushes = 0;
    while Instant::now() < until {
        tokio::time::sleep(rng.millis(20, 120)).await;
        assert_eq!(server.raw_command(&["SCRIPT", "FLUSH"]), "OK");
        flushes += 1;
    }
    let out = run
        .finish("script_flush", &client, &format!("{flushes}"), || {
            format!("warnings={}", logs.warnings().len())
        })
        .await;
    assert_eq!(
        out.send_errors, 0,
        "{} sends failed, first: {:?}",
        out.send_errors, out.first_send_error
    );
    let warnings = logs.warnings();
    assert!(
        warnings.is_empty(),
        "warnings while scripts were flushed:\n{}",
        warnings.join("\n")
    );
    assert!(out.sent > 0);
}

/// The NOSCRIPT race of the test above on its own, in one second: a
/// `SCRIPT FLUSH` every ~0.2 ms on a connection of its own while one
/// producer sends. Loading the script and retrying EVALSHA would fail
/// again whenever the next flush lands in between; a send that meets
/// NOSCRIPT is repeated as EVAL instead, which cannot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_flush_storm_fails_no_send() {
    use std::io::{BufRead, BufReader, Write};
    use std::sync::atomic::AtomicBool;

    let (server, _client, q) = start_queue_with(ServerOptions::default(), "storm", FETCH_INTERVAL, configure).await;
    let stop = Arc::new(AtomicBool::new(false));
    let flusher = {
        let (stop, port) = (stop.clone(), server.port());
        std::thread::spawn(move || {
            let conn = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
            let (mut tx, mut rx) = (conn.try_clone().unwrap(), BufReader::new(conn));
            let mut flushes = 0;
            let mut reply = String::new();
            while !stop.load(Ordering::Relaxed) {
                tx.write_all(b"SCRIPT FLUSH\r\n").unwrap();
                reply.clear();
                rx.read_line(&mut reply).unwrap();
                assert_eq!(reply, "+OK\r\n");
                flushes += 1;
                std::thread::sleep(Duration::from_micros(200));
            }
            flushes
        })
    };
    let (mut ok, mut failed, mut first) = (0, 0, None);
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(1) {
        match q.send("x").delay(Duration::from_secs(60)).await {
            Ok(_) => ok += 1,
            Err(e) => {
                failed += 1;
                first.get_or_insert(e.to_string());
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    let flushes = flusher.join().unwrap();
    println!("FAULT scenario=script_flush_storm sent={ok} send_errors={failed} faults={flushes}");
    assert_eq!(failed, 0, "{failed} of {} sends failed, first: {first:?}", ok + failed);
}

/// A slow link (each reply chunk held back 5 ms) and handlers that take no
/// time: claims (256 ids per call while 512 slots are free) bring messages
/// faster than acks (128 per call, one call at a time) can report them.
/// Finished deliveries whose acks wait beyond a slack hold back further
/// claims, so no ack waits until its lease (`LAG_LEASE`) has run out:
/// every message is delivered once and no delivery fails. With the slack
/// made unreachable, the acks' lag grows with the backlog: 4,862 messages
/// were delivered twice, 5,241 deliveries failed.
/// Long enough that a loaded 2-core machine's stalls (hundreds of ms)
/// never outlast it; the lag of acks without the slack grows past it.
const LAG_LEASE: Duration = Duration::from_secs(1);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acks_held_up_by_a_slow_link_hold_back_claims_so_no_lease_runs_out() {
    const N: usize = 30_000;
    let server = RedisServer::start().await;
    let direct = server.client().await;
    let proxy = Proxy::start(server.port()).await;
    let via_proxy = proxy.client().await;
    let producer = queue_builder("acklag", &direct, FETCH_INTERVAL).build().unwrap();
    for _ in 0..N / 1000 {
        let batch = (0..1000).map(|_| NewMessage::new("x"));
        for sent in producer.send_batch(batch).await.unwrap() {
            sent.unwrap();
        }
    }
    proxy.delay_replies(Duration::from_millis(5));
    let q = queue_builder("acklag", &via_proxy, FETCH_INTERVAL)
        .concurrency(16)
        .fetch_limit(512)
        .max_consume_duration(LAG_LEASE)
        .build()
        .unwrap();
    let log = Log::default();
    let consumer = q.start_consume(recording(&log, |_| async { Ok(()) })).await.unwrap();
    let drained = wait_stats(&producer, Duration::from_secs(60), Counts::default()).await;
    consumer.shutdown().await.unwrap();
    assert_eq!(drained, Counts::default());
    let failed = producer.status().await.unwrap().totals.failed;
    let counts = log.counts();
    let twice = counts.values().filter(|&&n| n > 1).count();
    println!(
        "ACKLAG deliveries {} of {N} ids, {twice} delivered more than once, {failed} failed",
        log.len()
    );
    assert_eq!((counts.len(), twice, failed), (N, 0, 0));
    assert!(all_keys(&direct).await.is_empty());
}

/// A send whose reply is lost after its script ran: fred re-sends the
/// script on a new connection, and that run finds the message the first
/// one stored. It is the call's own message, so the send succeeds; a real
/// duplicate (another payload, or an earlier send) still fails with
/// `Duplicate`.
#[tokio::test]
async fn a_send_re_sent_after_a_lost_reply_is_not_its_own_duplicate() {
    let server = RedisServer::start().await;
    let proxy = Proxy::start(server.port()).await;
    let q = DelayQueue::builder("dup", proxy.client().await).build().unwrap();
    // The server caches the script now: the cut below meets the send itself.
    q.send("warm").await.unwrap();

    proxy.cut_replies_once();
    let sent = q.send("fresh").id("fresh-1").await;
    assert_eq!(proxy.swallowed(), 1, "no reply was lost");
    assert_eq!(sent.unwrap(), MessageId::from("fresh-1"));

    // An earlier send of the same message: a duplicate.
    let again = q.send("fresh").id("fresh-1").await;
    assert!(matches!(again, Err(delayqueue::Error::Duplicate { .. })), "{again:?}");
    // Another message under the id, its reply lost too: a duplicate.
    proxy.cut_replies_once();
    let other = q.send("other").id("fresh-1").await;
    assert_eq!(proxy.swallowed(), 2, "no reply was lost");
    assert!(matches!(other, Err(delayqueue::Error::Duplicate { .. })), "{other:?}");

    assert_eq!(q.counts().await.unwrap().live(), 2);
    let stored = server.raw_command(&["GET", "dq:{dup}:m:fresh-1"]);
    assert!(stored.ends_with(":fresh"), "{stored}");
}
