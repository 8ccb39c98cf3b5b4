//! The `delayqueue` binary end to end: each test spawns it against a
//! private redis-server (messages set up with the library) and checks its
//! output and exit code.
#![cfg(feature = "cli")]

use delayqueue_test_support as support;

mod helpers;
use helpers::make_dead;

use std::net::{Ipv4Addr, TcpListener};
use std::process::Stdio;
use std::time::{Duration, Instant, SystemTime};

use delayqueue::fred::clients::Client;
use delayqueue::{Counts, DelayQueue, DelayQueueBuilder, HandlerError, Message, MessageState, SkipRetry};
use serde_json::{json, Value};
use support::{wait_for, RedisServer, WAIT};
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

const BIN: &str = env!("CARGO_BIN_EXE_delayqueue");
/// Longest one run of the binary may take.
const RUN_LIMIT: Duration = WAIT;

/// What one run printed, and its exit code.
#[derive(Debug)]
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    /// The stdout's one JSON line.
    fn json(&self) -> Value {
        assert_eq!(self.stdout.lines().count(), 1, "{self:?}");
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {self:?}"))
    }

    /// Asserts a failure: exit `code`, nothing on stdout, one `error:` line on stderr.
    fn failed(&self, code: i32) -> &str {
        assert_eq!(self.code, code, "{self:?}");
        assert_eq!(self.stdout, "", "{self:?}");
        assert!(self.stderr.starts_with("error: "), "{self:?}");
        self.stderr.trim_end()
    }
}

/// The binary with a clean environment: no REDIS_URL from outside, so a
/// test never talks to a Redis it did not start, and no dashboard secrets.
fn command(args: &[&str]) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.args(args)
        .env_remove("REDIS_URL")
        .env_remove("DELAYQUEUE_WEB_TOKEN")
        .env_remove("DELAYQUEUE_WEB_BASIC")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    cmd
}

async fn run_command(mut cmd: Command) -> Run {
    let out = tokio::time::timeout(RUN_LIMIT, cmd.output())
        .await
        .expect("delayqueue did not finish in time")
        .expect("cannot run delayqueue");
    Run {
        code: out.status.code().expect("delayqueue killed by a signal"),
        stdout: String::from_utf8(out.stdout).expect("stdout is not UTF-8"),
        stderr: String::from_utf8(out.stderr).expect("stderr is not UTF-8"),
    }
}

/// Runs `delayqueue --url <url> <args>`.
async fn run(url: &str, args: &[&str]) -> Run {
    let mut all = vec!["--url", url];
    all.extend_from_slice(args);
    run_command(command(&all)).await
}

/// A private Redis, its URL and a client on it.
async fn start() -> (RedisServer, String, Client) {
    let server = RedisServer::start().await;
    let client = server.client().await;
    let url = server.url();
    (server, url, client)
}

/// Queue `name` as the tests build it: quick sweeps, long leases.
fn builder(client: &Client, name: &str) -> DelayQueueBuilder {
    DelayQueue::builder(name, client.clone())
        .fetch_interval(Duration::from_millis(50))
        .max_consume_duration(Duration::from_secs(60))
}

fn queue(client: &Client, name: &str) -> DelayQueue {
    builder(client, name).build().unwrap()
}

#[tokio::test]
async fn send_queues_show_and_cancel() {
    let server = RedisServer::start().await;
    let url = server.url();

    let r = run(&url, &["queues"]).await;
    assert_eq!(
        (r.code, r.stdout.as_str()),
        (0, "no queues under prefix \"dq:\"\n"),
        "{r:?}"
    );
    assert_eq!(
        run(&url, &["queues", "--json"]).await.json(),
        serde_json::json!({"queues": [], "total": 0, "next": null})
    );

    let r = run(
        &url,
        &[
            "send",
            "orders",
            "close order 42",
            "--delay",
            "5m",
            "--id",
            "order-42",
            "--retry-count",
            "5",
            "--header",
            "tenant=acme",
            "-H",
            "trace=a=b",
        ],
    )
    .await;
    assert_eq!((r.code, r.stdout.as_str()), (0, "order-42\n"), "{r:?}");
    assert!(run(&url, &["send", "orders", "x", "--header", "bad name=1"])
        .await
        .failed(2)
        .contains("invalid header \"bad name\""));
    let r = run(
        &url,
        &["--json", "send", "orders", "{\"order\": 43}", "--delay", "90000ms"],
    )
    .await;
    let sent = r.json();
    let id = sent["id"].as_str().unwrap().to_string();
    assert_eq!(id.len(), 21, "a generated id: {sent}");
    assert_eq!(
        (sent["queue"].as_str(), sent["delay_ms"].as_u64()),
        (Some("orders"), Some(90_000))
    );
    // The same id again while the first waits.
    let err = run(&url, &["send", "orders", "again", "--id", "order-42"]).await;
    assert_eq!(
        err.failed(1),
        "error: message order-42 already exists in queue \"orders\""
    );
    assert!(run(&url, &["send", "orders", "x", "--delay", "soon"])
        .await
        .failed(2)
        .contains("--delay"));
    run(&url, &["send", "emails", "welcome", "--delay", "7d"]).await;
    assert_eq!(run(&url, &["pause", "emails"]).await.stdout, "paused emails\n");
    assert_eq!(
        run(&url, &["pause", "emails"]).await.stdout,
        "paused emails (it already was)\n"
    );
    assert!(run(&url, &["pause", "nosuchqueue"])
        .await
        .failed(1)
        .contains("nosuchqueue"));

    let r = run(&url, &["queues"]).await;
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert_eq!(
        lines[0].split_whitespace().collect::<Vec<_>>(),
        [
            "QUEUE",
            "SHARDS",
            "PAUSED",
            "PENDING",
            "READY",
            "PROCESSING",
            "RETRY",
            "DEAD"
        ]
    );
    assert_eq!(
        lines[1].split_whitespace().collect::<Vec<_>>(),
        ["emails", "1", "yes", "1", "0", "0", "0", "0"]
    );
    assert_eq!(
        lines[2].split_whitespace().collect::<Vec<_>>(),
        ["orders", "1", "no", "2", "0", "0", "0", "0"]
    );
    let v = run(&url, &["queues", "--json"]).await.json();
    assert_eq!(v["queues"][1]["name"], "orders");
    assert_eq!(v["queues"][1]["shards"], 1);
    assert_eq!(v["queues"][1]["counts"]["pending"], 2);
    assert_eq!(
        (&v["queues"][0]["paused"], &v["queues"][1]["paused"]),
        (&true.into(), &false.into())
    );
    let r = run(&url, &["stats", "emails"]).await;
    assert!(r.stdout.starts_with("queue emails (paused"), "{r:?}");
    assert_eq!(run(&url, &["stats", "emails", "--json"]).await.json()["paused"], true);
    let v = run(&url, &["resume", "emails", "--json"]).await.json();
    assert_eq!(
        v,
        serde_json::json!({"queue": "emails", "paused": false, "changed": true})
    );
    assert_eq!(run(&url, &["stats", "emails", "--json"]).await.json()["paused"], false);

    let r = run(&url, &["show", "orders", "order-42"]).await;
    assert_eq!(r.code, 0, "{r:?}");
    for line in [
        "id           order-42",
        "state        pending",
        "attempts     0",
        "retry count  5 (6 deliveries left)",
        "backoff      the consumer's",
        "last error   -",
        "headers      tenant: acme\n             trace: a=b\n",
        "payload      14 bytes, UTF-8:\nclose order 42\n",
    ] {
        assert!(r.stdout.contains(line), "{line:?} missing in:\n{}", r.stdout);
    }
    assert!(r.stdout.contains("(in 4m 5"), "due in about 5 minutes:\n{}", r.stdout);
    let v = run(&url, &["show", "orders", &id, "--json"]).await.json();
    let m = &v["message"];
    assert_eq!(
        (m["id"].as_str(), m["state"].as_str()),
        (Some(id.as_str()), Some("pending"))
    );
    assert_eq!(
        (m["payload"].as_str(), m["payload_encoding"].as_str()),
        (Some("{\"order\": 43}"), Some("utf8"))
    );
    assert_eq!(
        (m["retry_count"].as_u64(), m["payload_len"].as_u64()),
        (Some(3), Some(13))
    );
    assert!(m["due"].as_str().unwrap().ends_with('Z'), "{m}");
    assert_eq!(m["headers"], serde_json::json!({}));
    let v = run(&url, &["show", "orders", "order-42", "--json"]).await.json();
    assert_eq!(
        v["message"]["headers"],
        serde_json::json!({"tenant": "acme", "trace": "a=b"})
    );

    let r = run(&url, &["cancel", "orders", "order-42"]).await;
    assert_eq!((r.code, r.stdout.as_str()), (0, "cancelled order-42\n"), "{r:?}");
    assert!(run(&url, &["cancel", "orders", "order-42"])
        .await
        .failed(1)
        .contains("not cancelled"));
    let v = run(&url, &["cancel", "orders", &id, "--json"]).await.json();
    assert_eq!(v, serde_json::json!({"queue": "orders", "id": id, "cancelled": true}));
    let err = run(&url, &["show", "orders", "order-42"]).await;
    assert_eq!(err.failed(1), "error: no message \"order-42\" in queue \"orders\"");
}

