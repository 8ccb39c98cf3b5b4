//! Producers in other languages (producers/python, producers/node) against a
//! private redis-server: messages they send are handled by a Rust consumer
//! with the Rust guarantees (never before their due time, caller-given ids
//! idempotent, cancel), a live id they sent is refused by `queue.send`,
//! their parents sent with `after` run only after their children (of Rust,
//! Python and Node, across two queues), and they refuse what Rust refuses.
//! They run from their folders, as they are
//! in the tree (their own tests, run by scripts/test-producers.sh, run them
//! installed). Each test installs what it needs when missing: the `redis`
//! package in a venv under target/, `ioredis` from
//! producers/node/package-lock.json.

mod helpers;
use delayqueue_test_support as support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use delayqueue::fred::prelude::LuaInterface;
use delayqueue::{DelayQueue, Error, Message, MessageRef};
use helpers::flow_keys;
use serde_json::Value;
use support::{wait_for, wait_until, RedisServer, WAIT};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Runs `cmd`, which must succeed; its stdout.
fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// target/polyglot-venv/bin/python with `redis` installed.
fn python() -> PathBuf {
    let venv = root().join("target/polyglot-venv");
    let py = venv.join("bin/python");
    let has_redis = |py: &Path| {
        py.exists()
            && Command::new(py)
                .args(["-c", "import redis"])
                .status()
                .is_ok_and(|s| s.success())
    };
    if !has_redis(&py) {
        run(Command::new("python3").arg("-m").arg("venv").arg(&venv));
        run(Command::new(venv.join("bin/pip")).args(["install", "--quiet", "redis>=5"]));
    }
    py
}

/// The folder of the Python package's module (producers/python/src), put
/// first on the path by the Python snippets below.
fn python_dir() -> PathBuf {
    root().join("producers/python/src")
}

/// producers/node with its node_modules installed.
fn node_dir() -> PathBuf {
    let dir = root().join("producers/node");
    if !dir.join("node_modules/ioredis").exists() {
        run(Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund"])
            .current_dir(&dir));
    }
    dir
}

fn now_ms() -> u64 {
    u64::try_from(SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis()).unwrap()
}

/// The same steps in both languages; prints one JSON line: when each timed
/// message was sent (ms, this host's clock), the outcomes of duplicates,
/// cancel and the batch.
const PYTHON: &str = r#"
import json, sys
sys.path.insert(0, sys.argv[2])
import redis, delayqueue_producer as d
p = d.Producer(redis.Redis(host="127.0.0.1", port=int(sys.argv[1])), "poly")
out = {"t_delayed": d.now_ms()}
p.send("delayed", delay_ms=1500, id="delayed", retry_count=2)
try:
    p.send("again", id="delayed")
    out["dup"] = "stored"
except d.DuplicateError:
    out["dup"] = "duplicate"
out["at"] = d.now_ms() + 2000
p.send(b"at", at_ms=out["at"], id="at")
p.send("held", delay_ms=600000, id="held")
p.send("cancelled", delay_ms=1000, id="cancelled")
out["cancel"] = p.cancel("cancelled")
res = p.send_batch([{"payload": "b0"}, {"payload": "b1", "id": "b1", "priority": 2, "headers": {"tenant": "acme", "note": "h\u00e9llo"}}, {"payload": "b2", "id": "delayed"}])
out["batch"] = [x if isinstance(x, str) else type(x).__name__ for x in res]
print(json.dumps(out))
"#;

