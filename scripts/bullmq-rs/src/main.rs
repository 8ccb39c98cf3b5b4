//! One side of `scripts/bullmq-rs-bench.sh`: `<send|consume> <delayqueue|bullmq-rs> [n]`
//! against `$REDIS_URL`, a JSON line of the rate. The same payload (an
//! index and 80 bytes of padding, as JSON) on both sides.
//!
//! - `send`: `n` sends one after another, each awaited (after 200 to warm
//!   up the connection and the script cache).
//! - `consume`: `n` due messages (sent in batches of 1,000) consumed at
//!   concurrency 16 by a no-op handler, from the consumer's start until
//!   the last handler returned.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bullmq_rs::{QueueBuilder, RedisConnection, WorkerBuilder};
use delayqueue::fred::interfaces::ClientLike;
use delayqueue::fred::prelude::{Builder, Config};
use delayqueue::{DelayQueue, HandlerError, Message, NewMessage};
use serde::{Deserialize, Serialize};

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

#[derive(Serialize, Deserialize, Clone)]
struct Payload {
    i: usize,
    pad: String,
}

fn payload(i: usize) -> Payload {
    Payload { i, pad: "x".repeat(80) }
}

fn bytes(i: usize) -> Vec<u8> {
    serde_json::to_vec(&payload(i)).expect("a payload serializes")
}

/// Waits until `n` reaches `total`, five minutes at most.
async fn until(n: &AtomicU64, total: usize) {
    let end = Instant::now() + Duration::from_secs(300);
    while (n.load(Ordering::Relaxed) as usize) < total && Instant::now() < end {
        tokio::time::sleep(Duration::from_micros(500)).await;
    }
}

async fn delayqueue(url: &str, workload: &str, n: usize) -> Res<f64> {
    let client = Builder::from_config(Config::from_url(url)?).build()?;
    client.init().await?;
    let _: () = client.flushall(false).await?;
    if workload == "send" {
        let q = DelayQueue::builder("s", client.clone()).build()?;
        for i in 0..200 {
            q.send(bytes(i)).await?;
        }
        let t0 = Instant::now();
        for i in 0..n {
            q.send(bytes(i)).await?;
        }
        return Ok(n as f64 / t0.elapsed().as_secs_f64());
    }
    let q = DelayQueue::builder("c", client.clone()).concurrency(16).build()?;
    for chunk in (0..n).collect::<Vec<_>>().chunks(1000) {
        q.send_batch(chunk.iter().map(|&i| NewMessage::new(bytes(i)))).await?;
    }
    let done = Arc::new(AtomicU64::new(0));
    let d = done.clone();
    let t0 = Instant::now();
    let consumer = q
        .start_consume(move |_m: Message| {
            let d = d.clone();
            async move {
                d.fetch_add(1, Ordering::Relaxed);
                Ok::<(), HandlerError>(())
            }
        })
        .await?;
    until(&done, n).await;
    let rate = n as f64 / t0.elapsed().as_secs_f64();
    consumer.shutdown().await?;
    Ok(rate)
}

async fn bullmq_rs(url: &str, workload: &str, n: usize) -> Res<f64> {
    let conn = RedisConnection::new(url);
    if workload == "send" {
        let q = QueueBuilder::new("s").connection(conn).build::<Payload>().await?;
        for i in 0..200 {
            q.add("j", payload(i), None).await?;
        }
        let t0 = Instant::now();
        for i in 0..n {
            q.add("j", payload(i), None).await?;
        }
        return Ok(n as f64 / t0.elapsed().as_secs_f64());
    }
    let q = QueueBuilder::new("c")
        .connection(conn.clone())
        .build::<Payload>()
        .await?;
    for chunk in (0..n).collect::<Vec<_>>().chunks(1000) {
        q.add_bulk(chunk.iter().map(|&i| ("j".to_string(), payload(i), None)).collect())
            .await?;
    }
    let done = Arc::new(AtomicU64::new(0));
    let d = done.clone();
    let t0 = Instant::now();
    let worker = WorkerBuilder::new("c")
        .connection(conn)
        .concurrency(16)
        .build::<Payload>();
    let handle = worker
        .start(move |_job| {
            let d = d.clone();
            async move {
                d.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
        })
        .await?;
    until(&done, n).await;
    let rate = n as f64 / t0.elapsed().as_secs_f64();
    handle.shutdown();
    handle.wait().await?;
    Ok(rate)
}

#[tokio::main]
async fn main() -> Res<()> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6492".into());
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (workload, side) = match (args.first(), args.get(1)) {
        (Some(w), Some(s)) if ["send", "consume"].contains(&w.as_str()) => (w.as_str(), s.as_str()),
        _ => return Err("usage: bullmq-rs-side <send|consume> <delayqueue|bullmq-rs> [n]".into()),
    };
    let n = match args.get(2) {
        Some(n) => n.parse()?,
        None if workload == "send" => 10_000,
        None => 50_000,
    };
    let rate = match side {
        "delayqueue" => delayqueue(&url, workload, n).await?,
        "bullmq-rs" => bullmq_rs(&url, workload, n).await?,
        other => return Err(format!("unknown side {other}").into()),
    };
    println!(r#"{{"workload":"{workload}","side":"{side}","n":{n},"per_s":{rate:.0}}}"#);
    Ok(())
}
