//! The helpers the queue tests share, those that name `delayqueue` types or
//! its key layout: the delivery [`Log`] with its [`recording`] and
//! [`acking`] handlers, [`wait_stats`], [`queue_builder`],
//! [`start_queue`] (server + client + queue in one call), [`whereabouts`],
//! the [`worker`] processes of the fault tests and the [`crashing`]
//! consumer that dies holding a message. An integration test
//! declares `mod helpers;`; the delayqueue-free harness (servers, clusters,
//! proxies, logs) is the crate `delayqueue-test-support`.
//!
//! Not every test binary uses every helper, hence the module-wide allow.
#![allow(dead_code)]

pub mod crashing;
pub mod failover;
pub mod worker;

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use delayqueue::fred::clients::Client;
use delayqueue::{
    Counts, DelayQueue, DelayQueueBuilder, Event, Handler, HandlerError, Message, MessageId, MessageState, Order,
};
use delayqueue_test_support::{RedisServer, ServerOptions};

/// One delivery as the handler saw it: (id, attempt, arrival, payload).
pub type Delivery = (MessageId, u32, Instant, Vec<u8>);

/// Every delivery a handler saw, in order. Clones share the same log.
#[derive(Clone, Default)]
pub struct Log(Arc<Mutex<Vec<Delivery>>>);

impl Log {
    pub fn record(&self, msg: &Message) {
        self.0
            .lock()
            .unwrap()
            .push((msg.id().clone(), msg.attempt(), Instant::now(), msg.payload().to_vec()));
    }

    pub fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A copy of the deliveries so far.
    pub fn snapshot(&self) -> Vec<Delivery> {
        self.0.lock().unwrap().clone()
    }

    /// The attempt numbers `id` was delivered with, in order.
    pub fn attempts(&self, id: &MessageId) -> Vec<u32> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|e| &e.0 == id)
            .map(|e| e.1)
            .collect()
    }

    /// How often each id was delivered.
    pub fn counts(&self) -> HashMap<MessageId, usize> {
        let mut m = HashMap::new();
        for e in self.0.lock().unwrap().iter() {
            *m.entry(e.0.clone()).or_insert(0) += 1;
        }
        m
    }

    /// The distinct ids delivered.
    pub fn ids(&self) -> HashSet<MessageId> {
        self.0.lock().unwrap().iter().map(|e| e.0.clone()).collect()
    }
}

/// A handler that records every delivery in `log` and then runs `then`.
pub fn recording<F, Fut>(log: &Log, then: F) -> impl Handler
where
    F: Fn(Message) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), HandlerError>> + Send + 'static,
{
    let log = log.clone();
    let then = Arc::new(then);
    move |msg: Message| {
        log.record(&msg);
        let then = then.clone();
        async move { then(msg).await }
    }
}

/// A handler whose consumer stalls on cue: it records every delivery in
/// `log`; a `warm` message runs 500 ms (so claims run far ahead of the
/// handler, and it counts as stalled after four such runs, 2 s), a `slow`
/// one holds its handler until `hold` gets a permit, any other returns at
/// once.
pub fn stalling(log: &Log, hold: &Arc<tokio::sync::Semaphore>) -> impl Handler {
    let hold = hold.clone();
    recording(log, move |msg: Message| {
        let hold = hold.clone();
        async move {
            match msg.payload() {
                b"warm" => tokio::time::sleep(Duration::from_millis(500)).await,
                b"slow" => drop(hold.acquire().await),
                _ => {}
            }
            Ok(())
        }
    })
}

/// A handler that records every delivery in `log` and succeeds.
pub fn acking(log: &Log) -> impl Handler {
    recording(log, |_msg: Message| async move { Ok(()) })
}

/// One delivery's id, attempt, headers and its `tenant` header (read with
/// `Message::header`), as [`recording_headers`] records it.
pub type Headed = (String, u32, Vec<(String, String)>, Option<String>);