#[tokio::test]
async fn queues_come_a_page_at_a_time_with_a_search() {
    let (_server, url, client) = start().await;
    for i in 0..250 {
        queue(&client, &format!("q-{i:03}"))
            .send("x")
            .delay(Duration::from_secs(600))
            .await
            .unwrap();
    }
    queue(&client, "other").send("x").await.unwrap();

    // 100 by default, in name order, and how to get the next page.
    let r = run(&url, &["queues"]).await;
    assert_eq!(r.code, 0, "{r:?}");
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert_eq!(lines.len(), 1 + 100 + 2, "{r:?}");
    assert!(
        lines[1].starts_with("other ") && lines[100].starts_with("q-098 "),
        "{r:?}"
    );
    assert_eq!(lines[102], "1-100 of 251 queues; next page: --after q-098");

    // Walking the pages by --after sees every queue once.
    let mut after: Option<String> = None;
    let mut seen = Vec::new();
    for _ in 0..10 {
        let mut args = vec!["queues", "--json", "--limit", "120"];
        if let Some(a) = &after {
            args.extend(["--after", a.as_str()]);
        }
        let v = run(&url, &args).await.json();
        assert_eq!(v["total"], 251, "{v}");
        for q in v["queues"].as_array().unwrap() {
            assert_eq!(
                q["counts"]["pending"].as_u64().unwrap() + q["counts"]["ready"].as_u64().unwrap(),
                1
            );
            seen.push(q["name"].as_str().unwrap().to_string());
        }
        match v["next"].as_str() {
            Some(next) => after = Some(next.to_string()),
            None => break,
        }
    }
    assert_eq!(seen.len(), 251);
    assert!(seen.windows(2).all(|w| w[0] < w[1]), "name order, no repeat");

    // A search is the start of a name, taken literally.
    let v = run(&url, &["queues", "--json", "--search", "q-2"]).await.json();
    assert_eq!(
        (v["total"].clone(), v["queues"].as_array().unwrap().len()),
        (serde_json::json!(50), 50)
    );
    assert_eq!(v["next"], serde_json::Value::Null);
    let r = run(&url, &["queues", "--search", "q-*"]).await;
    assert_eq!(
        (r.code, r.stdout.as_str()),
        (0, "no queue name starts with \"q-*\"\n"),
        "{r:?}"
    );
    let r = run(&url, &["queues", "--after", "zzz"]).await;
    assert_eq!(
        (r.code, r.stdout.as_str()),
        (0, "no queues after \"zzz\" (251 in all)\n"),
        "{r:?}"
    );

    // Limits out of range are usage errors.
    for limit in ["0", "10001", "-1", "many"] {
        let r = run(&url, &["queues", &format!("--limit={limit}")]).await;
        assert_eq!(r.code, 2, "--limit {limit}: {r:?}");
        assert!(r.stderr.contains("--limit"), "{r:?}");
    }
}

/// `stats` of a grouped queue without consumer: its latency, the wait of
/// its oldest due message, in both outputs.
#[tokio::test]
async fn stats_show_the_latency_of_a_grouped_queue() {
    let (_server, url, client) = start().await;
    let q = queue(&client, "tenants");
    for i in 0..6 {
        q.send("job").group(format!("tenant-{}", i % 3)).await.unwrap();
    }
    let waited = std::cell::Cell::new(0);
    assert!(
        wait_for(WAIT, || async {
            let v = run(&url, &["stats", "tenants", "--json"]).await.json();
            waited.set(v["latency_ms"].as_u64().unwrap_or(0));
            waited.get() >= 1000
        })
        .await,
        "latency_ms {}",
        waited.get()
    );
    let r = run(&url, &["stats", "tenants"]).await;
    let line = r.stdout.lines().find(|l| l.starts_with("latency ")).unwrap_or_default();
    assert!(line.ends_with('s') && !line.ends_with(" -"), "{}", r.stdout);
}

