//! Where the end-to-end scenarios run: a [`Backend`] starts (or joins) the
//! Redis, gives a fred client, builds the test's queues and lists every key
//! they left on every node.
//!
//! Each test gets its own namespace: queue names start with `t<N>.`, unique
//! in the test process, so tests that share a cluster never see each
//! other's queues, and the leak checks count the keys of every hash tag
//! that starts with the namespace (`{t3.orders}`, but also one queue's
//! shards `{t3.orders#0}`, `{t3.orders#1}`, ... wherever they live).

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

use delayqueue::fred::clients::Client;
use delayqueue::{DelayQueue, DelayQueueBuilder};

use crate::support::cluster::RedisCluster;
use crate::support::RedisServer;

/// Primaries of the test cluster.
pub const PRIMARIES: usize = 3;

/// A Redis deployment the scenarios run against, with the queue settings
/// that go with it. A backend lives for one test.
pub trait Backend: Sized {
    /// Starts the Redis (or joins one shared by the tests of this process)
    /// and connects a client for one test.
    fn start() -> impl Future<Output = Self>;

    /// The test's client and namespace.
    fn scope(&self) -> &Scope;

    /// The test's client.
    fn client(&self) -> &Client {
        &self.scope().client
    }

    /// This test's namespace: a prefix of every queue name it uses.
    fn namespace(&self) -> &str {
        &self.scope().namespace
    }

    /// Queue settings this backend needs, applied to every builder before
    /// the scenario's own (e.g. a sharded layout). None by default.
    fn configure(&self, b: DelayQueueBuilder) -> DelayQueueBuilder {
        b
    }

    /// Every key on every node, sorted, except the totals hashes (per queue,
    /// not per message, and kept): the leak checks filter it.
    fn all_keys(&self) -> impl Future<Output = Vec<String>>;

    /// The builder of this test's queue `base` (named `<namespace><base>`),
    /// with [`Backend::configure`] applied.
    fn builder(&self, base: &str) -> DelayQueueBuilder {
        let name = format!("{}{base}", self.namespace());
        self.configure(DelayQueue::builder(name, self.client().clone()))
    }

    /// The keys of this test's queues left on any node, sorted (totals
    /// hashes excepted).
    fn keys(&self) -> impl Future<Output = Vec<String>> {
        async {
            let mut keys = self.all_keys().await;
            keys.retain(|k| in_namespace(k, self.namespace()));
            keys
        }
    }
}

/// Whether `key`'s hash tag (the text between its first `{` and the next
/// `}`) starts with `namespace`.
fn in_namespace(key: &str, namespace: &str) -> bool {
    key.split_once('{')
        .and_then(|(_, rest)| rest.split_once('}'))
        .is_some_and(|(tag, _)| tag.starts_with(namespace))
}

/// What every backend gives a test: a client and a namespace of its own.
pub struct Scope {
    client: Client,
    namespace: String,
}

impl Scope {
    /// `client` with a fresh namespace: `t0.`, `t1.`, ... in this process.
    fn new(client: Client) -> Scope {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let namespace = format!("t{}.", NEXT.fetch_add(1, Ordering::Relaxed));
        Scope { client, namespace }
    }
}

/// One private `redis-server` per test, plain client, queues as built.
pub struct SingleServer {
    // Fields drop in order: the client before its server.
    scope: Scope,
    _server: RedisServer,
}

impl Backend for SingleServer {
    async fn start() -> Self {
        let server = RedisServer::start().await;
        let client = server.client().await;
        SingleServer {
            scope: Scope::new(client),
            _server: server,
        }
    }

    fn scope(&self) -> &Scope {
        &self.scope
    }

    async fn all_keys(&self) -> Vec<String> {
        crate::support::all_keys(self.client()).await
    }
}

/// A 3-primary Redis Cluster shared by the tests of this process that run
/// at the same time (see [`shared_cluster`]), a fred cluster client per
/// test, queues as built (each queue is one hash tag, so one slot on one
/// primary; queue names decide which).
pub struct Cluster {
    scope: Scope,
    cluster: Arc<RedisCluster>,
}

impl Backend for Cluster {
    async fn start() -> Self {
        let cluster = shared_cluster().await;
        let client = cluster.client().await;
        Cluster {
            scope: Scope::new(client),
            cluster,
        }
    }

    fn scope(&self) -> &Scope {
        &self.scope
    }

    async fn all_keys(&self) -> Vec<String> {
        self.cluster.all_keys()
    }
}

/// The shared cluster of [`Cluster`], every queue spread over
/// [`SHARDS`] shards (so over the primaries).
pub struct ShardedCluster(Cluster);

/// Shards of each queue of [`ShardedCluster`].
pub const SHARDS: usize = 4;

impl Backend for ShardedCluster {
    async fn start() -> Self {
        ShardedCluster(Cluster::start().await)
    }

    fn scope(&self) -> &Scope {
        self.0.scope()
    }

    fn configure(&self, b: DelayQueueBuilder) -> DelayQueueBuilder {
        b.shards(SHARDS)
    }

    async fn all_keys(&self) -> Vec<String> {
        self.0.all_keys().await
    }
}

/// The cluster of the tests running now, started by the first of them.
/// Starting one takes seconds, so tests share it, each with its own client
/// and namespace; it stops when the last test holding it ends (a static
/// would never be dropped, leaving its servers running after the tests),
/// and the next test starts a new one.
async fn shared_cluster() -> Arc<RedisCluster> {
    static SHARED: tokio::sync::Mutex<Weak<RedisCluster>> = tokio::sync::Mutex::const_new(Weak::new());
    let mut shared = SHARED.lock().await;
    if let Some(cluster) = shared.upgrade() {
        return cluster;
    }
    let started = std::time::Instant::now();
    let cluster = Arc::new(RedisCluster::start(PRIMARIES).await);
    println!("started a {PRIMARIES}-primary cluster in {:?}", started.elapsed());
    *shared = Arc::downgrade(&cluster);
    cluster
}

#[test]
fn namespaces_cover_queues_and_their_shards_only() {
    for key in ["dq:{t3.orders}:pending", "dq:{t3.orders#1}:m:x", "other:{t3.}:x"] {
        assert!(in_namespace(key, "t3."), "{key}");
    }
    for key in ["dq:{t30.orders}:pending", "dq:t3.orders:pending", "t3.{x}", "dq:{t3"] {
        assert!(!in_namespace(key, "t3."), "{key}");
    }
}
