//! The test harness of `delayqueue`, shared by its unit tests and its
//! integration tests: a real, private `redis-server` per test.
//!
//! Every test gets its own server process on a free loopback port with its own
//! temp directory, so tests can run in parallel, kill/restart the server, and
//! inspect persistence without interfering with each other or with any Redis
//! already running on the machine. Also clusters ([`cluster`]), Sentinel
//! ([`sentinel`]), TLS ([`tls`]), a proxy that cuts connections ([`proxy`]),
//! log capture ([`logs`]), the at-least-once model that randomized runs are
//! checked against ([`history_model`]), and the waits every test uses:
//! [`wait_until`], [`wait_for`] and [`WAIT`].
//!
//! Std, fred and tokio only, no `delayqueue` types: the library's unit tests
//! use it too. The helpers that name `delayqueue` live in `tests/helpers/`.

pub mod cluster;
pub mod history_model;
pub mod logs;
pub mod proxy;
pub mod sentinel;
pub mod tls;

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use fred::clients::Client;
use fred::prelude::{Builder, ClientLike, Config, ReconnectPolicy};

/// How long a freshly spawned server may take to answer `PING`.
const READY_TIMEOUT: Duration = WAIT;
/// Poll interval while waiting for the server to come up.
const READY_POLL: Duration = Duration::from_millis(20);
/// Attempts with a fresh port when the server exits early (port race).
const START_ATTEMPTS: usize = 5;
/// Socket timeout for the raw RESP helpers.
const RAW_IO_TIMEOUT: Duration = Duration::from_secs(10);

const NOT_FOUND_MSG: &str =
    "redis-server not found: install it (apt-get install -y redis-server) or set REDIS_SERVER_BIN";

/// Extra knobs for the spawned server. `Default` is a plain, non-persistent server.
#[derive(Debug, Clone, Default)]
pub struct ServerOptions {
    /// `--appendonly yes` (AOF persistence) when true.
    pub appendonly: bool,
    /// `--appendfsync always|everysec|no`.
    pub appendfsync: Option<String>,
    /// `--maxmemory`, e.g. `"2mb"`.
    pub maxmemory: Option<String>,
    /// `--maxmemory-policy`, e.g. `"noeviction"`.
    pub maxmemory_policy: Option<String>,
    /// Appended verbatim to the command line, e.g. `["--hz", "100"]`.
    pub extra_args: Vec<String>,
}

impl ServerOptions {
    /// AOF persistence with `appendfsync always`: every acknowledged write
    /// survives a crash-restart.
    pub fn durable() -> ServerOptions {
        ServerOptions {
            appendonly: true,
            appendfsync: Some("always".into()),
            ..Default::default()
        }
    }
}

/// A private `redis-server` child process. Killed and its dir removed on drop.
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
    opts: ServerOptions,
}

/// A parsed RESP2 reply, for tests that want structure rather than a rendering.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RawReply {
    Simple(String),
    Error(String),
    Integer(i64),
    Bulk(Vec<u8>),
    Nil,
    Array(Vec<RawReply>),
}

impl RawReply {
    /// redis-cli-like rendering: `OK`, `123`, bulk contents, `(nil)`,
    /// errors keep their leading `-` (e.g. `-ERR ...`), arrays (and nested
    /// arrays, flattened) joined by `'\n'`.
    pub fn render(&self) -> String {
        match self {
            RawReply::Simple(s) => s.clone(),
            RawReply::Error(e) => format!("-{e}"),
            RawReply::Integer(i) => i.to_string(),
            RawReply::Bulk(b) => String::from_utf8_lossy(b).into_owned(),
            RawReply::Nil => "(nil)".to_string(),
            RawReply::Array(items) => items.iter().map(RawReply::render).collect::<Vec<_>>().join("\n"),
        }
    }
}

/// Why a launch attempt did not produce a ready server.
enum LaunchError {
    /// The process exited before answering PING (typically: port taken).
    Exited(ExitStatus),
    /// Still running but never answered PING within `READY_TIMEOUT`.
    TimedOut,
}

