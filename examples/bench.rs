//! Throughput, lateness, memory and scale of `delayqueue`, one JSON line per
//! workload (see docs/performance.md for figures and how to read them).
//!
//! Run against a throwaway Redis (it writes and deletes keys under `bench:`
//! and changes SLOWLOG settings for w4):
//!
//! ```text
//! redis-server --port 6390 --save '' --appendonly no --daemonize yes
//! REDIS_URL=redis://127.0.0.1:6390 cargo run --release --example bench
//! ```
//!
//! Options: `--only w1,w2,w3,w4,compare` (default: all), `--n 50000`
//! (messages per throughput phase), `--scale 1000000` (w4 backlog).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use delayqueue::fred::clients::Client;
use delayqueue::fred::interfaces::{ClientLike, SortedSetsInterface};
use delayqueue::fred::types::{CustomCommand, InfoKind, Value};
use delayqueue::{DelayQueue, DelayQueueBuilder, HandlerError, Message, MessageId, NewMessage};
use futures::StreamExt;
use serde_json::json;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

const PAYLOAD: [u8; 100] = [b'x'; 100];
const HOUR: Duration = Duration::from_secs(3600);
/// Concurrent single sends in flight.
const IN_FLIGHT: usize = 256;

struct Opts {
    only: Vec<String>,
    n: usize,
    scale: usize,
}

fn opts() -> Res<Opts> {
    let mut o = Opts {
        only: ["w1", "w2", "w3", "w4", "compare"].map(String::from).to_vec(),
        n: 50_000,
        scale: 1_000_000,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || args.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--only" => o.only = val()?.split(',').map(String::from).collect(),
            "--n" => o.n = val()?.parse()?,
            "--scale" => o.scale = val()?.parse()?,
            other => return Err(format!("unknown option {other}").into()),
        }
    }
    Ok(o)
}

fn queue(client: &Client, name: &str, f: impl FnOnce(DelayQueueBuilder) -> DelayQueueBuilder) -> Res<DelayQueue> {
    Ok(f(DelayQueue::builder(name, client.clone()).key_prefix("bench:")).build()?)
}

fn rate(n: usize, took: Duration) -> f64 {
    (n as f64 / took.as_secs_f64()).round()
}

/// Deletes every key the benchmark wrote.
async fn cleanup(client: &Client) -> Res<()> {
    let mut cursor = "0".to_string();
    loop {
        let reply: Vec<Value> = client
            .custom(
                CustomCommand::new_static("SCAN", None, false),
                vec![
                    cursor.clone(),
                    "MATCH".into(),
                    "bench:*".into(),
                    "COUNT".into(),
                    "10000".into(),
                ],
            )
            .await?;
        cursor = reply[0].as_string().unwrap_or_default();
        let keys: Vec<String> = reply[1].clone().convert()?;
        if !keys.is_empty() {
            let _: i64 = client
                .custom(CustomCommand::new_static("UNLINK", None, false), keys)
                .await?;
        }
        if cursor == "0" {
            return Ok(());
        }
    }
}

/// CPU seconds Redis has used so far (user + system).
async fn redis_cpu(client: &Client) -> Res<f64> {
    let info: String = client.info(Some(InfoKind::Cpu)).await?;
    let mut total = 0.0;
    for line in info.lines() {
        if let Some(v) = line
            .strip_prefix("used_cpu_user:")
            .or_else(|| line.strip_prefix("used_cpu_sys:"))
        {
            total += v.trim().parse::<f64>()?;
        }
    }
    Ok(total)
}

/// Script calls (EVALSHA) Redis has run so far.
async fn script_calls(client: &Client) -> Res<f64> {
    let info: String = client.info(Some(InfoKind::CommandStats)).await?;
    let line = info.lines().find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="));
    Ok(line.and_then(|l| l.split(',').next()).unwrap_or("0").parse()?)
}

async fn used_memory(client: &Client) -> Res<i64> {
    let info: String = client.info(Some(InfoKind::Memory)).await?;
    let line = info.lines().find_map(|l| l.strip_prefix("used_memory:"));
    Ok(line.ok_or("no used_memory in INFO")?.trim().parse()?)
}

