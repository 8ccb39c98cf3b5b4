//! Throughput of several queues at once, and of one queue spread over
//! several shards, on one Redis or on a Redis Cluster (each queue or shard
//! is one hash slot, so on a cluster they spread over the primaries). One
//! JSON line per queue count and per shard count; `scripts/cluster-bench.sh`
//! starts a throwaway server and a 3-primary cluster and runs this on both.
//!
//! ```text
//! REDIS_URL=redis-cluster://127.0.0.1:7000?node=127.0.0.1:7001 \
//!     cargo run --release --example cluster_bench -- --queues 1,3,6 --shards 3,6 --n 60000
//! ```
//!
//! Per queue count Q: Q queues (`bench:{cbQ-i}`; on a cluster chosen so that
//! each primary gets its share), `n` messages in all sent with `send_batch`
//! (due at once) from one task per queue, then consumed by one consumer per
//! queue with `concurrency(16)` and a no-op handler. Per shard count S: the
//! same with one queue of S shards (`bench:{cbS-0#i}`, named so that each
//! primary gets its share of shards), sent from S tasks and consumed by one
//! consumer with `concurrency(16 × S)`: as many handlers as S queues get.
//! The queues are left empty.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use delayqueue::fred::clients::Client;
use delayqueue::fred::interfaces::ClientLike;
use delayqueue::fred::types::{ClusterHash, CustomCommand, Value};
use delayqueue::{DelayQueue, HandlerError, Message, NewMessage};
use serde_json::json;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

const PAYLOAD: [u8; 100] = [b'x'; 100];

/// Owner (`host:port`) of each slot range, from `CLUSTER SLOTS`; empty on
/// a server that is not a cluster.
async fn slot_owners(client: &Client) -> Vec<(u16, u16, String)> {
    let cmd = CustomCommand::new_static("CLUSTER", ClusterHash::Random, false);
    let Ok(Value::Array(ranges)) = client.custom::<Value, _>(cmd, vec!["SLOTS"]).await else {
        return Vec::new();
    };
    ranges
        .into_iter()
        .filter_map(|range| {
            let Value::Array(parts) = range else { return None };
            let Value::Array(primary) = parts.get(2)? else {
                return None;
            };
            let host = primary.first()?.as_string()?;
            let port = primary.get(1)?.as_i64()?;
            Some((
                u16::try_from(parts.first()?.as_i64()?).ok()?,
                u16::try_from(parts.get(1)?.as_i64()?).ok()?,
                format!("{host}:{port}"),
            ))
        })
        .collect()
}

/// The primary (`host:port`) that owns hash tag `tag`.
fn owner(tag: &str, owners: &[(u16, u16, String)]) -> String {
    let slot = delayqueue::fred::util::redis_keyslot(format!("bench:{{{tag}}}:pending").as_bytes());
    owners
        .iter()
        .find(|(a, b, _)| (*a..=*b).contains(&slot))
        .map(|(_, _, o)| o.clone())
        .unwrap_or_else(|| "standalone".into())
}

fn primaries(owners: &[(u16, u16, String)]) -> usize {
    owners
        .iter()
        .map(|o| &o.2)
        .collect::<std::collections::BTreeSet<_>>()
        .len()
        .max(1)
}

/// How many of `tags` each primary owns.
fn per_node(tags: impl IntoIterator<Item = String>, owners: &[(u16, u16, String)]) -> BTreeMap<String, usize> {
    let mut count = BTreeMap::new();
    for tag in tags {
        *count.entry(owner(&tag, owners)).or_insert(0) += 1;
    }
    count
}

/// A queue name for run `tag` whose `shards` shards spread evenly over
/// the primaries.
fn sharded_name(tag: &str, shards: usize, owners: &[(u16, u16, String)]) -> String {
    let share = shards.div_ceil(primaries(owners));
    (0..)
        .map(|i| format!("{tag}-{i}"))
        .find(|name| {
            per_node((0..shards).map(|s| format!("{name}#{s}")), owners)
                .values()
                .all(|&n| n <= share)
        })
        .unwrap_or_default()
}

