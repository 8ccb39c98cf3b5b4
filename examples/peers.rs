//! The feature workloads that docs/performance.md compares with BullMQ,
//! written as `../shared/bench/bullmq-wave3/wave3.js` runs them on BullMQ's
//! side (same counts, payload and concurrency), one JSON line each:
//!
//! - `w5big`: one parent and 10,000 children in another queue (add time,
//!   children/s, the last child's handler end to the parent's start; the
//!   parent reads every child's result);
//! - `w5small`: 2,000 flows of 10 children, added one at a time while the
//!   consumers run (flows/s, last child to parent p50/p99);
//! - `w6`: 20,000 awaited sends, plain against `unique_for` (unique ids,
//!   all accepted), rounds A B A B;
//! - `w6race`: 16 handles send one `unique_for` id at once, 200 rounds
//!   (how many were stored per round);
//! - `w7`: 20,000 messages consumed at concurrency 16, a no-op handler
//!   against one that writes progress and a log line, rounds A B A B.
//!
//! It flushes the server it is given: run it against a throwaway one.
//!
//! ```text
//! redis-server --port 6491 --save '' --appendonly no --daemonize yes
//! REDIS_URL=redis://127.0.0.1:6491 cargo run --release --example peers -- --runs w5big,w5small,w6,w6race,w7
//! ```
//!
//! `scripts/peers-bench.sh` runs both sides alternately (A B B A).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use delayqueue::fred::clients::Client;
use std::future::IntoFuture;

use delayqueue::fred::interfaces::ClientLike;
use delayqueue::fred::prelude::{Builder, Config};
use delayqueue::{DelayQueue, Error, Flow, HandlerError, Message, NewMessage};
use serde_json::json;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// The padding BullMQ's side puts in each payload.
const PAD: &str = "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx";
/// The longest any workload waits for its messages.
const LIMIT: Duration = Duration::from_secs(300);

fn queue(client: &Client, name: &str, concurrency: usize) -> Res<DelayQueue> {
    Ok(DelayQueue::builder(name, client.clone())
        .concurrency(concurrency)
        .build()?)
}

fn payload(i: usize) -> String {
    format!(r#"{{"i":{i},"pad":"{PAD}"}}"#)
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e4).round() / 10.0
}

fn pct(sorted: &[f64], p: f64) -> Option<f64> {
    let i = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted
        .get(i.clamp(1, sorted.len().max(1)) - 1)
        .map(|x| (x * 10.0).round() / 10.0)
}

fn emit(v: serde_json::Value) {
    let mut v = v;
    v["peer"] = json!("delayqueue");
    println!("{v}");
}

/// Waits until `n` reaches `total`, at most [`LIMIT`].
async fn until(n: &AtomicU64, total: usize) {
    let end = Instant::now() + LIMIT;
    while (n.load(Ordering::Relaxed) as usize) < total && Instant::now() < end {
        tokio::time::sleep(Duration::from_micros(500)).await;
    }
}

