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
//! Options: `--only w1,w2,w3,w4,compare,batch,featurecost,rate,gconc,handles,bigpayload,idle,unique,groups,groupsfair,groupslimits,groupsbig,flows,fanin,results,progress,scriptcpu,abort`
//! (default: all but `batch`, per-message against batch-handler consume,
//! `results`, consume with handlers returning no result against 100-byte results,
//! `progress`, consume with no-op handlers against handlers writing one
//! progress update and one log line each,
//! `unique`, send with `unique_for` against a plain send,
//! `rate` and `gconc`, which measure the limits,
//! `groups`, consume over 1, 100 and 100,000 groups, a small group's
//! lateness while a big one drains, and the longest claim with 100,000
//! groups and `--scale` due messages, `groupsfair` and `groupsbig` those
//! parts alone (`groupsfair` with the groups at their limits, which
//! `groupslimits` runs alone),
//! `flows`, 2-level flows of 10,000 children per parent and one parent of
//! 100,000 children: throughput against plain messages, and the time from
//! a parent's last child's ack to its delivery, `fanin`, one parent of
//! 10,000 children, the time from its last child's handler end to its
//! delivery (split at the reply to the children's last ack), beside a
//! plain queue's consume of as many messages,
//! `featurecost`, what each feature costs per message when used: send
//! (`send_batch`) and consume (concurrency 16) of `--n` messages per
//! feature in interleaved rounds, Redis CPU µs and commands per message,
//! and consume's rate against plain messages',
//! `scriptcpu`, Redis's time per call of each hot script (send, promote,
//! claim, ack, nack, note) over `--n` messages, from SLOWLOG,
//! `abort`, the latency of `DelayQueue::abort` from its call to the
//! running handler's signal (`Message::aborted`), `--samples` aborts one at a time,
//! `handles`, this process's memory per queue handle, `bigpayload`, the
//! longest script call and Redis CPU with 1 MiB payloads, and `idle`, the
//! cost of idle queues consumed by one process, and send -> handler and a
//! delayed message's lateness on one of them), `--idle 1,200,1000`
//! (idle's queue counts), `--idle-as worker|consumers` (one `Worker` over
//! them, or a consumer each), `--n 50000`
//! (messages per throughput phase), `--scale 1000000` (w4 backlog),
//! `--rounds 3` (w4's interleaved empty/loaded rounds; it also uses the
//! next database of `REDIS_URL`'s server for the empty side), `--samples 200`
//! (group B's messages on each side of the fairness figure).

use std::future::IntoFuture;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use delayqueue::fred::clients::Client;
use delayqueue::fred::interfaces::{ClientLike, KeysInterface, LuaInterface, SortedSetsInterface};
use delayqueue::fred::prelude::{Builder, Config};
use delayqueue::fred::types::{CustomCommand, InfoKind, Value};
use delayqueue::{DelayQueue, DelayQueueBuilder, Event, Flow, HandlerError, Message, MessageId, NewMessage};
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
    rounds: usize,
    idle: Vec<usize>,
    idle_as: String,
    samples: usize,
}