#[tokio::test]
async fn stats_and_list_pages_in_human_and_json() {
    let (_server, url, client) = start().await;
    let q = queue(&client, "orders");
    for (i, minutes) in [10, 20, 30].iter().enumerate() {
        q.send(format!("close order {i}"))
            .delay(Duration::from_secs(60 * minutes))
            .await
            .unwrap();
    }
    make_dead(&q, &["charge card 7"], "card declined: insufficient funds").await;

    let r = run(&url, &["stats", "orders"]).await;
    assert_eq!(r.code, 0, "{r:?}");
    let rows: Vec<Vec<&str>> = r.stdout.lines().map(|l| l.split_whitespace().collect()).collect();
    for row in [vec!["pending", "3"], vec!["ready", "0"], vec!["dead", "1"]] {
        assert!(rows.contains(&row), "{row:?} missing in:\n{}", r.stdout);
    }
    assert!(r.stdout.contains("next due        in 9m 5"), "{}", r.stdout);
    assert!(
        r.stdout
            .contains("totals          sent 4  acked 0  failed 1  dead 1  expired 0"),
        "{}",
        r.stdout
    );
    let v = run(&url, &["stats", "orders", "--json"]).await.json();
    assert_eq!(
        v["counts"],
        serde_json::json!({"pending": 3, "ready": 0, "processing": 0, "retry": 0, "dead": 1})
    );
    assert_eq!(v["totals"]["sent"], 4);
    assert!(v["next_due_ms"].as_u64().unwrap() > 9 * 60_000, "{v}");
    assert!(v["latency_ms"].is_null() && v["oldest_dead_ms"].is_u64(), "{v}");

    let r = run(&url, &["list", "orders", "pending", "--limit", "2"]).await;
    assert_eq!(r.code, 0, "{r:?}");
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert_eq!(
        lines[0].split_whitespace().collect::<Vec<_>>(),
        ["ID", "DUE", "ATTEMPTS", "LAST", "ERROR", "PAYLOAD"]
    );
    assert!(
        lines[1].contains("in 9m 5") && lines[1].ends_with("close order 0"),
        "{}",
        r.stdout
    );
    assert!(lines[2].ends_with("close order 1"), "{}", r.stdout);
    assert_eq!(&lines[3..], ["", "1-2 of 3 pending; next page: --offset 2"]);
    let v = run(&url, &["list", "orders", "pending", "--offset", "2", "--json"])
        .await
        .json();
    assert_eq!(
        (v["total"].as_u64(), v["offset"].as_u64(), v["next"].as_u64()),
        (Some(3), Some(2), None)
    );
    assert_eq!(v["items"].as_array().unwrap().len(), 1);
    assert_eq!(v["items"][0]["payload"], "close order 2");

    let r = run(&url, &["list", "orders", "dead"]).await;
    let row = r.stdout.lines().nth(1).unwrap();
    assert!(r.stdout.starts_with("ID") && r.stdout.contains("DIED"), "{}", r.stdout);
    assert!(
        row.contains(" ago ") && row.contains("card declined: insufficient f…"),
        "{row}"
    );
    assert!(row.ends_with("charge card 7"), "{row}");
    let r = run(&url, &["list", "orders", "retry"]).await;
    assert_eq!((r.code, r.stdout.as_str()), (0, "no retry messages in orders\n"));
    assert!(run(&url, &["list", "orders", "later"])
        .await
        .failed(2)
        .contains("invalid value 'later'"));
    assert!(run(&url, &["list", "orders", "ready", "-n", "1001"])
        .await
        .failed(2)
        .contains("1 to 1000"));
}

#[tokio::test]
async fn ready_processing_and_binary_payloads() {
    let (_server, url, client) = start().await;
    let q = builder(&client, "jobs").concurrency(1).fetch_limit(1).build().unwrap();
    for i in 0..3 {
        q.send(format!("job {i}")).await.unwrap();
    }
    // One slot, taken by a handler that never returns: one message is
    // processing and the other two wait in ready. (The consumer is dropped
    // with the test.)
    let _consumer = q
        .start_consume(|_msg: Message| std::future::pending::<Result<(), HandlerError>>())
        .await
        .unwrap();
    let mut want = Counts::default();
    want.ready = 2;
    want.processing = 1;
    assert!(
        wait_for(WAIT, || async { q.counts().await.unwrap() == want }).await,
        "{:?}",
        q.counts().await
    );

    let r = run(&url, &["list", "jobs", "processing"]).await;
    assert!(r.stdout.starts_with("ID") && r.stdout.contains("LEASE LEFT"), "{r:?}");
    let row = r.stdout.lines().nth(1).unwrap();
    assert!(
        row.contains(" 59.") || row.contains(" 1m 0s"),
        "about a minute of lease left: {row}"
    );
    let v = run(&url, &["list", "jobs", "ready", "--json"]).await.json();
    assert_eq!(v["total"], 2);
    assert_eq!(v["items"][0]["state"], "ready");
    // Live payloads have no TTL; without expire_after no deadline either.
    assert!(
        v["items"][0]["expires_in_ms"].is_null() && v["items"][0]["expires_at"].is_null(),
        "{v}"
    );
    let r = run(&url, &["list", "jobs", "ready"]).await;
    assert!(r.stdout.contains("EXPIRES IN"), "{r:?}");

    q.send(vec![0u8, 0x9f, b'a', b'\n'])
        .delay(Duration::from_secs(60))
        .id("bin")
        .await
        .unwrap();
    let r = run(&url, &["show", "jobs", "bin"]).await;
    assert!(
        r.stdout
            .ends_with("payload      4 bytes, binary (escaped):\n\\x00\\x9fa\\n\n"),
        "{r:?}"
    );
    let v = run(&url, &["show", "jobs", "bin", "--json"]).await.json();
    assert_eq!(
        (
            v["message"]["payload"].as_str(),
            v["message"]["payload_encoding"].as_str()
        ),
        (Some("009f610a"), Some("hex"))
    );
    let r = run(&url, &["list", "jobs", "pending"]).await;
    assert!(r.stdout.lines().nth(1).unwrap().ends_with("\\x00\\x9fa\\n"), "{r:?}");
}

#[tokio::test]
async fn dead_letters_list_requeue_and_delete() {
    let (_server, url, client) = start().await;
    let q = queue(&client, "hooks");
    let ids = make_dead(&q, &["hook 1", "hook 2", "hook 3", "hook 4"], "HTTP 503").await;

    let r = run(&url, &["dead", "list", "hooks", "--limit", "3"]).await;
    assert_eq!(r.stdout.lines().filter(|l| l.contains("HTTP 503")).count(), 3, "{r:?}");
    assert!(r.stdout.ends_with("\n1-3 of 4 dead; next page: --offset 3\n"), "{r:?}");
    let v = run(&url, &["dead", "list", "hooks", "--json", "--offset", "3"])
        .await
        .json();
    assert_eq!(
        (v["state"].as_str(), v["items"][0]["last_error"].as_str()),
        (Some("dead"), Some("HTTP 503"))
    );
    assert_eq!(v["items"][0]["deliveries_left"], 0);

    let r = run(&url, &["dead", "requeue", "hooks", &ids[0]]).await;
    assert_eq!((r.code, r.stdout.as_str()), (0, "requeued 1 dead letter\n"), "{r:?}");
    let m = q.get(&ids[0]).await.unwrap().unwrap();
    assert_eq!(m.state, MessageState::Ready);
    let err = run(&url, &["dead", "requeue", "hooks", &ids[0]]).await;
    assert_eq!(
        err.failed(1),
        format!("error: \"{}\" is not a dead letter of queue \"hooks\"", ids[0])
    );
    let r = run(&url, &["dead", "delete", "hooks", &ids[1]]).await;
    assert_eq!(r.stdout, "deleted 1 dead letter\n", "{r:?}");
    assert!(q.get(&ids[1]).await.unwrap().is_none());
    let v = run(&url, &["dead", "delete", "hooks", "--all", "--json"]).await.json();
    assert_eq!(v, serde_json::json!({"queue": "hooks", "deleted": 2}));
    assert_eq!(q.counts().await.unwrap().dead, 0);

    let q2 = queue(&client, "hooks2");
    make_dead(&q2, &["hook 5", "hook 6"], "HTTP 410").await;
    let r = run(&url, &["dead", "requeue", "hooks2", "--all"]).await;
    assert_eq!(r.stdout, "requeued 2 dead letters\n", "{r:?}");
    let stats = q2.counts().await.unwrap();
    assert_eq!((stats.ready, stats.dead), (2, 0));
    assert!(run(&url, &["dead", "delete", "hooks"])
        .await
        .failed(2)
        .contains("<ID|--all>"));
    assert!(run(&url, &["dead", "delete", "hooks", "x", "--all"])
        .await
        .failed(2)
        .contains("cannot be used with"));
}

