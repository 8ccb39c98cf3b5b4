//! A queue pays only for the features it uses (docs/performance.md, What
//! each feature costs): the Redis commands that a send, consume and ack of
//! plain messages runs, counted by the server's own `INFO commandstats`
//! (commands inside scripts included), hold none per message that only a
//! feature needs.

mod helpers;
use delayqueue_test_support as support;

use std::collections::BTreeMap;
use std::time::Duration;

use delayqueue::NewMessage;
use helpers::{acking, start_queue, wait_stats, Log};
use support::{RedisServer, WAIT};

const N: usize = 200;

/// Calls of each command the server ran, by name.
fn command_calls(server: &RedisServer) -> BTreeMap<String, u64> {
    server
        .raw_command(&["INFO", "commandstats"])
        .lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(":calls=")?;
            Some((name.to_string(), rest.split(',').next()?.parse().ok()?))
        })
        .collect()
}

/// Sends `N` messages built by `msg`, consumes and acks them all, and
/// returns the commands the server ran meanwhile.
async fn run(name: &str, msg: impl Fn(usize) -> NewMessage) -> BTreeMap<String, u64> {
    let (server, _client, q) = start_queue(name, Duration::from_millis(100), |b| b.concurrency(8)).await;
    server.raw_command(&["CONFIG", "RESETSTAT"]);
    q.send_batch((0..N).map(&msg)).await.unwrap();
    let log = Log::default();
    let consumer = q.start_consume(acking(&log)).await.unwrap();
    wait_stats(&q, WAIT, delayqueue::Counts::default()).await;
    assert_eq!(log.len(), N, "every message handled");
    consumer.shutdown().await.unwrap();
    command_calls(&server)
}

/// Commands that only groups (a group's zset trimmed, each claimed
/// message's header read for its group), rate limits (the bucket's
/// INCRBY) and `unique_for` (a marker's window started at the ack) run.
const FEATURE_ONLY: &[&str] = &["getrange", "zremrangebyrank", "incrby", "pexpire"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_queue_runs_no_command_of_a_feature_it_does_not_use() {
    let plain = run("plain", |i| NewMessage::new(format!("m{i}"))).await;
    // None per message: a header read by a sweep or a late promote may
    // happen once or twice, a feature's costs come with every message.
    let used: Vec<_> = FEATURE_ONLY
        .iter()
        .filter(|c| plain.get(**c).is_some_and(|&n| n >= (N / 10) as u64))
        .collect();
    assert!(used.is_empty(), "a plain queue ran {used:?} per message: {plain:?}");

    // The same commands do run once the feature is used: the check can fail.
    let grouped = run("grouped", |i| {
        NewMessage::new(format!("m{i}")).group(format!("g{}", i % 10))
    })
    .await;
    assert!(
        grouped.get("getrange").is_some_and(|&n| n >= N as u64),
        "each grouped message's header is read for its group: {grouped:?}"
    );
    let unique = run("unique", |i| {
        NewMessage::new(format!("m{i}"))
            .id(format!("u{i}"))
            .unique_for(Duration::from_secs(60))
    })
    .await;
    assert_eq!(
        unique.get("pexpire"),
        Some(&(N as u64)),
        "each ack starts its marker's window: {unique:?}"
    );
}
