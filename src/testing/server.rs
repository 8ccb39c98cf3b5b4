//! A throwaway `redis-server` for integration tests.

use std::ffi::OsStr;
use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use fred::clients::Client;
use fred::interfaces::ClientLike;
use fred::prelude::{Builder, Config};

use crate::Error;

/// How long a started server may take to answer `PING`.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// Launches tried before giving up (another process may take the port
/// between picking it and the server's bind).
const ATTEMPTS: usize = 5;

/// A private `redis-server` process on a free loopback port, with its own
/// temp dir and no persistence; killed, and its dir removed, on drop. The
/// binary is `REDIS_SERVER_BIN`, else `redis-server` from `PATH`
/// (`valkey-server` works too).
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use delayqueue::testing::RedisServer;
/// use delayqueue::DelayQueue;
///
/// let server = RedisServer::start().await?;
/// let queue = DelayQueue::builder("orders", server.client().await?).build()?;
/// queue.send("close order 7").await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
}

impl RedisServer {
    /// Starts a server and waits until it answers `PING`. Fails when the
    /// binary is missing or never gets ready (the error says which, with
    /// the end of its log).
    pub async fn start() -> io::Result<RedisServer> {
        let bin = std::env::var_os("REDIS_SERVER_BIN").unwrap_or_else(|| "redis-server".into());
        Self::start_with(bin).await
    }

    /// Starts the server binary `bin` (a path, or a name looked up in
    /// `PATH`) as [`start`](Self::start) does.
    pub async fn start_with(bin: impl AsRef<OsStr>) -> io::Result<RedisServer> {
        let bin = bin.as_ref();
        let dir = temp_dir()?;
        let mut last = None;
        for _ in 0..ATTEMPTS {
            let port = free_port()?;
            let mut server = RedisServer {
                child: Some(spawn(bin, &dir, port)?),
                port,
                dir: dir.clone(),
            };
            match server.ready().await {
                Ok(()) => return Ok(server),
                Err(e) => {
                    server.kill();
                    // Keep the dir for the next attempt.
                    server.dir = PathBuf::new();
                    last = Some(e);
                }
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
        Err(last.unwrap_or_else(|| io::Error::other("the server did not start")))
    }

    /// Its port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Its working dir (its log is `redis.log` there).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A fred client connected to it.
    pub async fn client(&self) -> Result<Client, Error> {
        let client = Builder::from_config(Config::from_url(&self.url())?).build()?;
        client.init().await?;
        Ok(client)
    }

    /// Stops it (SIGKILL) and removes its dir, as dropping it does.
    pub fn stop(self) {}

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Waits for `+PONG`; a process that exited (a port taken) or a
    /// timeout is an error.
    async fn ready(&mut self) -> io::Result<()> {
        let end = Instant::now() + READY_TIMEOUT;
        while Instant::now() < end {
            if let Some(child) = self.child.as_mut() {
                if let Some(status) = child.try_wait()? {
                    return Err(io::Error::other(format!(
                        "redis-server exited ({status}): {}",
                        self.log_tail()
                    )));
                }
            }
            if ping(self.port).unwrap_or(false) {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!(
                "redis-server did not answer PING within {READY_TIMEOUT:?}: {}",
                self.log_tail()
            ),
        ))
    }

    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().rev().take(5).collect();
        lines.into_iter().rev().collect::<Vec<_>>().join(" | ")
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        if !self.dir.as_os_str().is_empty() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

fn spawn(bin: &OsStr, dir: &Path, port: u16) -> io::Result<Child> {
    Command::new(bin)
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .arg("--dir")
        .arg(dir)
        .args(["--logfile", "redis.log"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "cannot run {} ({e}): install redis-server or set REDIS_SERVER_BIN",
                    bin.to_string_lossy()
                ),
            )
        })
}

fn free_port() -> io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn temp_dir() -> io::Result<PathBuf> {
    static N: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "delayqueue-testing-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

fn ping(port: u16) -> io::Result<bool> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(1)))?;
    s.write_all(b"PING\r\n")?;
    let mut buf = [0u8; 7];
    let n = s.read(&mut buf)?;
    Ok(&buf[..n] == b"+PONG\r\n")
}