#[tokio::test]
async fn stats_watch_refreshes_count_times_with_rates() {
    let (_server, url, client) = start().await;
    let q = queue(&client, "orders");
    q.send("first").delay(Duration::from_secs(60)).await.unwrap();

    // Ends by itself after two frames (run() gives up after RUN_LIMIT).
    let r = run(
        &url,
        &["stats", "orders", "--watch", "--count", "2", "--interval", "100ms"],
    )
    .await;
    assert_eq!(r.code, 0, "{r:?}");
    let frames: Vec<&str> = r.stdout.split("every 100ms, ").skip(1).collect();
    assert_eq!(frames.len(), 2, "{}", r.stdout);
    assert!(
        frames[0].contains("per second      - (from the next refresh)"),
        "{}",
        frames[0]
    );
    assert!(
        frames[1].contains("per second      sent 0.0  acked 0.0  failed 0.0"),
        "{}",
        frames[1]
    );
    assert!(
        !r.stdout.contains('\x1b'),
        "no screen clearing when stdout is not a terminal"
    );

    // JSON lines; messages sent between two refreshes show in the rates.
    let (mut child, mut lines) = spawn_lines(&[
        "--url",
        &url,
        "--json",
        "stats",
        "orders",
        "-w",
        "--count",
        "2",
        "--interval",
        "1s",
    ]);
    let first = next_json(&mut lines).await;
    for _ in 0..4 {
        q.send("more").delay(Duration::from_secs(60)).await.unwrap();
    }
    let second = next_json(&mut lines).await;
    let status = tokio::time::timeout(RUN_LIMIT, child.wait()).await.unwrap().unwrap();
    assert!(status.success());
    assert!(first["rates"].is_null() && first["time"].is_string(), "{first}");
    assert_eq!(
        (first["totals"]["sent"].as_u64(), second["totals"]["sent"].as_u64()),
        (Some(1), Some(5))
    );
    let sent_rate = second["rates"]["sent"].as_f64().unwrap();
    assert!(sent_rate > 0.0 && sent_rate <= 4.0, "4 sends in at least 1 s: {second}");
    assert_eq!(second["rates"]["acked"], 0.0);
    assert_eq!(second["counts"]["pending"], 5);

    // Without --count it runs until Ctrl-C (SIGINT), then exits 0.
    let (mut child, mut lines) = spawn_lines(&[
        "--url",
        &url,
        "--json",
        "stats",
        "orders",
        "--watch",
        "--interval",
        "100ms",
    ]);
    next_json(&mut lines).await;
    next_json(&mut lines).await;
    let pid = child.id().unwrap().to_string();
    let kill = std::process::Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .unwrap();
    assert!(kill.success());
    let status = tokio::time::timeout(RUN_LIMIT, child.wait()).await.unwrap().unwrap();
    assert_eq!(status.code(), Some(0), "Ctrl-C ends the watch quietly");

    assert!(run(&url, &["stats", "orders", "--count", "2"])
        .await
        .failed(2)
        .contains("--watch"));
}

/// The binary running with `args`, and its stdout line by line.
/// Starts `delayqueue web` listening on 127.0.0.1 port 0 and returns it
/// with the port its first line names.
async fn spawn_web(args: &[&str]) -> (Child, u16) {
    let (child, mut lines) = spawn_lines(args);
    let line = tokio::time::timeout(RUN_LIMIT, lines.next_line())
        .await
        .expect("no line in time")
        .unwrap()
        .expect("stdout ended early");
    let port: u16 = line
        .strip_prefix("dashboard on http://127.0.0.1:")
        .and_then(|rest| rest.split('/').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("unexpected first line: {line}"));
    (child, port)
}

fn spawn_lines(args: &[&str]) -> (Child, Lines<BufReader<ChildStdout>>) {
    let mut child = command(args).stdout(Stdio::piped()).spawn().unwrap();
    let lines = BufReader::new(child.stdout.take().unwrap()).lines();
    (child, lines)
}

/// The next line of a child's stdout, as JSON.
async fn next_json(lines: &mut Lines<BufReader<ChildStdout>>) -> Value {
    let line = tokio::time::timeout(RUN_LIMIT, lines.next_line())
        .await
        .expect("no line in time");
    let line = line.unwrap().expect("stdout ended early");
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
}

#[tokio::test]
async fn sharded_queues_are_found_and_worked_on_as_one() {
    let (_server, url, client) = start().await;
    let q = builder(&client, "fanout").shards(4).build().unwrap();
    for i in 0..40 {
        q.send("x")
            .delay(Duration::from_secs(60))
            .id(format!("m-{i}"))
            .await
            .unwrap();
    }
    let v = run(&url, &["queues", "--json"]).await.json();
    assert_eq!(v["queues"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(
        (&v["queues"][0]["shards"], &v["queues"][0]["counts"]["pending"]),
        (&4.into(), &40.into())
    );

    // Without --shards the CLI finds the layout in Redis.
    let v = run(&url, &["stats", "fanout", "--json"]).await.json();
    assert_eq!(
        (&v["counts"]["pending"], &v["totals"]["sent"]),
        (&40.into(), &40.into())
    );
    let page = run(&url, &["list", "fanout", "pending", "--json", "--limit", "1000"])
        .await
        .json();
    assert_eq!(page["items"].as_array().unwrap().len(), 40, "{page}");
    assert_eq!(run(&url, &["show", "fanout", "m-7"]).await.code, 0);
    let r = run(&url, &["cancel", "fanout", "m-7"]).await;
    assert_eq!((r.code, r.stdout.as_str()), (0, "cancelled m-7\n"), "{r:?}");
    assert!(q.get("m-7").await.unwrap().is_none());
    let r = run(&url, &["--shards", "4", "send", "fanout", "y", "--id", "new-1"]).await;
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        q.get("new-1").await.unwrap().is_some(),
        "sent to the shard its id picks"
    );
    let r = run(&url, &["purge", "fanout", "--yes"]).await;
    assert_eq!(r.stdout, "purged fanout: 40 entries removed\n", "{r:?}");
    assert_eq!(q.status().await.unwrap(), delayqueue::QueueStatus::default());
}

#[tokio::test]
async fn purge_needs_yes() {
    let (_server, url, client) = start().await;
    let q = queue(&client, "orders");
    for _ in 0..3 {
        q.send("x").delay(Duration::from_secs(60)).await.unwrap();
    }
    let err = run(&url, &["purge", "orders"]).await;
    assert!(err.failed(2).contains("pass --yes"), "{err:?}");
    assert_eq!(q.counts().await.unwrap().pending, 3, "nothing purged without --yes");

    let r = run(&url, &["purge", "orders", "--yes"]).await;
    assert_eq!(
        (r.code, r.stdout.as_str()),
        (0, "purged orders: 3 entries removed\n"),
        "{r:?}"
    );
    assert_eq!(q.counts().await.unwrap(), Counts::default());
    assert_eq!(
        run(&url, &["queues", "--json"]).await.json()["queues"],
        serde_json::json!([])
    );
    let err = run(&url, &["purge", "orders", "--yes", "--json"]).await;
    assert_eq!(err.failed(1), "error: no queue named \"orders\" (known: none)");
}

#[tokio::test]
async fn check_reports_clean_queues_and_anomalies() {
    let (server, url, client) = start().await;
    let q = queue(&client, "orders");
    for _ in 0..2 {
        q.send("x").delay(Duration::from_secs(60)).await.unwrap();
    }
    let lost = q.send("y").delay(Duration::from_secs(60)).await.unwrap();

    let r = run(&url, &["check", "orders"]).await;
    assert_eq!(
        (r.code, r.stdout.as_str()),
        (0, "orders: 3 ids scanned, clean\n"),
        "{r:?}"
    );
    // A payload gone behind the queue's back.
    let key = format!("dq:{{orders}}:m:{lost}");
    assert_eq!(server.raw_command(&["DEL", &key]), "1");
    let r = run(&url, &["check", "orders"]).await;
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stdout.starts_with("orders: 3 ids scanned, 1 anomaly\n\nANOMALY"),
        "{}",
        r.stdout
    );
    let row: Vec<&str> = r.stdout.lines().last().unwrap().split_whitespace().collect();
    assert_eq!(row, ["missing", "payload", lost.as_str(), "pending"]);
    let r = run(&url, &["check", "orders", "--json"]).await;
    assert_eq!(r.code, 1);
    assert_eq!(
        r.json(),
        serde_json::json!({"queue": "orders", "scanned": 3, "clean": false,
            "anomalies": [{"kind": "missing_payload", "id": lost.as_str(), "state": "pending"}]})
    );
}