async fn flow_big(client: &Client, width: usize) -> Res<()> {
    let _: () = client.flushall(false).await?;
    let (parents, children) = (queue(client, "parents", 1)?, queue(client, "children", 16)?);
    let mut flow = Flow::new(&parents, NewMessage::new(payload(0)));
    for i in 0..width {
        flow = flow.child(Flow::new(&children, NewMessage::new(payload(i))));
    }
    let t0 = Instant::now();
    flow.send().await?;
    let add = t0.elapsed();
    let last_child = Arc::new(Mutex::new(None::<Instant>));
    let done = Arc::new(AtomicU64::new(0));
    let (l, d) = (last_child.clone(), done.clone());
    let c0 = Instant::now();
    let cw = children
        .start_consume(move |_m: Message| {
            let (l, d) = (l.clone(), d.clone());
            async move {
                *l.lock().unwrap() = Some(Instant::now());
                d.fetch_add(1, Ordering::Relaxed);
                Ok::<(), HandlerError>(())
            }
        })
        .await?;
    let parent_start = Arc::new(Mutex::new(None::<Instant>));
    let read = Arc::new(AtomicU64::new(0));
    let (p, r) = (parent_start.clone(), read.clone());
    let pw = parents
        .start_consume(move |m: Message| {
            let (p, r) = (p.clone(), r.clone());
            async move {
                p.lock().unwrap().get_or_insert(Instant::now());
                let mut cursor = None;
                loop {
                    let page = m.children_results(cursor).await?;
                    r.fetch_add(page.items.len() as u64, Ordering::Relaxed);
                    match page.next {
                        Some(next) => cursor = Some(next),
                        None => break,
                    }
                }
                Ok::<(), HandlerError>(())
            }
        })
        .await?;
    let end = Instant::now() + LIMIT;
    while read.load(Ordering::Relaxed) < width as u64 && Instant::now() < end {
        tokio::time::sleep(Duration::from_micros(500)).await;
    }
    cw.shutdown().await?;
    pw.shutdown().await?;
    let (last, start) = (*last_child.lock().unwrap(), *parent_start.lock().unwrap());
    let (Some(last), Some(start)) = (last, start) else {
        return Err("w5big: the parent never started".into());
    };
    emit(
        json!({"workload": "w5_flow_big", "width": width, "add_ms": add.as_millis(),
        "children_per_s": (width as f64 / last.duration_since(c0).as_secs_f64()).round(),
        "last_child_to_parent_ms": ms(start.saturating_duration_since(last)),
        "children_values_read": read.load(Ordering::Relaxed), "children_done": done.load(Ordering::Relaxed)}),
    );
    Ok(())
}

async fn flow_small(client: &Client, flows: usize) -> Res<()> {
    let _: () = client.flushall(false).await?;
    let (parents, children) = (queue(client, "parents", 16)?, queue(client, "children", 16)?);
    // Per flow: when its last child's handler ended.
    let last_child: Arc<Mutex<BTreeMap<String, Instant>>> = Arc::default();
    let lat: Arc<Mutex<Vec<f64>>> = Arc::default();
    let done = Arc::new(AtomicU64::new(0));
    let l = last_child.clone();
    let cw = children
        .start_consume(move |m: Message| {
            let l = l.clone();
            async move {
                if let Some(f) = m.header("flow") {
                    l.lock().unwrap().insert(f.to_string(), Instant::now());
                }
                Ok::<(), HandlerError>(())
            }
        })
        .await?;
    let (l, la, d) = (last_child.clone(), lat.clone(), done.clone());
    let pw = parents
        .start_consume(move |m: Message| {
            let (l, la, d) = (l.clone(), la.clone(), d.clone());
            async move {
                if let Some(t) = l.lock().unwrap().get(m.id().as_str()) {
                    la.lock().unwrap().push(ms(t.elapsed()));
                }
                d.fetch_add(1, Ordering::Relaxed);
                Ok::<(), HandlerError>(())
            }
        })
        .await?;
    let t0 = Instant::now();
    for f in 0..flows {
        let id = format!("f{f}");
        let mut flow = Flow::new(&parents, NewMessage::new(payload(f)).id(id.as_str()));
        for i in 0..10 {
            flow = flow.child(Flow::new(
                &children,
                NewMessage::new(payload(i)).header("flow", id.as_str()),
            ));
        }
        flow.send().await?;
    }
    let add = t0.elapsed();
    until(&done, flows).await;
    let total = t0.elapsed();
    cw.shutdown().await?;
    pw.shutdown().await?;
    let mut lat = lat.lock().unwrap().clone();
    lat.sort_by(f64::total_cmp);
    emit(
        json!({"workload": "w5_flow_small", "flows": flows, "children_each": 10, "add_ms": add.as_millis(),
        "flows_per_s": (flows as f64 / total.as_secs_f64()).round(), "parents_done": done.load(Ordering::Relaxed),
        "last_child_to_parent_p50_ms": pct(&lat, 50.0), "p99_ms": pct(&lat, 99.0)}),
    );
    Ok(())
}

