//! Reliability under faults, consumer-process side (issue 4: nothing lost):
//! worker processes (`examples/worker.rs`) killed with SIGKILL mid-handler,
//! workers whose clocks are an hour off, and a long soak that also flushes
//! scripts and restarts Redis.
//!
//! The workers are separate processes, each writing a ledger: one line per
//! delivery it handled, written before the handler returns `Ok` and so
//! before the ack. The checks compare the ledgers with what the test sent,
//! independently of the queue's own bookkeeping: every sent id handled at
//! least once, duplicates only where a fault explains them, and afterwards
//! a drained queue with no key left. Each scenario prints one `FAULT ...`
//! line (see it with `--nocapture`); `FAULT_SEED=<n>` replays a run's
//! random choices.
//!
//! The soak is `#[ignore]`d; `scripts/soak.sh` runs it for `SOAK_SECS`.

mod helpers;
use delayqueue_test_support as support;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use delayqueue::{Counts, DelayQueue, Error, Event, HandlerError, Message, MessageState, NewMessage, MAX_RETRY_COUNT};
use fred::clients::Client;
use fred::prelude::*;
use helpers::worker::{libfaketime, read_ledgers, Delivery, Worker, WorkerOptions};
use support::{all_keys, wait_until, RedisServer, ServerOptions, WAIT};

/// xorshift64*: fault timing only needs to vary, not to be good.
struct Rng(u64);