#[tokio::test]
async fn clear_errors_with_exit_codes() {
    let (_server, url, client) = start().await;
    queue(&client, "a").send("x").await.unwrap();
    queue(&client, "b").send("x").await.unwrap();

    let err = run(&url, &["stats", "nope"]).await;
    assert_eq!(err.failed(1), "error: no queue named \"nope\" (known: a, b)");
    for args in [
        &["show", "nope", "id"][..],
        &["list", "nope", "ready"],
        &["cancel", "nope", "x"],
        &["check", "nope"],
    ] {
        assert!(
            run(&url, args).await.failed(1).contains("no queue named \"nope\""),
            "{args:?}"
        );
    }
    let err = run(&url, &["show", "a", "bad id"]).await;
    assert!(
        err.failed(2).starts_with("error: invalid message id \"bad id\""),
        "{err:?}"
    );
    let err = run(&url, &["stats", "bad name"]).await;
    assert!(
        err.failed(2).starts_with("error: invalid queue name \"bad name\""),
        "{err:?}"
    );
    let err = run(&url, &["send", "bad{name}", "x"]).await;
    assert!(err.failed(2).starts_with("error: invalid queue name"), "{err:?}");

    // Redis unreachable: a port nobody listens on.
    let closed = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let closed_url = format!("redis://:secret@127.0.0.1:{closed}");
    // Refused, not timed out: the error says so.
    let err = run(&closed_url, &["queues"]).await;
    assert_eq!(
        err.failed(2),
        format!("error: cannot connect to Redis at redis://***@127.0.0.1:{closed}: Connection refused")
    );
    let err = run(&closed_url, &["--json", "stats", "a"]).await;
    assert!(err.failed(2).contains("cannot connect"), "{err:?}");
    assert!(run(&url, &["frobnicate"])
        .await
        .failed(2)
        .contains("unrecognized subcommand"));
}

#[tokio::test]
async fn a_server_that_never_answers_is_given_up_on_in_time() {
    // Connections complete (the kernel's backlog) but nothing ever answers.
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let port = listener.local_addr().unwrap().port();
    let started = Instant::now();
    let err = run(&format!("redis://:hunter2@127.0.0.1:{port}"), &["queues"]).await;
    let took = started.elapsed();
    let line = err.failed(2);
    assert!(
        line.starts_with(&format!(
            "error: cannot connect to Redis at redis://***@127.0.0.1:{port}: "
        )) && line.ends_with("within 5s"),
        "{line}"
    );
    assert!(!line.contains("hunter2"), "{line}");
    // Waited for its 5 s connect timeout; that it then gave up, not hung,
    // run() checks (RUN_LIMIT).
    assert!(took >= Duration::from_secs(4), "{took:?}");
    drop(listener);
}

#[tokio::test]
async fn url_from_the_environment_and_key_prefix() {
    let server = RedisServer::start().await;
    let client = server.client().await;
    DelayQueue::builder("billing", client.clone())
        .key_prefix("app:")
        .build()
        .unwrap()
        .send("x")
        .delay(Duration::from_secs(60))
        .await
        .unwrap();

    let mut cmd = command(&["queues"]);
    cmd.env("REDIS_URL", server.url());
    let r = run_command(cmd).await;
    assert_eq!(r.stdout, "no queues under prefix \"dq:\"\n", "{r:?}");
    let mut cmd = command(&["--prefix", "app:", "queues", "--json"]);
    cmd.env("REDIS_URL", server.url());
    let v = run_command(cmd).await.json();
    assert_eq!(v["queues"][0]["name"], "billing");
    let r = run(&server.url(), &["stats", "billing", "--prefix", "app:", "--json"]).await;
    assert_eq!(r.json()["counts"]["pending"], 1);
}

/// Usage lines show what is required: `--url` is not, even when it comes
/// from REDIS_URL; `dead requeue` and `dead delete` want an id or --all.
#[tokio::test]
async fn usage_lines_show_what_is_required() {
    for sub in ["requeue", "delete"] {
        let mut cmd = command(&["dead", sub, "hooks"]);
        cmd.env("REDIS_URL", "redis://127.0.0.1:1");
        let err = run_command(cmd).await;
        let text = err.failed(2);
        let usage = text.lines().find(|l| l.starts_with("Usage:")).unwrap_or_default();
        assert_eq!(
            usage,
            format!("Usage: delayqueue dead {sub} [OPTIONS] <QUEUE> <ID|--all>"),
            "{text}"
        );
        assert!(text.contains("not provided:\n  <ID|--all>"), "{text}");
    }
    let mut cmd = command(&["show", "orders"]);
    cmd.env("REDIS_URL", "redis://127.0.0.1:1");
    let text = run_command(cmd).await.failed(2).to_string();
    assert!(text.contains("Usage: delayqueue show <QUEUE> <ID>\n"), "{text}");
    let help = run_command(command(&["--help"])).await;
    assert!(
        help.stdout
            .contains("[default: $REDIS_URL, else redis://127.0.0.1:6379]"),
        "{help:?}"
    );
}

