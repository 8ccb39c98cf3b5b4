//! Checks the ACL users of docs/scaling.md ("ACL") against the scripts:
//! each role's `+command`s are exactly the commands that the scripts it
//! runs can call (read from their assembled sources, their
//! included helpers too) and those it sends itself, and its `&channel`s those its
//! scripts publish on and it subscribes to. tests/acl.rs runs the same
//! lines against a server, so the documented users are the tested ones.

use std::collections::BTreeSet;

use crate::store::assembly::code_of;
use crate::store::scripts::{self as s, LuaScript};

const SCALING: &str = include_str!("../docs/scaling.md");

/// What every connection sends: the scripts' calls (`EVAL` after
/// `NOSCRIPT`), and fred's connection set-up (`PING`, `CLIENT ID`, `INFO`),
/// which a consumer also reads at start (its eviction check).
const CONNECTION: &[&str] = &["client|id", "eval", "evalsha", "info", "ping"];

/// One role of the ACL section: its user, the scripts it runs, the
/// commands it sends outside scripts, and its channels (after the queue's
/// `<prefix>{<name>}:`).
struct Role {
    user: &'static str,
    scripts: Vec<&'static LuaScript>,
    own: Vec<&'static str>,
    channels: Vec<&'static str>,
}

/// The names of `lists`, once each, sorted.
fn union<'a>(lists: impl Iterator<Item = &'a Vec<&'static str>>) -> Vec<&'static str> {
    lists.flatten().copied().collect::<BTreeSet<_>>().into_iter().collect()
}

/// The roles, as docs/scaling.md describes them.
fn roles() -> Vec<Role> {
    let producer = Role {
        user: "orders-producer",
        // send (with after: flow_deps, flow_link, flow_complete), cancel
        // (and the relay it runs: relay, outbox, cancel, flow_complete),
        // reschedule, a duplicate's check (get), result and wait_result
        // (wait), cohort_status (flow_status).
        scripts: vec![
            &s::SEND,
            &s::CANCEL,
            &s::RESCHEDULE,
            &s::GET,
            &s::FLOW_DEPS,
            &s::FLOW_LINK,
            &s::FLOW_COMPLETE,
            &s::RELAY,
            &s::OUTBOX,
            &s::WAIT,
            &s::FLOW_STATUS,
        ],
        // SET: a big payload's staging string; WAIT: durable sends;
        // SUBSCRIBE, UNSUBSCRIBE: wait_result's wake-up on `done`.
        own: vec!["set", "subscribe", "unsubscribe", "wait"],
        channels: vec!["done", "wake"],
    };
    let consumer = Role {
        user: "orders-consumer",
        // The consumer's loop, its relay of flow completions (relay,
        // outbox, flow_complete, cancel of a cancelled parent's children), progress
        // and logs (note), the schedules it fires, and its heartbeat.
        scripts: vec![
            &s::PROMOTE,
            &s::CLAIM,
            &s::ACK,
            &s::NACK,
            &s::TIMEOUT,
            &s::GC,
            &s::EXTEND,
            &s::STATS,
            &s::PROBE,
            &s::NOTE,
            &s::RELAY,
            &s::OUTBOX,
            &s::FLOW_COMPLETE,
            &s::CANCEL,
            &s::FIRE,
            &s::READ_SCHEDULES,
            &s::HEARTBEAT,
        ],
        // SUBSCRIBE, UNSUBSCRIBE: wake-ups (a channel no consumer of the
        // client wants any more is left); HSCAN: children_results.
        own: vec!["hscan", "subscribe", "unsubscribe"],
        channels: vec!["done", "wake"],
    };
    let cli = Role {
        user: "orders-cli",
        // Reads only: stats, check (scan, inspect), list, show (get, walk),
        // a cohort's or flow's status, the live consumers.
        scripts: vec![
            &s::STATS,
            &s::SCAN,
            &s::INSPECT,
            &s::LIST,
            &s::WALK,
            &s::GET,
            &s::FLOW_STATUS,
            &s::CONSUMERS,
        ],
        // EXISTS: `exists`; SCAN: find_queues; HSCAN: children_results;
        // TIME: the CLI's clock; HGET, HMGET, SCARD, SISMEMBER, SSCAN: `flow show`.
        own: vec![
            "exists",
            "hget",
            "hmget",
            "hscan",
            "scan",
            "scard",
            "sismember",
            "sscan",
            "time",
        ],
        channels: vec![],
    };
    // All three users' rules, and the operator's writes (every script).
    let three = [&producer, &consumer, &cli];
    let app = Role {
        user: "orders-app",
        scripts: s::ALL.to_vec(),
        own: union(three.iter().map(|r| &r.own)),
        channels: union(three.iter().map(|r| &r.channels)),
    };
    vec![producer, consumer, cli, app]
}