/// A handler that records each delivery's headers in `log` and fails the
/// first delivery of the payload `fail_first`, succeeding otherwise.
pub fn recording_headers(log: &Arc<Mutex<Vec<Headed>>>, fail_first: &'static [u8]) -> impl Handler {
    let log = log.clone();
    move |msg: Message| {
        let tenant = msg.header("tenant").map(str::to_string);
        log.lock()
            .unwrap()
            .push((msg.id().to_string(), msg.attempt(), msg.headers().to_vec(), tenant));
        let fail = msg.payload() == fail_first && msg.attempt() == 1;
        async move {
            match fail {
                true => Err::<(), HandlerError>("first try fails".into()),
                false => Ok(()),
            }
        }
    }
}

/// Handlers running at once, as a [`Gauge::handler`] counts them: how
/// many run now, the most that ran together, how many finished. Clones
/// share the counts.
#[derive(Clone, Default)]
pub struct Gauge {
    running: Arc<AtomicUsize>,
    most: Arc<AtomicUsize>,
    done: Arc<AtomicUsize>,
}

/// What a [`Gauge::handler`] returns per delivery.
pub type Handled = std::pin::Pin<Box<dyn Future<Output = Result<(), HandlerError>> + Send>>;

impl Gauge {
    /// A handler (and a `tower::service_fn` body) that holds its place
    /// for `hold`, then succeeds.
    pub fn handler(&self, hold: Duration) -> impl Fn(Message) -> Handled + Clone + Send + Sync + 'static {
        let gauge = self.clone();
        move |_msg: Message| {
            let g = gauge.clone();
            Box::pin(async move {
                let now = g.running.fetch_add(1, Ordering::SeqCst) + 1;
                g.most.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(hold).await;
                g.running.fetch_sub(1, Ordering::SeqCst);
                g.done.fetch_add(1, Ordering::SeqCst);
                Ok(())
            })
        }
    }

    /// The most handlers that ran at once.
    pub fn most(&self) -> usize {
        self.most.load(Ordering::SeqCst)
    }

    /// The handlers that finished.
    pub fn done(&self) -> usize {
        self.done.load(Ordering::SeqCst)
    }
}

/// Collects the queue's `Failed` events (attempt, reason) until `n` arrived.
pub async fn failures(events: &mut tokio::sync::broadcast::Receiver<Event>, n: usize) -> Vec<(u32, String)> {
    let mut got = Vec::new();
    while got.len() < n {
        match tokio::time::timeout(delayqueue_test_support::WAIT, events.recv()).await {
            Ok(Ok(Event::Failed { attempt, reason, .. })) => got.push((attempt, reason)),
            Ok(Ok(_)) => {}
            other => panic!("no Failed event: {other:?}"),
        }
    }
    got
}

/// A handler that succeeds on the payload `ok` and fails on any other.
pub fn ok_else_fail() -> impl Handler {
    |msg: Message| async move {
        match msg.payload() {
            b"ok" => Ok(()),
            _ => Err::<(), HandlerError>("nope".into()),
        }
    }
}

/// Sends `payloads` with retry count 0 and lets a consumer fail each once:
/// they become dead letters with that failure reason. Returns their ids.
pub async fn make_dead(q: &DelayQueue, payloads: &[&str], reason: &'static str) -> Vec<String> {
    let before = q.counts().await.unwrap().dead;
    let mut ids = Vec::new();
    for p in payloads {
        let id = q.send(*p).retry_count(0).await.unwrap();
        ids.push(id.to_string());
    }
    let consumer = q
        .start_consume(move |_msg: Message| async move { Err::<(), HandlerError>(reason.into()) })
        .await
        .unwrap();
    let want = before + payloads.len() as u64;
    assert!(
        delayqueue_test_support::wait_for(delayqueue_test_support::WAIT, || async {
            q.counts().await.unwrap().dead >= want
        })
        .await,
        "dead letters did not appear"
    );
    consumer.shutdown().await.unwrap();
    ids
}