const NODE: &str = r#"
const Redis = require('ioredis');
const d = require(process.argv[2] + '/delayqueue-producer.js');
(async () => {
  const r = new Redis({ host: '127.0.0.1', port: Number(process.argv[1]) });
  const p = new d.Producer(r, 'poly');
  const out = { t_delayed: Date.now() };
  await p.send('delayed', { delayMs: 1500, id: 'delayed', retryCount: 2 });
  try { await p.send('again', { id: 'delayed' }); out.dup = 'stored'; }
  catch (e) { out.dup = e instanceof d.DuplicateError ? 'duplicate' : String(e); }
  out.at = Date.now() + 2000;
  await p.send(Buffer.from('at'), { atMs: out.at, id: 'at' });
  await p.send('held', { delayMs: 600000, id: 'held' });
  await p.send('cancelled', { delayMs: 1000, id: 'cancelled' });
  out.cancel = await p.cancel('cancelled');
  const res = await p.sendBatch([{ payload: 'b0' }, { payload: 'b1', id: 'b1', priority: 2, headers: { tenant: 'acme', note: 'h\u00e9llo' } }, { payload: 'b2', id: 'delayed' }]);
  out.batch = res.map((x) => (typeof x === 'string' ? x : x.constructor.name));
  console.log(JSON.stringify(out));
  r.disconnect();
})().catch((e) => { console.error(e); process.exit(1); });
"#;

/// Prints the SHA1s of the scripts named after the package's folder as
/// the Python package loads them.
const PYTHON_SHAS: &str = r#"
import hashlib, sys
sys.path.insert(0, sys.argv[1])
import delayqueue_producer as d
print(" ".join(hashlib.sha1(d.script(s).encode()).hexdigest() for s in sys.argv[2:]))
"#;

const NODE_SHAS: &str = r#"
const crypto = require('crypto');
const d = require(process.argv[1] + '/delayqueue-producer.js');
console.log(process.argv.slice(2).map((s) => crypto.createHash('sha1').update(d.script(s)).digest('hex')).join(' '));
"#;

/// The SHA1s of `scripts` as the Python package, then the Node package,
/// loads them.
fn foreign_shas(scripts: &[&str]) -> Vec<String> {
    let python = run(Command::new(python())
        .args(["-c", PYTHON_SHAS])
        .arg(python_dir())
        .args(scripts));
    let node = run(Command::new("node")
        .args(["-e", NODE_SHAS])
        .arg(node_dir())
        .args(scripts));
    format!("{python} {node}")
        .split_whitespace()
        .map(String::from)
        .collect()
}

/// One handled message: id, payload, retry count, priority, when (ms), headers.
type Handled = (String, Vec<u8>, u32, u8, u64, Vec<(String, String)>);

/// A private server, a client on it, and the queue "poly" the producers send to.
async fn poly_queue() -> (RedisServer, delayqueue::fred::clients::Client, DelayQueue) {
    let server = RedisServer::start().await;
    let client = server.client().await;
    let queue = DelayQueue::builder("poly", client.clone())
        .fetch_interval(Duration::from_millis(50))
        .build()
        .unwrap();
    (server, client, queue)
}

