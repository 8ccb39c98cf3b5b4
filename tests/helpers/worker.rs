//! Worker processes for the fault tests: `examples/worker.rs`, built once
//! per test process, spawned as a child, stopped with SIGKILL or SIGTERM,
//! and the ledgers it writes (one line per handled delivery).

use std::collections::HashMap;
use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How long a worker may take from spawn to `ready`.
pub const READY_TIMEOUT: Duration = delayqueue_test_support::WAIT;

/// Settings of one worker process; see `examples/worker.rs` for the flags.
#[derive(Debug, Clone)]
pub struct WorkerOptions {
    pub url: String,
    pub queue: String,
    pub ledger: PathBuf,
    /// Where the worker's stderr (its tracing log) goes.
    pub log: PathBuf,
    pub concurrency: usize,
    pub handler_ms: u64,
    /// Simulated work after the ledger line, before the handler returns.
    pub after_ms: u64,
    pub max_consume_ms: u64,
    pub fetch_interval_ms: u64,
    pub fetch_limit: Option<usize>,
    /// The consumer's heartbeat (its registry entry); the library's default when unset.
    pub heartbeat_ms: Option<u64>,
    pub record_redis_time: bool,
    /// Run under libfaketime with this offset, e.g. `"+1h"` or `"-1h"`.
    pub clock_offset: Option<String>,
    /// Handlers watch for aborts and write `"<id> <attempt>"` here when
    /// told of one (`--aborts`); `None`: they ignore aborts.
    pub aborts: Option<PathBuf>,
}

impl WorkerOptions {
    /// A worker of `queue` at `url` that writes `<dir>/<name>.ledger` and
    /// `<dir>/<name>.log`, with 4 handlers of 10 ms, a 1 s visibility
    /// timeout and a 100 ms fetch interval.
    pub fn new(url: &str, queue: &str, dir: &Path, name: &str) -> WorkerOptions {
        WorkerOptions {
            url: url.to_string(),
            queue: queue.to_string(),
            ledger: dir.join(format!("{name}.ledger")),
            log: dir.join(format!("{name}.log")),
            concurrency: 4,
            handler_ms: 10,
            after_ms: 0,
            max_consume_ms: 1_000,
            fetch_interval_ms: 100,
            fetch_limit: None,
            heartbeat_ms: None,
            record_redis_time: false,
            clock_offset: None,
            aborts: None,
        }
    }

    fn args(&self) -> Vec<String> {
        let mut args: Vec<String> = [
            ("--url", self.url.clone()),
            ("--queue", self.queue.clone()),
            ("--ledger", self.ledger.display().to_string()),
            ("--concurrency", self.concurrency.to_string()),
            ("--handler-ms", self.handler_ms.to_string()),
            ("--after-ms", self.after_ms.to_string()),
            ("--max-consume-ms", self.max_consume_ms.to_string()),
            ("--fetch-interval-ms", self.fetch_interval_ms.to_string()),
        ]
        .into_iter()
        .flat_map(|(k, v)| [k.to_string(), v])
        .collect();
        if let Some(n) = self.fetch_limit {
            args.extend(["--fetch-limit".to_string(), n.to_string()]);
        }
        if let Some(ms) = self.heartbeat_ms {
            args.extend(["--heartbeat-ms".to_string(), ms.to_string()]);
        }
        if self.record_redis_time {
            args.push("--record-redis-time".to_string());
        }
        if let Some(aborts) = &self.aborts {
            args.extend(["--aborts".to_string(), aborts.display().to_string()]);
        }
        args
    }
}

/// A running worker process. SIGKILLed and reaped on drop.
pub struct Worker {
    child: Option<Child>,
    pub opts: WorkerOptions,
    /// Lines the worker printed before `ready` (e.g. `clock_ms=`).
    pub banner: Vec<String>,
    /// Later stdout lines (`stopped`), read by a thread.
    lines: mpsc::Receiver<String>,
}

