//! A private Redis Cluster for tests: cluster-enabled `redis-server`
//! processes on free loopback ports (each a [`RedisServer`] with its own temp
//! dir, so each has its own `nodes.conf`), joined by
//! `redis-cli --cluster create ... --cluster-replicas <r> --cluster-yes`.
//! Every process is killed when the [`RedisCluster`] is dropped.
//!
//! With replicas ([`RedisCluster::start_with_replicas`]) the nodes run with
//! a `cluster-node-timeout` of 1 s, so a replica takes over within seconds
//! of its primary's death: [`RedisCluster::kill`] a primary (SIGKILL),
//! [`RedisCluster::wait_failover`], [`RedisCluster::restart`] the old node
//! (same port, dir and `nodes.conf`: it rejoins as a replica), and
//! [`RedisCluster::cut_replicas_of`] a primary to make its replicas lag.
//!
//! Also: where a slot lives, a queue name whose slot lands on a given node,
//! every key of every node, `SCRIPT FLUSH` on every node, and
//! [`RedisCluster::migrate_slot`], which moves one slot to another node the
//! way `redis-cli --cluster reshard` does (IMPORTING/MIGRATING, `MIGRATE` in
//! batches, `SETSLOT NODE` on every node) while clients keep running.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fred::clients::Client;

use super::{client_for, RawReply, RedisServer, ServerOptions};

/// How long the cluster may take to agree on its slots after `create`.
const JOIN_TIMEOUT: Duration = Duration::from_secs(20);
/// How long `redis-cli --cluster create` may run.
const CREATE_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest time one slot migration may take.
const MIGRATE_TIMEOUT: Duration = Duration::from_secs(60);
/// Most `MIGRATE` batches of one slot migration.
const MIGRATE_MAX_BATCHES: usize = 100_000;
/// `cluster-node-timeout` of a cluster without replicas: generous, since
/// a primary marked failed would fail the whole cluster on a loaded machine.
const NODE_TIMEOUT_MS: u32 = 5000;
/// `cluster-node-timeout` of a cluster with replicas: a replica starts its
/// election about a second after its primary stops answering.
const FAILOVER_NODE_TIMEOUT_MS: u32 = 1000;

/// A running cluster; see the module docs.
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
    /// `CLUSTER MYID` of each node, by index.
    ids: Vec<String>,
}

/// What [`RedisCluster::migrate_slot`] did.
#[derive(Debug, Clone)]
pub struct Migration {
    pub slot: u16,
    pub from: usize,
    pub to: usize,
    /// Keys moved with `MIGRATE`.
    pub keys: usize,
    /// `MIGRATE` calls made.
    pub batches: usize,
    /// From `SETSLOT IMPORTING` to the last `SETSLOT NODE`.
    pub elapsed: Duration,
}

impl RedisCluster {
    /// Starts `primaries` (at least 3, as `redis-cli --cluster create`
    /// requires) cluster-enabled servers, creates the cluster and waits until
    /// every node says `cluster_state:ok` and all agree on who owns each slot.
    pub async fn start(primaries: usize) -> RedisCluster {
        Self::start_with_replicas(primaries, 0).await
    }

    /// Starts `primaries` primaries with `replicas` replicas each (which
    /// node gets which role is `redis-cli`'s choice: see
    /// [`primaries`](Self::primaries)), and waits as [`start`](Self::start)
    /// does and until every replica is in sync with its primary.
    pub async fn start_with_replicas(primaries: usize, replicas: usize) -> RedisCluster {
        assert!(
            primaries >= 3,
            "support: redis-cli --cluster create needs at least 3 primaries"
        );
        let timeout = if replicas == 0 {
            NODE_TIMEOUT_MS
        } else {
            FAILOVER_NODE_TIMEOUT_MS
        };
        let count = primaries * (1 + replicas);
        let mut nodes = Vec::with_capacity(count);
        for _ in 0..count {
            nodes.push(RedisServer::start_with(node_options(timeout)).await);
        }
        let ids = nodes.iter().map(|n| n.raw_command(&["CLUSTER", "MYID"])).collect();
        let cluster = RedisCluster { nodes, ids };
        cluster.create(replicas);
        cluster.wait_joined().await;
        cluster
    }

