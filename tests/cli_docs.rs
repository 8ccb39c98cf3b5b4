//! docs/cli.md and the README's CLI sample run: every ```console block in
//! them is a trycmd case, run in order against the built `delayqueue`
//! binary and a private redis-server (its URL in `REDIS_URL`), so a change
//! in the binary's output fails here until the docs follow. Blocks marked
//! `console,ignore` are not run; the docs say why next to each.
//!
//! Before the blocks run, [`setup`] puts the state the docs start from:
//! queue `orders` with messages in every state (fixed ids, and due times,
//! leases and deaths hours away so that the relative times the tables print
//! stay the same for a minute), and queue `emails`, paused. What still
//! varies from run to run (timestamps, generated ids, milliseconds in JSON)
//! is `[..]` in the docs. `redis-cli` in the docs is a wrapper that talks to
//! the same server.
//!
//! To see what the binary prints now: `TRYCMD=overwrite cargo test
//! --features cli --test cli_docs` rewrites the blocks' outputs in place
//! (keeping the `[..]` that still match); check the diff before committing.
#![cfg(feature = "cli")]

use delayqueue_test_support as support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use delayqueue::fred::clients::Client;
use delayqueue::fred::interfaces::SortedSetsInterface;
use delayqueue::{Backoff, Consumer, DelayQueue, DelayQueueBuilder, HandlerError, Message, MessageState, RetryAfter};
use support::{wait_for, RedisServer, WAIT};

const HOUR: Duration = Duration::from_secs(3600);

#[test]
fn docs_cli_md_sessions_run_against_the_binary() {
    run_sessions("docs/cli.md");
}

/// The README's CLI sample, from the same state (on a Redis of its own).
#[test]
fn readme_cli_sessions_run_against_the_binary() {
    run_sessions("README.md");
}

/// Runs the console blocks of `doc` against a fresh Redis set up by [`setup`].
fn run_sessions(doc: &str) {
    // The dashboard's secrets would change what `web` says. (Both tests
    // remove the same variables; nothing reads them in this process.)
    std::env::remove_var("DELAYQUEUE_WEB_TOKEN");
    std::env::remove_var("DELAYQUEUE_WEB_BASIC");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let server = rt.block_on(RedisServer::start());
    // The consumer holding `orders`' processing message runs on `rt`'s
    // threads while the cases run on this one.
    let started = Instant::now();
    let _holder = rt.block_on(setup(&server));
    // The docs' relative times (`in 1h 59m`, `2h 0m ago`) hold for a minute
    // from the setup's first send; the cases take a few seconds.
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "the setup took {:?}: too slow for the docs' relative times",
        started.elapsed()
    );
    let redis_cli = redis_cli_wrapper(&server);

    trycmd::TestCases::new()
        .register_bin("delayqueue", Path::new(env!("CARGO_BIN_EXE_delayqueue")))
        .register_bin("redis-cli", redis_cli)
        .env("REDIS_URL", server.url())
        .timeout(WAIT)
        .case(doc)
        .run();
}

/// A queue as the setup builds it: quick sweeps, one handler, one message
/// held at a time (so a consumer takes exactly what the setup means it to).
fn builder(client: &Client, name: &str) -> DelayQueueBuilder {
    DelayQueue::builder(name, client.clone())
        .fetch_interval(Duration::from_millis(50))
        .concurrency(1)
        .fetch_limit(1)
}

/// Waits until `cond` holds, or fails the test with `what`.
async fn until<F, Fut>(what: &str, cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    assert!(wait_for(WAIT, cond).await, "setup: {what} did not happen in time");
}