impl Rng {
    /// Seeded from `FAULT_SEED`, else from the clock.
    fn seed() -> u64 {
        std::env::var("FAULT_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64)
    }

    fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `lo..hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo).max(1)
    }

    fn ms(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(self.range(lo, hi))
    }
}

/// Redis's clock in ms.
async fn redis_time_ms(client: &Client) -> u64 {
    let t: Vec<String> = client.custom(fred::cmd!("TIME"), Vec::<String>::new()).await.unwrap();
    t[0].parse::<u64>().unwrap() * 1000 + t[1].parse::<u64>().unwrap() / 1000
}

/// Stops every worker with SIGTERM and asserts each exits 0.
async fn terminate_all(workers: &mut [Worker]) {
    for w in workers.iter_mut() {
        let status = w.terminate(WAIT).await;
        assert!(
            status.is_some_and(|s| s.success()),
            "worker {} did not stop cleanly on SIGTERM ({status:?}); log:\n{}",
            w.opts.ledger.display(),
            w.log_tail(30)
        );
    }
}

/// After the workers stopped: the queue is empty, no key is left (a killed
/// worker's claim receipt expires after one visibility timeout, hence the
/// wait) and the integrity check is clean.
async fn assert_nothing_left(queue: &DelayQueue, client: &Client, limit: Duration) {
    assert_eq!(queue.counts().await.unwrap(), Counts::default());
    let end = Instant::now() + limit;
    let mut keys = all_keys(client).await;
    while !keys.is_empty() && Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(50)).await;
        keys = all_keys(client).await;
    }
    assert!(keys.is_empty(), "keys left after the queue drained: {keys:?}");
    let report = queue.check_integrity().await.unwrap();
    assert!(report.is_clean(), "integrity: {report}");
}

/// Polls the ledgers (and the stats) until every id in `sent` was handled
/// and the queue is empty, or `limit` passes. Returns the deliveries by id.
async fn wait_drained(
    queue: &DelayQueue,
    ledgers: &[PathBuf],
    sent: &HashSet<String>,
    limit: Duration,
) -> HashMap<String, Vec<Delivery>> {
    let end = Instant::now() + limit;
    loop {
        let (by_id, _) = read_ledgers(ledgers.iter().map(PathBuf::as_path));
        let all_handled = sent.iter().all(|id| by_id.contains_key(id));
        // Stats may fail while Redis restarts; then look again.
        let empty = all_handled
            && matches!(
                tokio::time::timeout(Duration::from_secs(5), queue.counts()).await,
                Ok(Ok(s)) if s == Counts::default()
            );
        if empty || Instant::now() > end {
            return by_id;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Ids sent but in no ledger, with where the queue holds each (first 5).
async fn lost_ids(
    client: &Client,
    queue: &str,
    sent: &HashSet<String>,
    by_id: &HashMap<String, Vec<Delivery>>,
) -> Vec<String> {
    let mut lost: Vec<String> = sent.iter().filter(|id| !by_id.contains_key(*id)).cloned().collect();
    lost.sort();
    for id in lost.iter().take(5) {
        eprintln!("lost {id}: {}", helpers::whereabouts(client, queue, id).await);
    }
    lost
}

/// Counts the WARN and ERROR lines in the workers' logs (stderr) and
/// prints the first few errors: faults cause warnings, nothing should
/// cause an error. With `FAULT_KEEP=<dir>`, copies every log and ledger
/// there for a post-mortem (the server's dir they live in is removed).
fn log_summary<'a>(workers: impl IntoIterator<Item = &'a Worker>) -> String {
    let keep = std::env::var_os("FAULT_KEEP").map(PathBuf::from);
    let (mut warns, mut errors) = (0, Vec::new());
    for w in workers {
        if let Some(keep) = &keep {
            std::fs::create_dir_all(keep).unwrap();
            for f in [&w.opts.log, &w.opts.ledger] {
                let _ = std::fs::copy(f, keep.join(f.file_name().unwrap()));
            }
        }
        let text = std::fs::read_to_string(&w.opts.log).unwrap_or_default();
        warns += text.lines().filter(|l| l.contains(" WARN ")).count();
        errors.extend(text.lines().filter(|l| l.contains(" ERROR ")).map(String::from));
    }
    for e in errors.iter().take(5) {
        eprintln!("worker error: {e}");
    }
    format!("worker_log_warn={warns} worker_log_error={}", errors.len())
}

/// Sends `n` messages due over `0..spread_ms` ms (payload: the index) in one batch; returns their ids.
async fn send_spread(queue: &DelayQueue, n: u64, spread_ms: u64) -> Vec<String> {
    let msgs = (0..n).map(|i| NewMessage::new(i.to_string()).delay(Duration::from_millis(i * spread_ms / n)));
    queue
        .send_batch(msgs)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.unwrap().as_str().to_string())
        .collect()
}

// ---------------------------------------------------------------------------
// a. Workers killed with SIGKILL mid-handler
// ---------------------------------------------------------------------------

const KILL_MESSAGES: u64 = 2_000;
const KILL_WORKERS: usize = 3;
const KILLS: usize = 5;
const KILL_CONCURRENCY: usize = 4;
/// Messages a worker holds claimed at most (handlers not yet returned).
const KILL_FETCH_LIMIT: usize = 16;
/// Returned handlers whose ack had not reached Redis when the process
/// died: those that finished during the last ack round trip or two. A
/// handful at most in practice; generous, so only a real leak trips it.
const ACK_SLACK: usize = 32;

/// Three workers drain 2,000 messages while, at random points of the
/// progress, one of them is SIGKILLed and replaced, five times. What a
/// killed worker had claimed comes back after the visibility timeout (3 s),
/// so nothing is lost; a message whose ledger line it had written but
/// whose ack it had not sent is handled again: a duplicate, and only
/// killed workers may cause one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkilled_workers_lose_nothing() {
    helpers::worker::worker_bin();
    let started = Instant::now();
    let seed = Rng::seed();
    let mut rng = Rng::new(seed);
    let server = RedisServer::start().await;
    let client = server.client().await;
    // Five kills could in theory hit one message five times: room for all.
    let queue = DelayQueue::builder("kill", client.clone())
        .default_retry_count(20)
        .build()
        .unwrap();
    let (url, dir) = (server.url(), server.dir().to_path_buf());
    let opts = |n: usize| WorkerOptions {
        concurrency: KILL_CONCURRENCY,
        // Half the work before the ledger line, half after: a kill in the
        // second half leaves a handled message unacked (a duplicate).
        handler_ms: 5,
        after_ms: 5,
        // Long enough that a live worker on a loaded machine keeps its
        // leases: only killed workers may cause duplicates.
        max_consume_ms: 3_000,
        fetch_interval_ms: 100,
        fetch_limit: Some(KILL_FETCH_LIMIT),
        ..WorkerOptions::new(&url, "kill", &dir, &format!("w{n}"))
    };
    let mut workers = futures::future::join_all((0..KILL_WORKERS).map(|n| Worker::spawn(opts(n)))).await;
    let mut spawned = KILL_WORKERS;

    let sent: HashSet<String> = send_spread(&queue, KILL_MESSAGES, 1_000).await.into_iter().collect();
    assert_eq!(sent.len() as u64, KILL_MESSAGES);

    // Kill points: random handled counts between 5% and 90% of the set, so
    // every kill hits a worker while there is work.
    let mut points: Vec<u64> = (0..KILLS)
        .map(|_| rng.range(KILL_MESSAGES / 20, KILL_MESSAGES * 9 / 10))
        .collect();
    points.sort_unstable();
    let mut killed: Vec<Worker> = Vec::new();
    // Per kill: the victim's ledger lines, and whether it grew in the last 10 ms.
    let mut kill_notes: Vec<String> = Vec::new();
    let mut mid_handler = 0;
    let kill_deadline = Instant::now() + WAIT;
    for point in points {
        let ledgers: Vec<PathBuf> = workers.iter().chain(&killed).map(|w| w.opts.ledger.clone()).collect();
        while Instant::now() < kill_deadline {
            let (by_id, _) = read_ledgers(ledgers.iter().map(PathBuf::as_path));
            if by_id.len() as u64 >= point {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let victim = rng.range(0, workers.len() as u64) as usize;
        let mut w = workers.swap_remove(victim);
        let before = helpers::worker::read_ledger(&w.opts.ledger).0.len();
        tokio::time::sleep(Duration::from_millis(10)).await;
        let at_kill = helpers::worker::read_ledger(&w.opts.ledger).0.len();
        w.kill();
        mid_handler += usize::from(at_kill > before);
        kill_notes.push(format!(
            "{}@{at_kill}",
            w.opts.ledger.file_stem().unwrap().to_string_lossy()
        ));
        killed.push(w);
        workers.push(Worker::spawn(opts(spawned)).await);
        spawned += 1;
    }

    let ledgers: Vec<PathBuf> = workers.iter().chain(&killed).map(|w| w.opts.ledger.clone()).collect();
    let by_id = wait_drained(&queue, &ledgers, &sent, 2 * WAIT).await;
    let lost = lost_ids(&client, "kill", &sent, &by_id).await;
    let stats = queue.counts().await.unwrap();
    terminate_all(&mut workers).await;
    let (by_id_final, partial) = read_ledgers(ledgers.iter().map(PathBuf::as_path));
    assert_eq!(partial, 0, "a ledger ends in a torn line");

    // Duplicates: order each id's deliveries by attempt. Every delivery but
    // the last was not acked, which only a killed worker explains.
    let killed_names: HashSet<String> = killed
        .iter()
        .map(|w| w.opts.ledger.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    let mut dups_by_victim: BTreeMap<String, usize> = BTreeMap::new();
    let mut unexplained = Vec::new();
    let mut deliveries = 0;
    // Ids handled after a redelivery: what the kills took from the victims.
    let mut redelivered = 0;
    for (id, ds) in &by_id_final {
        deliveries += ds.len();
        redelivered += usize::from(ds.iter().any(|d| d.attempt > 1));
        let mut attempts: Vec<u32> = ds.iter().map(|d| d.attempt).collect();
        attempts.sort_unstable();
        attempts.dedup();
        assert_eq!(
            attempts.len(),
            ds.len(),
            "{id} handled twice with one attempt number: {ds:?}"
        );
        let last = ds.iter().map(|d| d.attempt).max().unwrap();
        for d in ds.iter().filter(|d| d.attempt != last) {
            match killed_names.contains(&d.worker) {
                true => *dups_by_victim.entry(d.worker.clone()).or_default() += 1,
                false => unexplained.push(d.clone()),
            }
        }
    }
    let duplicates = deliveries - by_id_final.len();
    let unknown = by_id_final.keys().filter(|id| !sent.contains(*id)).count();
    let late = deliveries - by_id.values().map(Vec::len).sum::<usize>();
    println!(
        "FAULT scenario=sigkill sent={} handled={} lost={} duplicates={duplicates} faults=sigkill:{} \
         redelivered={redelivered} mid_handler={mid_handler} kills=[{}] dups_by_victim={dups_by_victim:?} {} \
         seed={seed} elapsed={:.1}s",
        sent.len(),
        by_id_final.len(),
        lost.len(),
        killed.len(),
        kill_notes.join(","),
        log_summary(workers.iter().chain(&killed)),
        started.elapsed().as_secs_f64()
    );
    assert!(
        lost.is_empty(),
        "{} of {} messages never handled",
        lost.len(),
        sent.len()
    );
    assert_eq!(unknown, 0, "handled ids that were never sent");
    assert_eq!(stats, Counts::default(), "queue not drained");
    assert_eq!(late, 0, "deliveries after the queue had drained");
    assert!(
        redelivered > 0,
        "no kill took a claimed message: the kills missed the work"
    );
    assert!(
        unexplained.is_empty(),
        "redelivered after a live worker handled it (its ack missed the lease): {:?}",
        &unexplained[..unexplained.len().min(5)]
    );
    // A victim's duplicates are deliveries it held when it died: at most
    // the fetch limit claimed, plus handled ones whose ack was in flight.
    for (victim, n) in &dups_by_victim {
        assert!(
            *n <= KILL_FETCH_LIMIT + ACK_SLACK,
            "{victim}: {n} duplicates, more than it can have held ({KILL_FETCH_LIMIT} + {ACK_SLACK})"
        );
    }
    assert_nothing_left(&queue, &client, WAIT).await;
}

/// A worker is SIGKILLed mid-handler on a message's only delivery. When its
/// lease runs out, another consumer's sweep takes the delivery back and,
/// with no deliveries left, buries it: its events say so per message
/// (`TimedOut`, then `Dead` with the id and reason "timeout"), and the
/// dead letter is there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_worker_s_last_delivery_is_buried_with_a_dead_event() {
    helpers::worker::worker_bin();
    let server = RedisServer::start().await;
    let client = server.client().await;
    let queue = DelayQueue::builder("lastgo", client.clone())
        .default_retry_count(0)
        .fetch_interval(Duration::from_millis(100))
        .build()
        .unwrap();
    let id = queue.send("x").await.unwrap();
    let (url, dir) = (server.url(), server.dir().to_path_buf());
    let mut worker = Worker::spawn(WorkerOptions {
        handler_ms: 0,
        after_ms: 60_000,
        max_consume_ms: 500,
        ..WorkerOptions::new(&url, "lastgo", &dir, "w")
    })
    .await;
    let ledger = worker.opts.ledger.clone();
    wait_until(WAIT, || !helpers::worker::read_ledger(&ledger).0.is_empty()).await;
    worker.kill();
    assert_eq!(
        helpers::worker::read_ledger(&ledger).0.len(),
        1,
        "the worker took the message"
    );

    let mut events = queue.events();
    let consumer = queue
        .start_consume(|_msg: Message| async { Ok::<(), HandlerError>(()) })
        .await
        .unwrap();
    let mut seen = Vec::new();
    let end = Instant::now() + WAIT;
    while seen.len() < 2 && Instant::now() < end {
        if let Ok(Ok(e)) = tokio::time::timeout(Duration::from_millis(100), events.recv()).await {
            seen.push(e);
        }
    }
    consumer.shutdown().await.unwrap();
    let want = vec![
        Event::TimedOut { count: 1, dead: 1 },
        Event::Dead {
            id: id.clone(),
            attempt: 1,
            reason: "timeout".into(),
        },
    ];
    assert_eq!(seen, want);
    let dead = queue.get(&id).await.unwrap().expect("the dead letter is kept");
    assert_eq!(
        (dead.state, dead.attempts, dead.last_error.as_deref()),
        (MessageState::Dead, 1, Some("timeout"))
    );
}

// ---------------------------------------------------------------------------
// b. Two workers with clocks an hour off
// ---------------------------------------------------------------------------

const SKEW_MESSAGES: u64 = 300;

/// Time comes from Redis, so a worker's own clock does not matter: one
/// worker runs an hour ahead, one an hour behind (libfaketime). Messages
/// due 200-1500 ms ahead are all delivered, none before its due time by
/// Redis's clock, each once, and both workers take a share.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skewed_worker_clocks_change_nothing() {
    helpers::worker::worker_bin();
    let started = Instant::now();
    // Fails here, with how to install it, when faketime is missing.
    libfaketime();
    let server = RedisServer::start().await;
    let client = server.client().await;
    let queue = DelayQueue::builder("skew", client.clone()).build().unwrap();
    let (url, dir) = (server.url(), server.dir().to_path_buf());
    let opts = |name: &str, offset: &str| WorkerOptions {
        concurrency: 2,
        handler_ms: 5,
        max_consume_ms: 5_000,
        record_redis_time: true,
        clock_offset: Some(offset.to_string()),
        ..WorkerOptions::new(&url, "skew", &dir, name)
    };
    let mut workers = futures::future::join_all([opts("ahead", "+1h"), opts("behind", "-1h")].map(Worker::spawn)).await;
    // The offsets took effect (else this test would prove nothing).
    let now_ms = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as i64;
    for (w, offset) in workers.iter().zip([3_600_000i64, -3_600_000]) {
        let skew = w.clock_ms().expect("worker banner has clock_ms") as i64 - now_ms;
        assert!(
            (skew - offset).abs() < 60_000,
            "worker clock is {skew} ms off, expected about {offset}: faketime not in effect"
        );
    }

    // Due times by Redis's clock: the pending zset's scores, read right
    // after the send (the earliest is due 200 ms later, so all still wait).
    let t0 = redis_time_ms(&client).await;
    let msgs = (0..SKEW_MESSAGES).map(|i| {
        let delay = 200 + i * 1300 / SKEW_MESSAGES;
        NewMessage::new((t0 + delay).to_string()).delay(Duration::from_millis(delay))
    });
    let ids: Vec<String> = queue
        .send_batch(msgs)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.unwrap().as_str().to_string())
        .collect();
    let scores: Vec<Option<f64>> = client.zmscore("dq:{skew}:pending", ids.clone()).await.unwrap();
    // Fallback for one promoted already: the due time is no earlier than t0 + delay.
    let due: HashMap<String, u64> = ids
        .iter()
        .zip(&scores)
        .enumerate()
        .map(|(i, (id, score))| {
            let floor = t0 + 200 + i as u64 * 1300 / SKEW_MESSAGES;
            (id.clone(), score.map_or(floor, |s| s as u64))
        })
        .collect();
    let exact = scores.iter().filter(|s| s.is_some()).count();
    let sent: HashSet<String> = ids.iter().cloned().collect();

    let ledgers: Vec<PathBuf> = workers.iter().map(|w| w.opts.ledger.clone()).collect();
    let by_id = wait_drained(&queue, &ledgers, &sent, WAIT).await;
    let lost = lost_ids(&client, "skew", &sent, &by_id).await;
    terminate_all(&mut workers).await;

    let mut early = Vec::new();
    let mut lateness: Vec<i64> = Vec::new();
    let mut share: BTreeMap<String, usize> = BTreeMap::new();
    let mut deliveries = 0;
    for (id, ds) in &by_id {
        for d in ds {
            deliveries += 1;
            *share.entry(d.worker.clone()).or_default() += 1;
            let at = d.redis_ms.expect("ledger line without Redis time") as i64;
            let late = at - due[id] as i64;
            lateness.push(late);
            if late < 0 {
                early.push((id.clone(), late, d.worker.clone()));
            }
        }
    }
    lateness.sort_unstable();
    let pct = |p: f64| {
        let i = (lateness.len().saturating_sub(1) as f64 * p) as usize;
        lateness.get(i).copied().unwrap_or(0)
    };
    let duplicates = deliveries - by_id.len();
    println!(
        "FAULT scenario=skewed_clocks sent={} handled={} lost={} duplicates={duplicates} faults=clock+1h:1,clock-1h:1 \
         early={} share={share:?} late_ms_p50={} p99={} max={} exact_due={exact} {} elapsed={:.1}s",
        sent.len(),
        by_id.len(),
        lost.len(),
        early.len(),
        pct(0.5),
        pct(0.99),
        pct(1.0),
        log_summary(&workers),
        started.elapsed().as_secs_f64()
    );
    assert!(
        lost.is_empty(),
        "{} of {} messages never handled",
        lost.len(),
        sent.len()
    );
    assert!(
        early.is_empty(),
        "delivered before due by Redis's clock (id, ms, worker): {early:?}"
    );
    assert_eq!(duplicates, 0, "a skewed clock caused a redelivery");
    for w in ["ahead", "behind"] {
        let n = share.get(w).copied().unwrap_or(0);
        assert!(n as u64 >= SKEW_MESSAGES / 10, "worker {w} handled only {n}: {share:?}");
    }
    assert_nothing_left(&queue, &client, WAIT).await;
}

// ---------------------------------------------------------------------------
// c. Long soak: kills, script flushes and Redis restarts at random
// ---------------------------------------------------------------------------

const SOAK_WORKERS: usize = 3;
const SOAK_PRODUCERS: usize = 3;

/// What the producers sent: ids whose send returned `Ok` (or Duplicate:
/// a re-sent script found the message its first run stored), and ids
/// whose send failed and may or may not be stored.
#[derive(Default)]
struct Sent {
    ok: Mutex<HashSet<String>>,
    uncertain: Mutex<HashSet<String>>,
    dup_replies: AtomicUsize,
}

/// One producer: batches of 1-20 messages due 0-2 s ahead, with ids
/// `p<n>-<seq>` so a failed send can be recognised in the ledgers.
async fn produce(queue: DelayQueue, p: usize, seed: u64, sent: Arc<Sent>, stop: Arc<AtomicBool>) {
    let mut rng = Rng::new(seed);
    let mut seq = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let n = rng.range(1, 21);
        let ids: Vec<String> = (seq..seq + n).map(|i| format!("p{p}-{i}")).collect();
        seq += n;
        let msgs: Vec<NewMessage> = ids
            .iter()
            .map(|id| NewMessage::new("soak").delay(rng.ms(0, 2_000)).id(id.as_str()))
            .collect();
        match tokio::time::timeout(Duration::from_secs(20), queue.send_batch(msgs)).await {
            Ok(Ok(results)) => {
                for (id, r) in ids.into_iter().zip(results) {
                    match r {
                        Ok(_) => sent.ok.lock().unwrap().insert(id),
                        Err(Error::Duplicate { .. }) => {
                            sent.dup_replies.fetch_add(1, Ordering::Relaxed);
                            sent.ok.lock().unwrap().insert(id)
                        }
                        Err(_) => sent.uncertain.lock().unwrap().insert(id),
                    };
                }
            }
            _ => sent.uncertain.lock().unwrap().extend(ids),
        }
        tokio::time::sleep(rng.ms(30, 120)).await;
    }
}

/// Runs for `SOAK_SECS` (default 120): producers send all along, three
/// workers consume, and every 1-4 s a fault strikes: a worker SIGKILLed and
/// replaced, `SCRIPT FLUSH`, or a crash-restart of Redis (AOF, fsync always).
/// Then the queue drains and the ledgers must hold every sent id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "long soak; run with scripts/soak.sh (SOAK_SECS, default 120)"]
async fn soak() {
    let secs: u64 = std::env::var("SOAK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(120);
    // Built first (a release build takes a while), so it does not eat the soak's time.
    helpers::worker::worker_bin();
    let started = Instant::now();
    let seed = Rng::seed();
    let mut rng = Rng::new(seed);
    let mut server = RedisServer::start_with(ServerOptions::durable()).await;
    let client = server.client().await;
    let queue = DelayQueue::builder("soak", client.clone())
        .default_retry_count(MAX_RETRY_COUNT)
        .build()
        .unwrap();
    let (url, dir) = (server.url(), server.dir().to_path_buf());
    let opts = |n: usize| WorkerOptions {
        concurrency: 4,
        handler_ms: 5,
        after_ms: 5,
        max_consume_ms: 1_000,
        fetch_interval_ms: 100,
        fetch_limit: Some(32),
        record_redis_time: true,
        ..WorkerOptions::new(&url, "soak", &dir, &format!("w{n}"))
    };
    let mut workers = futures::future::join_all((0..SOAK_WORKERS).map(|n| Worker::spawn(opts(n)))).await;
    let mut spawned = SOAK_WORKERS;
    let mut killed: Vec<Worker> = Vec::new();

    let sent = Arc::new(Sent::default());
    let stop = Arc::new(AtomicBool::new(false));
    let producers: Vec<_> = (0..SOAK_PRODUCERS)
        .map(|p| {
            tokio::spawn(produce(
                queue.clone(),
                p,
                seed.wrapping_add(p as u64 + 1),
                sent.clone(),
                stop.clone(),
            ))
        })
        .collect();

    let mut faults: BTreeMap<&str, usize> = BTreeMap::new();
    let end = started + Duration::from_secs(secs);
    let mut next_report = started + Duration::from_secs(10);
    while Instant::now() + Duration::from_secs(1) < end {
        tokio::time::sleep(rng.ms(1_000, 4_000).min(end.saturating_duration_since(Instant::now()))).await;
        let kind = match rng.range(0, 4) {
            0 | 1 => {
                let victim = rng.range(0, workers.len() as u64) as usize;
                let mut w = workers.swap_remove(victim);
                w.kill();
                killed.push(w);
                workers.push(Worker::spawn(opts(spawned)).await);
                spawned += 1;
                "sigkill"
            }
            2 => {
                assert_eq!(server.raw_command(&["SCRIPT", "FLUSH"]), "OK");
                "script_flush"
            }
            _ => {
                server.restart().await;
                "redis_restart"
            }
        };
        *faults.entry(kind).or_default() += 1;
        if Instant::now() >= next_report {
            next_report = Instant::now() + Duration::from_secs(10);
            let n = sent.ok.lock().unwrap().len();
            println!("soak {}s: sent {n}, faults {faults:?}", started.elapsed().as_secs());
        }
    }
    stop.store(true, Ordering::Relaxed);
    for p in producers {
        p.await.unwrap();
    }

    let sent_ok = sent.ok.lock().unwrap().clone();
    let uncertain = sent.uncertain.lock().unwrap().clone();
    let ledgers: Vec<PathBuf> = workers.iter().chain(&killed).map(|w| w.opts.ledger.clone()).collect();
    let drain_started = Instant::now();
    let by_id = wait_drained(&queue, &ledgers, &sent_ok, Duration::from_secs(60)).await;
    let drain = drain_started.elapsed();
    let lost = lost_ids(&client, "soak", &sent_ok, &by_id).await;
    let stats = queue.counts().await.unwrap();
    terminate_all(&mut workers).await;
    let (by_id, partial) = read_ledgers(ledgers.iter().map(PathBuf::as_path));

    let deliveries: usize = by_id.values().map(Vec::len).sum();
    let duplicates = deliveries - by_id.len();
    let uncertain_handled = uncertain.iter().filter(|id| by_id.contains_key(*id)).count();
    let unknown = by_id
        .keys()
        .filter(|id| !sent_ok.contains(*id) && !uncertain.contains(*id))
        .count();
    // For duplicates: from the first delivery to the last, by Redis's clock.
    let max_redelivery = by_id
        .values()
        .filter(|ds| ds.len() > 1)
        .map(|ds| {
            let ms = ds.iter().map(|d| d.redis_ms.unwrap());
            ms.clone().max().unwrap() - ms.min().unwrap()
        })
        .max()
        .unwrap_or(0);
    let faults_text = faults
        .iter()
        .map(|(k, n)| format!("{k}:{n}"))
        .collect::<Vec<_>>()
        .join(",");
    println!(
        "SOAK secs={secs} sent={} uncertain={} (handled {uncertain_handled}) dup_replies={} \
         faults={faults_text} deliveries={deliveries} handled={} lost={} duplicates={duplicates} \
         max_redelivery_ms={max_redelivery} drain={:.1}s workers_spawned={spawned} {} seed={seed}",
        sent_ok.len(),
        uncertain.len(),
        sent.dup_replies.load(Ordering::Relaxed),
        by_id.len(),
        lost.len(),
        drain.as_secs_f64(),
        log_summary(workers.iter().chain(&killed)),
    );
    println!(
        "FAULT scenario=soak sent={} handled={} lost={} duplicates={duplicates} faults={faults_text} elapsed={:.1}s",
        sent_ok.len(),
        by_id.len(),
        lost.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(
        lost.is_empty(),
        "{} of {} messages never handled",
        lost.len(),
        sent_ok.len()
    );
    assert_eq!(unknown, 0, "handled ids that were never sent");
    assert_eq!(partial, 0, "a ledger ends in a torn line");
    assert_eq!(stats, Counts::default(), "queue not drained");
    assert_nothing_left(&queue, &client, WAIT).await;
}
