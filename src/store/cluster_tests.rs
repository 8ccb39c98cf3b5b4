//! The scripts while a cluster moves the queue's slot to another node.
//!
//! Redis checks the keys a script declares before it runs it, but most
//! scripts build payload keys from the ids they find (and group keys,
//! markers, results, progress, logs and flow keys). Each test here stops
//! a move half-way, with either the payloads or the other queue keys
//! already on the new node, and runs one script where a client would reach
//! it: on the old owner, or with `ASKING` on the new one. The script must
//! fail before it writes (nothing changed on either node), never write half
//! its transition or answer from half the queue; once the move is over, the
//! same call succeeds and leaves a consistent queue.
//!
//! Scripts go by hand to one node (raw `EVAL`), with the KEYS and ARGV
//! their operations in `store/ops/` build.

use std::time::Duration;

use crate::error::script_met_moved_key;
use crate::flow::wire::{ChildRef, Outcome, ParentLink};
use crate::flow::ChildPolicy;
use crate::scribe::NoteKind;
use crate::store::keys::glob_escape;
use crate::store::ops::cancel::Cancel;
use crate::store::ops::change_schedule::{Change, ChangeSchedule};
use crate::store::ops::flow_complete::{Completion, FlowComplete};
use crate::store::ops::flow_link::FlowLink;
use crate::store::ops::flow_status::FlowStatus;
use crate::store::ops::groups::{ChangeGroups, GroupChange};
use crate::store::ops::list_groups::ListGroups;
use crate::store::ops::nack::{Nack, NackMode};
use crate::store::ops::note::{Note, Notes};
use crate::store::ops::outbox::OutboxDrop;
use crate::store::ops::read_schedules::{ReadSchedules, Which};
use crate::store::ops::relay::Relay;
use crate::store::ops::send::{Outgoing, SendBatch, SendMode};
use crate::store::ops::{
    ack::{Ack, Keep},
    claim::Claim,
    gc::Gc,
    inspect::Inspect,
    list::List,
    promote::Promote,
    purge::Purge,
    requeue::Requeue,
    timeout::Timeout,
    wait::Wait,
};
use crate::store::scripts::LuaScript;
use crate::store::stored::{encode_stored, ValueParts};
use crate::store::{Keys, Op};
use crate::test_support::cluster::RedisCluster;
use crate::test_support::{RawReply, RedisServer};
use crate::{DelayQueue, MessageState};

/// The key prefix of a queue built with the defaults.
const PREFIX: &str = "dq:";
/// Dead-letter retention passed to the scripts that take one.
const RETENTION: Duration = Duration::from_secs(60);
/// The lease of the delivery being processed: long past, so overdue for timeout
/// and still current for ack.
const LEASE: i64 = 1000;
/// The consumer whose claim receipt is seeded; it leased `u1` with
/// request 0.
const CONSUMER: &str = "c";

/// The seeded queue: one message in each state, every payload "3:x", and
/// `q1` of group [`GROUP`] due in its group (payload "3=G:x").
const IDS: [&str; 6] = ["p1", "r1", "u1", "t1", "g1", "q1"];
/// The group of the seeded queue.
const GROUP: &str = "G";
/// The seeded schedule, with one fire sent ahead (pending, far ahead).
/// `fire.lua` is not here: it declares every key it touches.
const SCHEDULE: &str = "s";
const FIRE: &str = "{s}@99999999999999";
/// The seeded flow (docs/workflows.md): parent [`PARENT`] waits for `u1`
/// (linked with policy 'f') and `g1` (dead, linked with 'w'), and has the
/// acked child `z1`, whose completion is still in the outbox with its
/// result; parent [`CANCELLED`] was cancelled and still waits for a child
/// in another queue. `u1`'s delivery wrote progress and a log line.
const PARENT: &str = "P1";
const CANCELLED: &str = "P2";
/// The keys of another queue, where the cancelled parent's child is.
const OTHER_BASE: &str = "dq:{other}:";

/// Scripts that declare every key they touch: Redis itself refuses them
/// (TRYAGAIN, or ASK) while their keys are split, or missing on a node.
const DECLARE_ALL: [&str; 2] = ["note", "wait"];

/// Where the move stands when the script runs.
#[derive(Debug, Clone, Copy)]
enum HalfMoved {
    /// The payloads are on the new node, the rest on the old one, where
    /// the script is sent.
    Payloads,
    /// Everything but the payloads is on the new node, where the script
    /// is sent (with ASKING, as after an ASK redirection).
    QueueKeys,
    /// The flow keys, results, progress and logs are on the new node, the
    /// rest (payloads too) on the old one, where the script is sent. Only
    /// the scripts of [`FLOW_SCRIPTS`] run.
    FlowKeys,
}