/// A dead letter has no deliveries left, however it died; requeued, it has
/// them all again, and no expiry: its payload is live again (no TTL).
#[tokio::test]
async fn dead_letters_have_no_deliveries_left_and_requeued_ones_no_expiry() {
    let (_server, url, client) = start().await;
    let q = queue(&client, "skips");
    let id = q.send("x").id("skip-1").await.unwrap();
    let consumer = q
        .start_consume(|_msg: Message| async move { Err::<(), HandlerError>(SkipRetry::new("bad order").into()) })
        .await
        .unwrap();
    assert!(
        wait_for(WAIT, || async { q.counts().await.unwrap().dead == 1 }).await,
        "{:?}",
        q.counts().await
    );
    consumer.shutdown().await.unwrap();
    let m = run(&url, &["show", "skips", "skip-1", "--json"]).await.json()["message"].clone();
    assert_eq!(
        (&m["state"], &m["attempts"], &m["retry_count"], &m["deliveries_left"]),
        (&json!("dead"), &json!(1), &json!(3), &json!(0)),
        "{m}"
    );
    assert!(
        m["expires_in_ms"].as_u64().is_some_and(|ms| ms > 0),
        "the retention: {m}"
    );
    let r = run(&url, &["show", "skips", "skip-1"]).await;
    assert!(r.stdout.contains("retry count  3 (0 deliveries left)\n"), "{r:?}");

    run(&url, &["dead", "requeue", "skips", id.as_str()]).await;
    let m = run(&url, &["show", "skips", "skip-1", "--json"]).await.json()["message"].clone();
    assert_eq!(
        (
            &m["state"],
            &m["deliveries_left"],
            &m["expires_in_ms"],
            &m["expires_at"]
        ),
        (&json!("ready"), &json!(4), &Value::Null, &Value::Null),
        "{m}"
    );
    let r = run(&url, &["show", "skips", "skip-1"]).await;
    assert!(r.stdout.contains("\nexpires in   -\n"), "{r:?}");
}

/// `reschedule` moves a pending message's due time; anything else is exit 1.
#[tokio::test]
async fn reschedule_moves_a_pending_message() {
    let (_server, url, client) = start().await;
    let q = queue(&client, "later");
    let dead = make_dead(&q, &["y"], "boom").await;
    q.send("x").delay(Duration::from_secs(3600)).id("r-1").await.unwrap();

    let r = run(&url, &["reschedule", "later", "r-1", "--delay", "5m"]).await;
    assert_eq!(
        (r.code, r.stdout.as_str()),
        (0, "rescheduled r-1: due in 5m 0s\n"),
        "{r:?}"
    );
    let due = q.get("r-1").await.unwrap().unwrap().due.unwrap();
    let left = due.duration_since(SystemTime::now()).unwrap_or_default();
    assert!(
        left > Duration::from_secs(240) && left <= Duration::from_secs(300),
        "{left:?}"
    );
    let v = run(&url, &["--json", "reschedule", "later", "r-1", "-d", "0s"])
        .await
        .json();
    assert_eq!(
        v,
        json!({"queue": "later", "id": "r-1", "rescheduled": true, "delay_ms": 0})
    );
    for id in [dead[0].as_str(), "nope"] {
        let err = run(&url, &["reschedule", "later", id, "--delay", "1m"]).await;
        assert_eq!(
            err.failed(1),
            format!(
                "error: message \"{id}\" not rescheduled: queue \"later\" has no such message pending \
                 (unknown, already due, being processed, or dead)"
            )
        );
    }
    assert!(run(&url, &["reschedule", "later", "r-1"])
        .await
        .failed(2)
        .contains("--delay"));
}

/// One HTTP/1.1 GET to 127.0.0.1:`port`: the status line and the body.
async fn http_get(port: u16, path: &str, auth: Option<&str>) -> (String, String) {
    http_get_as(port, path, "127.0.0.1", auth).await
}

/// [`http_get`] with `host` as the `Host` header.
async fn http_get_as(port: u16, path: &str, host: &str, auth: Option<&str>) -> (String, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect((Ipv4Addr::LOCALHOST, port))
            .await
            .unwrap();
        let auth = auth.map(|a| format!("authorization: {a}\r\n")).unwrap_or_default();
        let request = format!("GET {path} HTTP/1.1\r\nhost: {host}\r\n{auth}connection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut reply = String::new();
        stream.read_to_string(&mut reply).await.unwrap();
        reply
    };
    let reply = tokio::time::timeout(RUN_LIMIT, exchange)
        .await
        .expect("no HTTP reply in time");
    let (head, body) = reply.split_once("\r\n\r\n").expect("no HTTP head");
    (head.lines().next().unwrap_or("").to_string(), body.to_string())
}

#[tokio::test]
async fn web_serves_the_dashboard_and_refuses_an_open_public_address() {
    let (_server, url, client) = start().await;
    queue(&client, "shown").send("x").await.unwrap();

    let r = run(&url, &["web", "--listen", "0.0.0.0:0"]).await;
    let err = r.failed(2);
    assert!(
        err.contains("refusing to serve the dashboard on 0.0.0.0:0 without authentication"),
        "{err}"
    );
    let r = run(&url, &["web", "--basic", "nopassword"]).await;
    assert!(r.failed(2).contains("USER:PASSWORD"), "{r:?}");

    let (mut child, port) = spawn_web(&["--url", &url, "web", "--listen", "127.0.0.1:0", "--token", "t0k"]).await;
    let (status, _) = http_get(port, "/api/overview", None).await;
    assert!(status.contains(" 401 "), "{status}");
    let (status, body) = http_get(port, "/api/overview", Some("Bearer t0k")).await;
    assert!(status.contains(" 200 "), "{status}");
    let v: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"));
    assert_eq!(v["queues"][0]["name"], "shown", "{v}");
    assert_eq!(v["queues"][0]["counts"]["ready"], 1, "due at once: {v}");
    child.kill().await.unwrap();
}

#[tokio::test]
async fn web_refuses_an_empty_secret() {
    let (_server, url, _client) = start().await;
    for auth in [["--token", ""], ["--basic", ":"]] {
        let mut args = vec!["web", "--listen", "0.0.0.0:0"];
        args.extend(auth);
        let r = run(&url, &args).await;
        assert!(r.failed(2).contains("must not be empty"), "{r:?}");
    }
}

#[tokio::test]
async fn web_on_loopback_serves_only_its_own_and_allowed_hosts() {
    let (_server, url, _client) = start().await;
    let args = [
        "--url",
        &url,
        "web",
        "--listen",
        "127.0.0.1:0",
        "--allowed-host",
        "dash.example.com",
    ];
    let (mut child, port) = spawn_web(&args).await;
    let (status, body) = http_get_as(port, "/api/overview", &format!("rebind.attacker.example:{port}"), None).await;
    assert!(status.contains(" 403 "), "{status}");
    assert!(body.contains("host"), "{body}");
    for host in [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        "dash.example.com".into(),
    ] {
        let (status, _) = http_get_as(port, "/api/overview", &host, None).await;
        assert!(status.contains(" 200 "), "{host}: {status}");
    }
    child.kill().await.unwrap();
}