/// The commands `source` (an assembled script) can call: the first
/// argument of each `redis.call`/`redis.pcall` (both names of a `c and 'A'
/// or 'B'` choice), and the command of each `checked(want,
/// command, ...)`.
fn commands_of(source: &str) -> BTreeSet<String> {
    let code = code_of(source);
    let mut out = BTreeSet::new();
    for (opener, skip) in [("redis.call(", 0), ("redis.pcall(", 0), ("checked(", 1)] {
        for (at, _) in code.match_indices(opener) {
            let args = &code[at + opener.len()..];
            let arg = args.split(',').nth(skip).unwrap_or_default();
            let arg = arg.split(')').next().unwrap_or_default();
            for quoted in arg.split('\'').skip(1).step_by(2) {
                if !quoted.is_empty() && quoted.chars().all(|c| c.is_ascii_uppercase()) {
                    out.insert(quoted.to_ascii_lowercase());
                }
            }
        }
    }
    out
}

/// The `ACL SETUSER <user> ...` line of docs/scaling.md.
fn documented(user: &str) -> Vec<&'static str> {
    let start = format!("ACL SETUSER {user} ");
    let lines: Vec<&str> = SCALING.lines().filter(|l| l.starts_with(&start)).collect();
    assert_eq!(lines.len(), 1, "docs/scaling.md has one line for {user}");
    lines[0].split_whitespace().collect()
}

#[test]
fn the_documented_acl_users_have_the_commands_and_channels_their_scripts_need() {
    let mut wrong = Vec::new();
    for role in roles() {
        let mut want: BTreeSet<String> = CONNECTION.iter().chain(&role.own).map(|c| c.to_string()).collect();
        for script in &role.scripts {
            want.extend(commands_of(&script.source()));
        }
        let line = documented(role.user);
        let listed: Vec<&str> = line.iter().filter_map(|w| w.strip_prefix('+')).collect();
        let have: BTreeSet<String> = listed.iter().map(|c| c.to_string()).collect();
        let missing: Vec<&String> = want.difference(&have).collect();
        let extra: Vec<&String> = have.difference(&want).collect();
        if !missing.is_empty() || !extra.is_empty() {
            wrong.push(format!(
                "{}: missing {missing:?}, not needed {extra:?}; its commands:\n+{}",
                role.user,
                want.iter().cloned().collect::<Vec<_>>().join(" +")
            ));
        }
        assert!(listed.windows(2).all(|w| w[0] < w[1]), "{}: sorted", role.user);
        let channels: Vec<&str> = line.iter().filter_map(|w| w.strip_prefix('&')).collect();
        let want: Vec<String> = role.channels.iter().map(|c| format!("dq:{{orders}}:{c}")).collect();
        if channels != want {
            wrong.push(format!("{}: channels {channels:?}, not {want:?}", role.user));
        }
    }
    assert!(wrong.is_empty(), "docs/scaling.md, ACL:\n{}", wrong.join("\n"));
}

#[test]
fn commands_are_read_from_calls_and_checked_reads() {
    let lua = "local a = redis.call('ZADD', k, 'NX', 1, 'x') -- 'DEL'\n\
               local b = redis.pcall(list and 'LRANGE' or 'ZRANGE', k, 0, 1)\n\
               local c = checked('string', 'GET', KEYS[1], 'PX')";
    let found: Vec<String> = commands_of(lua).into_iter().collect();
    assert_eq!(found, ["get", "lrange", "zadd", "zrange"]);
}