impl Worker {
    /// Spawns a worker and waits (up to [`READY_TIMEOUT`]) until it prints
    /// `ready`; panics with its log if it exits or takes longer.
    pub async fn spawn(opts: WorkerOptions) -> Worker {
        let bin = worker_bin();
        let log = fs::File::create(&opts.log)
            .unwrap_or_else(|e| panic!("support: cannot create worker log {}: {e}", opts.log.display()));
        let mut cmd = Command::new(bin);
        cmd.args(opts.args())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log));
        if let Some(offset) = &opts.clock_offset {
            // libfaketime preloaded directly rather than through the
            // `faketime` wrapper: the wrapper forks and waits, so a signal
            // sent to it would not reach the worker. Monotonic clocks stay
            // real; only the wall clock (what a host's skew is) moves.
            cmd.env("LD_PRELOAD", libfaketime())
                .env("FAKETIME", offset)
                .env("DONT_FAKE_MONOTONIC", "1");
        }
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("support: cannot spawn worker {}: {e}", bin.display()));
        let stdout = child.stdout.take().expect("support: worker stdout is piped");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut worker = Worker {
            child: Some(child),
            opts,
            banner: Vec::new(),
            lines,
        };
        worker.wait_ready().await;
        worker
    }

    async fn wait_ready(&mut self) {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            match self.lines.try_recv() {
                Ok(line) if line == "ready" => return,
                Ok(line) => {
                    self.banner.push(line);
                    continue;
                }
                Err(mpsc::TryRecvError::Disconnected) => {
                    let status = self.child.as_mut().and_then(|c| c.wait().ok());
                    panic!("worker exited before `ready` ({status:?}); log:\n{}", self.log_tail(30));
                }
                Err(mpsc::TryRecvError::Empty) => {}
            }
            if Instant::now() >= deadline {
                self.kill();
                panic!("worker not ready within {READY_TIMEOUT:?}; log:\n{}", self.log_tail(30));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The worker's clock at start, from its banner (ms since the epoch).
    pub fn clock_ms(&self) -> Option<u64> {
        self.banner
            .iter()
            .flat_map(|l| l.split_whitespace())
            .find_map(|w| w.strip_prefix("clock_ms="))
            .and_then(|v| v.parse().ok())
    }

    /// SIGKILL (what `Child::kill` sends) and reap. No-op once stopped.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM, then waits up to `limit` for the worker to exit (SIGKILL
    /// after that). Returns its exit status, or `None` when it had to be
    /// killed or was stopped already.
    pub async fn terminate(&mut self, limit: Duration) -> Option<ExitStatus> {
        let child = self.child.as_mut()?;
        let sent = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .expect("support: cannot run `kill`");
        assert!(sent.success(), "support: kill -TERM {} failed", child.id());
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = child.try_wait().expect("support: try_wait on worker") {
                self.child = None;
                return Some(status);
            }
            if Instant::now() >= deadline {
                self.kill();
                return None;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The last `n` lines of the worker's stderr log.
    pub fn log_tail(&self, n: usize) -> String {
        let text = fs::read_to_string(&self.opts.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.kill();
    }
}

/// One handled delivery, as a worker's ledger recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    pub id: String,
    pub attempt: u32,
    /// Redis's clock when the handler started (`--record-redis-time`).
    pub redis_ms: Option<u64>,
    /// Which ledger the line is in (its file stem, the worker's name).
    pub worker: String,
}

/// A ledger's complete lines. A trailing line without its newline is being
/// written (the file is read while workers run) and is left out; it counts
/// in the second value. A line that does not parse panics.
pub fn read_ledger(path: &Path) -> (Vec<Delivery>, usize) {
    let text = match fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return (Vec::new(), 0),
        Err(e) => panic!("support: cannot read ledger {}: {e}", path.display()),
    };
    let worker = path.file_stem().unwrap_or_default().to_string_lossy().into_owned();
    let (complete, partial) = match text.rfind('\n') {
        Some(end) => (&text[..end], text.len() - end - 1),
        None => ("", text.len()),
    };
    let deliveries = complete
        .lines()
        .map(|line| {
            let parse = || -> Option<Delivery> {
                let mut words = line.split(' ');
                let id = words.next().filter(|w| !w.is_empty())?.to_string();
                let attempt = words.next()?.parse().ok()?;
                let redis_ms = match words.next() {
                    Some(w) => Some(w.parse().ok()?),
                    None => None,
                };
                words.next().is_none().then(|| Delivery {
                    id,
                    attempt,
                    redis_ms,
                    worker: worker.clone(),
                })
            };
            parse().unwrap_or_else(|| panic!("support: bad ledger line {line:?} in {}", path.display()))
        })
        .collect();
    (deliveries, partial)
}

/// Every delivery in `ledgers`, by message id, each id's in ledger order
/// (ledger by ledger). The second value counts bytes of unfinished lines.
pub fn read_ledgers<'a>(ledgers: impl IntoIterator<Item = &'a Path>) -> (HashMap<String, Vec<Delivery>>, usize) {
    let mut by_id: HashMap<String, Vec<Delivery>> = HashMap::new();
    let mut partial = 0;
    for path in ledgers {
        let (deliveries, p) = read_ledger(path);
        partial += p;
        for d in deliveries {
            by_id.entry(d.id.clone()).or_default().push(d);
        }
    }
    (by_id, partial)
}

/// The worker example's binary, built (once per test process) with the
/// profile of the running test, so it always matches the library's source.
/// `DELAYQUEUE_WORKER_BIN` names a prebuilt one instead.
pub fn worker_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(bin) = std::env::var_os("DELAYQUEUE_WORKER_BIN") {
            return PathBuf::from(bin);
        }
        build_worker()
    })
}

