//! What the dashboard (`delayqueue web`) and `delayqueue queues` cost at
//! 10,000 queues of one message each: the time of the first
//! `GET /api/overview`, the process's peak memory, the Redis script calls
//! per second while one overview page is open, and the time of `queues`.
//! Run against a throwaway Redis (it writes queues `q-00000`..`q-09999`
//! under prefix `scale:` and leaves them for the next run; `redis-cli -p
//! 6398 flushall` removes them):
//!
//! ```sh
//! taskset -c 0 redis-server --port 6398 --save '' --appendonly no --daemonize yes
//! cargo build --release --features cli --bin delayqueue --example web_scale
//! REDIS_URL=redis://127.0.0.1:6398 taskset -c 1 target/release/examples/web_scale target/release/delayqueue
//! redis-cli -p 6398 shutdown nosave
//! ```
//!
//! The argument is the `delayqueue` binary to measure (so two builds can
//! be compared on the same data). The dashboard is polled the way an open
//! overview page polls it (every 2 s, the default page) for `WATCH`, long
//! enough for the list of queues to be read again in the background; the
//! commands are timed `RUNS` times each, the median printed. A command
//! the binary does not know (an older build) prints "n/a".

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use delayqueue::fred::prelude::{Client, ClientLike};
use delayqueue::DelayQueue;
use futures::StreamExt;

const QUEUES: usize = 10_000;
const PREFIX: &str = "scale:";
const WATCH: Duration = Duration::from_secs(70);
const POLL: Duration = Duration::from_secs(2);
const RUNS: usize = 3;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6398".into());
    let bin = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "target/release/delayqueue".into());
    let client = delayqueue::connect(&url).await?;
    fill(&client).await?;

    let web = Web::start(&bin, &url)?;
    let (took, status, bytes) = web.get("/api/overview")?;
    println!(
        "first GET /api/overview: {:.0} ms, HTTP {status}, {bytes} bytes",
        took.as_secs_f64() * 1000.0
    );
    let before = scripts(&client).await?;
    let started = Instant::now();
    let mut times = Vec::new();
    while started.elapsed() < WATCH {
        let t = Instant::now();
        times.push(web.get("/api/overview")?.0);
        if let Some(rest) = POLL.checked_sub(t.elapsed()) {
            tokio::time::sleep(rest).await;
        }
    }
    let per_second = (scripts(&client).await? - before) / started.elapsed().as_secs_f64();
    times.sort();
    println!(
        "overview polled every 2 s for {}s: median {:.0} ms, {per_second:.0} script calls/s in Redis",
        WATCH.as_secs(),
        times[times.len() / 2].as_secs_f64() * 1000.0
    );
    let (peak, now) = web.memory()?;
    println!(
        "delayqueue web: peak RSS {:.1} MiB, RSS now {:.1} MiB",
        mib(peak),
        mib(now)
    );
    drop(web);

    for args in [&["queues"][..], &["queues", "--limit", "10000"]] {
        match time_command(&bin, &url, args)? {
            Some(t) => println!(
                "delayqueue {}: median {:.0} ms",
                args.join(" "),
                t.as_secs_f64() * 1000.0
            ),
            None => println!("delayqueue {}: n/a", args.join(" ")),
        }
    }
    Ok(())
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// Sends one message due in a day to every queue that has none yet.
async fn fill(client: &Client) -> Result<(), delayqueue::Error> {
    let found = delayqueue::find_queues(client, PREFIX).await?.len();
    if found == QUEUES {
        return Ok(());
    }
    let t = Instant::now();
    let results: Vec<Result<(), delayqueue::Error>> = futures::stream::iter(0..QUEUES)
        .map(|i| async move {
            let q = DelayQueue::builder(format!("q-{i:05}"), client.clone())
                .key_prefix(PREFIX)
                .build()?;
            if q.counts().await?.pending == 0 {
                q.send("x").delay(Duration::from_secs(86_400)).await?;
            }
            Ok(())
        })
        .buffer_unordered(64)
        .collect()
        .await;
    results.into_iter().collect::<Result<(), _>>()?;
    println!("filled {QUEUES} queues in {:.1}s", t.elapsed().as_secs_f64());
    Ok(())
}

/// Script calls Redis has run so far (`INFO commandstats`).
async fn scripts(client: &Client) -> Result<f64, delayqueue::Error> {
    let info: String = client
        .info(Some(delayqueue::fred::types::InfoKind::CommandStats))
        .await?;
    Ok(info
        .lines()
        .filter_map(|l| l.strip_prefix("cmdstat_evalsha:").or(l.strip_prefix("cmdstat_eval:")))
        .filter_map(|f| f.strip_prefix("calls=")?.split(',').next()?.parse::<f64>().ok())
        .sum())
}

/// A `delayqueue web` child on a loopback port; killed when dropped.
struct Web {
    child: Child,
    addr: String,
}

impl Web {
    fn start(bin: &str, url: &str) -> std::io::Result<Web> {
        let mut child = Command::new(bin)
            .args(["--url", url, "--prefix", PREFIX, "web", "--listen", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .spawn()?;
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("piped")).read_line(&mut line)?;
        // "dashboard on http://127.0.0.1:PORT/ ..."
        let addr = line
            .split("http://")
            .nth(1)
            .and_then(|rest| rest.split('/').next())
            .unwrap_or_default()
            .to_string();
        Ok(Web { child, addr })
    }

    /// One request: its time, status code and body size.
    fn get(&self, path: &str) -> std::io::Result<(Duration, u16, usize)> {
        let t = Instant::now();
        let mut s = TcpStream::connect(&self.addr)?;
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            self.addr
        )?;
        let mut reply = Vec::new();
        s.read_to_end(&mut reply)?;
        let took = t.elapsed();
        let text = String::from_utf8_lossy(&reply);
        let status = text.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
        let body = text.split_once("\r\n\r\n").map_or(0, |(_, b)| b.len());
        Ok((took, status, body))
    }

    /// Peak and current resident memory in KiB (`VmHWM`, `VmRSS`).
    fn memory(&self) -> std::io::Result<(u64, u64)> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))?;
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
                .unwrap_or(0)
        };
        Ok((field("VmHWM:"), field("VmRSS:")))
    }
}

impl Drop for Web {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The median time of `RUNS` runs of `bin args`; `None` when it fails.
fn time_command(bin: &str, url: &str, args: &[&str]) -> std::io::Result<Option<Duration>> {
    let mut times = Vec::new();
    for _ in 0..RUNS {
        let t = Instant::now();
        let status = Command::new(bin)
            .args(["--url", url, "--prefix", PREFIX])
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()?;
        if !status.success() {
            return Ok(None);
        }
        times.push(t.elapsed());
    }
    times.sort();
    Ok(Some(times[RUNS / 2]))
}