/// Checks that the foreign package runs send and cancel exactly as the
/// crate does (`shas`: their SHA1s as it computes them, which Redis knows
/// after a Rust send and cancel), starts a Rust consumer, lets `produce`
/// (given the server's port) send, and checks what the consumer handles.
async fn handled_like_rust(shas: String, produce: impl FnOnce(u16) -> String + Send + 'static) {
    let (server, client, queue) = poly_queue().await;
    queue
        .send("warm")
        .delay(Duration::from_secs(60))
        .id("warm")
        .await
        .unwrap();
    assert!(queue.cancel("warm").await.unwrap());
    let shas: Vec<String> = shas.split_whitespace().map(String::from).collect();
    assert_eq!(shas.len(), 2, "{shas:?}");
    let known: Vec<bool> = client.script_exists(shas.clone()).await.unwrap();
    assert_eq!(
        known,
        [true, true],
        "the same scripts as Rust's, byte for byte: {shas:?}"
    );
    let log: Arc<Mutex<Vec<Handled>>> = Arc::default();
    let seen = log.clone();
    let consumer = queue
        .start_consume(move |m: Message| {
            let entry = (
                m.id().to_string(),
                m.payload().to_vec(),
                m.retry_count(),
                m.priority(),
                now_ms(),
                m.headers().to_vec(),
            );
            seen.lock().unwrap().push(entry);
            async { Ok(()) }
        })
        .await
        .unwrap();

    let port = server.port();
    let line = tokio::task::spawn_blocking(move || produce(port)).await.unwrap();
    let out: Value = serde_json::from_str(line.trim()).unwrap_or_else(|e| panic!("{e}: {line}"));
    assert_eq!(out["dup"], "duplicate", "a live id is refused: {out}");
    assert_eq!(out["cancel"], true, "{out}");
    let batch = out["batch"].as_array().unwrap();
    assert!(
        batch[0].as_str().is_some_and(|id| id.len() >= 20),
        "a generated id: {out}"
    );
    assert_eq!(batch[1], "b1");
    assert_eq!(batch[2], "DuplicateError", "a duplicate in a batch fails alone: {out}");
    // A live id they sent is refused by Rust too.
    match queue.send("rust").id("held").await {
        Err(Error::Duplicate { .. }) => {}
        other => panic!("Rust send of a live foreign id: {other:?}"),
    }

    let want = ["delayed", "at", "b1", batch[0].as_str().unwrap()];
    let all_handled = wait_for(WAIT, || {
        let log = log.lock().unwrap();
        let ids: Vec<&str> = log.iter().map(|e| e.0.as_str()).collect();
        std::future::ready(want.iter().all(|w| ids.contains(w)))
    })
    .await;
    let log = log.lock().unwrap().clone();
    assert!(all_handled, "not all handled: {log:?}");
    let find = |id: &str| log.iter().find(|e| e.0 == id).unwrap().clone();
    let delayed = find("delayed");
    let t_delayed = out["t_delayed"].as_u64().unwrap();
    assert!(
        delayed.4 >= t_delayed + 1500,
        "handled {} ms early",
        t_delayed + 1500 - delayed.4
    );
    assert_eq!(
        (delayed.1.as_slice(), delayed.2),
        (&b"delayed"[..], 2),
        "the first payload and its retry count"
    );
    let at = out["at"].as_u64().unwrap();
    assert!(find("at").4 >= at, "handled before its at_ms");
    assert_eq!(find("b1").3, 2, "priority");
    let headers = [("tenant", "acme"), ("note", "h\u{e9}llo")].map(|(k, v)| (k.to_string(), v.to_string()));
    assert_eq!(find("b1").5, headers, "headers, in the order set");
    assert!(find("delayed").5.is_empty());
    // "cancelled" was due before "at", which has been handled: it would have been too.
    assert!(log.iter().all(|e| e.0 != "cancelled" && e.0 != "held"), "{log:?}");
    assert_eq!(log.iter().filter(|e| e.0 == "delayed").count(), 1, "handled once");
    consumer.shutdown().await.unwrap();
}

#[tokio::test]
async fn python_producer_messages_are_handled_by_rust() {
    let py = python();
    let dir = python_dir();
    let shas = run(Command::new(&py)
        .args(["-c", PYTHON_SHAS])
        .arg(&dir)
        .args(["send", "cancel"]));
    handled_like_rust(shas, move |port| {
        run(Command::new(py).args(["-c", PYTHON, &port.to_string()]).arg(dir))
    })
    .await;
}

#[tokio::test]
async fn node_producer_messages_are_handled_by_rust() {
    let dir = node_dir();
    let shas = run(Command::new("node")
        .args(["-e", NODE_SHAS])
        .arg(&dir)
        .args(["send", "cancel"]));
    handled_like_rust(shas, move |port| {
        run(Command::new("node")
            .args(["-e", NODE, &port.to_string()])
            .arg(&dir)
            .current_dir(&dir))
    })
    .await;
}

