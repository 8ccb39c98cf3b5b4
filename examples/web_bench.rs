//! What the dashboard costs: server time of its requests on a big queue
//! (1,000,000 pending, 10,000 dead), Redis included, and the Redis calls
//! of each. Run against a throwaway Redis (it writes queues `bench` and
//! `bench-000`..`bench-098` under prefix `dq:` and purges them afterwards):
//!
//! ```sh
//! taskset -c 0 redis-server --port 6399 --save '' --appendonly no --daemonize yes
//! cargo build --release --features web --example web_bench
//! REDIS_URL=redis://127.0.0.1:6399 taskset -c 1 target/release/examples/web_bench
//! redis-cli -p 6399 shutdown nosave
//! ```
//!
//! Each figure is the handling of one request by the router
//! (`tower::ServiceExt::oneshot`, no socket), the median and the 99th
//! percentile of `ROUNDS` requests. Redis's side is read from `INFO
//! commandstats` before and after: script calls (`EVALSHA`; the overview
//! sends one `TIME` more), commands run (those inside the scripts
//! included) and Redis's busy time in scripts, per request.

use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::Router;
use delayqueue::fred::prelude::{Client, ClientLike, ServerInterface};
use delayqueue::{DelayQueue, HandlerError, Message, NewMessage};
use futures::StreamExt;
use tower::ServiceExt;

const PENDING: usize = 1_000_000;
const DEAD: usize = 10_000;
const CHUNK: usize = 1000;
const ROUNDS: usize = 200;
const QUEUES: usize = 100;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6399".into());
    let client = delayqueue::connect(&url).await?;
    let queue = DelayQueue::builder("bench", client.clone()).concurrency(64).build()?;
    queue.purge().await?;

    let t = Instant::now();
    fill_dead(&queue).await?;
    fill_pending(&queue).await?;
    let counts = queue.counts().await?;
    println!(
        "filled in {:.1}s: {} pending, {} dead",
        t.elapsed().as_secs_f64(),
        counts.pending,
        counts.dead
    );

    let app = delayqueue::web::router(client.clone());
    // The first request scans the keyspace for the queues and starts the sampler.
    get(&app, "/api/overview").await;

    println!("request                                            median      p99    scripts  commands  Redis µs");
    for path in [
        "/metrics",
        "/api/overview",
        "/api/queues/bench",
        "/api/queues/bench/messages?state=pending",
        "/api/queues/bench/messages?state=pending&order=desc",
        "/api/queues/bench/messages?state=dead",
        "/api/queues/bench/messages?state=dead&limit=200",
        "/api/queues/bench/search?state=dead&q=no-such-text",
    ] {
        report(&client, &app, path, path).await?;
    }

    // 100 queues for /metrics: 99 more with one message each.
    for i in 0..QUEUES - 1 {
        DelayQueue::builder(format!("bench-{i:03}"), client.clone())
            .build()?
            .send("x")
            .delay(Duration::from_secs(3600))
            .await?;
    }
    let app = delayqueue::web::router(client.clone());
    get(&app, "/api/overview").await;
    let per_overview = report(&client, &app, "/api/overview (100 queues)", "/api/overview").await?;
    report(&client, &app, "/metrics (100 queues)", "/metrics").await?;
    println!(
        "one open overview polling every 2 s, 100 queues: {:.1} script calls/s, {:.0} commands/s, {:.2} ms/s of Redis time \
         (+ the sampler: one status per queue shown every 10 s)",
        per_overview.scripts / 2.0,
        per_overview.commands / 2.0,
        per_overview.busy_us / 2000.0
    );

    discovery(&client).await?;

    for i in 0..QUEUES - 1 {
        DelayQueue::builder(format!("bench-{i:03}"), client.clone())
            .build()?
            .purge()
            .await?;
    }
    queue.purge().await?;
    Ok(())
}

/// The queue list's refresh (at most every 30 s): one `find_queues`, a
/// SCAN of the whole keyspace, over 1,010,000 message keys and 100 queues.
async fn discovery(client: &Client) -> Result<(), delayqueue::Error> {
    let keys: u64 = client.dbsize().await?;
    let calls_before = scan_calls(client).await?;
    let mut times = Vec::new();
    let mut found = 0;
    for _ in 0..5 {
        let t = Instant::now();
        found = delayqueue::find_queues(client, "dq:").await?.len();
        times.push(t.elapsed());
    }
    times.sort();
    let calls = (scan_calls(client).await? - calls_before) / 5;
    println!(
        "queue list refresh (find_queues, {keys} keys): median {:.0} ms, {calls} SCAN calls, {found} queues found",
        times[2].as_secs_f64() * 1000.0
    );
    Ok(())
}