async fn dedup(client: &Client, n: usize) -> Res<()> {
    let mut rates: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for mode in ["plain", "dedup", "plain", "dedup"] {
        let _: () = client.flushall(false).await?;
        let q = queue(client, "d", 1)?;
        let t0 = Instant::now();
        for i in 0..n {
            let send = q.send(payload(i));
            if mode == "dedup" {
                send.id(format!("k{i}")).unique_for(Duration::from_secs(60)).await?;
            } else {
                send.await?;
            }
        }
        rates
            .entry(mode)
            .or_default()
            .push((n as f64 / t0.elapsed().as_secs_f64()).round());
    }
    emit(json!({"workload": "w6_dedup_send", "n": n, "plain_per_s": rates["plain"], "dedup_per_s": rates["dedup"]}));
    Ok(())
}

async fn dedup_race(client: &Client, rounds: usize) -> Res<()> {
    let _: () = client.flushall(false).await?;
    let qs: Vec<DelayQueue> = (0..16).map(|_| queue(client, "r", 1)).collect::<Res<_>>()?;
    let mut hist: BTreeMap<usize, usize> = BTreeMap::new();
    for r in 0..rounds {
        let sends = qs.iter().map(|q| {
            q.send(format!("{r}"))
                .id(format!("same{r}"))
                .unique_for(Duration::from_secs(60))
                .into_future()
        });
        let mut stored = 0;
        for res in futures::future::join_all(sends).await {
            match res {
                Ok(_) => stored += 1,
                Err(Error::Duplicate { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        *hist.entry(stored).or_default() += 1;
    }
    let c = qs[0].status().await?.counts;
    let waiting = c.pending + c.ready;
    emit(json!({"workload": "w6_dedup_race", "rounds": rounds, "stored_per_round": hist, "jobs_stored": waiting}));
    Ok(())
}

async fn progress(client: &Client, n: usize) -> Res<()> {
    let mut rates: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for mode in ["noop", "progress", "noop", "progress"] {
        let _: () = client.flushall(false).await?;
        let q = queue(client, "p", 16)?;
        q.send_batch((0..n).map(|i| NewMessage::new(payload(i)))).await?;
        let done = Arc::new(AtomicU64::new(0));
        let d = done.clone();
        let write = mode == "progress";
        let t0 = Instant::now();
        let w = q
            .start_consume(move |m: Message| {
                let d = d.clone();
                async move {
                    if write {
                        m.progress(50).await?;
                        m.log("half way").await?;
                    }
                    d.fetch_add(1, Ordering::Relaxed);
                    Ok::<(), HandlerError>(())
                }
            })
            .await?;
        until(&done, n).await;
        rates
            .entry(mode)
            .or_default()
            .push((n as f64 / t0.elapsed().as_secs_f64()).round());
        w.shutdown().await?;
    }
    emit(
        json!({"workload": "w7_progress_log", "n": n, "noop_per_s": rates["noop"], "progress_log_per_s": rates["progress"]}),
    );
    Ok(())
}

#[tokio::main]
async fn main() -> Res<()> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6491".into());
    let mut runs = "w5big,w5small,w6,w6race,w7".to_string();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--runs" => runs = args.next().ok_or("--runs needs a value")?,
            other => return Err(format!("unknown option {other}").into()),
        }
    }
    let client = Builder::from_config(Config::from_url(&url)?).build()?;
    client.init().await?;
    for run in runs.split(',') {
        let done = match run {
            "w5big" => flow_big(&client, 10_000).await,
            "w5small" => flow_small(&client, 2_000).await,
            "w6" => dedup(&client, 20_000).await,
            "w6race" => dedup_race(&client, 200).await,
            "w7" => progress(&client, 20_000).await,
            other => Err(format!("unknown workload {other}").into()),
        };
        if let Err(e) = done {
            emit(json!({"workload": run, "error": e.to_string()}));
        }
    }
    let _: () = client.flushall(false).await?;
    Ok(())
}