/// Checks a runner's verdicts (tests/validation/python.py, node.js) on
/// tests/validation/cases.json: every case judged as the table says (which
/// the Rust validators' unit tests hold Rust to), each refusal naming its
/// rule, and every code point judged by the character checks as the
/// table's list says.
fn assert_judged_like_rust(producer: &str, line: &str) {
    let cases: Value = serde_json::from_str(&std::fs::read_to_string(cases_file()).unwrap()).unwrap();
    let out: Value = serde_json::from_str(line.trim()).unwrap_or_else(|e| panic!("{e}: {line}"));
    let mut wrong = Vec::new();
    for (section, judged) in out["cases"].as_object().unwrap() {
        for (i, (case, got)) in cases[section]
            .as_array()
            .unwrap()
            .iter()
            .zip(judged.as_array().unwrap())
            .enumerate()
        {
            let rule = case["breaks"].as_str();
            let ok = match rule {
                None => got.is_null(),
                Some(rule) => got["rule"] == rule && got["error"].as_str().is_some_and(|e| e.contains(rule)),
            };
            if !ok {
                let input = shown(&case["input"]);
                wrong.push(format!(
                    "{section}[{i}] {input}: Rust {rule:?}, {producer} {}",
                    shown(got)
                ));
            }
        }
    }
    for (check, disagree) in out["sweep"].as_object().unwrap() {
        if !disagree.as_array().is_some_and(Vec::is_empty) {
            wrong.push(format!("{check} judges otherwise than the table: {disagree}"));
        }
    }
    assert!(
        wrong.is_empty(),
        "{producer} judges otherwise than Rust:\n{}",
        wrong.join("\n")
    );
}

/// `v` as JSON, cut at 100 characters, with every character other than
/// printable ASCII as `\u{..}` (the cases are mostly about those).
fn shown(v: &Value) -> String {
    v.to_string()
        .chars()
        .take(100)
        .map(|c| match c {
            ' '..='~' => c.to_string(),
            _ => c.escape_unicode().to_string(),
        })
        .collect()
}

fn cases_file() -> PathBuf {
    root().join("tests/validation/cases.json")
}

#[test]
fn python_producer_refuses_what_rust_refuses() {
    let out = run(Command::new(python())
        .arg(root().join("tests/validation/python.py"))
        .arg(python_dir())
        .arg(cases_file()));
    assert_judged_like_rust("Python", &out);
}

#[test]
fn node_producer_refuses_what_rust_refuses() {
    let out = run(Command::new("node")
        .arg(root().join("tests/validation/node.js"))
        .arg(node_dir())
        .arg(cases_file()));
    assert_judged_like_rust("Node", &out);
}

/// Sends one message to queue `sharded` and prints the error it gets.
const PYTHON_TO_SHARDED: &str = r#"
import sys
sys.path.insert(0, sys.argv[2])
import redis, delayqueue_producer as d
p = d.Producer(redis.Redis(host="127.0.0.1", port=int(sys.argv[1])), "sharded")
try:
    p.send("lost?")
    print("stored")
except Exception as e:
    print(e)
"#;

const NODE_TO_SHARDED: &str = r#"
const Redis = require('ioredis');
const d = require(process.argv[2] + '/delayqueue-producer.js');
(async () => {
  const r = new Redis({ host: '127.0.0.1', port: Number(process.argv[1]) });
  try { await new d.Producer(r, 'sharded').send('lost?'); console.log('stored'); }
  catch (e) { console.log(String(e)); }
  r.disconnect();
})();
"#;

/// The foreign producers write ordinary queues only: a queue whose shard
/// count is recorded refuses them (send.lua), with nothing written where
/// its consumers would never read.
#[tokio::test]
async fn foreign_producers_are_refused_by_a_sharded_queue() {
    use delayqueue::fred::prelude::KeysInterface;
    let server = RedisServer::start().await;
    let client = server.client().await;
    let queue = DelayQueue::builder("sharded", client.clone())
        .shards(3)
        .build()
        .unwrap();
    queue.send("from rust").await.unwrap();
    let port = server.port().to_string();
    let py = python();
    let python_says = run(Command::new(&py)
        .args(["-c", PYTHON_TO_SHARDED, &port])
        .arg(python_dir()));
    let dir = node_dir();
    let node_says = run(Command::new("node")
        .args(["-e", NODE_TO_SHARDED, &port])
        .arg(&dir)
        .current_dir(&dir));
    for said in [python_says, node_says] {
        assert!(said.contains("DQSHARDS the queue is spread over 3 shards"), "{said}");
    }
    let pending: i64 = client.exists("dq:{sharded}:pending").await.unwrap();
    assert_eq!(pending, 0, "nothing in the unsharded layout");
    assert_eq!(queue.counts().await.unwrap().ready, 1);
}

