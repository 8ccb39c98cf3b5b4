//! A cluster's primaries, one connection each: the queue's commands go to
//! the primary that owns their slot, so a primary that fails holds up only
//! the commands of its own slots.
//!
//! fred's cluster client writes every command from one task, which stops
//! writing to every node while it re-syncs after one node's loss (until
//! that node's replica is promoted; docs/scaling.md). So a cluster client
//! given to a queue is used here for its settings, for the first slot map,
//! and for what this routing leaves to fred (`ASK` and `TRYAGAIN` while a
//! slot migrates); the queue's scripts run on a centralized fred client per
//! primary, chosen by slot from the cluster's own `CLUSTER SLOTS`:
//!
//! - `MOVED` points the slot at the node named, and the map is read again;
//! - a command that waits long on its node (a dead or hung primary), or
//!   fails to reach it, makes the map be read every [`POLL`] from all
//!   nodes at once, so the promotion of a replica is seen within one poll;
//!   a command still waiting on the old owner is then sent to the new one
//!   (every script is idempotent: fred re-sends commands after a
//!   reconnect too);
//! - a node no longer a primary loses its connection.
//!
//! The [`Nodes`] of a client are shared by every queue on it (by the
//! client's id), alive while a queue or consumer [holds](hold) them.

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use fred::prelude::{Client, ClientLike, EventInterface, Server, ServerConfig};
use tokio::sync::{broadcast, watch, Notify};

mod map;
pub(crate) mod subscriber;

use map::{Map, Node, Range};

/// How often the slot map is read while a node is in trouble.
const POLL: Duration = Duration::from_millis(50);
/// How long the map is polled after the last sign of trouble.
const POLL_FOR: Duration = Duration::from_secs(3);
/// A command waiting this long on its node is a sign of trouble: the map
/// is polled while it waits.
const SLOW: Duration = Duration::from_millis(100);
/// Pause before a command that met `CLUSTERDOWN` or a lost connection is
/// sent again.
const PAUSE: Duration = Duration::from_millis(25);
/// How long a command is followed from node to node when the client sets
/// no command timeout.
const UNTIMED: Duration = Duration::from_secs(10);
/// How often the map is read while there is none (past [`POLL_FOR`]).
const NO_MAP_POLL: Duration = Duration::from_secs(1);
/// Longest a first command waits for the first slot map.
const FIRST_MAP: Duration = Duration::from_secs(2);
/// `MOVED` replies followed per command before it goes to the given
/// client (fred's own limit is 5).
const REDIRECTS: usize = 5;

/// The primaries of one cluster client and which slots each owns.
pub(crate) struct Nodes {
    /// The caller's cluster client.
    cluster: Client,
    map: Mutex<Arc<Map>>,
    /// The map's epoch; also moved on by every command left to `cluster`,
    /// so a durable send learns its `WAIT` may not count it.
    epoch: watch::Sender<u64>,
    signals: Arc<Signals>,
    started: std::sync::Once,
    /// Set once the first map was read, or [`FIRST_MAP`] passed.
    first_map: tokio::sync::OnceCell<()>,
    /// Moves on with every new map, for the wake-up subscriptions
    /// ([`subscriber`]).
    news: watch::Sender<u64>,
}

struct Signals {
    /// Wakes the reader of the map.
    kick: Notify,
    /// Until when the map is polled.
    poll_until: Mutex<Instant>,
}

/// Keeps the [`Nodes`] of a cluster client alive: a queue handle and a
/// consumer each hold one. Nothing for other clients.
#[derive(Clone, Default)]
pub(crate) struct Hold {
    _nodes: Option<Arc<Nodes>>,
}

impl std::fmt::Debug for Hold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Hold")
    }
}

/// The live [`Nodes`] of the process, by cluster client id.
static ALL: Mutex<Vec<(String, Weak<Nodes>)>> = Mutex::new(Vec::new());

