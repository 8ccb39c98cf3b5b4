//! A private Sentinel deployment for tests: a primary, `n` replicas of it
//! (each a [`RedisServer`]) and 3 sentinels (`redis-server <conf>
//! --sentinel`, each in its own temp dir with its own config file, which
//! Sentinel rewrites) on free loopback ports, all killed on drop.

use std::fs;
use std::io::{BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fred::clients::Client;

use super::{
    client_for, connect_raw, encode_command, free_port, ping_raw, read_reply, unique_temp_dir, wait_until, RawReply,
    RedisServer, ServerOptions,
};

/// The name the sentinels monitor the primary under.
pub const SERVICE: &str = "dq";
/// Sentinels in a deployment; a quorum of 2 decides that the primary is down.
const SENTINELS: usize = 3;
const QUORUM: usize = 2;
/// Sentinel `down-after-milliseconds`: how long the primary must be
/// unreachable before it is considered down.
pub const DOWN_AFTER: Duration = Duration::from_millis(1000);
/// Sentinel `failover-timeout`; a failed election is retried after twice this.
const FAILOVER_TIMEOUT: Duration = Duration::from_millis(3000);
/// How long the deployment may take to find all its members.
const DISCOVER_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a sentinel may take to answer PING after it is spawned.
const READY_TIMEOUT: Duration = super::WAIT;
/// Attempts with a fresh port when a sentinel exits early (port race).
const START_ATTEMPTS: usize = 5;

/// A primary, its replicas and 3 sentinels; see the module docs.
pub struct SentinelSetup {
    /// `None` once [`SentinelSetup::kill_primary`] has killed it.
    primary: Option<RedisServer>,
    replicas: Vec<RedisServer>,
    sentinels: Vec<SentinelProcess>,
}

impl SentinelSetup {
    /// Starts a primary and `replicas` replicas, waits until they are
    /// linked, then starts 3 sentinels and waits until each of them knows the
    /// replicas and the other sentinels (a failover needs both).
    pub async fn start(replicas: usize) -> SentinelSetup {
        // A failover is followed by a resync of the other replicas: do it
        // at once rather than after the 5 s default of diskless syncs.
        let opts = |extra: Vec<String>| ServerOptions {
            extra_args: [vec!["--repl-diskless-sync-delay".to_string(), "0".to_string()], extra].concat(),
            ..Default::default()
        };
        let primary = RedisServer::start_with(opts(Vec::new())).await;
        let mut linked = Vec::new();
        for _ in 0..replicas {
            let of = vec!["--replicaof".into(), "127.0.0.1".into(), primary.port().to_string()];
            linked.push(RedisServer::start_with(opts(of)).await);
        }
        for r in &linked {
            let up = wait_until(DISCOVER_TIMEOUT, || {
                r.raw_command(&["INFO", "replication"])
                    .contains("master_link_status:up")
            })
            .await;
            assert!(up, "support: replica on port {} never linked to the primary", r.port());
        }
        let mut sentinels = Vec::new();
        for _ in 0..SENTINELS {
            sentinels.push(SentinelProcess::start(primary.port()).await);
        }
        let setup = SentinelSetup {
            primary: Some(primary),
            replicas: linked,
            sentinels,
        };
        let want = format!("slaves={replicas},sentinels={SENTINELS}");
        let found = wait_until(DISCOVER_TIMEOUT, || {
            setup
                .sentinels
                .iter()
                .all(|s| s.command(&["INFO", "sentinel"]).contains(&want))
        })
        .await;
        assert!(
            found,
            "support: sentinels did not find {want} within {DISCOVER_TIMEOUT:?}: {:?}",
            setup
                .sentinels
                .iter()
                .map(|s| s.command(&["INFO", "sentinel"]))
                .collect::<Vec<_>>()
        );
        setup
    }

    /// `redis-sentinel://127.0.0.1:s1/0?sentinelServiceName=dq&node=127.0.0.1:s2&node=...`
    pub fn url(&self) -> String {
        let others: Vec<String> = self.sentinels[1..]
            .iter()
            .map(|s| format!("&node=127.0.0.1:{}", s.port))
            .collect();
        format!(
            "redis-sentinel://127.0.0.1:{}/0?sentinelServiceName={SERVICE}{}",
            self.sentinels[0].port,
            others.concat()
        )
    }

    /// A connected fred client that finds the primary through the sentinels,
    /// set up as [`client_for`] sets up every test client.
    pub async fn client(&self) -> Client {
        client_for(&self.url()).await
    }

    /// The primary, while it runs.
    pub fn primary(&self) -> Option<&RedisServer> {
        self.primary.as_ref()
    }

    pub fn replicas(&self) -> &[RedisServer] {
        &self.replicas
    }

    /// The primary's address as the first sentinel that answers tells it.
    pub fn primary_port(&self) -> Option<u16> {
        self.sentinels.iter().find_map(|s| {
            let reply = s.reply(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE]).ok()?;
            let RawReply::Array(parts) = reply else { return None };
            parts.get(1)?.render().parse().ok()
        })
    }

    /// SIGKILLs the primary: whatever it had not sent to a replica is lost.
    pub fn kill_primary(&mut self) -> u16 {
        let mut primary = self.primary.take().expect("support: the primary was killed already");
        let port = primary.port();
        primary.kill();
        port
    }

    /// Sends `signal` (`"STOP"`, `"CONT"`) to every replica process with
    /// `kill`: a stopped replica neither reads its link nor reconnects it.
    pub fn signal_replicas(&self, signal: &str) {
        for r in &self.replicas {
            r.signal(signal);
        }
    }

    /// Waits until every sentinel names a primary other than `old_port` and
    /// that server says it is a primary. Returns the new primary's port.
    pub async fn wait_failover(&self, old_port: u16, limit: Duration) -> u16 {
        let deadline = Instant::now() + limit;
        loop {
            let named: Vec<Option<u16>> = self
                .sentinels
                .iter()
                .map(|s| {
                    let reply = s.reply(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE]).ok()?;
                    let RawReply::Array(parts) = reply else { return None };
                    parts.get(1)?.render().parse().ok()
                })
                .collect();
            if let Some(Some(port)) = named.first() {
                let agreed = named.iter().all(|p| *p == Some(*port));
                let promoted = self
                    .replicas
                    .iter()
                    .find(|r| r.port() == *port)
                    .is_some_and(|r| r.raw_command(&["ROLE"]).starts_with("master"));
                if *port != old_port && agreed && promoted {
                    return *port;
                }
            }
            assert!(
                Instant::now() < deadline,
                "support: no failover within {limit:?}; sentinels name {named:?}; {}",
                self.sentinels[0].log_tail()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until the primary on `port` has `n` replicas online.
    pub async fn wait_replicas_of(&self, port: u16, n: usize, limit: Duration) -> bool {
        let want = format!("connected_slaves:{n}");
        let server = self
            .replicas
            .iter()
            .chain(self.primary.as_ref())
            .find(|r| r.port() == port)
            .expect("support: no server on that port");
        wait_until(limit, || server.raw_command(&["INFO", "replication"]).contains(&want)).await
    }
}

/// One `redis-server --sentinel` process, killed and its dir removed on drop.
struct SentinelProcess {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
}

impl SentinelProcess {
    /// Writes a config that monitors the primary on `primary_port` and
    /// starts a sentinel on a free port (a fresh one if it exits early).
    async fn start(primary_port: u16) -> SentinelProcess {
        for _ in 0..START_ATTEMPTS {
            let dir = unique_temp_dir();
            let port = free_port();
            let conf = dir.join("sentinel.conf");
            fs::write(&conf, config(port, &dir, primary_port)).expect("support: write sentinel.conf");
            let stderr = fs::File::create(dir.join("sentinel.stderr"))
                .map(Stdio::from)
                .unwrap_or_else(|_| Stdio::null());
            let bin = super::server_bin();
            let child = Command::new(&bin)
                .arg(&conf)
                .arg("--sentinel")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(stderr)
                .spawn()
                .unwrap_or_else(|e| panic!("support: cannot spawn {}: {e}", bin.display()));
            let mut sentinel = SentinelProcess {
                child: Some(child),
                port,
                dir,
            };
            if sentinel.wait_ready(primary_port).await {
                return sentinel;
            }
            // It exited, most likely because the port was taken: another one.
        }
        panic!("support: a sentinel exited early on {START_ATTEMPTS} attempts");
    }

    /// Until it answers as a sentinel of the primary on `primary_port` (not
    /// another test's process that got the same port): true, or false when
    /// it exited. Panics when it does neither within `READY_TIMEOUT`.
    async fn wait_ready(&mut self, primary_port: u16) -> bool {
        let deadline = Instant::now() + READY_TIMEOUT;
        let want = format!("127.0.0.1\n{primary_port}");
        loop {
            let child = self.child.as_mut().expect("support: sentinel child");
            if child.try_wait().expect("support: try_wait on sentinel").is_some() {
                self.child = None;
                return false;
            }
            if ping_raw(self.port) && self.command(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE]) == want {
                return true;
            }
            assert!(
                Instant::now() < deadline,
                "support: sentinel on port {} did not answer within {READY_TIMEOUT:?}: {}",
                self.port,
                self.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// One command over a fresh connection.
    fn reply(&self, args: &[&str]) -> std::io::Result<RawReply> {
        let mut stream = connect_raw(self.port, Duration::from_millis(500))?;
        stream.set_read_timeout(Some(Duration::from_secs(5)))?;
        stream.set_write_timeout(Some(Duration::from_secs(5)))?;
        stream.write_all(&encode_command(args))?;
        read_reply(&mut BufReader::new(stream))
    }

    /// [`reply`](Self::reply) rendered; an IO error renders as `io error: ...`.
    fn command(&self, args: &[&str]) -> String {
        match self.reply(args) {
            Ok(reply) => reply.render(),
            Err(e) => format!("io error: {e}"),
        }
    }

    fn log_tail(&self) -> String {
        let text = fs::read_to_string(self.dir.join("sentinel.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        format!(
            "--- sentinel {} log (tail) ---\n{}",
            self.port,
            lines[lines.len().saturating_sub(30)..].join("\n")
        )
    }
}

impl Drop for SentinelProcess {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = fs::remove_dir_all(&self.dir);
    }
}

fn config(port: u16, dir: &Path, primary_port: u16) -> String {
    let dir = dir.to_str().expect("support: temp dir is not UTF-8");
    format!(
        "port {port}\n\
         bind 127.0.0.1\n\
         daemonize no\n\
         protected-mode no\n\
         dir {dir}\n\
         logfile {dir}/sentinel.log\n\
         sentinel monitor {SERVICE} 127.0.0.1 {primary_port} {QUORUM}\n\
         sentinel down-after-milliseconds {SERVICE} {}\n\
         sentinel failover-timeout {SERVICE} {}\n\
         sentinel parallel-syncs {SERVICE} 1\n",
        DOWN_AFTER.as_millis(),
        FAILOVER_TIMEOUT.as_millis()
    )
}