/// Both producers read the result a Rust handler returned, by id.
#[tokio::test]
async fn producers_read_a_result_by_id() {
    let (server, _client, queue) = poly_queue().await;
    let id = queue.send("x").id("order-7").await.unwrap();
    let consumer = queue
        .start_consume(|_m: Message| async { Ok::<_, delayqueue::HandlerError>(b"\x00paid".to_vec()) })
        .await
        .unwrap();
    assert_eq!(
        queue.wait_result(&id, WAIT).await.unwrap().as_deref(),
        Some(&b"\x00paid"[..])
    );
    consumer.shutdown().await.unwrap();
    let port = server.port().to_string();
    let py = python();
    let python_says = run(Command::new(py)
        .args([
            "-c",
            r#"
import sys
sys.path.insert(0, sys.argv[2])
import redis, delayqueue_producer as d
p = d.Producer(redis.Redis(host="127.0.0.1", port=int(sys.argv[1])), "poly")
print(p.result("order-7").hex(), p.result("nope"))
"#,
        ])
        .arg(&port)
        .arg(python_dir()));
    let dir = node_dir();
    let node_says = run(Command::new("node")
        .args([
            "-e",
            r#"
const Redis = require('ioredis');
const d = require(process.argv[2] + '/delayqueue-producer.js');
(async () => {
  const r = new Redis({ host: '127.0.0.1', port: Number(process.argv[1]) });
  const p = new d.Producer(r, 'poly');
  console.log((await p.result('order-7')).toString('hex'), await p.result('nope'));
  r.disconnect();
})();
"#,
        ])
        .arg(&port)
        .arg(&dir)
        .current_dir(&dir));
    assert_eq!(python_says.trim(), "0070616964 None");
    assert_eq!(node_says.trim(), "0070616964 null");
}

/// Python's steps of the flow test: "first" sends parent `py-parent-1` of
/// queue poly after Rust's children `rust-a` (poly) and `rust-b` (mail),
/// and child `py-c` (mail); "second" sends parent `py-parent-2` of queue
/// mail after Node's child `node-c` (poly). Prints "ok".
const PYTHON_FLOW: &str = r#"
import sys
sys.path.insert(0, sys.argv[2])
import redis, delayqueue_producer as d
r = redis.Redis(host="127.0.0.1", port=int(sys.argv[1]))
poly, mail = d.Producer(r, "poly"), d.Producer(r, "mail")
if sys.argv[3] == "first":
    poly.send("parent", id="py-parent-1", after=["rust-a", ("mail", "rust-b")])
    mail.send("child", id="py-c", delay_ms=1500)
else:
    mail.send("parent", id="py-parent-2", after=[("poly", "node-c")], on_dead_child="ignore")
print("ok")
"#;

/// Node's steps, between Python's: child `node-c` (poly), then parent
/// `node-parent` of queue poly after Python's `py-c` (mail) and `node-c`.
const NODE_FLOW: &str = r#"
const Redis = require('ioredis');
const d = require(process.argv[2] + '/delayqueue-producer.js');
(async () => {
  const r = new Redis({ host: '127.0.0.1', port: Number(process.argv[1]) });
  const poly = new d.Producer(r, 'poly');
  await poly.send('child', { id: 'node-c', delayMs: 1500 });
  await poly.send('parent', { id: 'node-parent', after: [{ queue: 'mail', id: 'py-c' }, 'node-c'] });
  console.log('ok');
  r.disconnect();
})().catch((e) => { console.error(e); process.exit(1); });
"#;