/// Redis's main thread, when it runs on this machine (Linux): seconds on
/// a CPU, seconds runnable but waiting for one, and times it was
/// descheduled while runnable. SLOWLOG times are wall-clock, so a script
/// call is logged slow when another process took the CPU from Redis.
async fn redis_sched(client: &Client) -> Option<(f64, f64, u64)> {
    let info: String = client.info(Some(InfoKind::Server)).await.ok()?;
    let pid = info
        .lines()
        .find_map(|l| l.strip_prefix("process_id:"))?
        .trim()
        .to_string();
    let stat = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/schedstat")).ok()?;
    let mut ns = stat.split_whitespace().map(|w| w.parse::<f64>().unwrap_or(0.0));
    let (ran, waited) = (ns.next()? / 1e9, ns.next()? / 1e9);
    let status = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/status")).ok()?;
    let preempted = status
        .lines()
        .find_map(|l| l.strip_prefix("nonvoluntary_ctxt_switches:"))?
        .trim()
        .parse()
        .ok()?;
    Some((ran, waited, preempted))
}

async fn send_single_awaited(q: &DelayQueue, n: usize, delay: Duration) -> Res<f64> {
    let t = Instant::now();
    for _ in 0..n {
        q.send_delay_msg(&PAYLOAD, delay).await?;
    }
    Ok(rate(n, t.elapsed()))
}

async fn send_concurrent(q: &DelayQueue, n: usize, delay: Duration) -> Res<f64> {
    let t = Instant::now();
    let mut sends = futures::stream::iter(0..n)
        .map(|_| async move { q.send_delay_msg(&PAYLOAD, delay).await })
        .buffer_unordered(IN_FLIGHT);
    while let Some(r) = sends.next().await {
        r?;
    }
    Ok(rate(n, t.elapsed()))
}

async fn send_batch(q: &DelayQueue, n: usize, delay: Duration) -> Res<f64> {
    let t = Instant::now();
    // In slices, as an application would, so the whole batch is never in memory at once.
    for start in (0..n).step_by(10_000) {
        let msgs = (start..n.min(start + 10_000)).map(|_| NewMessage::new(&PAYLOAD, delay));
        for r in q.send_batch(msgs).await? {
            r?;
        }
    }
    Ok(rate(n, t.elapsed()))
}

/// Consumes `n` due messages with a no-op handler; returns msgs/s, Redis
/// CPU µs per message, script calls per message and failed deliveries
/// (time-outs: a lease that ran out before its ack arrived).
async fn consume(q: &DelayQueue, client: &Client, n: usize) -> Res<(f64, f64, f64, u64)> {
    let count = Arc::new(AtomicU64::new(0));
    let c = count.clone();
    let cpu = redis_cpu(client).await?;
    let calls = script_calls(client).await?;
    let failed = q.status().await?.totals.failed;
    let t = Instant::now();
    let consumer = q
        .start_consume(move |_msg: Message| {
            c.fetch_add(1, Ordering::Relaxed);
            async { Ok::<(), HandlerError>(()) }
        })
        .await?;
    let limit = Instant::now() + Duration::from_secs(300);
    while (count.load(Ordering::Relaxed) as usize) < n && Instant::now() < limit {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let took = t.elapsed();
    let cpu = redis_cpu(client).await? - cpu;
    let calls = script_calls(client).await? - calls;
    consumer.shutdown().await?;
    let failed = q.status().await?.totals.failed - failed;
    let got = count.load(Ordering::Relaxed) as usize;
    if got < n {
        return Err(format!("consumed only {got} of {n}").into());
    }
    let per_msg = |x: f64| (x / n as f64 * 100.0).round() / 100.0;
    Ok((rate(n, took), per_msg(cpu * 1e6), per_msg(calls), failed))
}

/// w1: the three ways to send, then consume a backlog with concurrency 16,
/// all on queue `name` (the first two send messages due in an hour, which
/// stay pending; the batch sends due ones, which are then consumed).
async fn w1(client: &Client, name: &str, n: usize) -> Res<serde_json::Value> {
    let q = queue(client, name, |b| b.concurrency(16))?;
    let single = send_single_awaited(&q, n, HOUR).await?;
    let concurrent = send_concurrent(&q, n, HOUR).await?;
    let batch = send_batch(&q, n, Duration::ZERO).await?;
    let (consumed, redis_us, calls, failed) = consume(&q, client, n).await?;
    Ok(json!({
        "n": n,
        "send_single_awaited_per_s": single,
        "send_concurrent_per_s": concurrent,
        "send_batch_per_s": batch,
        "consume_c16_per_s": consumed,
        "consume_redis_cpu_us_per_msg": redis_us,
        "consume_script_calls_per_msg": calls,
        "consume_failed_deliveries": failed,
    }))
}

/// Host clock in ms since the epoch, with fractions.
fn host_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs_f64()
        * 1000.0
}

