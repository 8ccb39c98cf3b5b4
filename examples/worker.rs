//! A worker process: consumes one queue and appends a line to a ledger file
//! for every message it handles.
//!
//! This is what a real deployment looks like (a process per host, each with
//! a consumer, stopped with SIGTERM), and it is what the fault tests in
//! `tests/faults_process.rs` run: several of these, killed with SIGKILL
//! mid-handler, run under `faketime` with a skewed clock, or left running
//! while Redis restarts. The tests check the ledgers against what they sent.
//! A ledger is independent of the queue: the handler writes its line before
//! it returns `Ok`, so a delivery whose ack died with the process is still
//! on record, and a message that was never handled is missing from it.
//!
//! The handler sleeps `--handler-ms` (the work), appends its line, sleeps
//! `--after-ms` (default 0: work after the side effect, like a commit) and
//! returns `Ok`. Each ledger line is `"<id> <attempt>\n"`, or
//! `"<id> <attempt> <redis ms>\n"` with `--record-redis-time`: Redis's clock
//! (TIME, in ms) when the handler started, which is the clock due times are
//! measured by.
//!
//! With `--aborts FILE` the handler also watches for an abort
//! (`DelayQueue::abort`, docs/handlers.md): aborted during its work, it
//! appends `"<id> <attempt>\n"` to that file instead of its ledger line and
//! returns at once.
//!
//! The worker prints `ready` on stdout once it consumes, and on SIGTERM or
//! Ctrl-C shuts down gracefully (running handlers finish and are acked,
//! claimed but unstarted messages are handed back) and exits 0.
//!
//! Run:
//!
//! ```sh
//! cargo run --example worker -- --url redis://127.0.0.1:6379 --queue orders \
//!     --ledger /tmp/orders.ledger --concurrency 8 --handler-ms 10
//! ```

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use delayqueue::fred::clients::Client;
use delayqueue::fred::prelude::ClientLike;
use delayqueue::{DelayQueue, HandlerError, Message};
use tokio::signal::unix::{signal, SignalKind};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

const USAGE: &str =
    "usage: worker --queue NAME --ledger FILE [--url URL] [--concurrency N] [--handler-ms N] [--after-ms N]
              [--max-consume-ms N] [--fetch-interval-ms N] [--fetch-limit N] [--heartbeat-ms N]
              [--record-redis-time] [--aborts FILE]";

struct Args {
    url: String,
    queue: String,
    ledger: PathBuf,
    concurrency: usize,
    /// Simulated work per message, before its ledger line.
    handler_ms: u64,
    /// Simulated work after the ledger line (a commit, say): a process
    /// killed in between has done the work but not acked it.
    after_ms: u64,
    /// Visibility timeout.
    max_consume_ms: u64,
    fetch_interval_ms: u64,
    /// Most messages claimed at once; the library's default when unset.
    fetch_limit: Option<usize>,
    /// How often the consumer writes its registry entry; the library's default when unset.
    heartbeat_ms: Option<u64>,
    record_redis_time: bool,
    /// Where a handler told of an abort writes its line; `None`: handlers ignore aborts.
    aborts: Option<PathBuf>,
}

fn args() -> Res<Args> {
    let mut a = Args {
        url: std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into()),
        queue: String::new(),
        ledger: PathBuf::new(),
        concurrency: 4,
        handler_ms: 10,
        after_ms: 0,
        max_consume_ms: 5_000,
        fetch_interval_ms: 1_000,
        fetch_limit: None,
        heartbeat_ms: None,
        record_redis_time: false,
        aborts: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut val = || args.next().ok_or(format!("{flag} needs a value\n{USAGE}"));
        match flag.as_str() {
            "--url" => a.url = val()?,
            "--queue" => a.queue = val()?,
            "--ledger" => a.ledger = val()?.into(),
            "--concurrency" => a.concurrency = val()?.parse()?,
            "--handler-ms" => a.handler_ms = val()?.parse()?,
            "--after-ms" => a.after_ms = val()?.parse()?,
            "--max-consume-ms" => a.max_consume_ms = val()?.parse()?,
            "--fetch-interval-ms" => a.fetch_interval_ms = val()?.parse()?,
            "--fetch-limit" => a.fetch_limit = Some(val()?.parse()?),
            "--heartbeat-ms" => a.heartbeat_ms = Some(val()?.parse()?),
            "--record-redis-time" => a.record_redis_time = true,
            "--aborts" => a.aborts = Some(val()?.into()),
            other => return Err(format!("unknown option {other}\n{USAGE}").into()),
        }
    }
    if a.queue.is_empty() || a.ledger.as_os_str().is_empty() {
        return Err(format!("--queue and --ledger are required\n{USAGE}").into());
    }
    Ok(a)
}