/// The [`Nodes`] of `client` held for as long as the [`Hold`] lives (made
/// when there are none); nothing when `client` is not a cluster client.
pub(crate) fn hold(client: &Client) -> Hold {
    if !client.is_clustered() {
        return Hold::default();
    }
    let mut all = ALL.lock().unwrap_or_else(PoisonError::into_inner);
    all.retain(|(_, n)| n.strong_count() > 0);
    if let Some(nodes) = all
        .iter()
        .find(|(id, _)| id == client.id())
        .and_then(|(_, n)| n.upgrade())
    {
        return Hold { _nodes: Some(nodes) };
    }
    let nodes = Arc::new(Nodes {
        cluster: client.clone(),
        map: Mutex::default(),
        epoch: watch::channel(0).0,
        signals: Arc::new(Signals {
            kick: Notify::new(),
            poll_until: Mutex::new(Instant::now()),
        }),
        started: std::sync::Once::new(),
        first_map: tokio::sync::OnceCell::new(),
        news: watch::channel(0).0,
    });
    all.push((client.id().to_string(), Arc::downgrade(&nodes)));
    Hold { _nodes: Some(nodes) }
}

/// The held [`Nodes`] of `client`, if any.
fn of(client: &Client) -> Option<Arc<Nodes>> {
    if !client.is_clustered() {
        return None;
    }
    let all = ALL.lock().unwrap_or_else(PoisonError::into_inner);
    all.iter()
        .find(|(id, _)| id == client.id())
        .and_then(|(_, n)| n.upgrade())
}

/// Runs `call` on the connection that serves `slot`: the primary that owns
/// it when `client` is a cluster client whose nodes are held, else
/// `client` itself. Follows `MOVED` and failovers, and leaves `ASK` and
/// `TRYAGAIN` to `client`. `call` may run more than once.
pub(crate) async fn on_slot<R, F, Fut>(client: &Client, slot: u16, call: F) -> Result<R, fred::error::Error>
where
    F: Fn(Client) -> Fut,
    Fut: Future<Output = Result<R, fred::error::Error>>,
{
    match of(client) {
        Some(nodes) => nodes.run(slot, call).await,
        None => call(client.clone()).await,
    }
}

/// The connection a command of `slot` goes to now, without following
/// anything: for a command that must use the connection an earlier one
/// used (`WAIT`).
pub(crate) fn connection(client: &Client, slot: u16) -> Client {
    of(client)
        .and_then(|nodes| nodes.owner(slot).map(|n| n.client))
        .unwrap_or_else(|| client.clone())
}

/// What changes a durable send's connections: taken before the send, asked
/// after its `WAIT` ([`Watch::changed`]).
#[derive(Debug)]
pub(crate) struct Watch {
    client: broadcast::Receiver<Server>,
    nodes: Option<(watch::Receiver<u64>, Vec<broadcast::Receiver<Server>>)>,
}

/// Starts watching the connections of `client` (and of its nodes).
pub(crate) fn watch(client: &Client) -> Watch {
    let nodes = of(client).map(|n| {
        let map = n.map();
        let rx = map.nodes.iter().map(|node| node.client.reconnect_rx()).collect();
        (n.epoch.subscribe(), rx)
    });
    Watch {
        client: client.reconnect_rx(),
        nodes,
    }
}

impl Watch {
    /// Whether a connection was made again, a slot changed its primary or
    /// a command went through the cluster client since the watch began (a
    /// receiver that lagged missed some: they did).
    pub(crate) fn changed(&mut self) -> bool {
        use broadcast::error::TryRecvError;
        let again = |rx: &mut broadcast::Receiver<Server>| {
            !matches!(rx.try_recv(), Err(TryRecvError::Empty | TryRecvError::Closed))
        };
        let mut changed = again(&mut self.client);
        if let Some((epoch, rx)) = &mut self.nodes {
            changed |= epoch.has_changed().unwrap_or(false);
            for rx in rx {
                changed |= again(rx);
            }
        }
        changed
    }
}