/// How far this host's clock is ahead of Redis's, in ms: the reading with
/// the shortest round trip of 50 (both clocks are read on this machine).
async fn clock_offset_ms(client: &Client) -> Res<f64> {
    let mut best = (f64::INFINITY, 0.0);
    for _ in 0..50 {
        let before = host_ms();
        let t: Vec<String> = client
            .custom(CustomCommand::new_static("TIME", None, false), Vec::<String>::new())
            .await?;
        let after = host_ms();
        let redis = t[0].parse::<f64>()? * 1000.0 + t[1].parse::<f64>()? / 1000.0;
        if after - before < best.0 {
            best = (after - before, (before + after) / 2.0 - redis);
        }
    }
    Ok(best.1)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted
        .get(((sorted.len() as f64 - 1.0) * p).round() as usize)
        .copied()
        .unwrap_or(f64::NAN)
}

/// w2: 2,000 messages due uniformly 1-6 s ahead, consumer already running
/// with default settings; lateness against each message's due time as
/// Redis stored it (its pending score).
async fn w2(client: &Client, tag: &str) -> Res<serde_json::Value> {
    const N: usize = 2_000;
    let q = queue(client, &format!("{tag}-lateness"), |b| b)?;
    let pending_key = format!("bench:{{{tag}-lateness}}:pending");
    let due: Arc<Mutex<HashMap<MessageId, f64>>> = Arc::default();
    let late: Arc<Mutex<Vec<f64>>> = Arc::default();
    let (d, l) = (due.clone(), late.clone());
    let offset = clock_offset_ms(client).await?;
    let consumer = q
        .start_consume(move |msg: Message| {
            // Redis's clock now, read from this host's (same machine) minus the measured offset.
            let now = host_ms() - offset;
            if let Some(due) = d.lock().unwrap().get(msg.id()) {
                l.lock().unwrap().push(now - due);
            }
            async { Ok::<(), HandlerError>(()) }
        })
        .await?;
    // Idle cost first: the script calls of the waiting consumer in 3 s.
    let before = script_calls(client).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let idle = (script_calls(client).await? - before) / 3.0;
    let mut rng = 0x2545F4914F6CDD1Du64;
    let start = Instant::now();
    for _ in 0..N {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        // Due 1-6 s after the start, whatever the send itself took.
        let at = Duration::from_millis(1000 + rng % 5000);
        let delay = at.saturating_sub(start.elapsed());
        let id = q.send_delay_msg(&PAYLOAD, delay).await?;
        let score: f64 = client.zscore(&pending_key, id.as_str()).await?;
        due.lock().unwrap().insert(id, score);
    }
    let limit = Instant::now() + Duration::from_secs(20);
    while late.lock().unwrap().len() < N && Instant::now() < limit {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    consumer.shutdown().await?;
    let mut late = late.lock().unwrap().clone();
    late.sort_by(f64::total_cmp);
    let early = late.iter().filter(|&&ms| ms < 0.0).count();
    Ok(json!({
        "messages": N,
        "delivered": late.len(),
        "early": early,
        "p50_ms": (percentile(&late, 0.5) * 100.0).round() / 100.0,
        "p99_ms": (percentile(&late, 0.99) * 100.0).round() / 100.0,
        "max_ms": (late.last().copied().unwrap_or(f64::NAN) * 100.0).round() / 100.0,
        "host_minus_redis_clock_ms": (offset * 1000.0).round() / 1000.0,
        "idle_consumer_script_calls_per_s": (idle * 10.0).round() / 10.0,
    }))
}

/// w3: bytes of Redis memory per pending message (100-byte payload), next
/// to a bare SET (same payload, TTL) + ZADD per message as the floor.
async fn w3(client: &Client) -> Res<serde_json::Value> {
    const N: usize = 200_000;
    cleanup(client).await?;
    let before = used_memory(client).await?;
    // A short queue name, as applications use: key names cost memory too.
    let q = queue(client, "w3", |b| b)?;
    send_batch(&q, N, HOUR).await?;
    let ours = (used_memory(client).await? - before) as f64 / N as f64;
    cleanup(client).await?;
    // Let Redis shrink its emptied hash tables, so both fills pay for growing them.
    tokio::time::sleep(Duration::from_secs(2)).await;
    // The floor: one string with TTL and one zset entry per message, ids as
    // long as ours, written by a script in batches.
    let before = used_memory(client).await?;
    let script = "for i = 2, #ARGV do redis.call('SET', KEYS[1] .. ARGV[i], ARGV[1], 'PX', 3600000) \
                  redis.call('ZADD', KEYS[2], i, ARGV[i]) end";
    let payload = String::from_utf8(PAYLOAD.to_vec())?;
    for _ in (0..N).step_by(1000) {
        let ids = std::iter::once(payload.clone()).chain((0..1000).map(|_| MessageId::generate().to_string()));
        let _: Value = client
            .custom(
                CustomCommand::new_static("EVAL", None, false),
                [
                    script.to_string(),
                    "2".into(),
                    "bench:{w3}:m:".into(),
                    "bench:{w3}:z".into(),
                ]
                .into_iter()
                .chain(ids)
                .collect::<Vec<String>>(),
            )
            .await?;
    }
    let bare = (used_memory(client).await? - before) as f64 / N as f64;
    cleanup(client).await?;
    Ok(json!({
        "messages": N,
        "payload_bytes": PAYLOAD.len(),
        "bytes_per_pending_msg": ours.round(),
        "bare_set_zadd_bytes_per_msg": bare.round(),
        "ratio_to_bare": (ours / bare * 100.0).round() / 100.0,
    }))
}

async fn config_set(client: &Client, name: &str, value: &str) -> Res<()> {
    let _: Value = client
        .custom(
            CustomCommand::new_static("CONFIG", None, false),
            vec!["SET", name, value],
        )
        .await?;
    Ok(())
}

/// Which script a SLOWLOG entry (`EVALSHA sha numkeys key...`) ran, told
/// by its first key (the state it works on) and its number of keys.
fn script_name(words: &[Value]) -> &'static str {
    let word = |i: usize| words.get(i).and_then(Value::as_string).unwrap_or_default();
    let state = word(3).rsplit(':').next().map(str::to_string).unwrap_or_default();
    match (state.as_str(), word(2).as_str()) {
        ("ready", _) => "claim",
        ("pending", "2") => "promote",
        ("pending", _) => "send",
        ("unack", "1") => "extend",
        ("unack", "3") => "ack",
        ("unack", "5") => "timeout",
        ("unack", _) => "nack",
        ("garbage", _) => "gc",
        _ => "other",
    }
}