/// The state docs/cli.md starts from. Returns the consumer that holds
/// `report-11` (processing, a lease of 2 h); it must live while the cases run.
async fn setup(server: &RedisServer) -> Consumer {
    let client = server.client().await;

    // emails: two messages in a week, paused.
    let emails = builder(&client, "emails").build().unwrap();
    for id in ["welcome-1", "welcome-2"] {
        emails.send("welcome").delay(7 * 24 * HOUR).id(id).await.unwrap();
    }
    emails.pause().await.unwrap();

    // orders, processing: a handler that never returns, with a 2 h lease.
    let orders = builder(&client, "orders").build().unwrap();
    orders.send("export report 11").id("report-11").await.unwrap();
    let holder = builder(&client, "orders")
        .max_consume_duration(2 * HOUR)
        .build()
        .unwrap()
        .start_consume(|_msg: Message| std::future::pending::<Result<(), HandlerError>>())
        .await
        .unwrap();
    until("report-11 processing", || async {
        orders.counts().await.unwrap().processing == 1
    })
    .await;

    // A second consumer fails what it gets: notify-5 asks for a retry in
    // 2 h (pending again), the charges die (retry count 0), and report-12
    // fails with no backoff (retry), after pausing the queue so that
    // nothing takes it from there.
    orders
        .send("notify user 5: your order shipped")
        .id("notify-5")
        .header("tenant", "acme")
        .header("request-id", "7f3a")
        .await
        .unwrap();
    for n in [7, 8, 9] {
        orders
            .send(format!("charge card {n}: 19.99 EUR"))
            .id(format!("charge-{n}"))
            .retry_count(0)
            .await
            .unwrap();
    }
    let failing = builder(&client, "orders")
        .backoff(Backoff::fixed(Duration::ZERO))
        .build()
        .unwrap();
    let pauser = orders.clone();
    let consumer = failing
        .start_consume(move |msg: Message| {
            let pauser = pauser.clone();
            async move {
                let id = msg.id().to_string();
                if id == "notify-5" {
                    return Err(RetryAfter::new(2 * HOUR, "smtp: connection reset by peer").into());
                }
                if id == "report-12" {
                    pauser.pause().await.unwrap();
                    return Err::<(), HandlerError>("upstream timeout".into());
                }
                Err("card declined: insufficient funds (gateway code 51)".into())
            }
        })
        .await
        .unwrap();
    until("three dead letters, notify-5 pending again", || async {
        let c = orders.counts().await.unwrap();
        c.dead == 3 && c.pending == 1 && c.ready == 0
    })
    .await;
    orders.send("export report 12").id("report-12").await.unwrap();
    until("report-12 in retry", || async {
        orders.counts().await.unwrap().retry == 1
    })
    .await;
    consumer.shutdown().await.unwrap();
    orders.resume().await.unwrap();

    // The deaths 2 h back, in their order, so that `DIED` prints in minutes.
    let garbage = "dq:{orders}:garbage";
    let dead: Vec<(String, f64)> = client.zrange(garbage, 0, -1, None, false, None, true).await.unwrap();
    assert_eq!(dead.len(), 3, "{dead:?}");
    for (id, at) in dead {
        let back = at - 2.0 * HOUR.as_millis() as f64;
        let _: i64 = client
            .zadd(garbage, None, None, false, false, (back, id.as_str()))
            .await
            .unwrap();
    }

    // Pending: due in hours; ready: due now, moved to ready by the holder's
    // loop (which has no slot to take them).
    for (id, hours, payload) in [
        ("order-42", 3, "close order 42"),
        ("order-43", 4, "close order 43"),
        ("order-44", 5, r#"{"order":44,"action":"close"}"#),
    ] {
        orders.send(payload).delay(hours * HOUR).id(id).await.unwrap();
    }
    orders.send("send receipt 12").id("receipt-12").await.unwrap();
    orders
        .send("send receipt 13")
        .id("receipt-13")
        .expire_after(2 * HOUR)
        .await
        .unwrap();
    until("two ready", || async {
        orders.list(MessageState::Ready, 0, 10).await.unwrap().total == 2
    })
    .await;
    holder
}

/// `redis-cli` as the docs use it: on the test's server, replies formatted
/// as on a terminal (`(integer) 1`).
fn redis_cli_wrapper(server: &RedisServer) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let bin = std::env::var("REDIS_CLI_BIN").unwrap_or_else(|_| "redis-cli".into());
    let path = server.dir().join("redis-cli");
    let script = format!("#!/bin/sh\nexec '{bin}' -u \"$REDIS_URL\" --no-raw \"$@\"\n");
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}
