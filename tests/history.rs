//! A seeded, randomized history checker: drives the real library against a
//! real `redis-server` (AOF, `appendfsync always`) through a proxy that can
//! cut connections, with random sends, cancels, reschedules and requeues,
//! two or three consumers with random handler outcomes, and random faults;
//! records the whole history and checks it against the at-least-once model
//! in `tests/support/history_model.rs` (crate `delayqueue-test-support`), along the way and at the end.
//!
//! The seed is printed at the start; `HISTORY_SEED=<n>` replays its choices
//! (the timing of a run differs, so a failure may need a few replays).
//! With no knob set it is the run CI makes: about a minute, every fault,
//! every handler kind, a fresh seed. Knobs, each optional:
//!
//! - `HISTORY_SECS`: how long operations and faults run (default 45).
//! - `HISTORY_FAULTS`: comma list of `pause,cut,crash,stop,restart,flush,outage`,
//!   `all` (default) or `none`.
//! - `HISTORY_HANDLERS`: comma list of `ok,error,panic,retry,skip,slow`,
//!   `all` (default). `ok` is always among them in the final drain.
//! - `HISTORY_RENEW`: `on`, `off` or `mixed` (default): whether consumers
//!   renew leases (`handler_timeout` > `max_consume_duration`).
//! - `HISTORY_CONSUMERS` (2 or 3), `HISTORY_CONCURRENCY` (handlers per
//!   consumer): from the seed unless set.
//! - `HISTORY_BURST=<n>`: once, a backlog of `n` messages due at once,
//!   followed by a graceful stop of a consumer.
//! - `HISTORY_ALLOW`: comma list of rule names (see the model) whose
//!   violations are printed at the end but do not fail the run, to look
//!   past a known defect for others. For debugging only, never in CI.
//!
//! `scripts/soak.sh history` runs it over and over with fresh seeds.

use delayqueue_test_support as support;
use support::history_model as model;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use delayqueue::fred::clients::Client;
use delayqueue::fred::prelude::{Builder, ClientLike, Config, ReconnectPolicy};
use delayqueue::{
    DelayQueue, DelayQueueBuilder, Event, Handler, HandlerError, Message, MessageId, MessageState, NewMessage,
    RetryAfter, SkipRetry,
};
use model::{Delivery, FaultRec, Final, History, IdOp, Limits, Outcome, SendRec};
use support::proxy::Proxy;
use support::{all_keys, wait_until, RedisServer, ServerOptions};
use tokio::sync::oneshot;

const QUEUE: &str = "history";
const INJECTED_PANIC: &str = "injected panic";
/// The visibility timeout. Faults and slow handlers are sized from it.
const LEASE: Duration = Duration::from_secs(2);
/// Shorter than the shorter stalls, so commands time out while Redis is
/// paused (a reply lost to a time-out, not only to a cut).
const COMMAND_TIMEOUT: Duration = Duration::from_millis(500);
const FETCH_INTERVAL: Duration = Duration::from_millis(100);
const BACKOFF: Duration = Duration::from_millis(50);
const DEFAULT_SECS: u64 = 45;
/// Longest a send is delayed or rescheduled.
const MAX_DELAY_MS: u64 = 1500;
/// Most operations of one run, whatever `HISTORY_SECS`.
const MAX_STEPS: usize = 20_000;
/// Generous limits for the waits on conditions.
const DRAIN_LIMIT: Duration = Duration::from_secs(120);
const CONSUMER_LIMIT: Duration = Duration::from_secs(60);
/// How often the history is checked while the run goes on.
const CHECK_EVERY: Duration = Duration::from_secs(4);