/// The scripts that touch flow keys, results, progress or logs (with the
/// seeded flow), run with [`HalfMoved::FlowKeys`].
const FLOW_SCRIPTS: [&str; 15] = [
    "ack",
    "claim",
    "timeout",
    "gc",
    "purge",
    "inspect",
    "nack",
    "cancel",
    "send",
    "note",
    "wait",
    "flow_complete",
    "outbox",
    "relay",
    "flow_status",
];

/// One script call: the script, its KEYS and its ARGV as `EVAL` takes them.
type Call = (&'static LuaScript, Vec<String>, Vec<String>);

/// The call `op` makes on the queue with keys `k`.
fn call<O: Op>(op: O, k: &Keys) -> Call {
    let args = op
        .args(k)
        .iter()
        .map(|v| v.as_string().expect("a text argument"))
        .collect();
    (O::script(), op.keys(k), args)
}

/// Every script that touches payloads (or schedule hashes, markers or group
/// keys) it does not declare.
fn calls(k: &Keys) -> Vec<Call> {
    let receipt = k.claim(CONSUMER);
    let claim = |seq| Claim {
        receipt: &receipt,
        limit: 10,
        max_consume_duration: Duration::from_secs(5),
        seq,
        dead_letter_retention: RETENTION,
        group_share: 0,
    };
    let timeout = Timeout {
        limit: 10,
        default_retry_count: 3,
        dead_letter_retention: RETENTION,
    };
    let gc = Gc {
        limit: 10,
        dead_letter_retention: Duration::ZERO,
        max_kept: 1000,
        ids: vec![],
    };
    // Page 0 of the ready list.
    let list = List {
        state: MessageState::Ready,
        offset: 0,
        limit: 10,
        preview: 36,
    };
    vec![
        call(Ack::plain(&[("u1", LEASE)]), k),
        // Builds the result, progress and log keys it writes.
        call(
            Ack {
                leases: vec![(
                    "u1",
                    LEASE,
                    Keep {
                        result: Some(b"r"),
                        noted: true,
                    },
                )],
                result_retention: RETENTION,
                notes: Notes::none(),
            },
            k,
        ),
        // A new request: leases t1 and r1.
        call(claim(1), k),
        // The seeded request again: replays its receipt (u1).
        call(claim(0), k),
        call(timeout, k),
        call(gc, k),
        call(Requeue { limit: 10, ids: vec![] }, k),
        call(Purge { limit: 1000 }, k),
        call(Inspect { ids: IDS.to_vec() }, k),
        call(list, k),
        // Groups: reads and writes only group keys it builds.
        call(
            ChangeGroups {
                change: GroupChange::Pause(GROUP),
            },
            k,
        ),
        call(
            ListGroups {
                offset: 0,
                limit: 10,
                only: None,
            },
            k,
        ),
        call(Promote { limit: 10, room: 10 }, k),
        // A message due now goes straight to its group; with unique_for.
        call(
            SendBatch {
                msgs: vec![Outgoing {
                    id: "n1".into(),
                    value: encode_stored(&ValueParts {
                        retry_count: 3,
                        group: Some(GROUP),
                        payload: b"x",
                        ..Default::default()
                    })
                    .into(),
                    delay: Duration::ZERO,
                    expire_after: None,
                    own_id: true,
                    wait: false,
                    stage: None,
                    mode: Some(SendMode::Unique(Duration::from_secs(60))),
                }],
            },
            k,
        ),
        // Withdraws the fire sent ahead: deletes its payload.
        call(
            ChangeSchedule {
                name: SCHEDULE,
                change: Change::Pause,
            },
            k,
        ),
        // Reads the schedule hashes it finds in the schedules zset.
        call(
            ReadSchedules {
                which: Which::Page {
                    horizon: None,
                    after: None,
                    limit: 10,
                },
            },
            k,
        ),
        // u1 dies: its completion goes to the outbox, its link goes.
        call(
            Nack {
                id: "u1",
                lease: LEASE,
                mode: NackMode::Dead,
                reason: "",
                attempt: 1,
                default_retry_count: 3,
                dead_letter_retention: RETENTION,
            },
            k,
        ),
        // A waiting parent: out of waiting, "x P1" to the outbox, its
        // children's results and its progress and log go.
        call(Cancel { id: PARENT }, k),
        // A dead letter's id sent again as a parent: its payload is
        // overwritten, then its set and the waiting zset (built) are read.
        call(
            SendBatch {
                msgs: vec![Outgoing {
                    id: "g1".into(),
                    value: encode_stored(&ValueParts {
                        retry_count: 3,
                        payload: b"x",
                        ..Default::default()
                    })
                    .into(),
                    delay: Duration::ZERO,
                    expire_after: None,
                    own_id: true,
                    wait: true,
                    stage: None,
                    mode: None,
                }],
            },
            k,
        ),
        call(
            Notes {
                notes: vec![
                    Note {
                        id: "u1",
                        lease: LEASE,
                        kind: NoteKind::Progress,
                        text: "60",
                    },
                    Note {
                        id: "u1",
                        lease: LEASE,
                        kind: NoteKind::Log,
                        text: "line",
                    },
                ],
                max_lines: 10,
                ttl: RETENTION,
            },
            k,
        ),
        call(
            Wait {
                id: "u1",
                wait: RETENTION,
            },
            k,
        ),
        // g1 (dead) finished for P1: out of its set, into its children.
        call(
            FlowComplete {
                completions: &[Completion {
                    parent: PARENT.into(),
                    child: ChildRef::new(&k.base, "g1"),
                    outcome: Outcome::Acked,
                    policy: ChildPolicy::Ignore,
                    result: "r".into(),
                }],
                dead_letter_retention: RETENTION,
            },
            k,
        ),
        call(
            FlowLink {
                parent: &ParentLink {
                    policy: ChildPolicy::Ignore,
                    base: k.base.clone(),
                    id: PARENT.into(),
                },
                ids: &["p1".to_string()],
                new: false,
            },
            k,
        ),
        // Applies z1's completion to P1 (its parent here) with its result,
        // and reads the cancelled parent's children.
        call(
            Relay {
                limit: 10,
                dead_letter_retention: RETENTION,
            },
            k,
        ),
        // The cancelled parent's child was cancelled: its set and entry go.
        call(
            OutboxDrop {
                entries: &[(format!("x {CANCELLED}"), vec![format!("{OTHER_BASE} c9")])],
            },
            k,
        ),
        call(
            FlowStatus {
                id: PARENT,
                open_member: None,
            },
            k,
        ),
    ]
}

/// One message in each state and every key a script may declare, so that
/// Redis lets each script run on a node holding all of its declared keys.
fn seed(node: &RedisServer, k: &Keys) {
    for id in IDS.into_iter().chain([FIRE, PARENT]) {
        let value = if id == "q1" { "3=G:x" } else { "3:x" };
        node.raw_command(&["SET", &k.msg(id), value]);
    }
    let gp = &k.group_prefix;
    let (known, ring, ready, zset) = (
        format!("{gp}known"),
        format!("{gp}ring"),
        format!("{gp}ready"),
        format!("{gp}:{GROUP}:ready"),
    );
    let (lease, receipt) = (LEASE.to_string(), format!("0 {LEASE} u1"));
    let schedule = k.schedule(SCHEDULE);
    let base = &k.base;
    let (child_u1, child_g1, child_z1) = (format!("{base} u1"), format!("{base} g1"), format!("{base} z1"));
    let (link_u1, link_g1) = (format!("f {base} {PARENT}"), format!("w {base} {PARENT}"));
    let (done_z1, cancelled) = (format!("a z1 f {base} {PARENT}"), format!("x {CANCELLED}"));
    let other_child = format!("{OTHER_BASE} c9");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
        .to_string();
    let commands: [&[&str]; 26] = [
        &["ZADD", &k.pending, "99999999999999", "p1", "99999999999999", FIRE],
        &["RPUSH", &k.ready, "r1"],
        &["ZADD", &k.processing, &lease, "u1"],
        &["RPUSH", &k.retry, "t1"],
        &["ZADD", &k.dead, "1", "g1"],
        &["HSET", &k.attempts, "u1", "1", "t1", "1:boom", "g1", "4:boom"],
        // Limits that let the claim through: it runs their checks too.
        &[
            "HSET",
            &k.totals,
            "sent",
            "6",
            "rate",
            "100 1000",
            "concurrency",
            "100",
            "groups",
            "1",
            "markers",
            "1",
            "flows",
            "1",
        ],
        &["ZADD", &zset, "1", "q1"],
        &["ZADD", &known, "0", GROUP],
        &["ZADD", &ring, "1", GROUP],
        &["SET", &ready, "1"],
        // u1 was sent with unique_for: its marker waits for its ack.
        &["SET", &k.marker("u1"), "60000"],
        &["SET", &k.claim(CONSUMER), &receipt, "PX", "60000"],
        &["ZADD", &k.schedules, "1000", SCHEDULE],
        &[
            "HSET",
            &schedule,
            "spec",
            "every 1000",
            "tz",
            "UTC",
            "misfire",
            "once",
            "grace",
            "60000",
            "value",
            "3:x",
            "version",
            "1",
            "anchor",
            "0",
            "ahead",
            "99999999999999",
            "last",
            "99999999999999",
        ],
        &["ZADD", &k.flow_waiting, "99999999999999", PARENT],
        &["SADD", &k.deps(PARENT), &child_u1, &child_g1],
        &["HSET", &k.children(PARENT), &child_z1, "a", " a", "1"],
        &["HSET", &k.parents(), "u1", &link_u1, "g1", &link_g1],
        &["ZADD", &k.outbox, &now, &done_z1, &now, &cancelled],
        &["SADD", &k.deps(CANCELLED), &other_child],
        &["SET", &k.result("z1"), "r", "PX", "600000"],
        &["SET", &k.progress("u1"), "50", "PX", "600000"],
        &["RPUSH", &k.log("u1"), "line"],
        &["PEXPIRE", &k.log("u1"), "600000"],
        // Cancel declares the marker of the id it cancels.
        &["SET", &k.marker(PARENT), "60000", "PX", "600000"],
    ];
    for args in commands {
        let reply = node.raw_reply(args);
        assert!(!matches!(reply, RawReply::Error(_)), "seeding {args:?}: {reply:?}");
    }
}

/// `script` sent as `EVAL` to `node`, after `ASKING` when `asking`.
fn eval(node: &RedisServer, asking: bool, (script, keys, args): &Call) -> RawReply {
    let source = script.source();
    let nkeys = keys.len().to_string();
    let mut eval: Vec<&str> = vec!["EVAL", &source, &nkeys];
    eval.extend(keys.iter().chain(args).map(String::as_str));
    let mut commands: Vec<&[&str]> = Vec::new();
    if asking {
        commands.push(&["ASKING"]);
    }
    commands.push(&eval);
    node.raw_replies(&commands).pop().expect("a reply to EVAL")
}

/// Every key of the queue with keys `k` on nodes `nodes` with its type,
/// value and expiry time, read with ASKING so that a node importing the
/// slot answers too. (Keys of the queues done before may expire meanwhile.)
fn snapshot(cluster: &RedisCluster, k: &Keys, nodes: [usize; 2]) -> Vec<String> {
    let mut out = Vec::new();
    for i in nodes {
        let node = cluster.node(i);
        let RawReply::Array(keys) = node.raw_reply(&["KEYS", &format!("{}*", glob_escape(&k.base))]) else {
            panic!("KEYS * on node {i}");
        };
        let mut keys: Vec<String> = keys.iter().map(RawReply::render).collect();
        keys.sort();
        for key in keys {
            let read = |args: &[&str]| node.raw_replies(&[&["ASKING"], args]).pop().expect("a reply");
            let kind = read(&["TYPE", &key]).render();
            let value = match kind.as_str() {
                "string" => read(&["GET", &key]),
                "list" => read(&["LRANGE", &key, "0", "-1"]),
                "zset" => read(&["ZRANGE", &key, "0", "-1", "WITHSCORES"]),
                "hash" => read(&["HGETALL", &key]),
                "set" => read(&["SORT", &key, "ALPHA"]),
                other => panic!("unexpected {other} key {key}"),
            };
            let expires = read(&["PEXPIRETIME", &key]).render();
            out.push(format!(
                "node {i}: {key} ({kind}, expires {expires}) = {:?}",
                value.render()
            ));
        }
    }
    out
}

/// Runs every call of [`calls`] with its slot frozen at `half`, on a queue
/// of its own; returns what went wrong, call by call.
async fn each_script_writes_nothing_when(half: HalfMoved) -> Vec<String> {
    let cluster = RedisCluster::start(3).await;
    let client = cluster.client().await;
    let (mut slots, mut wrong) = (Vec::new(), Vec::new());
    for n in 0..calls(&Keys::new(PREFIX, "q").unwrap()).len() {
        let name = cluster.queue_on(0, &format!("move{n}-"));
        let k = Keys::new(PREFIX, &name).unwrap();
        let call = calls(&k).swap_remove(n);
        if matches!(half, HalfMoved::FlowKeys) && !FLOW_SCRIPTS.contains(&call.0.name) {
            continue;
        }
        let what = format!("{} (call {n}) with the {half:?} moved", call.0.name);
        let slot = RedisCluster::slot_of(&k.pending);
        assert!(!slots.contains(&slot), "two queues in slot {slot}");
        slots.push(slot);
        seed(cluster.node(0), &k);
        let q = DelayQueue::builder(name.as_str(), client.clone()).build().unwrap();
        let report = q.check_integrity().await.unwrap();
        assert!(report.is_clean(), "seeded queue: {report}");

        let mut m = cluster.begin_move(slot, 1);
        // The keys scripts build instead of declare: payloads, markers,
        // group keys, and the schedule hash for the scripts that do not
        // declare it.
        let gp = &k.group_prefix;
        let declares_all = DECLARE_ALL.contains(&call.0.name);
        // Flow keys, results, progress and logs.
        let flow_keys = [k.flow_waiting.clone(), k.outbox.clone(), k.parents()]
            .into_iter()
            .chain([k.deps(PARENT), k.children(PARENT), k.deps(CANCELLED)])
            .chain([k.result("z1"), k.progress("u1"), k.log("u1")]);
        let others = IDS
            .iter()
            .chain(&[FIRE, PARENT])
            .map(|id| k.msg(id))
            .chain([k.schedule(SCHEDULE), k.marker("u1")])
            .chain(["known", "ring", "ready", "active", "paused", "wait"].map(|g| format!("{gp}{g}")))
            .chain([format!("{gp}:{GROUP}:ready")]);
        // A script that declares every key is split between its first key
        // and the others.
        let split = call.1.iter().skip(1).filter(|_| declares_all).cloned();
        let built: Vec<String> = match half {
            HalfMoved::FlowKeys => flow_keys.filter(|key| !call.1.contains(key)).chain(split).collect(),
            _ => others
                .chain(flow_keys)
                .filter(|key| !call.1.contains(key))
                .chain(split)
                .collect(),
        };
        let (first, rest): (Vec<String>, Vec<String>) = cluster
            .keys_left(&m, 100)
            .into_iter()
            .partition(|key| built.contains(key) != matches!(half, HalfMoved::QueueKeys));
        cluster.move_keys(&mut m, &first);
        let before = snapshot(&cluster, &k, [0, 1]);
        let reply = match half {
            HalfMoved::Payloads | HalfMoved::FlowKeys => eval(cluster.node(0), false, &call),
            HalfMoved::QueueKeys => eval(cluster.node(1), true, &call),
        };
        // The script ran (the server admitted it: no ASK or TRYAGAIN) and
        // stopped at a payload on the other node, before its first write.
        // Note and wait declare every key they touch, and send every key
        // but the group and flow keys, where the keys of a new message
        // exist on neither node: the server refuses them.
        let refused = |e: &str| {
            (e.starts_with("TRYAGAIN") && (declares_all || call.0.name == "send"))
                || (e.starts_with("ASK") && declares_all)
        };
        let after = snapshot(&cluster, &k, [0, 1]);
        // A claim that replays its receipt reads no flow key: it may answer.
        let replayed = matches!(half, HalfMoved::FlowKeys) && call.0.name == "claim" && after == before;
        if !matches!(&reply, RawReply::Error(e) if script_met_moved_key(e) || refused(e)) && !replayed {
            wrong.push(format!("{what}: replied {reply:?}"));
        }
        if after != before {
            let changed: Vec<&String> = before.iter().filter(|k| !after.contains(k)).collect();
            wrong.push(format!("{what}: wrote, changing {changed:?}"));
        }

        cluster.move_keys(&mut m, &rest);
        cluster.end_move(&m);
        let reply = eval(cluster.node(1), false, &call);
        if let RawReply::Error(e) = reply {
            wrong.push(format!("{what}: failed after the move: {e}"));
        }
        let report = q.check_integrity().await.unwrap();
        if !report.is_clean() {
            wrong.push(format!("{what}: after the move: {report}"));
        }
    }
    wrong
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_meeting_payloads_already_moved_fail_before_they_write() {
    let wrong = each_script_writes_nothing_when(HalfMoved::Payloads).await;
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_meeting_flow_keys_already_moved_fail_before_they_write() {
    let wrong = each_script_writes_nothing_when(HalfMoved::FlowKeys).await;
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_run_where_payloads_have_not_arrived_fail_before_they_write() {
    let wrong = each_script_writes_nothing_when(HalfMoved::QueueKeys).await;
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