/// `count` queue names for run `tag`, spread evenly over the primaries.
fn names(tag: &str, count: usize, owners: &[(u16, u16, String)]) -> Vec<(String, String)> {
    let share = count.div_ceil(primaries(owners));
    let mut taken: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = Vec::new();
    for i in 0.. {
        if out.len() == count {
            break;
        }
        let name = format!("{tag}-{i}");
        let o = owner(&name, owners);
        let n = taken.entry(o.clone()).or_insert(0);
        if *n < share {
            *n += 1;
            out.push((name, o));
        }
    }
    out
}

/// `count` queues of `shards` shards each: `n` messages sent, then consumed.
async fn run(
    client: &Client,
    tag: &str,
    (count, shards): (usize, usize),
    n: usize,
    owners: &[(u16, u16, String)],
) -> Res<serde_json::Value> {
    let picked: Vec<String> = match shards {
        1 => names(tag, count, owners).into_iter().map(|(name, _)| name).collect(),
        _ => vec![sharded_name(tag, shards, owners)],
    };
    let queues = picked
        .iter()
        .map(|name| {
            DelayQueue::builder(name.as_str(), client.clone())
                .key_prefix("bench:")
                .concurrency(16 * shards)
                .shards(shards)
                .build()
        })
        .collect::<Result<Vec<_>, _>>()?;
    // A sharded queue is sent to by one task per shard, like Q queues.
    let senders: Vec<&DelayQueue> = queues.iter().cycle().take(count.max(shards)).collect();
    let per_task = n / senders.len();

    let t = Instant::now();
    let sends = senders.iter().map(|q| async move {
        for start in (0..per_task).step_by(10_000) {
            let msgs = (start..per_task.min(start + 10_000)).map(|_| NewMessage::new(&PAYLOAD));
            for r in q.send_batch(msgs).await? {
                r?;
            }
        }
        Ok::<(), delayqueue::Error>(())
    });
    for r in futures::future::join_all(sends).await {
        r?;
    }
    let total = per_task * senders.len();
    let send_rate = total as f64 / t.elapsed().as_secs_f64();

    let done = Arc::new(AtomicU64::new(0));
    let t = Instant::now();
    let mut consumers = Vec::new();
    for q in &queues {
        let d = done.clone();
        consumers.push(
            q.start_consume(move |_msg: Message| {
                d.fetch_add(1, Ordering::Relaxed);
                async { Ok::<(), HandlerError>(()) }
            })
            .await?,
        );
    }
    let limit = Instant::now() + Duration::from_secs(300);
    while (done.load(Ordering::Relaxed) as usize) < total && Instant::now() < limit {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let consume_rate = done.load(Ordering::Relaxed) as f64 / t.elapsed().as_secs_f64();
    for c in consumers {
        c.shutdown().await?;
    }
    let tags = picked.iter().flat_map(|name| match shards {
        1 => vec![name.clone()],
        _ => (0..shards).map(|s| format!("{name}#{s}")).collect(),
    });
    Ok(json!({
        "queues": count,
        "shards": shards,
        "handlers": queues.len() * 16 * shards,
        "n": total,
        "slots_per_node": per_node(tags, owners),
        "send_batch_per_s": send_rate.round(),
        "consume_c16_per_s": consume_rate.round(),
    }))
}

#[tokio::main]
async fn main() -> Res<()> {
    let (mut counts, mut shards, mut n) = (vec![1, 3, 6], vec![3, 6], 60_000);
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || args.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--queues" => counts = val()?.split(',').map(str::parse).collect::<Result<_, _>>()?,
            "--shards" => shards = val()?.split(',').map(str::parse).collect::<Result<_, _>>()?,
            "--n" => n = val()?.parse()?,
            other => return Err(format!("unknown option {other}").into()),
        }
    }
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let client = delayqueue::connect(&url).await?;
    let owners = slot_owners(&client).await;
    let mode = if owners.is_empty() { "standalone" } else { "cluster" };
    let runs = counts
        .into_iter()
        .map(|q| (q, 1))
        .chain(shards.into_iter().map(|s| (1, s)));
    for (count, shards) in runs {
        let tag = format!("cb{}-{count}x{shards}", std::process::id());
        let mut line = run(&client, &tag, (count, shards), n, &owners).await?;
        line["mode"] = json!(mode);
        println!("{line}");
    }
    Ok(())
}
