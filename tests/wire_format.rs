//! The wire format version guard (docs/wire-format.md): a queue whose
//! totals hash names a version this client does not speak is neither
//! written nor read, by a producer or by a consumer.

mod helpers;
use delayqueue_test_support as support;

use std::time::{Duration, Instant};

use delayqueue::{DelayQueue, Error};
use fred::prelude::*;
use helpers::{acking, start_queue, Log};
use support::logs::Logs;
use support::{all_keys, wait_until, RedisServer, WAIT};

const FETCH_INTERVAL: Duration = Duration::from_millis(50);
/// A version from the future.
const FUTURE: &str = "999";

/// Every key of the database with its type and whole content.
async fn state(client: &Client) -> String {
    let mut out = String::new();
    let mut keys = all_keys(client).await;
    keys.sort();
    for key in keys {
        let kind: String = client.r#type(&key).await.unwrap();
        let content: Vec<String> = match kind.as_str() {
            "string" => vec![client.get(&key).await.unwrap()],
            "list" => client.lrange(&key, 0, -1).await.unwrap(),
            "zset" => client.zrange(&key, 0, -1, None, false, None, true).await.unwrap(),
            "hash" => {
                let mut fields: Vec<String> = client.hgetall::<Vec<String>, _>(&key).await.unwrap();
                fields.sort();
                fields
            }
            other => vec![other.to_string()],
        };
        out += &format!("{key} {kind} {content:?}\n");
    }
    out
}

/// How many script calls Redis answered with a DQFORMAT error.
fn format_errors(server: &RedisServer) -> u64 {
    let info = server.raw_command(&["INFO", "errorstats"]);
    info.lines()
        .find_map(|l| l.strip_prefix("errorstat_DQFORMAT:count="))
        .map_or(0, |n| n.trim().parse().unwrap())
}

fn expect_format_error(res: Result<(), Error>) -> u32 {
    match res {
        Err(e @ Error::FormatVersion { .. }) => {
            let text = e.to_string();
            let Error::FormatVersion {
                queue,
                found,
                supported,
            } = e
            else {
                unreachable!()
            };
            assert_eq!((queue.as_str(), found.as_str()), ("wire", FUTURE));
            assert_ne!(supported.to_string(), FUTURE);
            assert!(
                text.contains(&format!("format {FUTURE}")) && text.contains(&format!("format {supported}")),
                "{text}"
            );
            supported
        }
        other => panic!("expected Error::FormatVersion, got {other:?}"),
    }
}

#[tokio::test]
async fn a_queue_in_a_future_format_is_neither_written_nor_consumed() {
    let (server, client, q): (RedisServer, Client, DelayQueue) = start_queue("wire", FETCH_INTERVAL, |b| b).await;
    let id = q.send("written in this format").await.unwrap();
    let totals = "dq:{wire}:totals";
    let supported: String = client.hget(totals, "format").await.unwrap();
    // A newer client took the queue over.
    let () = client.hset(totals, ("format", FUTURE)).await.unwrap();
    let before = state(&client).await;

    // A producer fails with both versions and writes nothing.
    let supported = supported.parse::<u32>().unwrap();
    assert_eq!(expect_format_error(q.send("new").await.map(drop)), supported);
    assert_eq!(expect_format_error(q.send("new").id("own").await.map(drop)), supported);
    assert_eq!(state(&client).await, before);

    // A consumer leases nothing, says why once, at ERROR, and backs off
    // instead of retrying at once.
    let logs = Logs::capture("wire");
    let log = Log::default();
    let sent = format_errors(&server);
    let consumer = q.start_consume(acking(&log)).await.unwrap();
    // Its first step may fail in two calls (a promote and the claim sent
    // with it); a failed step's successor sends one call at a time.
    assert!(wait_until(WAIT, || format_errors(&server) >= sent + 2).await);
    let first = Instant::now();
    let (errors_then, wanted) = (format_errors(&server), 5);
    assert!(wait_until(WAIT, || format_errors(&server) >= errors_then + wanted).await);
    // Backoffs double from 100 ms: 5 more failed steps take over 1.5 s.
    let took = first.elapsed();
    assert!(
        took >= Duration::from_secs(1),
        "{wanted} failed steps within {took:?}: spinning"
    );
    consumer.shutdown().await.unwrap();
    assert_eq!(log.len(), 0, "a message of an unknown format was delivered");
    assert_eq!(state(&client).await, before);
    let errors: Vec<String> = logs.warnings().into_iter().filter(|l| l.contains(" ERROR ")).collect();
    assert_eq!(errors.len(), 1, "one error for the whole outage: {errors:?}");
    assert!(
        errors[0].contains("wire format")
            && errors[0].contains(FUTURE)
            && errors[0].contains(&format!("format {supported}")),
        "{errors:?}"
    );

    // Back in this client's format, the message is delivered.
    let () = client.hset(totals, ("format", supported.to_string())).await.unwrap();
    let consumer = q.start_consume(acking(&log)).await.unwrap();
    assert!(wait_until(WAIT, || log.len() == 1).await);
    consumer.shutdown().await.unwrap();
    assert_eq!(log.snapshot()[0].0, id);
}