/// Redis's clock in ms. Retried for a while, so a Redis restart in the
/// middle of a handler does not fail the delivery.
async fn redis_time_ms(client: &Client) -> Result<u64, HandlerError> {
    let mut tries = 0;
    loop {
        let reply: Result<Vec<String>, _> = client
            .custom(delayqueue::fred::cmd!("TIME"), Vec::<String>::new())
            .await;
        match reply {
            Ok(t) if t.len() == 2 => {
                let (secs, micros): (u64, u64) = (t[0].parse()?, t[1].parse()?);
                return Ok(secs * 1000 + micros / 1000);
            }
            Ok(t) => return Err(format!("unexpected TIME reply {t:?}").into()),
            Err(e) if tries >= 40 => return Err(e.into()),
            Err(_) => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// Handles one message: the simulated work, one ledger line, then the
/// `--after-ms` work. The line is written with a single `write` on a file
/// opened for append, so lines of concurrent handlers never interleave,
/// and a process killed after it (before the ack) still leaves it behind.
async fn handle(msg: Message, ledger: Arc<File>, client: Client, args: Arc<Args>) -> Result<(), HandlerError> {
    let redis_ms = if args.record_redis_time {
        Some(redis_time_ms(&client).await?)
    } else {
        None
    };
    let work = tokio::time::sleep(Duration::from_millis(args.handler_ms));
    if let Some(aborts) = &args.aborts {
        tokio::select! {
            () = work => {}
            () = msg.aborted() => {
                let line = format!("{} {}\n", msg.id(), msg.attempt());
                OpenOptions::new().create(true).append(true).open(aborts)?.write_all(line.as_bytes())?;
                return Ok(());
            }
        }
    } else {
        work.await;
    }
    let line = match redis_ms {
        Some(ms) => format!("{} {} {ms}\n", msg.id(), msg.attempt()),
        None => format!("{} {}\n", msg.id(), msg.attempt()),
    };
    (&*ledger).write_all(line.as_bytes())?;
    if args.after_ms > 0 {
        tokio::time::sleep(Duration::from_millis(args.after_ms)).await;
    }
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("worker: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Res<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()))
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let args = Arc::new(args()?);
    let ledger = Arc::new(OpenOptions::new().create(true).append(true).open(&args.ledger)?);
    // Installed before consuming, so a SIGTERM right after `ready` is graceful too.
    let mut term = signal(SignalKind::terminate())?;

    let client = delayqueue::connect(&args.url).await?;
    let mut builder = DelayQueue::builder(args.queue.as_str(), client.clone())
        .concurrency(args.concurrency)
        .max_consume_duration(Duration::from_millis(args.max_consume_ms))
        .fetch_interval(Duration::from_millis(args.fetch_interval_ms));
    if let Some(n) = args.fetch_limit {
        builder = builder.fetch_limit(n);
    }
    if let Some(ms) = args.heartbeat_ms {
        builder = builder.heartbeat(Duration::from_millis(ms));
    }
    let queue = builder.build()?;

    let a = args.clone();
    let consumer = queue
        .start_consume(move |msg: Message| handle(msg, ledger.clone(), client.clone(), a.clone()))
        .await?;
    // This host's clock, so a test can see that faketime took effect.
    let clock_ms = SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis();
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "worker pid={} queue={} clock_ms={clock_ms}",
        std::process::id(),
        args.queue
    )?;
    writeln!(out, "ready")?;
    out.flush()?;
    drop(out);

    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    consumer.shutdown().await?;
    println!("stopped");
    Ok(())
}