/// Runs `cargo build --example worker` into the target dir the test
/// executable lives in: `<target>/[<triple>/]<profile dir>/deps/<test>`,
/// and the example lands in `<profile dir>/examples/worker`. A no-op when
/// it is up to date (e.g. built by a plain `cargo test`).
fn build_worker() -> PathBuf {
    let exe = std::env::current_exe().expect("support: current_exe");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("support: test executable is not in <target>/<profile>/deps")
        .to_path_buf();
    let mut target_dir = profile_dir.parent().expect("support: no target dir").to_path_buf();
    let mut triple = None;
    if !target_dir.join("CACHEDIR.TAG").exists() && target_dir.parent().is_some_and(|t| t.join("CACHEDIR.TAG").exists())
    {
        triple = target_dir.file_name().map(|t| t.to_string_lossy().into_owned());
        target_dir = target_dir.parent().unwrap().to_path_buf();
    }
    let profile = match profile_dir.file_name().and_then(|p| p.to_str()) {
        Some("debug") => "dev".to_string(),
        Some(other) => other.to_string(),
        None => panic!("support: odd profile dir {}", profile_dir.display()),
    };
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(&cargo);
    // Without the variables cargo set for this test (CARGO_PKG_NAME,
    // CARGO_MANIFEST_DIR, ...): build scripts (ring's, through cc) record
    // them, so inheriting them would rebuild ring and all above it here and
    // again at the next plain `cargo test`.
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        if [
            "CARGO_PKG_",
            "CARGO_MANIFEST_",
            "CARGO_CRATE_",
            "CARGO_BIN_",
            "CARGO_PRIMARY_",
            "CARGO_TARGET_TMPDIR",
        ]
        .iter()
        .any(|p| name.starts_with(p))
            || name == "OUT_DIR"
        {
            cmd.env_remove(name.as_ref());
        }
    }
    cmd.current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["build", "--quiet", "--example", "worker", "--profile", &profile])
        .arg("--target-dir")
        .arg(&target_dir);
    if let Some(triple) = &triple {
        cmd.args(["--target", triple]);
    }
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("support: cannot run {cargo:?} to build the worker example: {e}"));
    assert!(
        out.status.success(),
        "support: `cargo build --example worker` failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bin = profile_dir
        .join("examples")
        .join(format!("worker{}", std::env::consts::EXE_SUFFIX));
    assert!(
        bin.exists(),
        "support: built the worker, but {} is missing",
        bin.display()
    );
    bin
}

/// The libfaketime shared library (package `faketime` on Debian/Ubuntu),
/// or `FAKETIME_LIB`. Panics with how to install it when it is missing.
pub fn libfaketime() -> PathBuf {
    if let Some(lib) = std::env::var_os("FAKETIME_LIB").map(PathBuf::from) {
        assert!(lib.exists(), "FAKETIME_LIB={} does not exist", lib.display());
        return lib;
    }
    let mut dirs = vec![
        PathBuf::from("/usr/lib/faketime"),
        PathBuf::from("/usr/local/lib/faketime"),
    ];
    // Debian's multiarch dirs: /usr/lib/x86_64-linux-gnu/faketime, ...
    if let Ok(entries) = fs::read_dir("/usr/lib") {
        dirs.extend(entries.flatten().map(|e| e.path().join("faketime")));
    }
    dirs.into_iter()
        .map(|d| d.join("libfaketime.so.1"))
        .find(|lib| lib.exists())
        .unwrap_or_else(|| {
            panic!(
                "libfaketime not found: install package faketime (apt-get install -y faketime; \
                 scripts/test.sh does it) or set FAKETIME_LIB to libfaketime.so.1"
            )
        })
}