impl RedisServer {
    /// Start a plain server (no persistence).
    pub async fn start() -> RedisServer {
        Self::start_with(ServerOptions::default()).await
    }

    /// Start a server with the given options on a fresh free port and temp dir.
    pub async fn start_with(opts: ServerOptions) -> RedisServer {
        let dir = unique_temp_dir();
        let mut server = RedisServer {
            child: None,
            port: 0,
            dir,
            opts,
        };
        for attempt in 1..=START_ATTEMPTS {
            server.port = free_port();
            // A cluster node's bus port may be the one taken: chosen afresh too.
            if let Some(at) = server.opts.extra_args.iter().position(|a| a == "--cluster-port") {
                if let Some(bus) = server.opts.extra_args.get_mut(at + 1) {
                    *bus = free_port().to_string();
                }
            }
            let child = server.spawn();
            server.child = Some(child);
            match server.wait_ready().await {
                Ok(()) => return server,
                Err(LaunchError::Exited(status)) => {
                    // Most likely someone grabbed the port between our probe and
                    // redis' bind; try again with another one.
                    server.child = None;
                    if attempt == START_ATTEMPTS {
                        panic!(
                            "redis-server exited early ({status}) on {START_ATTEMPTS} attempts; {}",
                            server.diagnostics()
                        );
                    }
                }
                Err(LaunchError::TimedOut) => {
                    server.kill();
                    panic!(
                        "redis-server on port {} did not answer PING within {:?}; {}",
                        server.port,
                        READY_TIMEOUT,
                        server.diagnostics()
                    );
                }
            }
        }
        unreachable!("start loop always returns or panics")
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The server's private working dir (holds the AOF/RDB files and `redis.log`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A connected fred client on this server; see [`client_for`].
    pub async fn client(&self) -> Client {
        client_for(&self.url()).await
    }

    /// SIGKILL the server and reap it. Data not yet written (e.g. with
    /// `appendfsync no` / RDB) is lost, which is exactly what crash tests want.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Whether the process runs (it was not [`kill`](Self::kill)ed).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Sends `signal` (`"STOP"`, `"CONT"`) to the process with `kill`: a
    /// stopped server neither reads its connections nor answers.
    pub fn signal(&self, signal: &str) {
        // The child's pid: a stopped server answers no INFO.
        let pid = self.child.as_ref().expect("support: server not running").id();
        let status = Command::new("kill")
            .args([format!("-{signal}"), pid.to_string()])
            .status()
            .expect("support: run kill");
        assert!(status.success(), "support: kill -{signal} {pid}");
    }

    /// Start the server again on the SAME port and dir with the same options
    /// (so existing clients can reconnect and AOF/RDB files are reloaded).
    /// Retries while the port is briefly busy.
    pub async fn start_again(&mut self) {
        self.kill();
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let child = self.spawn();
            self.child = Some(child);
            match self.wait_ready().await {
                Ok(()) => return,
                Err(LaunchError::Exited(status)) => {
                    self.child = None;
                    if Instant::now() >= deadline {
                        panic!(
                            "redis-server could not be restarted on port {} ({status}); {}",
                            self.port,
                            self.diagnostics()
                        );
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(LaunchError::TimedOut) => {
                    self.kill();
                    panic!(
                        "restarted redis-server on port {} did not answer PING within {:?}; {}",
                        self.port,
                        READY_TIMEOUT,
                        self.diagnostics()
                    );
                }
            }
        }
    }

    /// Crash-restart: `kill()` then `start_again()`.
    pub async fn restart(&mut self) {
        self.kill();
        self.start_again().await;
    }

    /// Redis's clock (`TIME`) in ms since the Unix epoch.
    pub fn now_ms(&self) -> u64 {
        match self.raw_reply(&["TIME"]) {
            RawReply::Array(t) => {
                t[0].render().parse::<u64>().expect("support: TIME seconds") * 1000
                    + t[1].render().parse::<u64>().expect("support: TIME micros") / 1000
            }
            other => panic!("support: TIME -> {other:?}"),
        }
    }

    /// Field `name` of `INFO server` (e.g. `redis_version`, which Valkey
    /// reports too, or `valkey_version`), when the server has it.
    pub fn info_server(&self, name: &str) -> Option<String> {
        let info = self.raw_command(&["INFO", "server"]);
        info.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .map(|v| v.trim().to_string())
    }

    /// Send one command over a fresh raw TCP connection (no fred involved) and
    /// return the reply rendered by [`RawReply::render`].
    pub fn raw_command(&self, args: &[&str]) -> String {
        self.raw_reply(args).render()
    }

    /// Like [`raw_command`](Self::raw_command) but returns the parsed reply.
    pub fn raw_reply(&self, args: &[&str]) -> RawReply {
        self.raw_replies(&[args]).pop().expect("support: one reply")
    }

    /// Sends `commands` in order over one fresh raw connection (so that,
    /// say, `ASKING` applies to the command after it) and returns their
    /// replies.
    pub fn raw_replies(&self, commands: &[&[&str]]) -> Vec<RawReply> {
        let mut stream = connect_raw(self.port, Duration::from_secs(2))
            .unwrap_or_else(|e| panic!("support: raw connect to port {} failed: {e}", self.port));
        stream
            .set_read_timeout(Some(RAW_IO_TIMEOUT))
            .expect("support: set_read_timeout");
        stream
            .set_write_timeout(Some(RAW_IO_TIMEOUT))
            .expect("support: set_write_timeout");
        let mut reader = BufReader::new(stream.try_clone().expect("support: clone raw stream"));
        commands
            .iter()
            .map(|args| {
                stream
                    .write_all(&encode_command(args))
                    .unwrap_or_else(|e| panic!("support: raw write of {args:?} failed: {e}"));
                read_reply(&mut reader).unwrap_or_else(|e| panic!("support: raw read of reply to {args:?} failed: {e}"))
            })
            .collect()
    }

    /// Spawn the process for the current port/dir/options (does not wait).
    fn spawn(&self) -> Child {
        let bin = server_bin();
        let port = self.port.to_string();
        let dir = self.dir.to_str().expect("support: temp dir is not UTF-8");
        let log = self.dir.join("redis.log");
        let log = log.to_str().expect("support: log path is not UTF-8");
        let mut args: Vec<String> = [
            "--port",
            &port,
            "--bind",
            "127.0.0.1",
            "--dir",
            dir,
            "--save",
            "",
            "--appendonly",
            if self.opts.appendonly { "yes" } else { "no" },
            "--daemonize",
            "no",
            "--protected-mode",
            "no",
            "--logfile",
            log,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let optional = [
            ("--appendfsync", &self.opts.appendfsync),
            ("--maxmemory", &self.opts.maxmemory),
            ("--maxmemory-policy", &self.opts.maxmemory_policy),
        ];
        for (flag, value) in optional {
            if let Some(v) = value {
                args.push(flag.to_string());
                args.push(v.clone());
            }
        }
        args.extend(self.opts.extra_args.iter().cloned());

        // Config errors are printed to stderr before the logfile is opened, so
        // keep stderr in a file for the panic message instead of discarding it.
        let stderr = fs::File::create(self.dir.join("redis.stderr"))
            .map(Stdio::from)
            .unwrap_or_else(|_| Stdio::null());
        match Command::new(&bin)
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
        {
            Ok(child) => child,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                panic!("{NOT_FOUND_MSG} (tried {})", bin.display())
            }
            Err(e) => panic!("support: failed to spawn {}: {e}", bin.display()),
        }
    }

    /// Poll until the server answers `+PONG` (retrying on `-LOADING`), it
    /// exits, or `READY_TIMEOUT` elapses.
    async fn wait_ready(&mut self) -> Result<(), LaunchError> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let child = self.child.as_mut().expect("support: wait_ready without a child");
            if let Some(status) = child.try_wait().expect("support: try_wait on redis-server") {
                return Err(LaunchError::Exited(status));
            }
            // Two tests can be handed the same free port; then the server
            // that answers may be the other test's, so check it is ours.
            if ping_raw(self.port) && self.answers_from_own_dir() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(LaunchError::TimedOut);
            }
            tokio::time::sleep(READY_POLL).await;
        }
    }

    /// Whether the server answering on our port runs in our dir (each server
    /// has its own), i.e. is the process we spawned.
    fn answers_from_own_dir(&self) -> bool {
        let probe = || -> std::io::Result<bool> {
            let mut stream = connect_raw(self.port, Duration::from_millis(200))?;
            stream.set_read_timeout(Some(Duration::from_millis(500)))?;
            stream.write_all(&encode_command(&["CONFIG", "GET", "dir"]))?;
            let reply = read_reply(&mut BufReader::new(stream))?;
            let RawReply::Array(items) = reply else {
                return Ok(false);
            };
            let answering = items.get(1).map(RawReply::render).unwrap_or_default();
            let own = self.dir.canonicalize().unwrap_or_else(|_| self.dir.clone());
            Ok(Path::new(&answering) == own)
        };
        probe().unwrap_or(false)
    }

    /// Tail of redis.log plus captured stderr, for panic messages.
    fn diagnostics(&self) -> String {
        let tail = |name: &str| {
            let text = fs::read_to_string(self.dir.join(name)).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(20)..].join("\n")
        };
        format!(
            "dir {}\n--- redis.log (tail) ---\n{}\n--- stderr (tail) ---\n{}",
            self.dir.display(),
            tail("redis.log"),
            tail("redis.stderr")
        )
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// The kind of server the suite runs on, as `scripts/test.sh --server`
/// says in `DELAYQUEUE_TEST_SERVER`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerKind {
    /// Redis: also when the variable is unset, so that a plain `cargo test`
    /// holds every test to what Debian's redis-server has.
    Redis,
    /// Valkey: builds differ (PyPI's have no TLS; 9.x can run without its
    /// Lua module), so a test that needs such a part may skip, saying so.
    Valkey,
}