/// w4: w1 again on top of `scale` pending messages (due in an hour); then
/// the longest script call while draining `scale` due messages.
async fn w4(client: &Client, tag: &str, n: usize, scale: usize, empty: &serde_json::Value) -> Res<serde_json::Value> {
    cleanup(client).await?;
    let name = format!("{tag}-scale");
    send_batch(&queue(client, &name, |b| b)?, scale, HOUR).await?;
    // Let Redis finish growing its hash tables (incremental rehashing), as
    // it has long done under a backlog that built up over time.
    tokio::time::sleep(Duration::from_secs(5)).await;
    // First pass: the 3n messages it adds take a backlog of 1,000,000 past
    // 2^20 keys, so Redis doubles its keyspace, expires and pending tables
    // (and moves ~1,000,000 entries in each) during the measurement.
    let first = w1(client, &name, n).await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    // Second pass, on the same backlog (now scale + 2n pending): the tables
    // have their new size, as they have in a queue that holds such a
    // backlog for longer than one benchmark phase.
    let second = w1(client, &name, n).await?;
    cleanup(client).await?;
    // A second empty run after the loaded ones, so that the machine's
    // noise shows in the empty figures too; ratios are to their mean.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let empty2 = w1(client, &format!("{tag}-w1b"), n).await?;
    cleanup(client).await?;
    let ratios = |loaded: &serde_json::Value| {
        let ratio = |k: &str| {
            let base = (empty[k].as_f64().unwrap_or(f64::NAN) + empty2[k].as_f64().unwrap_or(f64::NAN)) / 2.0;
            (loaded[k].as_f64().unwrap_or(0.0) / base * 100.0).round() / 100.0
        };
        json!({
            "send_single_awaited": ratio("send_single_awaited_per_s"),
            "send_concurrent": ratio("send_concurrent_per_s"),
            "send_batch": ratio("send_batch_per_s"),
            "consume_c16": ratio("consume_c16_per_s"),
            "consume_redis_cpu_per_msg": ratio("consume_redis_cpu_us_per_msg"),
        })
    };
    let (first_ratios, second_ratios) = (ratios(&first), ratios(&second));

    let q = queue(client, &format!("{tag}-drain"), |b| b.concurrency(16))?;
    send_batch(&q, scale, Duration::ZERO).await?;
    config_set(client, "slowlog-log-slower-than", "1000").await?;
    config_set(client, "slowlog-max-len", "10000").await?;
    let _: Value = client
        .custom(CustomCommand::new_static("SLOWLOG", None, false), vec!["RESET"])
        .await?;
    let sched = redis_sched(client).await;
    let (drain, drain_redis_us, _, drain_failed) = consume(&q, client, scale).await?;
    let sched = sched.zip(redis_sched(client).await).map(|(a, b)| {
        json!({
            "ran_s": ((b.0 - a.0) * 100.0).round() / 100.0,
            "waited_for_cpu_s": ((b.1 - a.1) * 100.0).round() / 100.0,
            "preempted_times": b.2 - a.2,
        })
    });
    let log: Vec<Value> = client
        .custom(CustomCommand::new_static("SLOWLOG", None, false), vec!["GET", "10000"])
        .await?;
    config_set(client, "slowlog-log-slower-than", "10000").await?;
    // Each entry: id, timestamp, duration in µs, the command's words, ...
    // Script calls only (Redis 7 also logs the commands a script runs).
    let mut slow: Vec<(i64, &'static str)> = log
        .iter()
        .filter_map(|e| {
            let Value::Array(e) = e else { return None };
            let Value::Array(words) = e.get(3)? else { return None };
            (words.first()?.as_string()? == "EVALSHA").then_some(())?;
            Some((e.get(2)?.as_i64()?, script_name(words)))
        })
        .collect();
    slow.sort();
    let mut longest = serde_json::Map::new();
    for (us, name) in &slow {
        longest.insert(name.to_string(), json!(*us as f64 / 1000.0));
    }
    cleanup(client).await?;
    Ok(json!({
        "pending_backlog": scale,
        "empty": [empty, empty2],
        "with_backlog": [first, second],
        "ratio_to_empty_first_pass": first_ratios,
        "ratio_to_empty_second_pass": second_ratios,
        "drain_due_messages": scale,
        "drain_consume_c16_per_s": drain,
        "drain_redis_cpu_us_per_msg": drain_redis_us,
        "drain_failed_deliveries": drain_failed,
        "drain_redis_main_thread": sched,
        "script_calls_over_1ms": slow.len(),
        "script_calls_over_5ms": slow.iter().filter(|s| s.0 > 5000).count(),
        "max_script_ms": slow.last().map(|s| s.0 as f64 / 1000.0).unwrap_or(0.0),
        "max_script": slow.last().map(|s| s.1),
        "max_ms_by_script": longest,
    }))
}

/// The Go original's design where it is cheap to show: one message per
/// claim (and per promote) call, against the default batches.
async fn compare(client: &Client, tag: &str) -> Res<serde_json::Value> {
    const N: usize = 10_000;
    let q = queue(client, &format!("{tag}-one"), |b| b.concurrency(16).batch_size(1))?;
    send_batch(&q, N, Duration::ZERO).await?;
    let (one, one_us, ..) = consume(&q, client, N).await?;
    let q = queue(client, &format!("{tag}-batched"), |b| b.concurrency(16))?;
    send_batch(&q, N, Duration::ZERO).await?;
    let (batched, batched_us, ..) = consume(&q, client, N).await?;
    cleanup(client).await?;
    Ok(json!({
        "n": N,
        "consume_one_per_call_per_s": one,
        "consume_batched_per_s": batched,
        "one_per_call_redis_cpu_us_per_msg": one_us,
        "batched_redis_cpu_us_per_msg": batched_us,
        "speedup": (batched / one * 100.0).round() / 100.0,
    }))
}

fn emit(workload: &str, mut v: serde_json::Value) {
    v["workload"] = json!(workload);
    println!("{v}");
}

#[tokio::main]
async fn main() -> Res<()> {
    let o = opts()?;
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let client = delayqueue::connect(&url).await?;
    let tag = format!("b{}", std::process::id());
    let on = |w: &str| o.only.iter().any(|x| x == w);
    cleanup(&client).await?;
    // Memory first, while the keyspace is as fresh as the server.
    if on("w3") {
        emit("w3_memory", w3(&client).await?);
    }
    let mut empty = serde_json::Value::Null;
    if on("w1") || on("w4") {
        empty = w1(&client, &format!("{tag}-w1"), o.n).await?;
        cleanup(&client).await?;
        if on("w1") {
            emit("w1_throughput", empty.clone());
        }
    }
    if on("w2") {
        emit("w2_lateness", w2(&client, &tag).await?);
        cleanup(&client).await?;
    }
    if on("w4") {
        emit("w4_scale", w4(&client, &tag, o.n, o.scale, &empty).await?);
    }
    if on("compare") {
        emit("compare_go_style", compare(&client, &tag).await?);
    }
    Ok(())
}