    /// `redis-cluster://127.0.0.1:p1?node=127.0.0.1:p2&node=...`
    pub fn url(&self) -> String {
        let first = self.nodes[0].port();
        let others: Vec<String> = self.nodes[1..]
            .iter()
            .map(|n| format!("node=127.0.0.1:{}", n.port()))
            .collect();
        format!("redis-cluster://127.0.0.1:{first}?{}", others.join("&"))
    }

    /// A connected fred cluster client, set up as [`client_for`] sets up
    /// every test client (reconnect policy, timeouts).
    pub async fn client(&self) -> Client {
        client_for(&self.url()).await
    }

    /// The servers, by index.
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    pub fn node(&self, i: usize) -> &RedisServer {
        &self.nodes[i]
    }

    /// The slot of `key` (only its hash tag counts when it has one).
    pub fn slot_of(key: &str) -> u16 {
        fred::util::redis_keyslot(key.as_bytes())
    }

    /// Index of the node that owns `slot`, as the first running node sees it.
    pub fn owner_of(&self, slot: u16) -> usize {
        let map = slot_map(self.running().next().expect("support: every node is down"));
        let port = map
            .iter()
            .find(|(start, end, _)| (*start..=*end).contains(&slot))
            .map(|(_, _, port)| *port)
            .unwrap_or_else(|| panic!("support: no node owns slot {slot}: {map:?}"));
        self.index_of_port(port)
    }

    /// The node that holds the keys of queue `name` (default prefix `dq:`).
    pub fn owner_of_queue(&self, name: &str) -> usize {
        self.owner_of(Self::slot_of(&format!("dq:{{{name}}}:pending")))
    }

    /// The first of `base0`, `base1`, ... whose queue keys live on `node`.
    pub fn queue_on(&self, node: usize, base: &str) -> String {
        (0..10_000)
            .map(|i| format!("{base}{i}"))
            .find(|name| self.owner_of_queue(name) == node)
            .unwrap_or_else(|| panic!("support: no queue name {base}N lands on node {node}"))
    }