/// splitmix64: small, seedable, good enough to choose with.
#[derive(Clone)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// One of `items`, each as likely as its weight.
    fn weighted<T: Copy>(&mut self, items: &[(T, u64)]) -> T {
        let total: u64 = items.iter().map(|i| i.1).sum();
        let mut at = self.below(total);
        for (item, w) in items {
            if at < *w {
                return *item;
            }
            at -= w;
        }
        items[0].0
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FaultKind {
    Pause,
    Cut,
    Crash,
    Stop,
    Restart,
    Flush,
    Outage,
}

const FAULTS: [(&str, FaultKind); 7] = [
    ("pause", FaultKind::Pause),
    ("cut", FaultKind::Cut),
    ("crash", FaultKind::Crash),
    ("stop", FaultKind::Stop),
    ("restart", FaultKind::Restart),
    ("flush", FaultKind::Flush),
    ("outage", FaultKind::Outage),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HandlerKind {
    Ok,
    Error,
    Panic,
    Retry,
    Skip,
    Slow,
}

const HANDLERS: [(&str, HandlerKind, u64); 6] = [
    ("ok", HandlerKind::Ok, 8),
    ("error", HandlerKind::Error, 1),
    ("panic", HandlerKind::Panic, 1),
    ("retry", HandlerKind::Retry, 1),
    ("skip", HandlerKind::Skip, 1),
    ("slow", HandlerKind::Slow, 1),
];

/// The run's settings: from the environment, else from the seed.
#[derive(Debug, Clone)]
struct Knobs {
    seed: u64,
    secs: u64,
    faults: Vec<FaultKind>,
    handlers: Vec<(HandlerKind, u64)>,
    /// Per consumer: whether it renews leases.
    renews: Vec<bool>,
    concurrency: usize,
    default_retry_count: u32,
    burst: usize,
    /// Rules whose violations are printed but do not fail the run.
    allow: Vec<String>,
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// The names in comma list `var` (or all of `table` for `all`/unset).
fn chosen<T: Copy>(var: &str, table: &[(&str, T)]) -> Vec<T> {
    let Some(list) = env(var) else {
        return table.iter().map(|t| t.1).collect();
    };
    if list == "all" {
        return table.iter().map(|t| t.1).collect();
    }
    if list == "none" {
        return Vec::new();
    }
    list.split(',')
        .map(|name| {
            table
                .iter()
                .find(|t| t.0 == name.trim())
                .unwrap_or_else(|| {
                    panic!(
                        "{var}: unknown name {name:?}; choose from {:?}",
                        table.iter().map(|t| t.0).collect::<Vec<_>>()
                    )
                })
                .1
        })
        .collect()
}

fn knobs() -> Knobs {
    let seed = env("HISTORY_SEED").map_or_else(
        || SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64,
        |s| s.parse().expect("HISTORY_SEED must be a number"),
    );
    let mut rng = Rng(seed);
    let secs = env("HISTORY_SECS").map_or(DEFAULT_SECS, |s| s.parse().expect("HISTORY_SECS must be a number"));
    let faults = chosen("HISTORY_FAULTS", &FAULTS);
    let table: Vec<(&str, (HandlerKind, u64))> = HANDLERS.iter().map(|h| (h.0, (h.1, h.2))).collect();
    let handlers = chosen("HISTORY_HANDLERS", &table);
    assert!(!handlers.is_empty(), "HISTORY_HANDLERS names no handler");
    let consumers = env("HISTORY_CONSUMERS").map_or_else(|| rng.range(2, 3) as usize, |s| s.parse().unwrap());
    let renews = (0..consumers)
        .map(|i| match env("HISTORY_RENEW").as_deref() {
            Some("on") => true,
            Some("off") => false,
            // Mixed: one of each for sure, the third at random.
            _ => match i {
                0 => true,
                1 => false,
                _ => rng.chance(50),
            },
        })
        .collect();
    let concurrency = env("HISTORY_CONCURRENCY").map_or_else(|| rng.range(1, 4) as usize, |s| s.parse().unwrap());
    let burst = env("HISTORY_BURST").map_or(0, |s| s.parse().unwrap());
    Knobs {
        seed,
        secs,
        faults,
        handlers,
        renews,
        concurrency,
        default_retry_count: rng.range(1, 3) as u32,
        burst,
        allow: env("HISTORY_ALLOW")
            .map(|a| a.split(',').map(|r| r.trim().to_string()).collect())
            .unwrap_or_default(),
    }
}

/// A client that reconnects at once and times commands out after `timeout`.
async fn client(url: &str, timeout: Duration) -> Client {
    let client = Builder::from_config(Config::from_url(url).unwrap())
        .set_policy(ReconnectPolicy::new_exponential(0, 50, 1000, 2))
        .with_performance_config(|p| p.default_command_timeout = timeout)
        .with_connection_config(|c| c.connection_timeout = Duration::from_secs(2))
        .build()
        .unwrap();
    for _ in 0..100 {
        if client.init().await.is_ok() {
            return client;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("cannot connect to {url}");
}

/// The queue settings every producer and consumer shares.
fn configure(b: DelayQueueBuilder, knobs: &Knobs, concurrency: usize, renews: bool) -> DelayQueueBuilder {
    let b = b
        .fetch_interval(FETCH_INTERVAL)
        .max_consume_duration(LEASE)
        .concurrency(concurrency)
        .default_retry_count(knobs.default_retry_count)
        .nack_redelivery_delay(BACKOFF);
    if renews {
        b.handler_timeout(LEASE * 4)
    } else {
        b
    }
}

/// The history, shared by the driver and every handler.
type Shared = Arc<Mutex<History>>;

/// A handler run in progress; records its end, or `Cancelled` when dropped
/// before it returned (time-out or crash).
struct Running {
    history: Shared,
    index: usize,
    done: bool,
}

impl Running {
    fn finish(mut self, outcome: Outcome) {
        self.end(outcome);
    }

    fn end(&mut self, outcome: Outcome) {
        if !self.done {
            self.done = true;
            self.history.lock().unwrap().deliveries[self.index].end = Some((Instant::now(), outcome));
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.end(Outcome::Cancelled);
    }
}

/// The handler of every consumer: records the delivery, then does what the
/// seed picks for this id and attempt.
#[derive(Clone)]
struct Recorder {
    history: Shared,
    consumer: String,
    renews: bool,
    seed: u64,
    handlers: Vec<(HandlerKind, u64)>,
    /// Set for the final drain: every handler succeeds.
    draining: Arc<AtomicBool>,
}

#[delayqueue::async_trait]
impl Handler for Recorder {
    async fn handle(&self, msg: Message) -> Result<(), HandlerError> {
        let running = {
            let mut h = self.history.lock().unwrap();
            h.deliveries.push(Delivery {
                id: msg.id().as_str().to_string(),
                payload: String::from_utf8_lossy(msg.payload()).into_owned(),
                attempt: msg.attempt(),
                retry_count: msg.retry_count(),
                consumer: self.consumer.clone(),
                renews: self.renews,
                start: Instant::now(),
                end: None,
            });
            Running {
                history: self.history.clone(),
                index: h.deliveries.len() - 1,
                done: false,
            }
        };
        // The same choice for the same seed, id and attempt, whichever consumer runs it.
        let mut rng = Rng(self.seed ^ fnv(msg.id().as_str()) ^ u64::from(msg.attempt()).wrapping_mul(0x1000_0000_01b3));
        let kind = if self.draining.load(Ordering::Relaxed) {
            HandlerKind::Ok
        } else {
            rng.weighted(&self.handlers)
        };
        match kind {
            HandlerKind::Ok => {
                running.finish(Outcome::Ok);
                Ok(())
            }
            HandlerKind::Error => {
                running.finish(Outcome::Error);
                Err("injected error".into())
            }
            HandlerKind::Panic => {
                running.finish(Outcome::Panic);
                std::panic::panic_any(INJECTED_PANIC);
            }
            HandlerKind::Retry => {
                let delay = Duration::from_millis(rng.range(100, 600));
                running.finish(Outcome::RetryAfter(delay));
                Err(RetryAfter::new(delay, "injected retry-after").into())
            }
            HandlerKind::Skip => {
                running.finish(Outcome::Skip);
                Err(SkipRetry::new("injected skip").into())
            }
            HandlerKind::Slow => {
                // Past the lease: renewed, it ends Ok; unrenewed, it is cancelled.
                tokio::time::sleep(LEASE * rng.range(12, 30) as u32 / 10).await;
                running.finish(Outcome::Ok);
                Ok(())
            }
        }
    }
}

fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// One consumer on its own runtime, so a crash is dropping that runtime.
struct ConsumerSlot {
    name: String,
    rt: tokio::runtime::Runtime,
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Result<(), String>>,
}

async fn start_consumer(url: String, knobs: &Knobs, handler: Recorder) -> ConsumerSlot {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let (stop, stop_rx) = oneshot::channel::<()>();
    let (ready, ready_rx) = oneshot::channel::<()>();
    let (knobs, name) = (knobs.clone(), handler.consumer.clone());
    let task =
        rt.spawn(async move {
            let client = client(&url, COMMAND_TIMEOUT).await;
            let queue = configure(
                DelayQueue::builder(QUEUE, client),
                &knobs,
                knobs.concurrency,
                handler.renews,
            )
            .build()
            .unwrap();
            let mut events = queue.events();
            let (history, me) = (handler.history.clone(), handler.consumer.clone());
            tokio::spawn(async move {
                use tokio::sync::broadcast::error::RecvError;
                loop {
                    match events.recv().await {
                        Ok(Event::LeaseLost { id }) => history.lock().unwrap().lease_lost.push((
                            me.clone(),
                            id.as_str().to_string(),
                            Instant::now(),
                        )),
                        Ok(_) | Err(RecvError::Lagged(_)) => {}
                        Err(RecvError::Closed) => break,
                    }
                }
            });
            let started = Instant::now();
            let consumer = loop {
                match queue.start_consume(handler.clone()).await {
                    Ok(c) => break c,
                    Err(e) if started.elapsed() > CONSUMER_LIMIT => return Err(format!("start_consume: {e}")),
                    Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                }
            };
            let _ = ready.send(());
            let _ = stop_rx.await;
            consumer.shutdown().await.map_err(|e| format!("shutdown: {e}"))
        });
    tokio::time::timeout(CONSUMER_LIMIT, ready_rx)
        .await
        .unwrap_or_else(|_| panic!("consumer {name} did not start within {CONSUMER_LIMIT:?}"))
        .unwrap_or_else(|_| panic!("consumer {name} failed to start"));
    ConsumerSlot { name, rt, stop, task }
}

impl ConsumerSlot {
    /// Graceful stop; the error, if shutdown failed or took too long.
    async fn stop(self) -> Option<String> {
        let _ = self.stop.send(());
        let result = match tokio::time::timeout(CONSUMER_LIMIT, self.task).await {
            Ok(Ok(Ok(()))) => None,
            Ok(Ok(Err(e))) => Some(format!("{}: {e}", self.name)),
            Ok(Err(e)) => Some(format!("{}: task failed: {e}", self.name)),
            Err(_) => Some(format!("{}: shutdown took longer than {CONSUMER_LIMIT:?}", self.name)),
        };
        self.rt.shutdown_background();
        result
    }

    /// A crash: every task of the consumer, its handlers and its client
    /// connections are dropped at once.
    fn crash(self) {
        self.rt.shutdown_background();
    }
}

/// Messages the producer knows ids of, for cancels, reschedules and requeues.
struct Producer {
    queue: DelayQueue,
    history: Shared,
    known: Vec<MessageId>,
    next: u64,
    default_retry_count: u32,
}

impl Producer {
    fn payload(&mut self) -> String {
        self.next += 1;
        format!("h{}", self.next)
    }

    /// A random message: its record (not yet sent) and its retry count, if set.
    fn plan(&mut self, rng: &mut Rng, how: &'static str) -> (SendRec, Option<u32>) {
        let payload = self.payload();
        let delay = if rng.chance(25) {
            Duration::ZERO
        } else {
            Duration::from_millis(rng.range(1, MAX_DELAY_MS))
        };
        let id = rng.chance(50).then(|| format!("c-{payload}"));
        let retry_count = rng.chance(40).then(|| rng.range(0, 3) as u32);
        let now = Instant::now();
        let rec = SendRec {
            payload,
            caller_id: id.is_some(),
            id,
            delay,
            retry_count: retry_count.unwrap_or(self.default_retry_count),
            start: now,
            end: now,
            error: None,
            how,
        };
        (rec, retry_count)
    }

    async fn send_one(&mut self, rng: &mut Rng) {
        let (mut rec, retry_count) = self.plan(rng, "delay");
        let start = Instant::now();
        let mut send = if rng.chance(30) {
            rec.how = "at";
            self.queue.send(rec.payload.clone()).at(SystemTime::now() + rec.delay)
        } else {
            self.queue.send(rec.payload.clone()).delay(rec.delay)
        };
        if let Some(id) = &rec.id {
            send = send.id(id.as_str());
        }
        if let Some(n) = retry_count {
            send = send.retry_count(n);
        }
        let result = send.await;
        rec.start = start;
        self.record(vec![rec], vec![result.map_err(|e| e.to_string())]);
    }

    /// `n` messages in one `send_batch`; with `due_now`, all due at once.
    async fn send_batch(&mut self, rng: &mut Rng, n: usize, due_now: bool) {
        let mut recs = Vec::with_capacity(n);
        let mut msgs = Vec::with_capacity(n);
        for _ in 0..n {
            let (mut rec, retry_count) = self.plan(rng, "batch");
            if due_now {
                rec.delay = Duration::ZERO;
            }
            let mut msg = NewMessage::new(rec.payload.clone()).delay(rec.delay);
            if let Some(id) = &rec.id {
                msg = msg.id(id.as_str());
            }
            if let Some(n) = retry_count {
                msg = msg.retry_count(n);
            }
            msgs.push(msg);
            recs.push(rec);
        }
        let start = Instant::now();
        recs.iter_mut().for_each(|r| r.start = start);
        let results = match self.queue.send_batch(msgs).await {
            Ok(rs) => rs.into_iter().map(|r| r.map_err(|e| e.to_string())).collect(),
            Err(e) => vec![Err(e.to_string()); n],
        };
        self.record(recs, results);
    }

    fn record(&mut self, recs: Vec<SendRec>, results: Vec<Result<MessageId, String>>) {
        let end = Instant::now();
        let mut h = self.history.lock().unwrap();
        for (mut rec, result) in recs.into_iter().zip(results) {
            rec.end = end;
            match result {
                Ok(id) => {
                    rec.id = Some(id.as_str().to_string());
                    self.known.push(id);
                }
                Err(e) => {
                    rec.error = Some(e);
                    if let Some(id) = &rec.id {
                        self.known.push(id.as_str().into());
                    }
                }
            }
            h.sends.push(rec);
        }
    }

    fn pick(&self, rng: &mut Rng) -> Option<MessageId> {
        // Mostly recent ones: those may still wait.
        let n = self.known.len() as u64;
        (n > 0).then(|| self.known[(n - 1 - rng.below(n.min(50))) as usize].clone())
    }

    async fn id_op(&mut self, rng: &mut Rng, kind: &'static str) {
        let Some(id) = self.pick(rng) else { return };
        let delay = (kind == "reschedule").then(|| Duration::from_millis(rng.range(0, MAX_DELAY_MS)));
        let start = Instant::now();
        let result = match kind {
            "cancel" => self.queue.cancel(&id).await,
            "reschedule" => self.queue.reschedule(&id, delay.unwrap()).await,
            _ => self.queue.requeue_dead(&id).await,
        };
        self.push_op(kind, id.as_str(), delay, start, result.map_err(|e| e.to_string()));
    }

    async fn requeue_all(&mut self) {
        let start = Instant::now();
        let result = self.queue.requeue_all_dead().await.map(|n| n > 0);
        self.push_op("requeue_all_dead", "*", None, start, result.map_err(|e| e.to_string()));
    }

    fn push_op(
        &self,
        kind: &'static str,
        id: &str,
        delay: Option<Duration>,
        start: Instant,
        result: Result<bool, String>,
    ) {
        self.history.lock().unwrap().ops.push(IdOp {
            kind,
            id: id.to_string(),
            delay,
            start,
            end: Instant::now(),
            result,
        });
    }
}

#[derive(Debug, Clone, Copy)]
enum Op {
    Send,
    Batch,
    Cancel,
    Reschedule,
    Requeue,
    RequeueAll,
}

const OPS: [(Op, u64); 6] = [
    (Op::Send, 40),
    (Op::Batch, 8),
    (Op::Cancel, 15),
    (Op::Reschedule, 15),
    (Op::Requeue, 10),
    (Op::RequeueAll, 2),
];

/// Fails the test with the seed, the broken rules and their history.
fn fail(knobs: &Knobs, h: &History, violations: &[model::Violation], when: &str) -> ! {
    panic!(
        "HISTORY seed={} {when}: {} violation(s); replay with HISTORY_SEED={} (knobs {:?})\nfaults: {}\n{}",
        knobs.seed,
        violations.len(),
        knobs.seed,
        knobs,
        h.fault_summary(),
        model::render(h, violations, 2)
    )
}

fn verify(knobs: &Knobs, history: &Shared, fin: Option<&Final>, when: &str) {
    let h = history.lock().unwrap().clone();
    let mut all = model::check(
        &h,
        Limits {
            lease: LEASE,
            command_timeout: COMMAND_TIMEOUT,
        },
        fin,
    );
    all.extend(RECEIPT_FAILURES.lock().unwrap().iter().map(|line| model::Violation {
        rule: "shutdown-receipt",
        id: "*".into(),
        detail: format!("a stopping consumer could not hand back its claim: {}", line.trim()),
    }));
    let (allowed, violations): (Vec<_>, Vec<_>) =
        all.into_iter().partition(|v| knobs.allow.iter().any(|a| a == v.rule));
    if fin.is_some() && !allowed.is_empty() {
        println!(
            "HISTORY seed={}: {} violation(s) of rules allowed by HISTORY_ALLOW:\n{}",
            knobs.seed,
            allowed.len(),
            model::render(&h, &allowed, 1)
        );
    }
    if !violations.is_empty() {
        fail(knobs, &h, &violations, when);
    }
}

fn redis_error(v: &support::RawReply) -> Option<String> {
    match v {
        support::RawReply::Error(e) => Some(e.clone()),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_keeps_the_at_least_once_promise() {
    let knobs = knobs();
    quiet_injected_panics();
    capture_receipt_failures();
    println!(
        "HISTORY seed={} (replay: HISTORY_SEED={}) knobs {knobs:?}",
        knobs.seed, knobs.seed
    );
    let mut rng = Rng(knobs.seed.rotate_left(17) ^ 0x5eed);
    let mut server = RedisServer::start_with(ServerOptions::durable()).await;
    let proxy = Proxy::start(server.port()).await;
    let direct = server.client().await;
    let history: Shared = Arc::new(Mutex::new(History::new()));
    let draining = Arc::new(AtomicBool::new(false));
    let recorder = |name: String, renews: bool| Recorder {
        history: history.clone(),
        consumer: name,
        renews,
        seed: knobs.seed,
        handlers: knobs.handlers.clone(),
        draining: draining.clone(),
    };
    let mut consumers: Vec<Option<ConsumerSlot>> = Vec::new();
    let mut generation = 0;
    for (i, &renews) in knobs.renews.iter().enumerate() {
        let handler = recorder(format!("c{i}.{generation}"), renews);
        consumers.push(Some(start_consumer(proxy.url(), &knobs, handler).await));
    }
    let producer_client = client(&proxy.url(), COMMAND_TIMEOUT).await;
    let mut producer = Producer {
        queue: configure(DelayQueue::builder(QUEUE, producer_client), &knobs, 1, false)
            .build()
            .unwrap(),
        history: history.clone(),
        known: Vec::new(),
        next: 0,
        default_retry_count: knobs.default_retry_count,
    };
    let mut shutdown_errors: Vec<String> = Vec::new();

    let run_for = Duration::from_secs(knobs.secs);
    let started = Instant::now();
    let mut next_fault = started + Duration::from_millis(rng.range(500, 2000));
    let mut next_check = started + CHECK_EVERY;
    let mut burst_due = knobs.burst > 0;
    for _ in 0..MAX_STEPS {
        if started.elapsed() >= run_for {
            break;
        }
        if burst_due && started.elapsed() >= run_for / 3 {
            burst_due = false;
            producer.send_batch(&mut rng, knobs.burst, true).await;
            // A consumer stops over the backlog (the shutdown's claim sees it all).
            let i = rng.below(consumers.len() as u64) as usize;
            let slot = consumers[i].take().unwrap();
            let start = Instant::now();
            let name = slot.name.clone();
            if let Some(e) = slot.stop().await {
                shutdown_errors.push(e);
            }
            generation += 1;
            let handler = recorder(format!("c{i}.{generation}"), knobs.renews[i]);
            consumers[i] = Some(start_consumer(proxy.url(), &knobs, handler).await);
            record_fault(
                &history,
                "stop",
                start,
                format!("{name} stopped over a backlog of {}", knobs.burst),
            );
        }
        match rng.weighted(&OPS) {
            Op::Send => producer.send_one(&mut rng).await,
            Op::Batch => {
                let n = rng.range(2, 20) as usize;
                producer.send_batch(&mut rng, n, false).await
            }
            Op::Cancel => producer.id_op(&mut rng, "cancel").await,
            Op::Reschedule => producer.id_op(&mut rng, "reschedule").await,
            Op::Requeue => producer.id_op(&mut rng, "requeue_dead").await,
            Op::RequeueAll => producer.requeue_all().await,
        }
        if Instant::now() >= next_fault && !knobs.faults.is_empty() {
            next_fault = Instant::now() + Duration::from_millis(rng.range(800, 2500));
            let kind = knobs.faults[rng.below(knobs.faults.len() as u64) as usize];
            let start = Instant::now();
            match kind {
                FaultKind::Pause => {
                    // Mostly shorter than half a lease (no lease may be lost),
                    // sometimes longer than what a lease may have left.
                    let ms = if rng.chance(70) {
                        rng.range(100, LEASE.as_millis() as u64 / 2 - 100)
                    } else {
                        rng.range(LEASE.as_millis() as u64 / 2 + 100, LEASE.as_millis() as u64 * 5 / 4)
                    };
                    let reply = server.raw_reply(&["CLIENT", "PAUSE", &ms.to_string(), "WRITE"]);
                    assert_eq!(redis_error(&reply), None, "CLIENT PAUSE failed");
                    history.lock().unwrap().faults.push(FaultRec {
                        kind: "pause",
                        start,
                        end: start + Duration::from_millis(ms),
                        detail: format!("CLIENT PAUSE {ms} WRITE"),
                    });
                }
                FaultKind::Cut => {
                    let replies = rng.chance(50);
                    if replies {
                        proxy.cut_replies_once();
                    } else {
                        proxy.cut_all();
                    }
                    let what = if replies {
                        "next reply of every connection swallowed"
                    } else {
                        "every connection dropped"
                    };
                    record_fault(&history, "cut", start, what.to_string());
                }
                FaultKind::Crash | FaultKind::Stop => {
                    let i = rng.below(consumers.len() as u64) as usize;
                    let slot = consumers[i].take().unwrap();
                    let name = slot.name.clone();
                    let (kind, done) = if kind == FaultKind::Crash {
                        slot.crash();
                        ("crash", "runtime dropped")
                    } else {
                        if let Some(e) = slot.stop().await {
                            shutdown_errors.push(e);
                        }
                        ("stop", "shut down")
                    };
                    record_fault(&history, kind, start, format!("{name} {done}"));
                    generation += 1;
                    let handler = recorder(format!("c{i}.{generation}"), knobs.renews[i]);
                    consumers[i] = Some(start_consumer(proxy.url(), &knobs, handler).await);
                }
                FaultKind::Outage => {
                    // No consumer at all for a while: messages fall due with
                    // nobody to take them, and must wait, not vanish.
                    for slot in consumers.iter_mut() {
                        if let Some(e) = slot.take().unwrap().stop().await {
                            shutdown_errors.push(e);
                        }
                    }
                    generation += 1;
                    tokio::time::sleep(Duration::from_millis(rng.range(2500, 4000))).await;
                    for (i, slot) in consumers.iter_mut().enumerate() {
                        let handler = recorder(format!("c{i}.{generation}"), knobs.renews[i]);
                        *slot = Some(start_consumer(proxy.url(), &knobs, handler).await);
                    }
                    record_fault(
                        &history,
                        "outage",
                        start,
                        "every consumer shut down, then started again".into(),
                    );
                }
                FaultKind::Restart => {
                    server.restart().await;
                    record_fault(
                        &history,
                        "restart",
                        start,
                        "redis-server killed and restarted (AOF always)".into(),
                    );
                }
                FaultKind::Flush => {
                    let reply = server.raw_reply(&["SCRIPT", "FLUSH"]);
                    assert_eq!(redis_error(&reply), None, "SCRIPT FLUSH failed");
                    record_fault(&history, "flush", start, "SCRIPT FLUSH".into());
                }
            }
        }
        if Instant::now() >= next_check {
            next_check = Instant::now() + CHECK_EVERY;
            verify(&knobs, &history, None, "during the run");
        }
        tokio::time::sleep(Duration::from_millis(rng.range(5, 40))).await;
    }

    // Drain: no more faults, every handler succeeds.
    server.raw_command(&["CLIENT", "UNPAUSE"]);
    draining.store(true, Ordering::Relaxed);
    let drained = drain(&producer.queue, false).await;
    let running = || {
        history
            .lock()
            .unwrap()
            .deliveries
            .iter()
            .filter(|d| d.end.is_none())
            .count()
    };
    wait_until(CONSUMER_LIMIT, || running() == 0).await;
    let status = producer.queue.status().await.unwrap();
    let mut fin = Final {
        totals_sent: status.totals.sent,
        totals_acked: status.totals.acked,
        totals_expired: status.totals.expired,
        ..Final::default()
    };
    let mut offset = Some(0);
    for _ in 0..10_000 {
        let Some(at) = offset else { break };
        let page = producer.queue.list(MessageState::Dead, at, 1000).await.unwrap();
        for m in page.items {
            fin.dead.insert(m.id.as_str().to_string(), m.attempts);
        }
        offset = page.next;
    }
    {
        let h = history.lock().unwrap();
        let delivered = h.deliveries.len();
        println!(
            "HISTORY seed={} sends={} ops={} deliveries={delivered} dead={} lease_lost={} faults: {}",
            knobs.seed,
            h.sends.len(),
            h.ops.len(),
            fin.dead.len(),
            h.lease_lost.len(),
            h.fault_summary()
        );
    }
    assert!(
        drained,
        "HISTORY seed={}: the queue did not drain within {DRAIN_LIMIT:?}: {status:?}",
        knobs.seed
    );
    verify(&knobs, &history, Some(&fin), "at the end");
    let report = producer.queue.check_integrity().await.unwrap();
    assert!(
        report.is_clean(),
        "HISTORY seed={}: integrity after the run: {report}",
        knobs.seed
    );
    assert!(
        shutdown_errors.is_empty(),
        "HISTORY seed={}: consumer shutdowns failed: {shutdown_errors:?}",
        knobs.seed
    );

    // Dead letters back to life, handled; then nothing may be left.
    producer.requeue_all().await;
    assert!(
        drain(&producer.queue, true).await,
        "HISTORY seed={}: requeued dead letters were not handled within {DRAIN_LIMIT:?}: {:?}",
        knobs.seed,
        producer.queue.status().await
    );
    for slot in consumers.into_iter().flatten() {
        if let Some(e) = slot.stop().await {
            panic!("HISTORY seed={}: final shutdown failed: {e}", knobs.seed);
        }
    }
    verify(&knobs, &history, None, "after the dead letters were requeued");
    let report = producer.queue.check_integrity().await.unwrap();
    assert!(
        report.is_clean(),
        "HISTORY seed={}: integrity at the end: {report}",
        knobs.seed
    );
    assert_eq!(
        all_keys(&direct).await,
        Vec::<String>::new(),
        "HISTORY seed={}: keys left",
        knobs.seed
    );
}

/// Script errors of the claim a stopping consumer makes to hand its
/// receipt back: logged at debug level only, so caught from the log.
static RECEIPT_FAILURES: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Keeps the log lines of a failed receipt hand-back (a script error, not
/// a time-out or a lost connection, which a fault may cause).
struct ReceiptLog;

impl std::io::Write for ReceiptLog {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let line = String::from_utf8_lossy(buf);
        if line.contains("could not delete the claim receipt") && line.contains("ERR") {
            RECEIPT_FAILURES.lock().unwrap().push(line.into_owned());
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn capture_receipt_failures() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("delayqueue=debug"))
        .with_writer(|| ReceiptLog)
        .with_ansi(false)
        .try_init();
}

/// Injected handler panics are expected by the hundred: keep them out of
/// the output, so a real panic stands out.
fn quiet_injected_panics() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if info.payload().downcast_ref::<&str>() != Some(&INJECTED_PANIC) {
            default(info);
        }
    }));
}

fn record_fault(history: &Shared, kind: &'static str, start: Instant, detail: String) {
    history.lock().unwrap().faults.push(FaultRec {
        kind,
        start,
        end: Instant::now(),
        detail,
    });
}

/// Waits until nothing waits or runs (and, with `dead`, no dead letter is
/// left either); false when `DRAIN_LIMIT` passes first.
async fn drain(queue: &DelayQueue, dead: bool) -> bool {
    let end = Instant::now() + DRAIN_LIMIT;
    while Instant::now() < end {
        if let Ok(s) = queue.counts().await {
            if s.pending + s.ready + s.processing + s.retry == 0 && (!dead || s.dead == 0) {
                return true;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}