impl Nodes {
    fn map(&self) -> Arc<Map> {
        self.map.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    fn owner(&self, slot: u16) -> Option<Node> {
        self.map().owner(usize::from(slot)).cloned()
    }

    /// Wakes the reader of the map and has it poll for [`POLL_FOR`].
    fn kick(&self) {
        *self.signals.poll_until.lock().unwrap_or_else(PoisonError::into_inner) = Instant::now() + POLL_FOR;
        self.signals.kick.notify_one();
    }

    /// Starts the reader of the map, and waits (at most [`FIRST_MAP`]) for
    /// its first map: a command routed by none goes to the cluster client,
    /// and the first map then moving the epoch would make a send in flight
    /// take itself for re-sent.
    /// Only the first commands wait: without a map (no `CLUSTER SLOTS`
    /// permission, say) every command goes to the cluster client at once.
    async fn started(self: &Arc<Self>) {
        self.start();
        self.first_map
            .get_or_init(|| async {
                let mut epoch = self.epoch.subscribe();
                let known = async {
                    while self.map().nodes.is_empty() {
                        if epoch.changed().await.is_err() {
                            return;
                        }
                    }
                };
                let _ = tokio::time::timeout(FIRST_MAP, known).await;
            })
            .await;
    }

    async fn run<R, F, Fut>(self: Arc<Self>, slot: u16, call: F) -> Result<R, fred::error::Error>
    where
        F: Fn(Client) -> Fut,
        Fut: Future<Output = Result<R, fred::error::Error>>,
    {
        self.started().await;
        // As long as a command may wait in fred's buffer.
        let timeout = self.cluster.perf_config().default_command_timeout;
        let deadline = Instant::now() + if timeout.is_zero() { UNTIMED } else { timeout };
        let mut redirects = 0;
        while Instant::now() < deadline {
            let Some(node) = self.owner(slot) else {
                // No map yet, or the slot has no primary in it: fred's
                // cluster client, which `connection` names too, so a
                // `WAIT` after this counts it (a new map moves the epoch).
                return call(self.cluster.clone()).await;
            };
            let mut epoch = self.epoch.subscribe();
            let attempt = call(node.client.clone());
            tokio::pin!(attempt);
            let mut slow = Box::pin(tokio::time::sleep(SLOW));
            let outcome = loop {
                tokio::select! {
                    result = &mut attempt => break Some(result),
                    _ = &mut slow => {
                        // Still waiting: the node may be dead or hung (or
                        // running a big script): the map is polled while
                        // it waits.
                        self.kick();
                        slow = Box::pin(tokio::time::sleep(POLL_FOR / 2));
                    }
                    Ok(()) = epoch.changed() => {
                        if self.owner(slot).is_none_or(|n| !n.is(&node.host, node.port)) {
                            break None;
                        }
                    }
                }
            };
            let error = match outcome {
                None => continue,
                Some(Ok(reply)) => return Ok(reply),
                Some(Err(e)) => e,
            };
            if self.owner(slot).is_none_or(|n| !n.is(&node.host, node.port)) {
                // Its connection was closed as it left the map.
                continue;
            }
            tracing::debug!(slot, host = node.host, port = node.port, error = %error, "a primary's command failed");
            let details = error.details();
            match details.split(' ').next().unwrap_or_default() {
                "MOVED" if redirects < REDIRECTS => {
                    redirects += 1;
                    self.moved(slot, details);
                }
                "MOVED" => break,
                "CLUSTERDOWN" => {
                    self.kick();
                    tokio::time::sleep(PAUSE).await;
                }
                "ASK" | "TRYAGAIN" => break,
                _ if crate::error::connection_failed(&error) => {
                    self.kick();
                    tokio::time::sleep(PAUSE).await;
                }
                _ => return Err(error),
            }
        }
        // fred's cluster client follows what this does not; a durable
        // send's WAIT on the node would not count this command.
        self.epoch.send_modify(|e| *e += 1);
        call(self.cluster.clone()).await
    }

    /// `MOVED <slot> <host>:<port>`: the slot is served there now.
    fn moved(&self, slot: u16, details: &str) {
        let target = details.split(' ').nth(2).and_then(|a| a.rsplit_once(':'));
        if let Some((host, port)) = target.and_then(|(h, p)| Some((h.to_string(), p.parse::<u16>().ok()?))) {
            let mut ranges = self.map().ranges();
            ranges.push((slot, slot, host, port));
            self.install(ranges);
        }
        self.kick();
    }

    /// Makes `ranges` the map, and moves the epoch on, when a slot's
    /// primary changed; closes the connections of nodes no longer primaries.
    fn install(&self, ranges: Vec<Range>) {
        let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        let new = Map::new(ranges, &map, |host, port| self.connect(host, port));
        if !map.differs(&new) {
            return;
        }
        let left = map.left(&new);
        *map = Arc::new(new);
        drop(map);
        self.epoch.send_modify(|e| *e += 1);
        self.news.send_modify(|n| *n += 1);
        for client in left {
            tokio::spawn(async move {
                let _ = client.quit().await;
            });
        }
    }

    /// A connection to one primary, connecting in the background
    /// (commands wait for it).
    fn connect(&self, host: &str, port: u16) -> Option<Client> {
        let client = map::client_for(&self.cluster, host, port)?;
        client.connect();
        Some(client)
    }

    /// Starts the reader of the map once, from within the runtime.
    fn start(self: &Arc<Self>) {
        self.started.call_once(|| {
            let nodes = Arc::downgrade(self);
            let signals = self.signals.clone();
            self.kick();
            tokio::spawn(read_map(nodes, signals));
        });
    }

    /// Reads `CLUSTER SLOTS` from every primary at once (from the cluster
    /// client before any is known), installs the first answer.
    async fn refresh(&self) {
        let mut asked: Vec<(Client, String)> = self
            .map()
            .nodes
            .iter()
            .map(|n| (n.client.clone(), n.host.clone()))
            .collect();
        if asked.is_empty() {
            let host = match &self.cluster.client_config().server {
                ServerConfig::Clustered { hosts, .. } => hosts.first().map(|s| s.host.to_string()),
                _ => None,
            };
            asked.push((self.cluster.clone(), host.unwrap_or_default()));
        }
        let reads = asked
            .into_iter()
            .map(|(client, host)| Box::pin(map::read(client, host)));
        if let Ok((ranges, _)) = futures::future::select_ok(reads).await {
            self.install(ranges);
        }
    }
}

impl Drop for Nodes {
    fn drop(&mut self) {
        self.signals.kick.notify_one();
        let map = self.map.get_mut().unwrap_or_else(PoisonError::into_inner);
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            for node in &map.nodes {
                let client = node.client.clone();
                runtime.spawn(async move {
                    let _ = client.quit().await;
                });
            }
        }
    }
}

/// Reads the map when kicked, every [`POLL`] while polling, and every
/// [`NO_MAP_POLL`] while it has none (its reads failed, on a loaded
/// machine, say: until it has one, every command goes through the
/// cluster client, and wake-ups cross the cluster bus); ends with its
/// [`Nodes`].
async fn read_map(nodes: Weak<Nodes>, signals: Arc<Signals>) {
    loop {
        let Some(live) = nodes.upgrade() else { return };
        live.refresh().await;
        let none = live.map().nodes.is_empty();
        drop(live);
        let until = *signals.poll_until.lock().unwrap_or_else(PoisonError::into_inner);
        if Instant::now() < until {
            tokio::time::sleep(POLL).await;
        } else if none {
            let _ = tokio::time::timeout(NO_MAP_POLL, signals.kick.notified()).await;
        } else {
            signals.kick.notified().await;
        }
    }
}