async fn scan_calls(client: &Client) -> Result<u64, delayqueue::Error> {
    let info: String = client
        .info(Some(delayqueue::fred::types::InfoKind::CommandStats))
        .await?;
    Ok(info
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_scan:calls="))
        .and_then(|rest| rest.split(',').next()?.parse().ok())
        .unwrap_or(0))
}

/// 10,000 dead letters: sent due now with no retry, failed by a consumer.
async fn fill_dead(queue: &DelayQueue) -> Result<(), delayqueue::Error> {
    send_chunks(queue, DEAD, Duration::ZERO, 0).await?;
    let consumer = queue
        .start_consume(|_m: Message| async { Err::<(), HandlerError>("bench: failed on purpose".into()) })
        .await?;
    while queue.counts().await?.dead < DEAD as u64 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    consumer.shutdown().await
}

/// 1,000,000 pending, due in 1 to 2 days.
async fn fill_pending(queue: &DelayQueue) -> Result<(), delayqueue::Error> {
    send_chunks(queue, PENDING, Duration::from_secs(86_400), 3).await
}

/// `n` messages due `base` to 2 × `base` from now, in chunks of 1000, 8 at a time.
async fn send_chunks(queue: &DelayQueue, n: usize, base: Duration, retries: u32) -> Result<(), delayqueue::Error> {
    let results: Vec<_> = futures::stream::iter((0..n).step_by(CHUNK))
        .map(|start| async move {
            let msgs = (start..(start + CHUNK).min(n)).map(|i| {
                NewMessage::new(format!("{{\"order\":{i},\"customer\":\"c-{}\"}}", i % 977))
                    .delay(base + base.mul_f64(i as f64 / n as f64))
                    .retry_count(retries)
            });
            queue.send_batch(msgs).await
        })
        .buffer_unordered(8)
        .collect()
        .await;
    for r in results {
        for sent in r? {
            sent?;
        }
    }
    Ok(())
}

async fn get(app: &Router, path: &str) -> Duration {
    let t = Instant::now();
    let res = app
        .clone()
        .oneshot(Request::get(path).body(Body::empty()).expect("a valid request"))
        .await
        .expect("infallible");
    let status = res.status();
    let body = axum::body::to_bytes(res.into_body(), usize::MAX).await.expect("a body");
    let took = t.elapsed();
    assert_eq!(status, StatusCode::OK, "{path}: {}", String::from_utf8_lossy(&body));
    took
}

/// Redis's side of one request, on average.
#[derive(Debug, Clone, Copy)]
struct Cost {
    scripts: f64,
    commands: f64,
    busy_us: f64,
}

/// Times `ROUNDS` requests of `path` and reads their Redis cost; prints
/// a line and returns the cost per request.
async fn report(client: &Client, app: &Router, label: &str, path: &str) -> Result<Cost, delayqueue::Error> {
    let mut times = Vec::with_capacity(ROUNDS);
    let before = stats(client).await?;
    for _ in 0..ROUNDS {
        times.push(get(app, path).await);
    }
    let after = stats(client).await?;
    let per = |f: fn(&Stats) -> f64| (f(&after) - f(&before)) / ROUNDS as f64;
    // The INFO call itself counts once in each.
    let cost = Cost {
        scripts: per(|s| s.scripts),
        commands: per(|s| s.commands) - 1.0 / ROUNDS as f64,
        busy_us: per(|s| s.busy_us),
    };
    times.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "{label:<50} {:>6.2}ms {:>6.2}ms {:>12.1} {:>9.0} {:>9.0}",
        ms(times[ROUNDS / 2]),
        ms(times[ROUNDS * 99 / 100]),
        cost.scripts,
        cost.commands,
        cost.busy_us
    );
    Ok(cost)
}

/// Totals from `INFO commandstats`.
struct Stats {
    scripts: f64,
    commands: f64,
    busy_us: f64,
}

/// The script calls, each one round trip.
const SCRIPTS: &[&str] = &["evalsha", "eval"];

async fn stats(client: &Client) -> Result<Stats, delayqueue::Error> {
    let info: String = client
        .info(Some(delayqueue::fred::types::InfoKind::CommandStats))
        .await?;
    let mut s = Stats {
        scripts: 0.0,
        commands: 0.0,
        busy_us: 0.0,
    };
    for line in info.lines() {
        let Some((name, fields)) = line.strip_prefix("cmdstat_").and_then(|l| l.split_once(':')) else {
            continue;
        };
        let field = |key: &str| {
            fields
                .split(',')
                .find_map(|f| f.strip_prefix(key)?.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        let calls = field("calls=");
        s.commands += calls;
        if SCRIPTS.contains(&name) {
            s.scripts += calls;
            // A script's time includes the commands it runs.
            s.busy_us += field("usec=");
        }
    }
    Ok(s)
}