/// Parents sent by the Python and Node producers with `after`, waiting for
/// children sent from Rust, Python and Node across two queues, are
/// delivered once each, only after every child was acked, and read their
/// children's results; nothing of the flows is left at the end.
#[tokio::test]
async fn producers_send_parents_that_run_after_their_children() {
    let (server, client, poly) = poly_queue().await;
    let mail = DelayQueue::builder("mail", client.clone())
        .fetch_interval(Duration::from_millis(50))
        .build()
        .unwrap();
    // Rust's send with after runs flow_deps, send, flow_link and (a child
    // never sent completes at once) flow_complete: the producers' copies
    // are those scripts, byte for byte.
    poly.send("warm")
        .after([MessageRef::new(&mail, "never-sent")])
        .await
        .unwrap();
    let flow_scripts = ["flow_deps", "flow_link", "flow_complete"];
    let shas = foreign_shas(&flow_scripts);
    let known: Vec<bool> = client.script_exists(shas.clone()).await.unwrap();
    assert_eq!(known, [true; 6], "{flow_scripts:?} as Rust runs them: {shas:?}");
    // Due later than the parents are sent, so that they wait for live children.
    for (q, id) in [(&poly, "rust-a"), (&mail, "rust-b")] {
        q.send("child").id(id).delay(Duration::from_millis(1500)).await.unwrap();
    }
    let port = server.port().to_string();
    let py = python();
    let python_step = |step: &str| {
        run(Command::new(&py)
            .args(["-c", PYTHON_FLOW, &port])
            .arg(python_dir())
            .arg(step))
    };
    assert_eq!(python_step("first").trim(), "ok");
    let dir = node_dir();
    let node_says = run(Command::new("node")
        .args(["-e", NODE_FLOW, &port])
        .arg(&dir)
        .current_dir(&dir));
    assert_eq!(node_says.trim(), "ok");
    assert_eq!(python_step("second").trim(), "ok");
    for (q, id) in [(&poly, "py-parent-1"), (&poly, "node-parent"), (&mail, "py-parent-2")] {
        let info = q.get(id).await.unwrap().unwrap_or_else(|| panic!("{id} not stored"));
        assert_eq!(info.state, delayqueue::MessageState::Waiting, "{id}");
    }

    // Events in order: ("done", child) once its handler returned (its ack
    // comes after), ("parent", id, its children's results) when a parent
    // starts.
    type Event = (&'static str, String, Vec<(String, String, Option<Vec<u8>>)>);
    let log: Arc<Mutex<Vec<Event>>> = Arc::default();
    let consumer = |q: &DelayQueue| {
        let (log, q) = (log.clone(), q.clone());
        move |m: Message| {
            let (log, q) = (log.clone(), q.clone());
            async move {
                let id = m.id().to_string();
                if m.payload() != b"child" {
                    let page = q.children_results(&id, None).await?;
                    let mut children: Vec<_> = page
                        .items
                        .into_iter()
                        .map(|c| (c.queue, c.id.to_string(), c.result))
                        .collect();
                    children.sort();
                    log.lock().unwrap().push(("parent", id, children));
                    return Ok::<_, delayqueue::HandlerError>(Vec::new());
                }
                let result = format!("r:{id}").into_bytes();
                log.lock().unwrap().push(("done", id, Vec::new()));
                Ok(result)
            }
        }
    };
    let consumers = [
        poly.start_consume(consumer(&poly)).await.unwrap(),
        mail.start_consume(consumer(&mail)).await.unwrap(),
    ];
    let all = wait_until(WAIT, || {
        log.lock().unwrap().iter().filter(|e| e.0 == "parent").count() == 4
    })
    .await;
    let events = log.lock().unwrap().clone();
    assert!(all, "not every parent ran: {events:?}");
    let at = |kind: &str, id: &str| {
        let found: Vec<usize> = events
            .iter()
            .enumerate()
            .filter(|(_, e)| e.0 == kind && e.1 == id)
            .map(|(i, _)| i)
            .collect();
        assert_eq!(found.len(), 1, "{kind} {id} once: {events:?}");
        found[0]
    };
    let child = |q: &str, id: &str| (q.to_string(), id.to_string(), Some(format!("r:{id}").into_bytes()));
    let flows = [
        ("py-parent-1", vec![child("mail", "rust-b"), child("poly", "rust-a")]),
        ("node-parent", vec![child("mail", "py-c"), child("poly", "node-c")]),
        ("py-parent-2", vec![child("poly", "node-c")]),
    ];
    for (parent, children) in flows {
        let started = at("parent", parent);
        for (_, id, _) in &children {
            assert!(
                at("done", id) < started,
                "{parent} ran before {id} was acked: {events:?}"
            );
        }
        assert_eq!(events[started].2, children, "{parent}'s children results");
    }
    for c in consumers {
        c.shutdown().await.unwrap();
    }
    for q in [&poly, &mail] {
        assert_eq!(q.counts().await.unwrap(), delayqueue::Counts::default());
    }
    let gone = wait_for(WAIT, || async { flow_keys(&client).await.is_empty() }).await;
    assert!(gone, "flow keys left: {:?}", flow_keys(&client).await);
}

/// Python's and Node's parent of `early`, a child of queue poly that
/// finished before they were sent (argv: port, module folder).
const PYTHON_LATE: &str = r#"
import sys
sys.path.insert(0, sys.argv[2])
import redis, delayqueue_producer as d
d.Producer(redis.Redis(host="127.0.0.1", port=int(sys.argv[1])), "poly").send("parent", id="py-late", after=["early"])
print("ok")
"#;
const NODE_LATE: &str = r#"
const Redis = require('ioredis');
const d = require(process.argv[2] + '/delayqueue-producer.js');
(async () => {
  const r = new Redis({ host: '127.0.0.1', port: Number(process.argv[1]) });
  await new d.Producer(r, 'poly').send('parent', { id: 'node-late', after: ['early'] });
  console.log('ok');
  r.disconnect();
})().catch((e) => { console.error(e); process.exit(1); });
"#;

/// A parent that Python or Node sends after a child that already
/// finished reads the result the child's handler returned, still kept.
#[tokio::test]
async fn producers_parents_after_a_finished_child_read_its_kept_result() {
    let (server, client, poly) = poly_queue().await;
    type Read = (String, Vec<(String, Option<Vec<u8>>)>);
    let read: Arc<Mutex<Vec<Read>>> = Arc::default();
    let (log, q) = (read.clone(), poly.clone());
    let consumer = poly
        .start_consume(move |m: Message| {
            let (log, q) = (log.clone(), q.clone());
            async move {
                if m.payload() == b"child" {
                    return Ok::<_, delayqueue::HandlerError>(b"r:early".to_vec());
                }
                let page = q.children_results(m.id(), None).await?;
                let children = page.items.into_iter().map(|c| (c.id.to_string(), c.result)).collect();
                log.lock().unwrap().push((m.id().to_string(), children));
                Ok(Vec::new())
            }
        })
        .await
        .unwrap();
    poly.send("child").id("early").await.unwrap();
    assert_eq!(
        poly.wait_result("early", WAIT).await.unwrap(),
        Some(b"r:early".to_vec())
    );
    let port = server.port().to_string();
    let py = run(Command::new(python())
        .args(["-c", PYTHON_LATE, &port])
        .arg(python_dir()));
    assert_eq!(py.trim(), "ok");
    let dir = node_dir();
    let node = run(Command::new("node")
        .args(["-e", NODE_LATE, &port])
        .arg(&dir)
        .current_dir(&dir));
    assert_eq!(node.trim(), "ok");
    assert!(
        wait_until(WAIT, || read.lock().unwrap().len() == 2).await,
        "{:?}",
        read.lock().unwrap()
    );
    let mut got = read.lock().unwrap().clone();
    got.sort();
    let kept = vec![("early".to_string(), Some(b"r:early".to_vec()))];
    assert_eq!(
        got,
        vec![("node-late".to_string(), kept.clone()), ("py-late".to_string(), kept)]
    );
    consumer.shutdown().await.unwrap();
    let gone = wait_for(WAIT, || async { flow_keys(&client).await.is_empty() }).await;
    assert!(gone, "flow keys left: {:?}", flow_keys(&client).await);
}