/// The server kind of this run; see [`ServerKind`].
pub fn server_kind() -> ServerKind {
    match std::env::var("DELAYQUEUE_TEST_SERVER").as_deref() {
        Ok("valkey") => ServerKind::Valkey,
        _ => ServerKind::Redis,
    }
}

/// Says on stderr that `test` skips and why. Written to the stream itself,
/// not with `eprintln!`, so that the test harness does not swallow the line
/// of a test that passes.
pub fn skip(test: &str, why: &str) {
    let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {why}");
}

/// The server binary the tests start: `REDIS_SERVER_BIN`, else `redis-server`.
pub fn server_bin() -> PathBuf {
    std::env::var_os("REDIS_SERVER_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("redis-server"))
}

/// How long a test waits for something that should happen within moments.
/// Generous on purpose: a loaded machine may stall a process for seconds,
/// and a passing test never waits this long, so it costs nothing.
pub const WAIT: Duration = Duration::from_secs(30);

/// Polls `cond` every 10 ms until it holds or `limit` passes.
pub async fn wait_until(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if cond() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    cond()
}

/// [`wait_until`] for a condition that has to await (e.g. ask Redis):
/// polls `cond` every 10 ms until it holds or `limit` passes.
pub async fn wait_for<F, Fut>(limit: Duration, mut cond: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if cond().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    cond().await
}

/// A connected fred client on `url` that reconnects forever (fast backoff),
/// so it survives `restart()`; commands time out after 10 s so tests can't hang.
pub async fn client_for(url: &str) -> Client {
    let cfg = Config::from_url(url).expect("support: invalid redis url for fred Config");
    client_with(cfg, url).await
}

/// [`client_for`] with a fred `Config` the caller built (e.g. with TLS
/// settings); `url` only names it in the panic message.
pub async fn client_with(cfg: Config, url: &str) -> Client {
    let client = Builder::from_config(cfg)
        .set_policy(ReconnectPolicy::new_exponential(0, 50, 1000, 2))
        .with_performance_config(|p| p.default_command_timeout = Duration::from_secs(10))
        .with_connection_config(|c| {
            c.connection_timeout = Duration::from_secs(2);
        })
        .build()
        .expect("support: failed to build fred client");
    client
        .init()
        .await
        .unwrap_or_else(|e| panic!("support: fred client failed to connect to {url}: {e:?}"));
    client
}

/// Every key in the server (the tests own the server), sorted, except
/// those that stay by design ([`stays`]).
pub async fn all_keys(client: &Client) -> Vec<String> {
    let mut keys: Vec<String> = client.custom(fred::cmd!("KEYS"), vec!["*"]).await.unwrap();
    keys.retain(|k| !stays(k));
    keys.sort();
    keys
}

/// Whether `key` is one a test expects to stay after every message is
/// gone: a queue's totals hash (per queue, not per message) or the
/// registry of live consumers (per consumer process: a running consumer
/// has its entry there; tests/consumers.rs checks that none is left once
/// the consumers are gone).
pub fn stays(key: &str) -> bool {
    key.ends_with(":totals") || key.contains("{#consumers}")
}

/// Ask the OS for a free loopback port. Racy by nature (it is released before
/// redis binds it), which is why `start_with` retries on early exit.
fn free_port() -> u16 {
    let listener =
        TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("support: could not bind 127.0.0.1:0 to find a free port");
    listener
        .local_addr()
        .expect("support: local_addr of probe listener")
        .port()
}

/// A fresh dir under the system temp dir, unique across processes and tests.
fn unique_temp_dir() -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let dir = std::env::temp_dir().join(format!("delayqueue-redis-{}-{n}-{nanos}", std::process::id()));
    fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("support: cannot create temp dir {}: {e}", dir.display()));
    dir
}