#[tokio::test]
async fn schedules_add_list_show_trigger_pause_resume_and_remove() {
    let (_server, url, client) = start().await;
    let add = [
        "schedules",
        "add",
        "jobs",
        "nightly",
        "clean up",
        "--cron",
        "0 3 * * *",
        "--tz",
        "Europe/Berlin",
    ];
    let r = run(&url, &add).await;
    assert_eq!((r.code, r.stdout.as_str()), (0, "set nightly\n"), "{r:?}");
    // The same definition again changes nothing.
    let r = run(&url, &add).await;
    assert_eq!(r.stdout, "unchanged nightly\n");
    assert!(run(
        &url,
        &[
            "schedules",
            "add",
            "jobs",
            "bad",
            "x",
            "--cron",
            "0 3 * * *",
            "--tz",
            "Mars/Base"
        ]
    )
    .await
    .failed(2)
    .contains("Mars/Base"));
    run(
        &url,
        &[
            "schedules",
            "add",
            "jobs",
            "ping",
            "p",
            "--every",
            "1h",
            "--misfire",
            "skip",
        ],
    )
    .await;

    let r = run(&url, &["schedules", "list", "jobs"]).await;
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{r:?}");
    assert!(
        lines[1].starts_with("nightly") && lines[1].contains("Europe/Berlin") && lines[1].contains("active"),
        "{r:?}"
    );
    let r = run(&url, &["--json", "schedules", "list", "jobs"]).await;
    let list: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(list[1]["spec"], "every 3600000");
    assert_eq!(list[1]["misfire"], "skip");
    assert!(list[0]["next_fire_ms"].as_u64().is_some());
    assert!(run(&url, &["schedules", "show", "jobs", "nightly"])
        .await
        .stdout
        .contains("payload:     clean up"));

    let r = run(&url, &["schedules", "trigger", "jobs", "nightly"]).await;
    let id = r.stdout.trim().to_string();
    assert!(id.starts_with("{nightly}@t"), "{r:?}");
    let got = queue(&client, "jobs").get(&id).await.unwrap().expect("sent");
    // Due now: ready, though no consumer moved it out of pending.
    assert_eq!(got.state, delayqueue::MessageState::Ready);

    assert_eq!(
        run(&url, &["schedules", "pause", "jobs", "ping"]).await.stdout,
        "paused ping\n"
    );
    assert_eq!(
        run(&url, &["schedules", "pause", "jobs", "ping"]).await.stdout,
        "paused ping (it already was)\n"
    );
    assert!(run(&url, &["schedules", "list", "jobs"])
        .await
        .stdout
        .contains("paused"));
    assert_eq!(
        run(&url, &["schedules", "resume", "jobs", "ping"]).await.stdout,
        "resumed ping\n"
    );
    assert_eq!(
        run(&url, &["schedules", "remove", "jobs", "ping"]).await.stdout,
        "removed ping\n"
    );
    assert!(run(&url, &["schedules", "remove", "jobs", "ping"])
        .await
        .failed(1)
        .contains("ping"));
    assert!(run(&url, &["schedules", "show", "jobs", "ping"])
        .await
        .failed(1)
        .contains("ping"));
}

#[tokio::test]
async fn groups_are_listed_a_page_at_a_time_and_paused_and_resumed() {
    let (_server, url, client) = start().await;
    let q = builder(&client, "tenants").group_concurrency(4).build().unwrap();
    for g in ["a", "b", "c"] {
        q.send("x").group(g).await.unwrap();
    }
    q.set_group_rate("b", Some(delayqueue::RateLimit::new(10, Duration::from_secs(1))))
        .await
        .unwrap();
    // A consumer on the paused queue promotes the messages (so their
    // groups are known) and handles none.
    assert!(q.pause().await.unwrap());
    let consumer = q
        .start_consume(|_m: Message| async { Ok::<_, HandlerError>(()) })
        .await
        .unwrap();
    assert!(wait_for(WAIT, || async { q.groups(0, 10).await.unwrap().total == 3 }).await);
    consumer.shutdown().await.unwrap();

    assert_eq!(
        run(&url, &["groups", "pause", "tenants", "a"]).await.stdout,
        "paused group a\n"
    );
    let r = run(&url, &["groups", "list", "tenants", "-n", "2"]).await;
    let lines: Vec<Vec<&str>> = r.stdout.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(
        lines,
        [
            vec!["GROUP", "READY", "PROCESSING", "PAUSED", "CONCURRENCY", "RATE"],
            vec!["a", "1", "0", "yes", "4", "(default)", "none", "(default)"],
            vec!["b", "1", "0", "no", "4", "(default)", "10/1s"],
            vec![],
            vec!["1-2", "of", "3", "groups;", "next", "page:", "--offset", "2"],
        ],
        "{}",
        r.stdout
    );
    let r = run(&url, &["--json", "groups", "list", "tenants", "--offset", "2"]).await;
    let v: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!((&v["total"], &v["default_concurrency"]), (&json!(3), &json!(4)));
    assert_eq!(v["groups"][0]["name"], "c");
    assert_eq!(
        run(&url, &["groups", "resume", "tenants", "a"]).await.stdout,
        "resumed group a\n"
    );
    assert!(!q.groups(0, 1).await.unwrap().items[0].paused);
    assert!(run(&url, &["groups", "pause", "tenants", "a b"])
        .await
        .failed(2)
        .contains("invalid group"));
    assert!(run(&url, &["groups", "pause", "nosuchqueue", "a"])
        .await
        .failed(1)
        .contains("nosuchqueue"));
}

#[tokio::test]
async fn a_group_is_shown_by_name_and_its_limits_set_and_reset() {
    let (_server, url, client) = start().await;
    let q = builder(&client, "tenants").build().unwrap();
    // The queue exists for the CLI once it has sent something.
    q.send("x").group("b").await.unwrap();
    assert!(q.set_default_group_concurrency(Some(4)).await.unwrap());
    assert_eq!(
        run(
            &url,
            &[
                "groups",
                "limit",
                "tenants",
                "a",
                "--concurrency",
                "2",
                "--rate",
                "5/1s"
            ]
        )
        .await
        .stdout,
        "group a: concurrency 2, rate 5/1s\n"
    );
    let g = q.group("a").await.unwrap().expect("a has settings of its own");
    assert_eq!(g.concurrency, Some(2));
    assert_eq!(g.rate, Some(delayqueue::RateLimit::new(5, Duration::from_secs(1))));
    let r = run(&url, &["groups", "show", "tenants", "a"]).await;
    let lines: Vec<Vec<&str>> = r.stdout.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(
        lines,
        [
            vec!["FIELD", "VALUE"],
            vec!["group", "a"],
            vec!["ready", "0"],
            vec!["processing", "0"],
            vec!["paused", "no"],
            vec!["concurrency", "2"],
            vec!["rate", "5/1s"],
            vec!["waiting", "until", "-"],
        ],
        "{}",
        r.stdout
    );
    assert_eq!(
        run(&url, &["groups", "limit", "tenants", "a", "--no-concurrency"])
            .await
            .stdout,
        "group a: concurrency: the default\n"
    );
    let r = run(&url, &["--json", "groups", "show", "tenants", "a"]).await;
    let v: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(
        (
            &v["name"],
            &v["concurrency"],
            &v["default_concurrency"],
            &v["rate"]["limit"]
        ),
        (&json!("a"), &Value::Null, &json!(4), &json!(5))
    );
    let r = run(&url, &["--json", "groups", "limit", "tenants", "a", "--no-rate"]).await;
    let v: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!((&v["rate"], &v["changed"]), (&Value::Null, &json!(true)));
    // With no setting left and nothing sent, a is unknown again.
    assert!(run(&url, &["groups", "show", "tenants", "a"])
        .await
        .failed(1)
        .contains("no group"));
    assert!(run(&url, &["groups", "limit", "tenants", "a"])
        .await
        .failed(2)
        .contains("required"));
    assert!(run(&url, &["groups", "limit", "tenants", "a", "--concurrency", "0"])
        .await
        .failed(2)
        .contains("0"));
    assert!(run(&url, &["groups", "limit", "tenants", "a", "--rate", "5"])
        .await
        .failed(2)
        .contains("N/DURATION"));
}