fn opts() -> Res<Opts> {
    let mut o = Opts {
        only: ["w1", "w2", "w3", "w4", "compare"].map(String::from).to_vec(),
        n: 50_000,
        scale: 1_000_000,
        rounds: 3,
        idle: vec![1, 200, 1000],
        idle_as: "worker".into(),
        samples: 200,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || args.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--only" => o.only = val()?.split(',').map(String::from).collect(),
            "--n" => o.n = val()?.parse()?,
            "--scale" => o.scale = val()?.parse()?,
            "--rounds" => o.rounds = val()?.parse()?,
            "--idle" => o.idle = val()?.split(',').map(str::parse).collect::<Result<_, _>>()?,
            "--idle-as" => o.idle_as = val()?,
            "--samples" => o.samples = val()?.parse()?,
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

/// Deletes every key the benchmark wrote: under `bench:`, and the queues
/// of [`consume_as_user`] under the default prefix.
async fn cleanup(client: &Client) -> Res<()> {
    for pattern in ["bench:*", "dq:{b[0-9]*-user}:*"] {
        cleanup_matching(client, pattern).await?;
    }
    Ok(())
}

async fn cleanup_matching(client: &Client, pattern: &str) -> Res<()> {
    let mut cursor = "0".to_string();
    loop {
        let reply: Vec<Value> = client
            .custom(
                CustomCommand::new_static("SCAN", None, false),
                vec![
                    cursor.clone(),
                    "MATCH".into(),
                    pattern.into(),
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

/// Calls per side in each round of [`send_single_awaited`].
const FLOOR_ROUND: usize = 100;

/// One awaited single send at a time, `n` in all, against its floor: `n`
/// awaited `EVALSHA`s, from the same client, of a script that does one
/// `SET` of the same payload (a script call's round trip with no work in
/// it). Short alternating rounds of each, so that the machine's noise falls
/// on both alike. Returns sends/s, floor calls/s (each over all its rounds)
/// and the median over the rounds of send rate / floor rate.
async fn send_single_awaited(q: &DelayQueue, client: &Client, n: usize, delay: Duration) -> Res<(f64, f64, f64)> {
    let sha: String = client.script_load("return redis.call('SET', KEYS[1], ARGV[1])").await?;
    let key = format!("bench:{{{}}}:floor", q.name());
    let (mut sends, mut floor, mut ratios) = (Duration::ZERO, Duration::ZERO, Vec::new());
    let rounds = n.div_ceil(FLOOR_ROUND);
    for round in 0..rounds {
        let mut took = [Duration::ZERO; 2];
        for side in [round % 2, 1 - round % 2] {
            let t = Instant::now();
            for _ in 0..FLOOR_ROUND {
                if side == 0 {
                    q.send(&PAYLOAD).delay(delay).await?;
                } else {
                    let _: Value = client.evalsha(sha.as_str(), key.as_str(), &PAYLOAD[..]).await?;
                }
            }
            took[side] = t.elapsed();
        }
        sends += took[0];
        floor += took[1];
        ratios.push(took[1].as_secs_f64() / took[0].as_secs_f64());
    }
    let calls = rounds * FLOOR_ROUND;
    Ok((rate(calls, sends), rate(calls, floor), median(ratios)))
}

async fn send_concurrent(q: &DelayQueue, n: usize, delay: Duration) -> Res<f64> {
    let t = Instant::now();
    let mut sends = futures::stream::iter(0..n)
        .map(|_| async move { q.send(&PAYLOAD).delay(delay).await })
        .buffer_unordered(IN_FLIGHT);
    while let Some(r) = sends.next().await {
        r?;
    }
    Ok(rate(n, t.elapsed()))
}

async fn send_batch(q: &DelayQueue, n: usize, delay: Duration) -> Res<f64> {
    send_levels(q, n, delay, 1).await
}

/// [`send_batch`] with message `i` of priority `i % levels` (1: all 0, the default).
async fn send_levels(q: &DelayQueue, n: usize, delay: Duration, levels: usize) -> Res<f64> {
    let t = Instant::now();
    // In slices, as an application would, so the whole batch is never in memory at once.
    for start in (0..n).step_by(10_000) {
        let msgs =
            (start..n.min(start + 10_000)).map(|i| NewMessage::new(&PAYLOAD).delay(delay).priority((i % levels) as u8));
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
    consume_by(q, client, n, |count| async move {
        q.start_consume(move |_msg: Message| {
            count.fetch_add(1, Ordering::Relaxed);
            async { Ok::<(), HandlerError>(()) }
        })
        .await
    })
    .await
}

/// [`consume`] with the consumer `start` starts, whose handler counts each
/// message it handles in the counter it is given.
async fn consume_by<F, Fut>(q: &DelayQueue, client: &Client, n: usize, start: F) -> Res<(f64, f64, f64, u64)>
where
    F: FnOnce(Arc<AtomicU64>) -> Fut,
    Fut: std::future::Future<Output = Result<delayqueue::Consumer, delayqueue::Error>>,
{
    let count = Arc::new(AtomicU64::new(0));
    let cpu = redis_cpu(client).await?;
    let calls = script_calls(client).await?;
    let failed = q.status().await?.totals.failed;
    let t = Instant::now();
    let consumer = start(count.clone()).await?;
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

/// batch: a backlog of `n` due messages consumed per message
/// (concurrency 16) and by a batch handler of 100 messages (concurrency 1
/// and 4: 100 and 400 messages in handlers), each with a no-op handler
/// and with one whose every call waits 1 ms (a database round trip: one
/// per message, or one per batch), `rounds` times in turn on fresh queues;
/// medians of msgs/s and Redis CPU.
async fn batch(client: &Client, tag: &str, n: usize, rounds: usize) -> Res<serde_json::Value> {
    let mut runs = Vec::new();
    for round in 0..rounds {
        let mut run = json!({});
        for (work, cost) in [("noop", Duration::ZERO), ("rt1ms", Duration::from_millis(1))] {
            let q = queue(client, &format!("{tag}-{work}-single{round}"), |b| b.concurrency(16))?;
            send_batch(&q, n, Duration::ZERO).await?;
            let (per_s, us, _, _) = consume_by(&q, client, n, |count| {
                q.start_consume(move |_msg: Message| {
                    let count = count.clone();
                    async move {
                        call(cost).await;
                        count.fetch_add(1, Ordering::Relaxed);
                        Ok::<(), HandlerError>(())
                    }
                })
            })
            .await?;
            run[format!("{work}_per_message_c16_per_s")] = json!(per_s);
            run[format!("{work}_per_message_redis_cpu_us_per_msg")] = json!(us);
            for c in [1, 4] {
                let q = queue(client, &format!("{tag}-{work}-batch{c}-{round}"), |b| b.concurrency(c))?;
                send_batch(&q, n, Duration::ZERO).await?;
                let (per_s, us, _, failed) = consume_by(&q, client, n, |count| {
                    q.consume_batch(move |batch: Vec<Message>| {
                        let count = count.clone();
                        async move {
                            call(cost).await;
                            count.fetch_add(batch.len() as u64, Ordering::Relaxed);
                            batch.iter().map(|_| Ok(())).collect::<Vec<Result<(), HandlerError>>>()
                        }
                    })
                    .size(100)
                    .into_future()
                })
                .await?;
                run[format!("{work}_batch100_c{c}_per_s")] = json!(per_s);
                run[format!("{work}_batch100_c{c}_redis_cpu_us_per_msg")] = json!(us);
                run[format!("{work}_batch100_c{c}_failed_deliveries")] = json!(failed);
            }
            cleanup(client).await?;
        }
        runs.push(run);
    }
    let keys: Vec<String> = runs[0]
        .as_object()
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default();
    let mut out = medians(&runs, keys.iter().map(String::as_str));
    out["n"] = json!(n);
    out["rounds"] = json!(rounds);
    Ok(out)
}

/// A handler's work that costs `cost` of waiting (none: returns at once).
async fn call(cost: Duration) {
    if !cost.is_zero() {
        tokio::time::sleep(cost).await;
    }
}

/// w1: the three ways to send, then consume a backlog with concurrency 16,
/// all on queue `name` (the first two send messages due in an hour, which
/// stay pending; the batch sends due ones, which are then consumed). With
/// `user`, the Redis URL, also consume as an application does (see
/// [`consume_as_user`]).
async fn w1(client: &Client, name: &str, n: usize, user: Option<&str>) -> Res<serde_json::Value> {
    let q = queue(client, name, |b| b.concurrency(16))?;
    let (single, floor, to_floor) = send_single_awaited(&q, client, n, HOUR).await?;
    let concurrent = send_concurrent(&q, n, HOUR).await?;
    let batch = send_batch(&q, n, Duration::ZERO).await?;
    let (consumed, redis_us, calls, failed) = consume(&q, client, n).await?;
    let mut out = json!({
        "n": n,
        "send_single_awaited_per_s": single,
        "floor_evalsha_one_set_per_s": floor,
        "send_single_to_floor": (to_floor * 100.0).round() / 100.0,
        "send_concurrent_per_s": concurrent,
        "send_batch_per_s": batch,
        "consume_c16_per_s": consumed,
        "consume_redis_cpu_us_per_msg": redis_us,
        "consume_script_calls_per_msg": calls,
        "consume_failed_deliveries": failed,
    });
    if let Some(url) = user {
        out["consume_user_c16_per_s"] = json!(consume_as_user(url, &format!("{name}-user"), n).await?);
    }
    Ok(out)
}

/// results: consume as in w1 (`concurrency(16)`, `n` due messages) with a
/// handler that returns nothing and with one that returns a 100-byte
/// result (kept by the ack for the default retention), in `rounds`
/// alternating rounds on fresh queues: what keeping results costs
/// (docs/results.md).
async fn results(client: &Client, tag: &str, n: usize, rounds: usize) -> Res<serde_json::Value> {
    let (mut rates, mut cpu, mut ratios) = ([vec![], vec![]], [vec![], vec![]], vec![]);
    for round in 0..rounds {
        let mut took = [0.0; 2];
        for side in [round % 2, 1 - round % 2] {
            let q = queue(client, &format!("{tag}-results{round}-{side}"), |b| b.concurrency(16))?;
            send_batch(&q, n, Duration::ZERO).await?;
            let (rate, redis_us, ..) = match side {
                0 => consume(&q, client, n).await?,
                _ => {
                    let handle = q.clone();
                    consume_by(&q, client, n, |count| async move {
                        handle
                            .start_consume(move |_msg: Message| {
                                count.fetch_add(1, Ordering::Relaxed);
                                async { Ok::<_, HandlerError>(PAYLOAD.to_vec()) }
                            })
                            .await
                    })
                    .await?
                }
            };
            rates[side].push(rate);
            cpu[side].push(redis_us);
            took[side] = rate;
        }
        ratios.push(took[1] / took[0]);
        cleanup(client).await?;
    }
    Ok(json!({
        "n": n,
        "rounds": rounds,
        "consume_c16_per_s": {"no_result": median(rates[0].clone()), "result_100b": median(rates[1].clone())},
        "consume_redis_cpu_us_per_msg": {"no_result": median(cpu[0].clone()), "result_100b": median(cpu[1].clone())},
        "result_to_no_result_median": (median(ratios) * 100.0).round() / 100.0,
    }))
}

/// progress: consume as in w1 (`concurrency(16)`, `n` due messages) with
/// a no-op handler and with one that writes one progress update and one
/// log line per message, in `rounds` alternating rounds on fresh queues:
/// what progress and logs cost (docs/results.md).
async fn progress(client: &Client, tag: &str, n: usize, rounds: usize) -> Res<serde_json::Value> {
    let (mut rates, mut cpu, mut calls, mut ratios) = ([vec![], vec![]], [vec![], vec![]], [vec![], vec![]], vec![]);
    for round in 0..rounds {
        let mut took = [0.0; 2];
        for side in [round % 2, 1 - round % 2] {
            let q = queue(client, &format!("{tag}-progress{round}-{side}"), |b| b.concurrency(16))?;
            send_batch(&q, n, Duration::ZERO).await?;
            let (rate, redis_us, script_calls, _) = match side {
                0 => consume(&q, client, n).await?,
                _ => {
                    let handle = q.clone();
                    consume_by(&q, client, n, |count| async move {
                        handle
                            .start_consume(move |msg: Message| {
                                let count = count.clone();
                                async move {
                                    msg.progress(50).await?;
                                    msg.log("fetched 3 invoices").await?;
                                    count.fetch_add(1, Ordering::Relaxed);
                                    Ok::<_, HandlerError>(())
                                }
                            })
                            .await
                    })
                    .await?
                }
            };
            rates[side].push(rate);
            cpu[side].push(redis_us);
            calls[side].push(script_calls);
            took[side] = rate;
        }
        ratios.push(took[1] / took[0]);
        cleanup(client).await?;
    }
    let m = |v: &[Vec<f64>; 2]| json!({"noop": median(v[0].clone()), "progress_and_log": median(v[1].clone())});
    Ok(json!({
        "n": n,
        "rounds": rounds,
        "consume_c16_per_s": m(&rates),
        "consume_redis_cpu_us_per_msg": m(&cpu),
        "script_calls_per_msg": m(&calls),
        "ratios": ratios.iter().map(|r| (r * 100.0).round() / 100.0).collect::<Vec<_>>(),
        "progress_to_noop_median": (median(ratios) * 100.0).round() / 100.0,
    }))
}

/// prio: consume as in w1 (`concurrency(16)`, no-op handler, `n` due
/// messages) from a queue whose messages have no priority and from one
/// whose messages cycle through priorities 0-9, in `rounds` alternating
/// rounds: what using priorities costs (header reads in promote, a zset).
async fn prio(client: &Client, tag: &str, n: usize, rounds: usize) -> Res<serde_json::Value> {
    let (mut rates, mut cpu) = ([vec![], vec![]], [vec![], vec![]]);
    for round in 0..rounds {
        for (i, levels) in [1, 10].into_iter().enumerate() {
            let q = queue(client, &format!("{tag}-prio{round}-{levels}"), |b| b.concurrency(16))?;
            send_levels(&q, n, Duration::ZERO, levels).await?;
            let (rate, redis_us, ..) = consume(&q, client, n).await?;
            rates[i].push(rate);
            cpu[i].push(redis_us);
        }
        cleanup(client).await?;
    }
    Ok(json!({
        "n": n,
        "consume_c16_per_s": {"no_priorities": rates[0], "priorities_0_to_9": rates[1]},
        "redis_cpu_us_per_msg": {"no_priorities": cpu[0], "priorities_0_to_9": cpu[1]},
    }))
}

/// Consume as an application runs it: its own client from
/// `delayqueue::connect`, a queue with builder defaults but
/// `concurrency(16)` (and the default key prefix), `n` due messages, a
/// no-op handler; msgs/s.
async fn consume_as_user(url: &str, name: &str, n: usize) -> Res<f64> {
    let client = delayqueue::connect(url).await?;
    let q = DelayQueue::builder(name, client.clone()).concurrency(16).build()?;
    send_batch(&q, n, Duration::ZERO).await?;
    let (rate, ..) = consume(&q, &client, n).await?;
    client.quit().await?;
    Ok(rate)
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
    let late: Arc<Mutex<Vec<f64>>> = Arc::default();
    let l = late.clone();
    let offset = clock_offset_ms(client).await?;
    let consumer = q
        .start_consume(move |msg: Message| {
            // Redis's clock now, read from this host's (same machine) minus
            // the measured offset, against the due time Redis stored (ms).
            let now = host_ms() - offset;
            let due = msg.due_at().duration_since(UNIX_EPOCH).unwrap_or_default().as_millis() as f64;
            l.lock().unwrap().push(now - due);
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
        q.send(&PAYLOAD).delay(delay).await?;
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

/// A client on another database of the same server (the one after
/// `url`'s): the empty side of w4, so that both sides share one Redis
/// process, its CPU and its noise, while each has a keyspace of its own.
async fn other_database(url: &str) -> Res<Client> {
    let mut config = Config::from_url(url)?;
    config.database = Some(config.database.map_or(1, |d| (d + 1) % 16));
    let client = Builder::from_config(config).build()?;
    client.init().await?;
    Ok(client)
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    match xs.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => xs[n / 2],
        n => (xs[n / 2 - 1] + xs[n / 2]) / 2.0,
    }
}

/// The figures of w1 that w4 compares, loaded against empty.
const W1_FIGURES: [(&str, &str); 5] = [
    ("send_single_awaited", "send_single_awaited_per_s"),
    ("send_concurrent", "send_concurrent_per_s"),
    ("send_batch", "send_batch_per_s"),
    ("consume_c16", "consume_c16_per_s"),
    ("consume_redis_cpu_per_msg", "consume_redis_cpu_us_per_msg"),
];

/// Each figure of `loaded` divided by `base`'s, to two places.
fn ratios(loaded: &serde_json::Value, base: &serde_json::Value) -> serde_json::Value {
    let mut out = serde_json::Map::new();
    for (name, key) in W1_FIGURES {
        let r = loaded[key].as_f64().unwrap_or(0.0) / base[key].as_f64().unwrap_or(f64::NAN);
        out.insert(name.into(), json!((r * 100.0).round() / 100.0));
    }
    out.into()
}

/// The median of each figure named in `keys` over `runs`.
fn medians<'a>(runs: &[serde_json::Value], keys: impl IntoIterator<Item = &'a str>) -> serde_json::Value {
    let mut out = serde_json::Map::new();
    for key in keys {
        out.insert(
            key.into(),
            json!(median(runs.iter().filter_map(|r| r[key].as_f64()).collect())),
        );
    }
    out.into()
}

/// w4: w1 on top of `scale` pending messages (due in an hour) against w1 on
/// an empty database of the same server, in interleaved rounds; then the
/// longest script call while draining `scale` due messages.
async fn w4(client: &Client, url: &str, tag: &str, n: usize, scale: usize, rounds: usize) -> Res<serde_json::Value> {
    let empty_db = other_database(url).await?;
    cleanup(client).await?;
    cleanup(&empty_db).await?;
    let name = format!("{tag}-scale");
    send_batch(&queue(client, &name, |b| b)?, scale, HOUR).await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    // The first loaded round adds 3n messages, which take a backlog of
    // 1,000,000 past 2^20 keys: Redis doubles its keyspace, expires and
    // pending tables (moving ~1,000,000 entries in each) meanwhile. That
    // happens once per doubling in a server's life, so it is reported on
    // its own, and the rounds after it show the backlog's lasting cost.
    let growth = w1(client, &name, n, None).await?;
    let (mut empty, mut loaded) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        // Alternate which side goes first, so drift in the machine's load
        // does not always favour the same side.
        for side in [round % 2, 1 - round % 2] {
            tokio::time::sleep(Duration::from_secs(2)).await;
            if side == 0 {
                empty.push(w1(&empty_db, &format!("{tag}-empty"), n, None).await?);
                cleanup(&empty_db).await?;
            } else {
                loaded.push(w1(client, &name, n, None).await?);
            }
        }
    }
    let figures = || W1_FIGURES.map(|(_, key)| key);
    let base = medians(&empty, figures());
    let per_round: Vec<_> = loaded.iter().zip(&empty).map(|(l, e)| ratios(l, e)).collect();
    let steady = ratios(&medians(&loaded, figures()), &base);
    let growth_ratios = ratios(&growth, &base);
    cleanup(client).await?;

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
        "empty": empty,
        "with_backlog_growth_round": growth,
        "with_backlog": loaded,
        "ratio_to_empty_growth_round": growth_ratios,
        "ratio_to_empty_per_round": per_round,
        "ratio_to_empty_median": steady,
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

/// unique: a plain send with its own id against the same send with
/// `unique_for(1 h)`, side by side on one server: in interleaved rounds
/// (the order swapped each round, so the machine's noise falls on both),
/// `SINGLES` single awaited sends each, then `n / rounds` sends with
/// `IN_FLIGHT` in flight, each side into its own queue (due in an hour).
/// Then Redis CPU and memory per message of the concurrent phases, and each
/// side's `n` messages consumed (the acks of the unique side start the
/// markers' windows).
async fn unique(client: &Client, tag: &str, n: usize, rounds: usize) -> Res<serde_json::Value> {
    /// Single awaited sends per side and round.
    const SINGLES: usize = 1000;
    let qs = [
        queue(client, &format!("{tag}-plain"), |b| b.concurrency(16))?,
        queue(client, &format!("{tag}-unique"), |b| b.concurrency(16))?,
    ];
    let per_round = n / rounds.max(1);
    let (mut single, mut conc) = ([Duration::ZERO; 2], [Duration::ZERO; 2]);
    let (mut cpu, mut mem) = ([0.0f64; 2], [0i64; 2]);
    let mut ratios = Vec::new();
    let mut next = 0usize;
    for round in 0..rounds.max(1) {
        let mut took = [Duration::ZERO; 2];
        for side in [round % 2, 1 - round % 2] {
            let q = &qs[side];
            let t = Instant::now();
            for i in next..next + SINGLES {
                send(q, side, i).await?;
            }
            single[side] += t.elapsed();
            let (c, m, t) = (redis_cpu(client).await?, used_memory(client).await?, Instant::now());
            let base = next + SINGLES;
            let mut sends = futures::stream::iter(base..base + per_round)
                .map(|i| send(q, side, i).into_future())
                .buffer_unordered(IN_FLIGHT);
            while let Some(r) = sends.next().await {
                r?;
            }
            took[side] = t.elapsed();
            conc[side] += took[side];
            cpu[side] += redis_cpu(client).await? - c;
            mem[side] += used_memory(client).await? - m;
        }
        ratios.push(took[0].as_secs_f64() / took[1].as_secs_f64());
        next += SINGLES + per_round;
    }
    let sent = rounds.max(1) * per_round;
    let singles = rounds.max(1) * SINGLES;
    let us = |x: f64| (x / sent as f64 * 1e6 * 100.0).round() / 100.0;
    let mut consumed = [0.0; 2];
    let mut consume_us = [0.0; 2];
    for (side, q) in qs.iter().enumerate() {
        let total = singles + sent;
        for i in 0..total {
            q.reschedule(format!("m{i}"), Duration::ZERO).await?;
        }
        let (r, us, ..) = consume(q, client, total).await?;
        (consumed[side], consume_us[side]) = (r, us);
    }
    Ok(json!({
        "n": sent,
        "rounds": rounds.max(1),
        "send_single_awaited_per_s": {"plain": rate(singles, single[0]), "unique_for": rate(singles, single[1])},
        "send_concurrent_per_s": {"plain": rate(sent, conc[0]), "unique_for": rate(sent, conc[1])},
        "concurrent_unique_to_plain_median": (median(ratios) * 100.0).round() / 100.0,
        "send_redis_cpu_us_per_msg": {"plain": us(cpu[0]), "unique_for": us(cpu[1])},
        "bytes_per_msg": {"plain": mem[0] / sent as i64, "unique_for": mem[1] / sent as i64},
        "consume_c16_per_s": {"plain": consumed[0], "unique_for": consumed[1]},
        "consume_redis_cpu_us_per_msg": {"plain": consume_us[0], "unique_for": consume_us[1]},
    }))
}

/// Message `i` of [`unique`]'s side `side` (1: with `unique_for`).
fn send(q: &DelayQueue, side: usize, i: usize) -> NewMessage<&DelayQueue> {
    let m = q.send(&PAYLOAD).delay(HOUR).id(format!("m{i}"));
    match side {
        1 => m.unique_for(HOUR),
        _ => m,
    }
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

/// Consumers of one process started on `q`, each handling with `handler`.
async fn consumers<H: delayqueue::Handler + Clone>(
    q: &DelayQueue,
    n: usize,
    handler: H,
) -> Res<Vec<delayqueue::Consumer>> {
    let mut all = Vec::with_capacity(n);
    for _ in 0..n {
        all.push(q.start_consume(handler.clone()).await?);
    }
    Ok(all)
}

/// rate: a backlog consumed by 4 consumers (concurrency 16 each) under
/// `rate_limit(1000, 1 s)` for 30 s. Each handler start is recorded; the
/// start rate over the 30 s and the most starts in any 1 s window
/// (sliding, by this host's clock) are reported.
async fn rate_limited(client: &Client, tag: &str) -> Res<serde_json::Value> {
    const LIMIT: u64 = 1000;
    const RUN: Duration = Duration::from_secs(30);
    let q = queue(client, &format!("{tag}-rate"), |b| {
        b.concurrency(16).rate_limit(LIMIT, Duration::from_secs(1))
    })?;
    send_batch(&q, 36_000, Duration::ZERO).await?;
    let starts = Arc::new(Mutex::new(Vec::with_capacity(40_000)));
    let s = starts.clone();
    let handler = move |_msg: Message| {
        s.lock().unwrap().push(Instant::now());
        async { Ok::<(), HandlerError>(()) }
    };
    let t = Instant::now();
    let all = consumers(&q, 4, handler).await?;
    tokio::time::sleep(RUN + Duration::from_secs(2)).await;
    for c in all {
        c.shutdown().await?;
    }
    let mut starts = starts.lock().unwrap().clone();
    starts.sort();
    let first = *starts.first().ok_or("nothing started")?;
    let run: Vec<Instant> = starts.iter().copied().filter(|&x| x < first + RUN).collect();
    let (mut most, mut j) = (0, 0);
    for i in 0..run.len() {
        while j < run.len() && run[j] < run[i] + Duration::from_secs(1) {
            j += 1;
        }
        most = most.max(j - i);
    }
    let whole_seconds: Vec<usize> = (0..RUN.as_secs())
        .map(|k| {
            let from = first + Duration::from_secs(k);
            run.iter()
                .filter(|&&x| x >= from && x < from + Duration::from_secs(1))
                .count()
        })
        .collect();
    Ok(json!({
        "limit_per_s": LIMIT,
        "consumers": 4,
        "first_start_after_ms": (first - t).as_millis() as u64,
        "starts_in_30s": run.len(),
        "rate_per_s": (run.len() as f64 / RUN.as_secs_f64() * 10.0).round() / 10.0,
        "of_limit": (run.len() as f64 / RUN.as_secs_f64() / LIMIT as f64 * 1000.0).round() / 1000.0,
        "most_in_any_1s_window": most,
        "per_second": whole_seconds,
    }))
}

/// gconc: 20,000 messages whose handler takes 2 ms, consumed by 4
/// consumers of concurrency 16 under `global_concurrency(10)`; the
/// processing count (`ZCARD` of unack) is sampled every ms, and the
/// handlers running at once in this process are counted.
async fn global_concurrency(client: &Client, tag: &str) -> Res<serde_json::Value> {
    const N: usize = 20_000;
    let name = format!("{tag}-gconc");
    let q = queue(client, &name, |b| b.concurrency(16).global_concurrency(10))?;
    send_batch(&q, N, Duration::ZERO).await?;
    let (running, most, done) = (
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
    );
    let (r, m, d) = (running.clone(), most.clone(), done.clone());
    let handler = move |_msg: Message| {
        let (r, m, d) = (r.clone(), m.clone(), d.clone());
        async move {
            m.fetch_max(r.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(2)).await;
            r.fetch_sub(1, Ordering::SeqCst);
            d.fetch_add(1, Ordering::SeqCst);
            Ok::<(), HandlerError>(())
        }
    };
    let unack = format!("bench:{{{name}}}:unack");
    let t = Instant::now();
    let all = consumers(&q, 4, handler).await?;
    let (mut samples, mut max_processing, mut at_limit) = (0u64, 0i64, 0u64);
    let limit = Instant::now() + Duration::from_secs(300);
    while (done.load(Ordering::SeqCst) as usize) < N && Instant::now() < limit {
        let n: i64 = client.zcard(&unack).await?;
        samples += 1;
        max_processing = max_processing.max(n);
        at_limit += u64::from(n == 10);
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let took = t.elapsed();
    for c in all {
        c.shutdown().await?;
    }
    Ok(json!({
        "global_concurrency": 10,
        "consumers": 4,
        "concurrency_each": 16,
        "handler_ms": 2,
        "msgs_per_s": rate(done.load(Ordering::SeqCst) as usize, took),
        "samples": samples,
        "max_processing_sampled": max_processing,
        "share_of_samples_at_10": (at_limit as f64 / samples.max(1) as f64 * 1000.0).round() / 1000.0,
        "max_running_handlers": most.load(Ordering::SeqCst),
    }))
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
    if on("w1") {
        emit(
            "w1_throughput",
            w1(&client, &format!("{tag}-w1"), o.n, Some(&url)).await?,
        );
        cleanup(&client).await?;
    }
    if on("w2") {
        emit("w2_lateness", w2(&client, &tag).await?);
        cleanup(&client).await?;
    }
    if on("w4") {
        emit("w4_scale", w4(&client, &url, &tag, o.n, o.scale, o.rounds).await?);
    }
    if on("compare") {
        emit("compare_go_style", compare(&client, &tag).await?);
    }
    if on("batch") {
        emit("batch_handler", batch(&client, &tag, o.n, o.rounds).await?);
    }
    if on("results") {
        emit("results", results(&client, &tag, o.n, o.rounds).await?);
    }
    if on("progress") {
        emit("progress", progress(&client, &tag, o.n, o.rounds).await?);
    }
    if on("prio") {
        emit("priorities", prio(&client, &tag, o.n, o.rounds).await?);
    }
    if on("rate") {
        emit("rate_limit", rate_limited(&client, &tag).await?);
        cleanup(&client).await?;
    }
    if on("gconc") {
        emit("global_concurrency", global_concurrency(&client, &tag).await?);
        cleanup(&client).await?;
    }
    if on("handles") {
        emit("handles", handles(&client)?);
    }
    if on("groups") {
        emit("groups", groups(&client, &tag, o.n, o.scale, o.samples).await?);
        cleanup(&client).await?;
    }
    if on("groupsfair") || on("groupslimits") {
        emit("groups_limits", groups_limits(&client, &tag).await?);
    }
    if on("groupsfair") {
        emit("groups_fairness", fairness(&client, &tag, o.samples).await?);
    }
    if on("flows") {
        emit("flows", flows(&client, &tag, o.rounds).await?);
        cleanup(&client).await?;
    }
    if on("fanin") {
        emit("fanin", fanin(&client, &tag, o.rounds).await?);
        cleanup(&client).await?;
    }
    if on("groupsbig") {
        emit("groups_big", groups_big(&client, &tag, o.scale).await?);
    }
    if on("bigpayload") {
        emit("big_payload", big_payload(&client, &tag).await?);
    }
    if on("scriptcpu") {
        emit("script_cpu", script_cpu(&client, &tag, o.n).await?);
        cleanup(&client).await?;
    }
    if on("unique") {
        emit("unique_for", unique(&client, &tag, o.n, o.rounds).await?);
        cleanup(&client).await?;
    }
    if on("featurecost") {
        emit("feature_cost", feature_cost(&client, &tag, o.n, o.rounds).await?);
        cleanup(&client).await?;
    }
    if on("abort") {
        emit("abort_latency", abort_latency(&client, &tag, o.samples).await?);
        cleanup(&client).await?;
    }
    if on("idle") {
        for &n in &o.idle {
            emit("idle", idle(&client, &url, n, &o.idle_as).await?);
            cleanup(&client).await?;
        }
    }
    Ok(())
}

/// This process's resident memory, in KiB (Linux: /proc/self/statm).
fn rss_kib() -> Res<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm")?;
    let pages: u64 = statm.split(' ').nth(1).ok_or("statm")?.parse()?;
    Ok(pages * 4)
}

/// Resident memory per `DelayQueue` handle (no Redis call, no consumer),
/// and per handle that someone subscribed to the events of.
fn handles(client: &Client) -> Res<serde_json::Value> {
    const N: u64 = 1000;
    let per_handle = |subscribe: bool| -> Res<f64> {
        let before = rss_kib()?;
        let mut kept = Vec::new();
        for i in 0..N {
            let q = queue(client, &format!("h{i}"), |b| b)?;
            let events = subscribe.then(|| q.events());
            kept.push((q, events));
        }
        Ok((rss_kib()? - before) as f64 / N as f64)
    };
    Ok(json!({
        "handles": N,
        "kib_per_handle": per_handle(false)?,
        "kib_per_handle_with_events": per_handle(true)?,
    }))
}

/// Every command Redis has run so far (scripts' own calls included), and
/// of those the script calls and the TYPE calls.
async fn commands(client: &Client) -> Res<(f64, f64, f64)> {
    let info: String = client.info(Some(InfoKind::CommandStats)).await?;
    let (mut all, mut scripts, mut types) = (0.0, 0.0, 0.0);
    for line in info.lines() {
        let Some((name, rest)) = line.strip_prefix("cmdstat_").and_then(|l| l.split_once(":calls=")) else {
            continue;
        };
        let calls: f64 = rest.split(',').next().unwrap_or("0").parse()?;
        // The measuring connection's own INFO calls are not the queues'.
        if name != "info" {
            all += calls;
        }
        match name {
            "evalsha" | "eval" => scripts += calls,
            "type" => types += calls,
            _ => {}
        }
    }
    Ok((all, scripts, types))
}

/// Connections open on the server.
async fn connections(client: &Client) -> Res<f64> {
    let info: String = client.info(Some(InfoKind::Clients)).await?;
    let line = info.lines().find_map(|l| l.strip_prefix("connected_clients:"));
    Ok(line.ok_or("no connected_clients in INFO")?.trim().parse()?)
}

/// CPU seconds this process has used so far (Linux: /proc/self/stat).
fn process_cpu() -> Res<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    let fields: Vec<&str> = stat.rsplit_once(')').ok_or("stat")?.1.split_whitespace().collect();
    let ticks: f64 = fields[11].parse::<f64>()? + fields[12].parse::<f64>()?;
    Ok(ticks / 100.0)
}

/// The cost of `n` empty queues consumed by this process, over a 30 s
/// window after a warm-up (each queue's first idle probe falls anywhere
/// in its idle probe period, so the window holds its share of them, at
/// the steady state's rate): Redis commands, script and TYPE calls per
/// second, connections (the client's included), Redis and process CPU,
/// and resident memory (its growth since before the consumers started);
/// then, with the rest still idle, one of them: send -> handler start of
/// single messages sent one at a time, and the lateness of messages
/// delayed 500 ms (handler start after due time, by this host's clock).
/// `how`: one `Worker` over all (`worker`), or a consumer each
/// (`consumers`), on a client of their own.
async fn idle(client: &Client, url: &str, n: usize, how: &str) -> Res<serde_json::Value> {
    const WINDOW: Duration = Duration::from_secs(30);
    const SAMPLES: usize = 200;
    const DELAYED: usize = 10;
    const DELAY: Duration = Duration::from_millis(500);
    let conns = connections(client).await?;
    let own = delayqueue::connect(url).await?;
    let queues: Vec<DelayQueue> = (0..n)
        .map(|i| queue(&own, &format!("idle{i}"), |b| b))
        .collect::<Res<_>>()?;
    let rss = rss_kib()?;
    let ok = |_m: Message| async { Ok::<(), HandlerError>(()) };
    // The first queue's handler says when each message started.
    let (started, mut starts) = tokio::sync::mpsc::unbounded_channel::<Instant>();
    let timed = move |_m: Message| {
        let _ = started.send(Instant::now());
        async { Ok::<(), HandlerError>(()) }
    };
    let mut consumers = Vec::new();
    match how {
        "worker" => {
            let mut worker = delayqueue::Worker::new().queue(&queues[0], 1, timed);
            for q in &queues[1..] {
                worker = worker.queue(q, 1, ok);
            }
            consumers.push(worker.start().await?);
        }
        "consumers" => {
            consumers.push(queues[0].start_consume(timed).await?);
            for q in &queues[1..] {
                consumers.push(q.start_consume(ok).await?);
            }
        }
        other => return Err(format!("--idle-as {other}: worker or consumers").into()),
    }
    // Past start-up: the first probes and the subscriptions.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let conns = connections(client).await? - conns;
    let (all, scripts, types) = commands(client).await?;
    let (cpu, own_cpu) = (redis_cpu(client).await?, process_cpu()?);
    tokio::time::sleep(WINDOW).await;
    let (all2, scripts2, types2) = commands(client).await?;
    let (cpu2, own_cpu2) = (redis_cpu(client).await?, process_cpu()?);
    let rss = rss_kib()?.saturating_sub(rss);

    let producer = queue(client, "idle0", |b| b)?;
    let mut latency = Vec::with_capacity(SAMPLES);
    for _ in 0..SAMPLES {
        let sent = Instant::now();
        producer.send(PAYLOAD.as_slice()).await?;
        let at = tokio::time::timeout(Duration::from_secs(10), starts.recv())
            .await?
            .ok_or("handler gone")?;
        latency.push((at - sent).as_secs_f64() * 1000.0);
    }
    let mut late = Vec::with_capacity(DELAYED);
    for _ in 0..DELAYED {
        let due = Instant::now() + DELAY;
        producer.send(PAYLOAD.as_slice()).delay(DELAY).await?;
        let at = tokio::time::timeout(Duration::from_secs(10), starts.recv())
            .await?
            .ok_or("handler gone")?;
        late.push(if at >= due {
            (at - due).as_secs_f64() * 1000.0
        } else {
            -(due - at).as_secs_f64() * 1000.0
        });
    }
    for c in consumers {
        c.shutdown().await?;
    }
    own.quit().await?;
    let per_s = |x: f64| x / WINDOW.as_secs_f64();
    let per_queue_s = |x: f64| (per_s(x) / n as f64 * 1000.0).round() / 1000.0;
    let percent = |x: f64| (per_s(x) * 1000.0).round() / 10.0;
    late.sort_by(f64::total_cmp);
    Ok(json!({
        "queues": n,
        "as": how,
        "commands_per_s": per_s(all2 - all).round(),
        "commands_per_s_per_queue": per_queue_s(all2 - all),
        "scripts_per_s_per_queue": per_queue_s(scripts2 - scripts),
        "type_per_s_per_queue": per_queue_s(types2 - types),
        "connections": conns,
        "redis_cpu_percent": percent(cpu2 - cpu),
        "process_cpu_percent": percent(own_cpu2 - own_cpu),
        "rss_mib": (rss as f64 / 1024.0 * 10.0).round() / 10.0,
        "kib_rss_per_queue": (rss as f64 / n as f64 * 10.0).round() / 10.0,
        "send_to_handler": p50_p99(latency),
        "delayed_500ms_lateness_ms": {
            "p50": (percentile(&late, 0.5) * 10.0).round() / 10.0,
            "max": (late.last().copied().unwrap_or(f64::NAN) * 10.0).round() / 10.0,
            "n": late.len(),
        },
    }))
}

/// bigpayload: what one script call costs with 1 MiB payloads, next to
/// plain `SET`/`GET` of the same size. Each phase resets `SLOWLOG` (every
/// call logged) and `INFO commandstats`, runs one kind of call, and reads
/// the longest script call, usec_per_call and Redis CPU (`used_cpu_*`).
async fn big_payload(client: &Client, tag: &str) -> Res<serde_json::Value> {
    const SIZE: usize = 1 << 20;
    const N: usize = 40;
    let payload = vec![b'x'; SIZE];
    let mut out = serde_json::Map::new();
    out.insert("payload_bytes".into(), json!(SIZE));
    out.insert("messages".into(), json!(N));
    config_set(client, "slowlog-log-slower-than", "0").await?;
    config_set(client, "slowlog-max-len", "100000").await?;

    let plain = format!("bench:{{{tag}-plain}}:k");
    let p = Phase::start(client).await?;
    for i in 0..N {
        let _: () = client
            .set(format!("{plain}{}", i % 4), payload.as_slice(), None, None, false)
            .await?;
    }
    out.insert("plain_set".into(), p.end(client, N, "set", false).await?);
    let p = Phase::start(client).await?;
    let t = Instant::now();
    // 16 in flight, as redis-benchmark -P 16 would.
    let gets = futures::stream::iter(0..N)
        .map(|i| client.get::<Vec<u8>, _>(format!("{plain}{}", i % 4)))
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await;
    let took = t.elapsed();
    gets.into_iter().collect::<Result<Vec<_>, _>>()?;
    let mut get = p.end(client, N, "get", false).await?;
    get["mb_per_s"] = json!(mb_per_s(N * SIZE, took));
    out.insert("plain_get".into(), get);
    // What EVALSHA costs for a 1 MiB ARGV before the script does anything:
    // Lua hashes every byte of each string it is given.
    let noop = delayqueue::fred::types::scripts::Script::from_lua("return 1");
    let p = Phase::start(client).await?;
    for _ in 0..N {
        let _: Value = noop
            .evalsha_with_reload(client, Vec::<String>::new(), vec![payload.as_slice()])
            .await?;
    }
    out.insert(
        "evalsha_noop_1mib_argv".into(),
        p.end(client, N, "evalsha", false).await?,
    );

    let q = queue(client, &format!("{tag}-big"), |b| b.concurrency(4))?;
    let p = Phase::start(client).await?;
    for _ in 0..N {
        q.send(payload.as_slice()).await?;
    }
    out.insert("send".into(), p.end(client, N, "evalsha", false).await?);
    let p = Phase::start(client).await?;
    let t = Instant::now();
    let (..) = consume(&q, client, N).await?;
    let mut c = p.end(client, N, "evalsha", true).await?;
    c["mb_per_s"] = json!(mb_per_s(N * SIZE, t.elapsed()));
    out.insert("consume".into(), c);

    // Dead letters with a deadline, which requeue removes.
    for _ in 0..N {
        q.send(payload.as_slice())
            .expire_after(Duration::from_millis(1))
            .await?;
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    let consumer = q
        .start_consume(|_m: Message| async { Ok::<(), HandlerError>(()) })
        .await?;
    let limit = Instant::now() + Duration::from_secs(60);
    while q.counts().await?.dead < N as u64 && Instant::now() < limit {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    consumer.shutdown().await?;
    let p = Phase::start(client).await?;
    q.requeue_all_dead().await?;
    out.insert("requeue".into(), p.end(client, N, "evalsha", false).await?);
    let p = Phase::start(client).await?;
    let found = q.search(delayqueue::MessageState::Ready, "needle").await?;
    drop(found);
    out.insert("search".into(), p.end(client, 1, "evalsha", false).await?);
    let p = Phase::start(client).await?;
    let page = q.list(delayqueue::MessageState::Ready, 0, 100).await?;
    let id = page.items.first().map(|m| m.id.clone()).ok_or("nothing listed")?;
    out.insert("list".into(), p.end(client, 1, "evalsha", false).await?);
    let p = Phase::start(client).await?;
    q.get(&id).await?;
    out.insert("get".into(), p.end(client, 1, "evalsha", false).await?);
    config_set(client, "slowlog-log-slower-than", "10000").await?;
    cleanup(client).await?;
    let (send, set) = (
        &out["send"]["redis_cpu_us_per_call"],
        &out["plain_set"]["redis_cpu_us_per_call"],
    );
    if let (Some(send), Some(set)) = (send.as_f64(), set.as_f64()) {
        out.insert("send_cpu_to_set".into(), json!((send / set * 100.0).round() / 100.0));
    }
    if let (Some(c), Some(g)) = (
        out["consume"]["mb_per_s"].as_f64(),
        out["plain_get"]["mb_per_s"].as_f64(),
    ) {
        out.insert("consume_mb_s_to_get".into(), json!((c / g * 1000.0).round() / 1000.0));
    }
    Ok(serde_json::Value::Object(out))
}

fn mb_per_s(bytes: usize, took: Duration) -> f64 {
    (bytes as f64 / took.as_secs_f64() / 1e6 * 10.0).round() / 10.0
}

/// One phase of [`big_payload`]: the Redis CPU when it started, with
/// `SLOWLOG` and `INFO commandstats` reset.
struct Phase {
    cpu: f64,
}

impl Phase {
    async fn start(client: &Client) -> Res<Phase> {
        let _: Value = client
            .custom(CustomCommand::new_static("SLOWLOG", None, false), vec!["RESET"])
            .await?;
        let _: Value = client
            .custom(CustomCommand::new_static("CONFIG", None, false), vec!["RESETSTAT"])
            .await?;
        Ok(Phase {
            cpu: redis_cpu(client).await?,
        })
    }

    /// Redis CPU per call over `calls` calls, the usec_per_call of every
    /// command that ran, and the longest `command` call (SLOWLOG; for
    /// "evalsha", EVAL calls too); with
    /// `by_script`, the longest of each script the phase ran (told by
    /// [`script_name`]: for the consumer's scripts).
    async fn end(self, client: &Client, calls: usize, command: &str, by_script: bool) -> Res<serde_json::Value> {
        let cpu = redis_cpu(client).await? - self.cpu;
        let info: String = client.info(Some(InfoKind::CommandStats)).await?;
        let mut per_call = serde_json::Map::new();
        for line in info.lines() {
            let Some((name, stats)) = line.strip_prefix("cmdstat_").and_then(|l| l.split_once(':')) else {
                continue;
            };
            let field = |f: &str| stats.split(',').find_map(|kv| kv.strip_prefix(f)?.strip_prefix('='));
            if matches!(name, "info" | "config|resetstat" | "slowlog|reset") {
                continue;
            }
            if let Some(us) = field("usec_per_call") {
                per_call.insert(name.into(), json!(us.parse::<f64>()?));
            }
        }
        let log: Vec<Value> = client
            .custom(CustomCommand::new_static("SLOWLOG", None, false), vec!["GET", "100000"])
            .await?;
        // Each entry: id, timestamp, duration in µs, the command's words, ...
        let (mut longest, mut scripts) = (0, serde_json::Map::new());
        for e in &log {
            let Value::Array(e) = e else { continue };
            let (Some(Value::Array(words)), Some(us)) = (e.get(3), e.get(2).and_then(Value::as_i64)) else {
                continue;
            };
            let word = words.first().and_then(Value::as_string).unwrap_or_default();
            // A script's first call in a phase may be an EVAL (NOSCRIPT):
            // its words line up with EVALSHA's.
            let script = command == "evalsha" && word.eq_ignore_ascii_case("eval");
            if !word.eq_ignore_ascii_case(command) && !script {
                continue;
            }
            longest = longest.max(us);
            if by_script {
                let name = script_name(words);
                let ms = scripts.get(name).and_then(serde_json::Value::as_f64).unwrap_or(0.0);
                scripts.insert(name.into(), json!(ms.max(us as f64 / 1000.0)));
            }
        }
        Ok(json!({
            "redis_cpu_us_per_call": (cpu * 1e6 / calls as f64).round(),
            "longest_ms": longest as f64 / 1000.0,
            "longest_ms_by_script": scripts,
            "usec_per_call": per_call,
        }))
    }
}

/// scriptcpu: Redis's time per call of each hot script, from SLOWLOG (every
/// EVALSHA logged: its execution time, what the script costs Redis): `n`
/// messages sent one by one (64 in flight) due 1 ms later, so promote moves
/// them, then consumed (concurrency 16): every 4th handler writes a log
/// line (note), every 5th fails its first delivery (nack, retried at once).
async fn script_cpu(client: &Client, tag: &str, n: usize) -> Res<serde_json::Value> {
    let q = queue(client, &format!("{tag}-cpu"), |b| {
        b.concurrency(16).backoff(delayqueue::Backoff::fixed(Duration::ZERO))
    })?;
    config_set(client, "slowlog-log-slower-than", "0").await?;
    config_set(client, "slowlog-max-len", "1000000").await?;
    let _: Value = client
        .custom(CustomCommand::new_static("SLOWLOG", None, false), vec!["RESET"])
        .await?;
    let sends = futures::stream::iter(0..n)
        .map(|i| {
            let q = &q;
            async move {
                q.send(format!("{i:0100}").into_bytes())
                    .delay(Duration::from_millis(1))
                    .await
            }
        })
        .buffer_unordered(64)
        .collect::<Vec<_>>()
        .await;
    sends.into_iter().collect::<Result<Vec<_>, _>>()?;
    let (..) = consume_by(&q, client, n, |count| {
        q.start_consume(move |m: Message| {
            let count = count.clone();
            async move {
                let i: usize = std::str::from_utf8(m.payload())
                    .ok()
                    .and_then(|t| t.parse().ok())
                    .unwrap_or(0);
                if i.is_multiple_of(4) {
                    m.log("handled").await?;
                }
                if i.is_multiple_of(5) && m.attempt() == 1 {
                    return Err(HandlerError::from("first delivery fails"));
                }
                count.fetch_add(1, Ordering::Relaxed);
                Ok::<(), HandlerError>(())
            }
        })
    })
    .await?;
    let log: Vec<Value> = client
        .custom(
            CustomCommand::new_static("SLOWLOG", None, false),
            vec!["GET", "1000000"],
        )
        .await?;
    config_set(client, "slowlog-log-slower-than", "10000").await?;
    // script -> the µs of each call
    let mut by: std::collections::BTreeMap<&str, Vec<f64>> = Default::default();
    for e in &log {
        let Value::Array(e) = e else { continue };
        let (Some(Value::Array(words)), Some(us)) = (e.get(3), e.get(2).and_then(Value::as_i64)) else {
            continue;
        };
        // EVALSHA only: an EVAL (a script's first call, NOSCRIPT) also compiles it.
        let word = words.first().and_then(Value::as_string).unwrap_or_default();
        if !word.eq_ignore_ascii_case("evalsha") {
            continue;
        }
        by.entry(script_name(words)).or_default().push(us as f64);
    }
    // The median as well as the mean: on a busy machine a call the OS
    // preempts logs the time it waited.
    let per_call: serde_json::Map<String, serde_json::Value> = by
        .into_iter()
        .map(|(name, us)| {
            let (calls, sum) = (us.len(), us.iter().sum::<f64>());
            let round = |x: f64| (x * 100.0).round() / 100.0;
            let stats = json!({
                "calls": calls,
                "us_per_call": round(sum / calls as f64),
                "us_per_call_p50": median(us),
                "us_per_msg": round(sum / n as f64),
            });
            (name.to_string(), stats)
        })
        .collect();
    Ok(json!({"messages": n, "scripts": per_call}))
}

/// Which script a SLOWLOG entry (`EVALSHA sha numkeys key...`) ran, told
/// by its first two keys' kinds and its number of keys (docs/wire-format.md).
fn script_name(words: &[Value]) -> &'static str {
    let word = |i: usize| words.get(i).and_then(Value::as_string).unwrap_or_default();
    // The kind of key i: what follows the queue's "}:", to the next ':'.
    let kind = |i: usize| {
        let w = word(i);
        let after = w.split_once("}:").map_or(String::new(), |(_, k)| k.to_string());
        after.split(':').next().unwrap_or_default().to_string()
    };
    match (kind(3).as_str(), kind(4).as_str(), word(2).as_str()) {
        ("ready", _, _) => "claim",
        ("pending", "ready", "3") => "promote",
        ("pending", "ready", _) => "probe",
        ("pending", _, _) => "send",
        ("unack", "progress" | "log", _) => "note",
        ("unack", "retries", "3") => "ack",
        ("unack", "retries", "5") => "timeout",
        ("unack", "retries", _) => "nack",
        ("unack", _, _) => "extend",
        ("garbage", _, _) => "gc",
        _ => "other",
    }
}

/// Sends `n` messages due after `delay`, message `i` in group
/// `g<i % groups>` (0: none), in slices of 10,000.
async fn send_grouped(q: &DelayQueue, n: usize, groups: usize, delay: Duration) -> Res<()> {
    for start in (0..n).step_by(10_000) {
        let msgs = (start..n.min(start + 10_000)).map(|i| {
            let m = NewMessage::new(&PAYLOAD).delay(delay);
            if groups == 0 {
                m
            } else {
                m.group(format!("g{}", i % groups))
            }
        });
        for r in q.send_batch(msgs).await? {
            r?;
        }
    }
    Ok(())
}

/// p50 and p99 of `v`, in ms to 0.1.
fn p50_p99(mut v: Vec<f64>) -> serde_json::Value {
    v.sort_by(f64::total_cmp);
    let at = |q: f64| {
        v.get(((v.len() as f64 - 1.0) * q).round() as usize)
            .copied()
            .unwrap_or(0.0)
    };
    json!({"p50_ms": (at(0.5) * 10.0).round() / 10.0, "p99_ms": (at(0.99) * 10.0).round() / 10.0, "n": v.len()})
}

/// What [`b_lateness`] saw: each B message's due time and lateness (ms
/// from its due time to its handler's start), and when the other messages
/// were drained (how long after the consumer started, and the wall-clock
/// time), if they were.
struct Lateness {
    b: Vec<(SystemTime, f64)>,
    drained: Option<(Duration, SystemTime)>,
}

/// Sends B's messages (payload `b`), `burst` every 100 ms, to group `b`
/// of `q` (or without a group) while its consumer runs, whose handler
/// takes `work`, until at least `b_wanted` of them were handled and
/// `backlog` other messages were (at most 120 s).
async fn b_lateness(
    q: &DelayQueue,
    grouped: bool,
    work: Duration,
    backlog: u64,
    b_wanted: usize,
    burst: usize,
) -> Res<Lateness> {
    let late: Arc<Mutex<Vec<(SystemTime, f64)>>> = Arc::default();
    let drained: Arc<Mutex<Option<(Duration, SystemTime)>>> = Arc::default();
    let others = Arc::new(AtomicU64::new(0));
    let (l, d, o) = (late.clone(), drained.clone(), others.clone());
    let t = Instant::now();
    let consumer = q
        .start_consume(move |msg: Message| {
            let (l, d, o) = (l.clone(), d.clone(), o.clone());
            async move {
                let now = SystemTime::now();
                if msg.payload() == b"b" {
                    let ms = now.duration_since(msg.due_at()).unwrap_or_default().as_secs_f64() * 1e3;
                    l.lock().unwrap().push((msg.due_at(), ms));
                } else if o.fetch_add(1, Ordering::Relaxed) + 1 == backlog {
                    *d.lock().unwrap() = Some((t.elapsed(), now));
                }
                if !work.is_zero() {
                    tokio::time::sleep(work).await;
                }
                Ok::<(), HandlerError>(())
            }
        })
        .await?;
    if backlog == 0 {
        *drained.lock().unwrap() = Some((Duration::ZERO, SystemTime::now()));
    }
    let limit = Instant::now() + Duration::from_secs(120);
    while Instant::now() < limit {
        if drained.lock().unwrap().is_some() && late.lock().unwrap().len() >= b_wanted {
            break;
        }
        let b = (0..burst).map(|_| {
            let m = NewMessage::new(&b"b"[..]);
            if grouped {
                m.group("b")
            } else {
                m
            }
        });
        for r in q.send_batch(b).await? {
            r?;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    consumer.shutdown().await?;
    let b = late.lock().unwrap().clone();
    let drained = *drained.lock().unwrap();
    Ok(Lateness { b, drained })
}

/// groups: consume (`concurrency(16)`, no-op handler) of `n` due messages
/// without groups and spread over 1, 100 and 100,000 groups (at least one
/// message each); the lateness of group B's messages, sent one every
/// 100 ms, on an empty queue and while group A drains 100,000 due
/// messages, and A's drain rate; the longest claim, promote and ack calls
/// (SLOWLOG) while a queue of 100,000 groups and `scale` due messages is
/// consumed.
async fn groups(client: &Client, tag: &str, n: usize, scale: usize, samples: usize) -> Res<serde_json::Value> {
    let mut consume_by_groups = serde_json::Map::new();
    let mut ungrouped = 0.0;
    for groups in [0, 1, 100, 100_000] {
        let q = queue(client, &format!("{tag}-g{groups}"), |b| b.concurrency(16))?;
        let count = n.max(groups);
        send_grouped(&q, count, groups, Duration::ZERO).await?;
        let (rate, redis_us, calls, _) = consume(&q, client, count).await?;
        if groups == 0 {
            ungrouped = rate;
        }
        let figures = json!({"groups": groups, "n": count, "per_s": rate, "redis_cpu_us_per_msg": redis_us, "script_calls_per_msg": calls});
        emit("groups_consume", figures.clone());
        consume_by_groups.insert(format!("{groups}"), figures);
        cleanup(client).await?;
    }
    let fair = fairness(client, tag, samples).await?;
    emit("groups_fairness", fair.clone());
    let big = groups_big(client, tag, scale).await?;
    let beside = &fair["beside_a_backlog"]["group_share_default"];
    Ok(json!({
        "consume_c16_by_groups": consume_by_groups,
        "lateness_of_b_alone": fair["lateness_of_b_alone"],
        "lateness_of_b_beside_a_backlog": beside["lateness_of_b"],
        "without_groups_lateness_of_b_behind_a_backlog": fair["without_groups"]["lateness_of_b_behind_a_backlog"],
        "a_drain_per_s": beside["a_drain_per_s"],
        "a_drain_to_ungrouped_consume": (beside["a_drain_per_s"].as_f64().unwrap_or(0.0) / ungrouped * 100.0).round() / 100.0,
        "big": big,
    }))
}

/// A group at each kind of limit, alone on a fresh queue with the default
/// `fetch_interval` (1 s) and `concurrency(16)`: how fast it drains
/// against its limit (a group served once per tick would drain at its
/// concurrency per second): `group_concurrency(2)` and `ordered()` with
/// 1 ms handlers, beside the queue-wide `global_concurrency(2)` in the
/// same run, and `group_rate_limit(10, 1 s)` with no-op handlers, as
/// starts per second after its first window and the most in any 1 s.
async fn groups_limits(client: &Client, tag: &str) -> Res<serde_json::Value> {
    let ms = Duration::from_millis(1);
    let pair = limited(client, &format!("{tag}-lim0"), 2_000, 1, ms, |b| b.group_concurrency(2)).await?;
    let ordered = limited(client, &format!("{tag}-lim1"), 1_000, 1, ms, DelayQueueBuilder::ordered).await?;
    let global = limited(client, &format!("{tag}-lim2"), 2_000, 0, ms, |b| {
        b.global_concurrency(2)
    })
    .await?;
    let per = Duration::from_secs(1);
    let rated = limited(client, &format!("{tag}-lim3"), 60, 1, Duration::ZERO, move |b| {
        b.group_rate_limit(10, per)
    })
    .await?;
    // The first window's 10 start at once; every later start waits for a
    // window: the sustained rate is those later starts over the run's span.
    let span = rated.starts.last().copied().unwrap_or_default() - rated.starts[0];
    let most_in_a_period = (0..rated.starts.len())
        .map(|i| {
            rated.starts[i..]
                .iter()
                .take_while(|&&t| t < rated.starts[i] + per)
                .count()
        })
        .max()
        .unwrap_or(0);
    let per_s = |l: &Limited| rate(l.starts.len(), l.took);
    let pair_s = per_s(&pair);
    Ok(json!({
        "group_concurrency_2": {"n": pair.starts.len(), "per_s": pair_s, "most_at_once": pair.most, "goal_per_s": 500},
        "ordered": {"n": ordered.starts.len(), "per_s": per_s(&ordered), "most_at_once": ordered.most},
        "global_concurrency_2": {"n": global.starts.len(), "per_s": per_s(&global), "most_at_once": global.most},
        "group_to_global": (pair_s / per_s(&global) * 100.0).round() / 100.0,
        "group_rate_10_per_s": {
            "n": rated.starts.len(),
            "per_s_sustained": ((rated.starts.len() - 10) as f64 / span.as_secs_f64() * 10.0).round() / 10.0,
            "most_started_in_1s": most_in_a_period,
            "took_s": (rated.took.as_secs_f64() * 10.0).round() / 10.0,
        },
    }))
}

/// One [`limited`] run: each message's start from the first's, the drain
/// time (first start to last end) and the most handlers running at once.
struct Limited {
    starts: Vec<Duration>,
    took: Duration,
    most: usize,
}

/// Sends `n` due messages over `groups` groups (0: none) to a fresh queue
/// `name` built with `limit`, and consumes them with handlers that take `work`.
async fn limited(
    client: &Client,
    name: &str,
    n: usize,
    groups: usize,
    work: Duration,
    limit: impl FnOnce(DelayQueueBuilder) -> DelayQueueBuilder,
) -> Res<Limited> {
    let q = queue(client, name, |b| limit(b.concurrency(16)))?;
    send_grouped(&q, n, groups, Duration::ZERO).await?;
    // Starts, the last end, handlers running now and the most at once.
    type Seen = (Vec<Instant>, Option<Instant>, usize, usize);
    let seen: Arc<Mutex<Seen>> = Arc::default();
    let record = seen.clone();
    let consumer = q
        .start_consume(move |_msg: Message| {
            let record = record.clone();
            async move {
                {
                    let mut s = record.lock().unwrap();
                    s.0.push(Instant::now());
                    s.2 += 1;
                    s.3 = s.3.max(s.2);
                }
                if !work.is_zero() {
                    tokio::time::sleep(work).await;
                }
                let mut s = record.lock().unwrap();
                s.2 -= 1;
                s.1 = Some(Instant::now());
                Ok::<(), HandlerError>(())
            }
        })
        .await?;
    let end = Instant::now() + Duration::from_secs(120);
    while seen.lock().unwrap().0.len() < n || seen.lock().unwrap().2 > 0 {
        if Instant::now() > end {
            return Err(format!("{name}: {} of {n} started within 120 s", seen.lock().unwrap().0.len()).into());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    consumer.shutdown().await?;
    cleanup(client).await?;
    let s = seen.lock().unwrap();
    let first = s.0[0];
    Ok(Limited {
        starts: s.0.iter().map(|&t| t - first).collect(),
        took: s.1.unwrap_or(first) - first,
        most: s.3,
    })
}

/// One fairness setup: what A's backlog is and what B sends.
#[derive(Clone, Copy)]
struct Fair {
    /// How long each handler takes.
    work: Duration,
    /// A's due messages.
    backlog: usize,
    /// Over how many groups A's backlog is spread (`g0`, `g1`, ...).
    heavy: usize,
    /// B's messages sent together every 100 ms.
    burst: usize,
}

/// The lateness of group B's messages (ms from due to handler start), on
/// an empty queue and beside A's backlog, with `group_share` 0 (off) and
/// its default side by side; handlers do nothing, A's 100,000 due
/// messages are in one group and B sends one every 100 ms. Then the same
/// with A spread over 3 groups, with B sending bursts of 20, and with
/// handlers that take 1 ms (A's backlog 20,000).
async fn fairness(client: &Client, tag: &str, samples: usize) -> Res<serde_json::Value> {
    let base = Fair {
        work: Duration::ZERO,
        backlog: 100_000,
        heavy: 1,
        burst: 1,
    };
    let mut figures = fairness_of(client, tag, samples, base).await?;
    figures["a_in_3_groups"] = fairness_of(client, tag, samples, Fair { heavy: 3, ..base }).await?;
    figures["b_bursts_of_20"] = fairness_of(client, tag, samples, Fair { burst: 20, ..base }).await?;
    let slow = Fair {
        work: Duration::from_millis(1),
        backlog: 20_000,
        ..base
    };
    figures["handlers_1ms"] = fairness_of(client, tag, samples, slow).await?;
    Ok(figures)
}

/// [`fairness`] for one setup `f`, in interleaved rounds (so every side
/// sees the same machine) until each side has `samples`: B alone (about
/// 25 messages), B beside a fresh backlog of A for each `group_share`
/// (only B's messages sent before A was drained count), and for the base
/// setup the same backlog without groups (B's messages behind A's in one
/// ready list), whose drain rate A's compare with.
async fn fairness_of(client: &Client, tag: &str, samples: usize, f: Fair) -> Res<serde_json::Value> {
    const ALONE_PER_ROUND: usize = 25;
    // `group_share(0)`, then the default (not set).
    const SHARES: [Option<usize>; 2] = [Some(0), None];
    let with_ungrouped = f.work.is_zero() && f.heavy == 1 && f.burst == 1;
    let mut alone = Vec::new();
    let mut beside: [(Vec<f64>, Vec<Duration>); 2] = Default::default();
    let (mut behind, mut ungrouped, mut rounds) = (Vec::new(), Vec::new(), 0);
    // Bounded: a round adds at least ALONE_PER_ROUND alone and one beside.
    for _ in 0..samples.max(1) {
        if alone.len() >= samples && beside.iter().all(|(b, _)| b.len() >= samples) {
            break;
        }
        rounds += 1;
        let q = queue(client, &format!("{tag}-fair0"), |b| b.concurrency(16))?;
        let seen = b_lateness(&q, true, f.work, 0, ALONE_PER_ROUND, f.burst).await?;
        alone.extend(seen.b.into_iter().map(|(_, ms)| ms));
        cleanup(client).await?;
        for (side, share) in beside.iter_mut().zip(SHARES) {
            let q = queue(client, &format!("{tag}-fair1"), |b| match share {
                Some(n) => b.concurrency(16).group_share(n),
                None => b.concurrency(16),
            })?;
            send_grouped(&q, f.backlog, f.heavy, Duration::ZERO).await?;
            let (took, during) = beside_backlog(&q, true, f.work, f.backlog, f.burst).await?;
            side.0.extend(during);
            side.1.push(took);
            cleanup(client).await?;
        }
        if with_ungrouped {
            let q = queue(client, &format!("{tag}-fair2"), |b| b.concurrency(16))?;
            send_grouped(&q, f.backlog, 0, Duration::ZERO).await?;
            let (took, during) = beside_backlog(&q, false, f.work, f.backlog, f.burst).await?;
            behind.extend(during);
            ungrouped.push(took);
            cleanup(client).await?;
        }
    }
    let ungrouped_rate = rate(f.backlog * ungrouped.len(), ungrouped.iter().sum());
    let mut sides = serde_json::Map::new();
    for ((lateness, drains), share) in beside.into_iter().zip(SHARES) {
        let drain_rate = rate(f.backlog * drains.len(), drains.iter().sum());
        let mut side = json!({
            "lateness_of_b": p50_p99(lateness),
            "a_drain_per_s": drain_rate,
            "a_drain_per_s_by_round": drains.iter().map(|&took| rate(f.backlog, took)).collect::<Vec<_>>(),
        });
        if with_ungrouped {
            side["a_drain_to_ungrouped"] = json!((drain_rate / ungrouped_rate * 100.0).round() / 100.0);
        }
        let name = share.map_or("group_share_default".into(), |n| format!("group_share_{n}"));
        sides.insert(name, side);
    }
    let mut figures = json!({
        "rounds": rounds,
        "a_backlog": f.backlog,
        "a_groups": f.heavy,
        "b_burst": f.burst,
        "handler_ms": f.work.as_secs_f64() * 1e3,
        "lateness_of_b_alone": p50_p99(alone),
        "beside_a_backlog": sides,
    });
    if with_ungrouped {
        figures["without_groups"] = json!({
            "lateness_of_b_behind_a_backlog": p50_p99(behind),
            "drain_per_s": ungrouped_rate,
        });
    }
    Ok(figures)
}

/// B's messages sent while `q`'s `backlog` other messages drain: how long
/// the drain took, and the lateness of the B messages due before its end.
async fn beside_backlog(
    q: &DelayQueue,
    grouped: bool,
    work: Duration,
    backlog: usize,
    burst: usize,
) -> Res<(Duration, Vec<f64>)> {
    let seen = b_lateness(q, grouped, work, backlog as u64, 0, burst).await?;
    let (took, end) = seen.drained.ok_or("the backlog was not drained within 120 s")?;
    let during = seen.b.into_iter().filter(|&(due, _)| due <= end).map(|(_, ms)| ms);
    Ok((took, during.collect()))
}

/// The longest calls (SLOWLOG, over 1 ms) while a queue of 100,000 groups
/// and `scale` due messages is consumed, with how long Redis waited for a
/// CPU meanwhile (a wall-clock SLOWLOG counts that wait).
async fn groups_big(client: &Client, tag: &str, scale: usize) -> Res<serde_json::Value> {
    let q = queue(client, &format!("{tag}-big"), |b| b.concurrency(16))?;
    // Due 1 ms after the send, so the whole backlog comes due at once and
    // promote moves it: the longest promote is measured too.
    send_grouped(&q, scale, 100_000, Duration::from_millis(1)).await?;
    config_set(client, "slowlog-log-slower-than", "1000").await?;
    config_set(client, "slowlog-max-len", "100000").await?;
    let sched = redis_sched(client).await;
    let p = Phase::start(client).await?;
    let (rate_big, redis_us, calls, _) = consume(&q, client, scale).await?;
    let longest = p.end(client, scale, "evalsha", true).await?;
    let waited = match (sched, redis_sched(client).await) {
        (Some(a), Some(b)) => {
            json!({"redis_waited_for_cpu_s": ((b.1 - a.1) * 10.0).round() / 10.0, "preempted": b.2 - a.2})
        }
        _ => json!(null),
    };
    let slow: Vec<Value> = client
        .custom(CustomCommand::new_static("SLOWLOG", None, false), vec!["GET", "100000"])
        .await?;
    config_set(client, "slowlog-log-slower-than", "10000").await?;
    // Per script, how many calls took over 1, 5 and 10 ms: on a loaded
    // machine the longest is mostly time Redis waited for a CPU.
    let mut over = serde_json::Map::new();
    for e in &slow {
        let Value::Array(e) = e else { continue };
        let (Some(Value::Array(words)), Some(us)) = (e.get(3), e.get(2).and_then(Value::as_i64)) else {
            continue;
        };
        let counts = over.entry(script_name(words)).or_insert_with(|| json!([0, 0, 0]));
        for (i, limit) in [1_000, 5_000, 10_000].into_iter().enumerate() {
            if us > limit {
                counts[i] = json!(counts[i].as_u64().unwrap_or(0) + 1);
            }
        }
    }
    let out = json!({"groups": 100_000, "due": scale, "consume_per_s": rate_big, "redis_cpu_us_per_msg": redis_us, "script_calls_per_msg": calls, "calls_over_1ms": slow.len(), "calls_over_1_5_10_ms_by_script": over, "longest_ms_by_script": longest["longest_ms_by_script"], "usec_per_call": longest["usec_per_call"], "sched": waited});
    cleanup(client).await?;
    Ok(out)
}

/// One flows run: `parents` parents in queue `p`, each of `width`
/// children in queue `c` (or in `p` itself with `one_queue`: parents and
/// children in one slot), sent as `Flow`s then consumed by one consumer
/// per queue (concurrency 16, no-op handlers). Returns the messages
/// consumed per second (children and parents), Redis CPU µs and script
/// calls per message, and per parent the ms from its last child's handler
/// end (its ack follows at once) to the parent's delivery.
async fn flow_run(client: &Client, tag: &str, parents: usize, width: usize, one_queue: bool) -> Res<FlowRun> {
    let p = queue(client, &format!("{tag}-fp"), |b| b.concurrency(16))?;
    let c = match one_queue {
        true => p.clone(),
        false => queue(client, &format!("{tag}-fc"), |b| b.concurrency(16))?,
    };
    let t = Instant::now();
    for i in 0..parents {
        let mut flow = Flow::new(&p, NewMessage::new(format!("p{i}")));
        for _ in 0..width {
            flow = flow.child(Flow::new(&c, NewMessage::new(format!("c{i}"))));
        }
        flow.send().await?;
    }
    let send_per_s = rate(parents * (width + 1), t.elapsed());
    // Per parent: when its last child's handler ended, when it was delivered.
    let ends: Arc<Mutex<Vec<Option<Instant>>>> = Arc::new(Mutex::new(vec![None; parents]));
    let starts: Arc<Mutex<Vec<Option<Instant>>>> = Arc::new(Mutex::new(vec![None; parents]));
    let count = Arc::new(AtomicU64::new(0));
    let index = |m: &Message| {
        std::str::from_utf8(&m.payload()[1..])
            .ok()
            .and_then(|s| s.parse::<usize>().ok())
    };
    // When the last ack of a child came back (fanin splits the wait there).
    let last_acked: Arc<Mutex<Option<Instant>>> = Arc::default();
    let mut acks = c.events();
    let la = last_acked.clone();
    // In one queue, the first parent's own ack is none of its children's.
    let first_started = starts.clone();
    let watcher = tokio::spawn(async move {
        loop {
            match acks.recv().await {
                Ok(Event::Acked { .. }) if first_started.lock().unwrap()[0].is_none() => {
                    *la.lock().unwrap() = Some(Instant::now())
                }
                Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            }
        }
    });
    let cpu = redis_cpu(client).await?;
    let calls = script_calls(client).await?;
    let t = Instant::now();
    // A child's payload starts with 'c', a parent's with 'p'.
    let handler = |e: Arc<Mutex<Vec<Option<Instant>>>>, s: Arc<Mutex<Vec<Option<Instant>>>>, n: Arc<AtomicU64>| {
        move |m: Message| {
            let (e, s, n) = (e.clone(), s.clone(), n.clone());
            async move {
                let at = if m.payload().first() == Some(&b'c') { &e } else { &s };
                if let Some(i) = index(&m) {
                    at.lock().unwrap()[i] = Some(Instant::now());
                }
                n.fetch_add(1, Ordering::Relaxed);
                Ok::<(), HandlerError>(())
            }
        }
    };
    let children = c
        .start_consume(handler(ends.clone(), starts.clone(), count.clone()))
        .await?;
    let parent_consumer = match one_queue {
        true => None,
        false => Some(
            p.start_consume(handler(ends.clone(), starts.clone(), count.clone()))
                .await?,
        ),
    };
    let total = parents * (width + 1);
    let limit = Instant::now() + Duration::from_secs(600);
    while (count.load(Ordering::Relaxed) as usize) < total && Instant::now() < limit {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let took = t.elapsed();
    let cpu = redis_cpu(client).await? - cpu;
    let calls = script_calls(client).await? - calls;
    children.shutdown().await?;
    if let Some(parents) = parent_consumer {
        parents.shutdown().await?;
    }
    watcher.abort();
    let got = count.load(Ordering::Relaxed) as usize;
    if got < total {
        return Err(format!("flows: consumed only {got} of {total}").into());
    }
    let (ends, starts) = (ends.lock().unwrap().clone(), starts.lock().unwrap().clone());
    let mut waits: Vec<f64> = ends
        .iter()
        .zip(&starts)
        .filter_map(|(e, s)| Some(s.as_ref()?.saturating_duration_since(*e.as_ref()?).as_secs_f64() * 1e3))
        .collect();
    waits.sort_by(f64::total_cmp);
    let per_msg = |x: f64| (x / total as f64 * 100.0).round() / 100.0;
    let ms = |from: Option<Instant>, to: Option<Instant>| {
        from.zip(to)
            .map_or(f64::NAN, |(f, t)| t.saturating_duration_since(f).as_secs_f64() * 1e3)
    };
    let acked = *last_acked.lock().unwrap();
    let split = (ms(ends[0], acked), ms(acked, starts[0]));
    Ok(FlowRun {
        per_s: rate(total, took),
        us: per_msg(cpu * 1e6),
        calls: per_msg(calls),
        waits,
        send_per_s,
        split,
    })
}

/// What `flow_run` measured.
struct FlowRun {
    /// Messages (parents and children) consumed per second.
    per_s: f64,
    /// Redis CPU µs per message.
    us: f64,
    /// Script calls per message.
    calls: f64,
    /// Per parent, ms from its last child's handler end to its delivery, sorted.
    waits: Vec<f64>,
    /// Messages sent per second by `Flow::send`.
    send_per_s: f64,
    /// The first parent's wait split at the last child ack's reply: ms
    /// before it, ms after it.
    split: (f64, f64),
}

/// fanin: `rounds` times in turn, a plain queue's consume of 10,001 due
/// messages, one parent of 10,000 children in another queue and one in
/// its children's queue (`flow_run`): the time from the last child's
/// handler end to the parent's delivery, each round's.
async fn fanin(client: &Client, tag: &str, rounds: usize) -> Res<serde_json::Value> {
    const WIDTH: usize = 10_000;
    let mut plain = vec![];
    // Per layout (parent in another queue, in the children's), per round.
    let (mut flowed, mut waits, mut to_ack, mut after_ack) =
        ([vec![], vec![]], [vec![], vec![]], [vec![], vec![]], [vec![], vec![]]);
    let r = |x: f64| (x * 100.0).round() / 100.0;
    for round in 0..rounds {
        let q = queue(client, &format!("{tag}-fanin-plain{round}"), |b| b.concurrency(16))?;
        send_batch(&q, WIDTH + 1, Duration::ZERO).await?;
        plain.push(consume(&q, client, WIDTH + 1).await?.0);
        cleanup(client).await?;
        for (l, one_queue) in [false, true].into_iter().enumerate() {
            let run = flow_run(client, &format!("{tag}-fanin{round}-{l}"), 1, WIDTH, one_queue).await?;
            flowed[l].push(run.per_s);
            waits[l].push(run.waits.first().copied().map_or(f64::NAN, r));
            to_ack[l].push(r(run.split.0));
            after_ack[l].push(r(run.split.1));
            cleanup(client).await?;
        }
    }
    let layout = |l: usize| {
        json!({
            "flow_per_s": flowed[l],
            "last_child_to_parent_ms": waits[l],
            "last_child_to_parent_ms_median": median(waits[l].clone()),
            "of_which_until_the_last_ack_ms": to_ack[l],
            "of_which_after_the_last_ack_ms": after_ack[l],
        })
    };
    Ok(json!({
        "rounds": rounds,
        "plain_per_s": plain,
        "parent_in_another_queue": layout(0),
        "parent_in_the_children_s_queue": layout(1),
    }))
}

/// flows: `rounds` times in turn, a plain queue's consume of 200,000 due
/// messages (A) and 20 parents of 10,000 children each (B, the same
/// number of children); then one parent of 100,000 children.
async fn flows(client: &Client, tag: &str, rounds: usize) -> Res<serde_json::Value> {
    const PARENTS: usize = 20;
    const WIDTH: usize = 10_000;
    let mut plain = Vec::new();
    let mut flowed = Vec::new();
    let mut waits = Vec::new();
    let mut runs = Vec::new();
    for round in 0..rounds {
        let q = queue(client, &format!("{tag}-plain{round}"), |b| b.concurrency(16))?;
        send_batch(&q, PARENTS * WIDTH, Duration::ZERO).await?;
        let (per_s, us, calls, _) = consume(&q, client, PARENTS * WIDTH).await?;
        plain.push(per_s);
        cleanup(client).await?;
        let FlowRun {
            per_s: f_per_s,
            us: f_us,
            calls: f_calls,
            waits: w,
            send_per_s,
            ..
        } = flow_run(client, &format!("{tag}-r{round}"), PARENTS, WIDTH, false).await?;
        flowed.push(f_per_s);
        waits.extend(w);
        runs.push(json!({"plain": {"per_s": per_s, "redis_cpu_us_per_msg": us, "script_calls_per_msg": calls},
            "flows": {"per_s": f_per_s, "send_per_s": send_per_s, "redis_cpu_us_per_msg": f_us, "script_calls_per_msg": f_calls}}));
        cleanup(client).await?;
    }
    waits.sort_by(f64::total_cmp);
    let FlowRun {
        per_s: wide_per_s,
        waits: wide_wait,
        send_per_s: wide_send,
        ..
    } = flow_run(client, &format!("{tag}-wide"), 1, 100_000, false).await?;
    let r = |x: f64| (x * 100.0).round() / 100.0;
    Ok(json!({
        "runs": runs,
        "plain_per_s_median": median(plain),
        "flows_per_s_median": median(flowed),
        "last_child_ack_to_parent_ms": {"n": waits.len(), "p50": r(percentile(&waits, 0.5)), "p99": r(percentile(&waits, 0.99)), "max": r(percentile(&waits, 1.0))},
        "wide_100000": {"per_s": wide_per_s, "send_per_s": wide_send, "last_child_to_parent_ms": wide_wait.first().copied().map(r)},
    }))
}

/// The features of [`feature_cost`], each a message of `i` and a handler.
const FEATURES: [&str; 8] = [
    "plain",
    "delay",
    "priority",
    "group_1",
    "group_100",
    "unique_for",
    "result",
    "progress_log",
];

/// featurecost: per feature, `n` messages sent with `send_batch` and
/// consumed at concurrency 16, `rounds` times in turn; medians of Redis
/// CPU µs per message (send and consume apart), commands per message and
/// the consume rate over plain's.
async fn feature_cost(client: &Client, tag: &str, n: usize, rounds: usize) -> Res<serde_json::Value> {
    let mut figures: Vec<[Vec<f64>; 5]> = FEATURES.iter().map(|_| Default::default()).collect();
    for round in 0..rounds {
        for (f, feature) in FEATURES.iter().enumerate() {
            let q = queue(client, &format!("{tag}-fc{round}{feature}"), |b| b.concurrency(16))?;
            let msg = |i: usize| {
                let m = NewMessage::new(&PAYLOAD);
                match *feature {
                    "delay" => m.delay(Duration::from_millis(1)),
                    "priority" => m.priority((i % 4) as u8),
                    "group_1" => m.group("g"),
                    "group_100" => m.group(format!("g{}", i % 100)),
                    "unique_for" => m.id(format!("{tag}-{round}-{i}")).unique_for(HOUR),
                    _ => m,
                }
            };
            let (cpu, cmds) = (redis_cpu(client).await?, commands(client).await?.0);
            for start in (0..n).step_by(10_000) {
                for r in q.send_batch((start..n.min(start + 10_000)).map(msg)).await? {
                    r?;
                }
            }
            let send_us = (redis_cpu(client).await? - cpu) * 1e6 / n as f64;
            let cmds_mid = commands(client).await?.0;
            let result = *feature == "result";
            let notes = *feature == "progress_log";
            let consumer_q = q.clone();
            let (per_s, consume_us, _, _) = consume_by(&q, client, n, |count| async move {
                consumer_q
                    .start_consume(move |m: Message| {
                        let count = count.clone();
                        async move {
                            if notes {
                                m.progress(50).await?;
                                m.log("half way").await?;
                            }
                            if result {
                                m.set_result(&PAYLOAD[..])?;
                            }
                            count.fetch_add(1, Ordering::Relaxed);
                            Ok::<(), HandlerError>(())
                        }
                    })
                    .await
            })
            .await?;
            let end = commands(client).await?.0;
            let per = |x: f64| x / n as f64;
            for (v, x) in
                figures[f]
                    .iter_mut()
                    .zip([send_us, consume_us, per(cmds_mid - cmds), per(end - cmds_mid), per_s])
            {
                v.push(x);
            }
            cleanup(client).await?;
        }
    }
    let plain_rate = median(figures[0][4].clone());
    let r = |x: f64| (x * 100.0).round() / 100.0;
    let mut out = serde_json::Map::new();
    for (feature, f) in FEATURES.iter().zip(figures) {
        let [send_us, consume_us, send_cmds, consume_cmds, per_s] = f;
        let per_s = median(per_s);
        out.insert(
            feature.to_string(),
            json!({"send_redis_us_per_msg": r(median(send_us)), "consume_redis_us_per_msg": r(median(consume_us)),
                "send_commands_per_msg": r(median(send_cmds)), "consume_commands_per_msg": r(median(consume_cmds)),
                "consume_per_s": per_s, "consume_to_plain": r(per_s / plain_rate)}),
        );
    }
    Ok(
        json!({"n": n, "rounds": rounds, "load": std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim(), "features": out}),
    )
}

/// Aborts `samples` running handlers one at a time: per abort, the ms from
/// the call to the handler's `Message::aborted` completing (the signal on
/// the wake-up channel, through the consumer's hub), and the call's own
/// round trip.
async fn abort_latency(client: &Client, tag: &str, samples: usize) -> Res<serde_json::Value> {
    let q = queue(client, &format!("{tag}-abort"), |b| b.concurrency(4))?;
    let (started_tx, mut started) = tokio::sync::mpsc::unbounded_channel::<MessageId>();
    let (told_tx, mut told) = tokio::sync::mpsc::unbounded_channel::<Instant>();
    let consumer = q
        .start_consume(move |msg: Message| {
            let (started_tx, told_tx) = (started_tx.clone(), told_tx.clone());
            async move {
                let _ = started_tx.send(msg.id().clone());
                msg.aborted().await;
                let _ = told_tx.send(Instant::now());
                Ok::<(), HandlerError>(())
            }
        })
        .await?;
    let (mut signal, mut call) = (Vec::with_capacity(samples), Vec::with_capacity(samples));
    for _ in 0..samples {
        q.send(&PAYLOAD[..]).await?;
        let id = tokio::time::timeout(Duration::from_secs(30), started.recv())
            .await?
            .ok_or("consumer stopped")?;
        let t0 = Instant::now();
        let outcome = q.abort(&id).await?;
        call.push(t0.elapsed().as_secs_f64() * 1e3);
        if outcome != delayqueue::AbortOutcome::Aborting {
            return Err(format!("abort of a running handler answered {outcome:?}").into());
        }
        let at = tokio::time::timeout(Duration::from_secs(30), told.recv())
            .await?
            .ok_or("consumer stopped")?;
        signal.push(at.duration_since(t0).as_secs_f64() * 1e3);
    }
    consumer.shutdown().await?;
    let aborted = q.status().await?.totals.aborted;
    Ok(json!({"call_to_signal": p50_p99(signal), "call": p50_p99(call), "aborted": aborted}))
}