    /// Every key of every primary, sorted (`KEYS *`: the tests own the
    /// cluster), except those that stay by design ([`crate::stays`]).
    pub fn all_keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = self.primaries().into_iter().flat_map(|i| self.keys_of(i)).collect();
        keys.retain(|k| !crate::stays(k));
        keys.sort();
        keys
    }

    /// Every key of node `i`.
    pub fn keys_of(&self, i: usize) -> Vec<String> {
        match self.nodes[i].raw_reply(&["KEYS", "*"]) {
            RawReply::Array(items) => items.iter().map(RawReply::render).collect(),
            other => panic!("support: KEYS * on node {i}: {other:?}"),
        }
    }

    /// `SCRIPT FLUSH` on every running node.
    pub fn script_flush_all(&self) {
        for (i, node) in self.nodes.iter().enumerate().filter(|(_, n)| n.is_running()) {
            let reply = node.raw_command(&["SCRIPT", "FLUSH"]);
            assert_eq!(reply, "OK", "support: SCRIPT FLUSH on node {i}");
        }
    }

    /// Moves `slot` to node `to` while clients keep using it, as
    /// `redis-cli --cluster reshard` does: [`begin_move`](Self::begin_move),
    /// the slot's keys moved with `MIGRATE` in batches of `batch` keys
    /// (sleeping `pause` between batches, which keeps the slot half-moved
    /// for longer), then [`end_move`](Self::end_move). Meanwhile clients get
    /// `ASK` for keys already moved, and `TRYAGAIN` for multi-key commands
    /// whose keys are split between the two nodes.
    ///
    /// Call it from a multi-threaded runtime when clients run in the same
    /// test: the raw commands block the calling thread.
    pub async fn migrate_slot(&self, slot: u16, to: usize, batch: usize, pause: Duration) -> Migration {
        let started = Instant::now();
        let mut m = self.begin_move(slot, to);
        loop {
            assert!(
                started.elapsed() < MIGRATE_TIMEOUT && m.batches < MIGRATE_MAX_BATCHES,
                "support: migrating slot {slot} took more than {MIGRATE_TIMEOUT:?} or {MIGRATE_MAX_BATCHES} batches"
            );
            let found = self.keys_left(&m, batch.max(1));
            if found.is_empty() {
                break;
            }
            self.move_keys(&mut m, &found);
            if !pause.is_zero() {
                tokio::time::sleep(pause).await;
            }
        }
        self.end_move(&m);
        m.elapsed = started.elapsed();
        m
    }

    /// Opens a move of `slot` to node `to`: the target is marked IMPORTING,
    /// then the owner MIGRATING. The keys stay where they are until
    /// [`move_keys`](Self::move_keys).
    pub fn begin_move(&self, slot: u16, to: usize) -> Migration {
        let from = self.owner_of(slot);
        assert_ne!(from, to, "support: slot {slot} is on node {to} already");
        let slot_arg = slot.to_string();
        self.ok(to, &["CLUSTER", "SETSLOT", &slot_arg, "IMPORTING", &self.ids[from]]);
        self.ok(from, &["CLUSTER", "SETSLOT", &slot_arg, "MIGRATING", &self.ids[to]]);
        Migration {
            slot,
            from,
            to,
            keys: 0,
            batches: 0,
            elapsed: Duration::ZERO,
        }
    }

    /// Up to `count` keys of the slot of `m` still on its old owner.
    pub fn keys_left(&self, m: &Migration, count: usize) -> Vec<String> {
        let args = ["CLUSTER", "GETKEYSINSLOT", &m.slot.to_string(), &count.to_string()];
        match self.nodes[m.from].raw_reply(&args) {
            RawReply::Array(items) => items.iter().map(RawReply::render).collect(),
            other => panic!("support: GETKEYSINSLOT {}: {other:?}", m.slot),
        }
    }

    /// Moves `keys` (of the slot of `m`, on its old owner) with one `MIGRATE`.
    pub fn move_keys(&self, m: &mut Migration, keys: &[String]) {
        let target_port = self.nodes[m.to].port().to_string();
        let mut args = vec!["MIGRATE", "127.0.0.1", &target_port, "", "0", "5000", "KEYS"];
        args.extend(keys.iter().map(String::as_str));
        // NOKEY: every key of the batch expired in between.
        let reply = self.nodes[m.from].raw_command(&args);
        assert!(
            reply == "OK" || reply == "NOKEY",
            "support: MIGRATE of slot {}: {reply}",
            m.slot
        );
        m.keys += keys.len();
        m.batches += 1;
    }

    /// Closes a move: every node is told the new owner (target first, then
    /// the old owner, then the rest). Keys left on the old owner are lost to
    /// the slot, so move them all first.
    pub fn end_move(&self, m: &Migration) {
        let (slot_arg, node_arg) = (m.slot.to_string(), &self.ids[m.to]);
        let order = [m.to, m.from]
            .into_iter()
            .chain((0..self.nodes.len()).filter(|i| *i != m.from && *i != m.to));
        for i in order {
            self.ok(i, &["CLUSTER", "SETSLOT", &slot_arg, "NODE", node_arg]);
        }
    }

    /// The primaries, by index, as the first running node sees the slots.
    pub fn primaries(&self) -> Vec<usize> {
        let map = slot_map(self.running().next().expect("support: every node is down"));
        let mut primaries: Vec<usize> = map.iter().map(|(_, _, port)| self.index_of_port(*port)).collect();
        primaries.sort_unstable();
        primaries.dedup();
        primaries
    }

    /// The running nodes that replicate node `primary`, by index.
    pub fn replicas_of(&self, primary: usize) -> Vec<usize> {
        let port = i64::from(self.nodes[primary].port());
        (0..self.nodes.len())
            .filter(|i| self.nodes[*i].is_running())
            .filter(|i| match self.nodes[*i].raw_reply(&["ROLE"]) {
                RawReply::Array(parts) => {
                    parts.first().map(RawReply::render).as_deref() == Some("slave")
                        && parts.get(2) == Some(&RawReply::Integer(port))
                }
                _ => false,
            })
            .collect()
    }

    /// SIGKILLs node `i`: whatever it had not sent to a replica is lost.
    pub fn kill(&mut self, i: usize) {
        self.nodes[i].kill();
    }

    /// Waits until the slots of node `killed` (killed or stopped) have a
    /// new primary: every other running node says `cluster_state:ok` and
    /// reports the same slot map, without `killed`. Returns the new owner
    /// of `slot`.
    pub async fn wait_failover(&self, killed: usize, slot: u16, limit: Duration) -> usize {
        let gone = self.nodes[killed].port();
        let others = || self.running().filter(|n| n.port() != gone);
        let deadline = Instant::now() + limit;
        loop {
            let states_ok = others().all(|n| n.raw_command(&["CLUSTER", "INFO"]).contains("cluster_state:ok"));
            let maps: Vec<_> = others().map(slot_map).collect();
            let agreed = maps.iter().all(|m| *m == maps[0]);
            if states_ok && agreed && !maps[0].is_empty() && maps[0].iter().all(|(_, _, port)| *port != gone) {
                let map = &maps[0];
                let (_, _, port) = map
                    .iter()
                    .find(|(start, end, _)| (*start..=*end).contains(&slot))
                    .unwrap_or_else(|| panic!("support: no node owns slot {slot}: {map:?}"));
                return self.index_of_port(*port);
            }
            assert!(
                Instant::now() < deadline,
                "support: no failover of node {killed} within {limit:?}: {}",
                others().next().unwrap().raw_command(&["CLUSTER", "NODES"])
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Starts the killed node `i` again on its port, dir and `nodes.conf`,
    /// and [`wait_rejoined`](Self::wait_rejoined).
    pub async fn restart(&mut self, i: usize) {
        self.nodes[i].start_again().await;
        self.wait_rejoined(i).await;
    }

    /// Waits until node `i`, a primary that was replaced (and then started
    /// again or [`resume`](Self::resume)d), is a replica in sync with its
    /// new primary and the whole cluster agrees again.
    pub async fn wait_rejoined(&self, i: usize) {
        self.wait_joined().await;
        let deadline = Instant::now() + JOIN_TIMEOUT;
        while self.nodes[i].raw_command(&["ROLE"]).starts_with("master") {
            assert!(
                Instant::now() < deadline,
                "support: node {i} still a primary {JOIN_TIMEOUT:?} after its restart"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.wait_joined().await;
    }

    /// Makes the replicas of `primary` lag: stops their processes
    /// (SIGSTOP: they neither read nor reconnect) and has `primary` drop
    /// their links, so what it takes from now on exists only on it.
    /// Returns them, for [`resume`](Self::resume).
    pub fn cut_replicas_of(&self, primary: usize) -> Vec<usize> {
        let replicas = self.replicas_of(primary);
        for r in &replicas {
            self.nodes[*r].signal("STOP");
        }
        let cut = self.nodes[primary].raw_command(&["CLIENT", "KILL", "TYPE", "replica"]);
        assert_eq!(cut, replicas.len().to_string(), "support: replica links cut");
        replicas
    }

    /// Lets stopped nodes run again (SIGCONT).
    pub fn resume(&self, nodes: &[usize]) {
        for i in nodes {
            self.nodes[*i].signal("CONT");
        }
    }

    fn running(&self) -> impl Iterator<Item = &RedisServer> {
        self.nodes.iter().filter(|n| n.is_running())
    }

    /// Runs a command on node `i` that must answer OK.
    fn ok(&self, i: usize, args: &[&str]) {
        let reply = self.nodes[i].raw_command(args);
        assert_eq!(reply, "OK", "support: {args:?} on port {}", self.nodes[i].port());
    }

    fn index_of_port(&self, port: u16) -> usize {
        self.nodes
            .iter()
            .position(|n| n.port() == port)
            .unwrap_or_else(|| panic!("support: port {port} is not a node of this cluster"))
    }

    /// `redis-cli --cluster create`, killed if it runs too long.
    fn create(&self, replicas: usize) {
        let bin = std::env::var_os("REDIS_CLI_BIN")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("redis-cli"));
        let mut args: Vec<String> = vec!["--cluster".into(), "create".into()];
        args.extend(self.nodes.iter().map(|n| format!("127.0.0.1:{}", n.port())));
        args.extend([
            "--cluster-replicas".to_string(),
            replicas.to_string(),
            "--cluster-yes".into(),
        ]);
        let out_path = self.nodes[0].dir().join("cluster-create.out");
        let out = std::fs::File::create(&out_path).expect("support: create cluster-create.out");
        let mut child = Command::new(&bin)
            .args(&args)
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("support: clone file handle"))
            .stderr(out)
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "support: cannot run {} (install redis-tools or set REDIS_CLI_BIN): {e}",
                    bin.display()
                )
            });
        let deadline = Instant::now() + CREATE_TIMEOUT;
        let status = loop {
            if let Some(status) = child.try_wait().expect("support: try_wait on redis-cli") {
                break status;
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "support: redis-cli --cluster create ran longer than {CREATE_TIMEOUT:?}:\n{}",
                    std::fs::read_to_string(&out_path).unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let output = std::fs::read_to_string(&out_path).unwrap_or_default();
        assert!(
            status.success() && output.contains("All 16384 slots covered"),
            "support: redis-cli --cluster create failed ({status}):\n{output}"
        );
    }

    /// Until every running node says `cluster_state:ok`, knows every other
    /// node and reports the same slot map, and every replica is in sync.
    async fn wait_joined(&self) {
        let deadline = Instant::now() + JOIN_TIMEOUT;
        let known = format!("cluster_known_nodes:{}", self.nodes.len());
        loop {
            let states_ok = self.running().all(|n| {
                let info = n.raw_command(&["CLUSTER", "INFO"]);
                info.contains("cluster_state:ok") && info.contains(&known)
            });
            let first = slot_map(self.running().next().expect("support: every node is down"));
            let maps_agree = self.running().all(|n| slot_map(n) == first);
            let replicas_synced = self.running().all(|n| {
                let info = n.raw_command(&["INFO", "replication"]);
                info.contains("role:master") || info.contains("master_link_status:up")
            });
            if states_ok && maps_agree && replicas_synced {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "support: cluster not ok after {JOIN_TIMEOUT:?}: {}",
                self.running().next().unwrap().raw_command(&["CLUSTER", "NODES"])
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// A cluster node: cluster mode on, its `nodes.conf` in its own dir,
/// `cluster-node-timeout` of `timeout_ms`, an explicit bus port (the
/// default, port + 10000, may not exist), a full sync to a replica
/// started at once (by default a primary waits 5 s for more replicas),
/// and `cluster-require-full-coverage no`, as docs/scaling.md advises: the
/// primaries that stay up serve their slots while another one's replica
/// is not promoted yet.
fn node_options(timeout_ms: u32) -> ServerOptions {
    ServerOptions {
        extra_args: [
            "--repl-diskless-sync-delay",
            "0",
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            &timeout_ms.to_string(),
            "--cluster-port",
            // Chosen at each start attempt (`RedisServer::start_with`).
            "0",
            "--cluster-require-full-coverage",
            "no",
        ]
        .map(String::from)
        .to_vec(),
        ..Default::default()
    }
}

/// `CLUSTER SLOTS` of `node` as sorted (first slot, last slot, primary port).
fn slot_map(node: &RedisServer) -> Vec<(u16, u16, u16)> {
    let RawReply::Array(ranges) = node.raw_reply(&["CLUSTER", "SLOTS"]) else {
        return Vec::new();
    };
    let mut map: Vec<(u16, u16, u16)> = ranges
        .iter()
        .filter_map(|range| {
            let RawReply::Array(parts) = range else { return None };
            let int = |r: &RawReply| match r {
                RawReply::Integer(i) => u16::try_from(*i).ok(),
                _ => None,
            };
            let RawReply::Array(primary) = parts.get(2)? else {
                return None;
            };
            Some((int(parts.first()?)?, int(parts.get(1)?)?, int(primary.get(1)?)?))
        })
        .collect();
    map.sort_unstable();
    map
}