fn connect_raw(port: u16, timeout: Duration) -> std::io::Result<TcpStream> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    TcpStream::connect_timeout(&addr, timeout)
}

/// One readiness probe: true only on `+PONG` (so `-LOADING` means "not yet").
fn ping_raw(port: u16) -> bool {
    let probe = || -> std::io::Result<bool> {
        let mut stream = connect_raw(port, Duration::from_millis(200))?;
        stream.set_read_timeout(Some(Duration::from_millis(500)))?;
        stream.set_write_timeout(Some(Duration::from_millis(500)))?;
        stream.write_all(b"PING\r\n")?;
        let mut line = String::new();
        BufReader::new(stream).read_line(&mut line)?;
        Ok(line.starts_with("+PONG"))
    };
    probe().unwrap_or(false)
}

/// Encode a command as a RESP array of bulk strings.
fn encode_command(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out
}

fn invalid(msg: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, msg)
}

/// Read one RESP2 reply (recursively for arrays).
fn read_reply<R: BufRead>(reader: &mut R) -> std::io::Result<RawReply> {
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Err(invalid("connection closed before reply".into()));
    }
    let line = line.trim_end_matches("\r\n");
    let (kind, rest) = line.split_at(line.len().min(1));
    let parse_len = |s: &str| -> std::io::Result<i64> {
        s.parse::<i64>()
            .map_err(|e| invalid(format!("bad length/integer {s:?}: {e}")))
    };
    match kind {
        "+" => Ok(RawReply::Simple(rest.to_string())),
        "-" => Ok(RawReply::Error(rest.to_string())),
        ":" => Ok(RawReply::Integer(parse_len(rest)?)),
        "$" => {
            let len = parse_len(rest)?;
            if len < 0 {
                return Ok(RawReply::Nil);
            }
            let mut buf = vec![0u8; len as usize + 2];
            reader.read_exact(&mut buf)?;
            buf.truncate(len as usize);
            Ok(RawReply::Bulk(buf))
        }
        "*" => {
            let len = parse_len(rest)?;
            if len < 0 {
                return Ok(RawReply::Nil);
            }
            (0..len)
                .map(|_| read_reply(reader))
                .collect::<std::io::Result<Vec<_>>>()
                .map(RawReply::Array)
        }
        _ => Err(invalid(format!("unexpected reply line {line:?}"))),
    }
}