#[tokio::test]
async fn flow_show_prints_the_tree_from_any_of_its_messages() {
    use delayqueue::{Flow, NewMessage, FLOW_PAGE};
    let (_server, url, client) = start().await;
    let (orders, mail) = (queue(&client, "orders"), queue(&client, "mail"));
    let hour = Duration::from_secs(3600);
    Flow::new(&orders, NewMessage::new("close").id("close-1"))
        .child(Flow::new(&orders, NewMessage::new("charge").id("charge-1").delay(hour)))
        .child(
            Flow::new(&mail, NewMessage::new("email").id("email-1"))
                .child(Flow::new(&mail, NewMessage::new("render").id("render-1")))
                .child(Flow::new(&orders, NewMessage::new("ledger").id("ledger-1").delay(hour))),
        )
        .send()
        .await
        .unwrap();
    // render-1 is acked with a result; the rest wait.
    let consumer = mail
        .start_consume(|m: Message| async move { Ok::<_, HandlerError>(m.payload().to_vec()) })
        .await
        .unwrap();
    let relayed = wait_for(WAIT, || async {
        mail.children_results("email-1", None).await.unwrap().items.len() == 1
    })
    .await;
    assert!(relayed, "render-1's completion did not reach email-1");
    consumer.shutdown().await.unwrap();

    let r = run(&url, &["flow", "show", "orders", "ledger-1"]).await;
    assert_eq!(r.code, 0, "{r:?}");
    let lines: Vec<&str> = r.stdout.lines().map(str::trim_end).collect();
    let (charge, email) = if lines[2].contains("charge-1") { (2, 3) } else { (5, 2) };
    assert_eq!(lines[0], "STATE    MESSAGE");
    assert_eq!(lines[1], "waiting  orders/close-1       0 of 2 children finished");
    assert_eq!(lines[charge], "pending    orders/charge-1");
    assert_eq!(lines[email], "waiting    mail/email-1       1 of 2 children finished");
    assert_eq!(lines[email + 1], "pending      orders/ledger-1  <- asked for");
    assert_eq!(lines[email + 2], "acked        mail/render-1    result kept");
    assert_eq!(lines.len(), 6, "{}", r.stdout);

    let v = run(&url, &["--json", "flow", "show", "mail", "email-1"]).await.json();
    assert_eq!(
        v["path"],
        json!([{"queue": "orders", "id": "close-1", "policy": "fail"}])
    );
    assert_eq!(
        (&v["root"]["id"], &v["root"]["state"], &v["truncated"]),
        (&json!("close-1"), &json!("waiting"), &json!(false))
    );
    let email = v["root"]["children"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "email-1")
        .unwrap();
    assert_eq!((&email["unfinished"], &email["finished"]), (&json!(1), &json!(1)));
    assert_eq!(email["children"][1]["outcome"], "acked");

    // send --after: a parent in the same queue, with more children than a node lists.
    let mut args = vec!["send", "mail", "digest", "--id", "digest-1"];
    let kids: Vec<String> = (0..FLOW_PAGE + 2).map(|i| format!("kid-{i:02}")).collect();
    for kid in &kids {
        mail.send("kid").id(kid.as_str()).delay(hour).await.unwrap();
        args.extend(["--after", kid.as_str()]);
    }
    assert_eq!(run(&url, &args).await.stdout, "digest-1\n");
    let r = run(&url, &["flow", "show", "mail", "kid-07"]).await;
    assert_eq!(
        r.stdout.lines().nth(1).unwrap().trim_end(),
        "waiting  mail/digest-1  0 of 52 children finished"
    );
    assert_eq!(r.stdout.lines().last().unwrap().trim(), "... 2 more");
    assert_eq!(r.stdout.lines().count(), 2 + FLOW_PAGE + 1, "{}", r.stdout);

    assert!(run(&url, &["flow", "show", "orders", "nope"])
        .await
        .failed(1)
        .contains("nope"));
    assert!(run(&url, &["flow", "show", "orders", "a b"])
        .await
        .failed(2)
        .contains("invalid message id"));
}

/// Before any consumer stored group defaults, the group views say the
/// default is none rather than a bare `-`.
#[tokio::test]
async fn groups_without_stored_defaults_say_the_default_is_none() {
    let (_server, url, client) = start().await;
    queue(&client, "plain").send("x").group("a").await.unwrap();
    let r = run(&url, &["groups", "list", "plain"]).await;
    let row: Vec<&str> = r.stdout.lines().nth(1).unwrap_or_default().split_whitespace().collect();
    assert_eq!(
        row,
        ["a", "1", "0", "no", "none", "(default)", "none", "(default)"],
        "{}",
        r.stdout
    );
    let r = run(&url, &["groups", "show", "plain", "a"]).await;
    assert!(
        r.stdout
            .lines()
            .any(|l| l.split_whitespace().eq(["concurrency", "none", "(default)"])),
        "{}",
        r.stdout
    );
}

/// `consumers`: a live consumer with what it runs, in text and JSON;
/// `--queue` narrows to a queue's; an entry another writer left (a
/// terminal escape in it) listed as skipped with the reason, printed safe.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumers_lists_the_live_consumers_and_skips_bad_entries() {
    let (server, url, client) = start().await;
    let q = builder(&client, "orders")
        .heartbeat(Duration::from_millis(200))
        .build()
        .unwrap();
    let gate = std::sync::Arc::new(tokio::sync::Semaphore::new(0));
    let g = gate.clone();
    let consumer = q
        .start_consume(move |_m: Message| {
            let g = g.clone();
            async move {
                g.acquire().await?.forget();
                Ok::<_, HandlerError>(())
            }
        })
        .await
        .unwrap();
    q.send("x").id("order-7").await.unwrap();
    let running = wait_for(WAIT, || {
        let url = url.clone();
        async move { run(&url, &["consumers", "--json"]).await.json()["consumers"][0]["running_total"] == json!(1) }
    })
    .await;
    assert!(running);
    let later = (u64::MAX / 2).to_string();
    server.raw_command(&["SET", "dq:{#consumers}:consumer:evil", "\u{1b}[2Jnot json"]);
    server.raw_command(&["ZADD", "dq:{#consumers}:consumers", &later, "evil"]);

    let r = run(&url, &["consumers"]).await;
    assert_eq!(r.code, 0, "{r:?}");
    let pid = std::process::id().to_string();
    assert!(r.stdout.starts_with("CONSUMER"), "{r:?}");
    assert!(r.stdout.contains(&pid) && r.stdout.contains("orders"), "{r:?}");
    assert!(r.stdout.contains("orders order-7 attempt 1 since"), "{r:?}");
    assert!(r.stdout.contains("skipped entry evil: not a JSON entry"), "{r:?}");
    assert!(!r.stdout.contains('\u{1b}'), "no terminal escape printed: {r:?}");
    let j = run(&url, &["consumers", "--json"]).await.json();
    assert_eq!(j["live"], json!(2));
    assert_eq!(j["consumers"][0]["pid"], json!(std::process::id()));
    assert_eq!(j["consumers"][0]["running"][0]["id"], json!("order-7"));
    assert_eq!(j["skipped"][0]["id"], json!("evil"));
    let none = run(&url, &["consumers", "--queue", "other", "--json"]).await.json();
    assert_eq!(none["consumers"], json!([]));

    gate.add_permits(1);
    consumer.shutdown().await.unwrap();
    let r = run(&url, &["consumers"]).await;
    assert!(!r.stdout.contains(&pid), "gone after shutdown: {r:?}");
}