/// Polls the queue's stats every 20 ms until they equal `want` or
/// `limit` passes; returns the last stats seen.
pub async fn wait_stats(queue: &DelayQueue, limit: Duration, want: Counts) -> Counts {
    let end = Instant::now() + limit;
    loop {
        let s = queue.counts().await.unwrap();
        if s == want || Instant::now() > end {
            return s;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A builder for queue `name` on `client` whose consumers poll every `fetch_interval`.
pub fn queue_builder(name: &str, client: &Client, fetch_interval: Duration) -> DelayQueueBuilder {
    DelayQueue::builder(name, client.clone()).fetch_interval(fetch_interval)
}

/// A private plain server, a client on it, and queue `name` built
/// from [`queue_builder`] after `configure`. Bind the server
/// (`_server`, not `_`): dropping it stops the server.
pub async fn start_queue(
    name: &str,
    fetch_interval: Duration,
    configure: impl FnOnce(DelayQueueBuilder) -> DelayQueueBuilder,
) -> (RedisServer, Client, DelayQueue) {
    start_queue_with(ServerOptions::default(), name, fetch_interval, configure).await
}

/// [`start_queue`] with server options.
pub async fn start_queue_with(
    opts: ServerOptions,
    name: &str,
    fetch_interval: Duration,
    configure: impl FnOnce(DelayQueueBuilder) -> DelayQueueBuilder,
) -> (RedisServer, Client, DelayQueue) {
    let server = RedisServer::start_with(opts).await;
    let client = server.client().await;
    let queue = configure(queue_builder(name, &client, fetch_interval)).build().unwrap();
    (server, client, queue)
}

/// Where the keys of queue `name` (default prefix) hold `id`, for the report
/// of a lost message.
pub async fn whereabouts(client: &Client, name: &str, id: &str) -> String {
    use fred::prelude::{HashesInterface, KeysInterface, ListInterface, SortedSetsInterface};
    let k = |s: &str| format!("dq:{{{name}}}:{s}");
    let pending: Option<f64> = client.zscore(k("pending"), id).await.unwrap_or(None);
    let unack: Option<f64> = client.zscore(k("unack"), id).await.unwrap_or(None);
    let garbage: Option<f64> = client.zscore(k("garbage"), id).await.unwrap_or(None);
    let ready: Option<i64> = client.lpos(k("ready"), id, None, None, None).await.unwrap_or(None);
    let retry: Option<i64> = client.lpos(k("retry"), id, None, None, None).await.unwrap_or(None);
    let payload: bool = client.exists(k(&format!("m:{id}"))).await.unwrap_or(false);
    let retries: Option<String> = client.hget(k("retries"), id).await.unwrap_or(None);
    format!(
        "pending={pending:?} ready={ready:?} retry={retry:?} unack={unack:?} garbage={garbage:?} \
         payload={payload} deliveries={retries:?}"
    )
}

/// Browses `state` to its end in pages of `limit`, at most 10 pages: the
/// ids in walk order and the pages it took. Each page reports `total`.
pub async fn browse_all(
    q: &DelayQueue,
    state: MessageState,
    order: Order,
    limit: usize,
    total: u64,
) -> (Vec<String>, usize) {
    let (mut cursor, mut ids, mut pages) = (None, Vec::new(), 0);
    loop {
        assert!(pages < 10, "{order:?}: no end");
        pages += 1;
        let page = q.browse(state).order(order).after(cursor).limit(limit).await.unwrap();
        assert_eq!(page.total, total);
        ids.extend(page.items.iter().map(|m| m.id.to_string()));
        cursor = page.cursor;
        if cursor.is_none() {
            return (ids, pages);
        }
    }
}

/// A private plain server, a client on it, and queues `names` on it built
/// from [`queue_builder`].
pub async fn start_queues(names: &[&str], fetch_interval: Duration) -> (RedisServer, Client, Vec<DelayQueue>) {
    let server = RedisServer::start().await;
    let client = server.client().await;
    let queues = names
        .iter()
        .map(|n| queue_builder(n, &client, fetch_interval).build().unwrap())
        .collect();
    (server, client, queues)
}

/// Every key of the server whose name says it belongs to a flow
/// (docs/workflows.md), sorted.
pub async fn flow_keys(client: &Client) -> Vec<String> {
    use fred::prelude::ClientLike;
    let mut keys = Vec::new();
    for pattern in ["*:flow:waiting", "*:deps:*", "*:children:*", "*:outbox", "*:parents"] {
        let found: Vec<String> = client.custom(fred::cmd!("KEYS"), vec![pattern]).await.unwrap();
        keys.extend(found);
    }
    keys.sort();
    keys
}
