//! probe.lua: what a consumer's periodic steps have to do, read without writing.

use std::time::Duration;

use crate::store::ops::probe::{Probe, Probed};
use crate::Error;

use super::{Env, RETENTION};

/// The probe as a consumer with the default retention and `dead_limit` runs it.
fn probe(dead_limit: u64) -> Probe {
    Probe {
        dead_letter_retention: Duration::from_millis(RETENTION as u64),
        dead_limit,
    }
}

const IDLE: Probed = Probed {
    sweep: None,
    next_due: None,
    claim: false,
    schedules: false,
    relay: false,
};

/// A lease run out or a dead letter to delete: a sweep now.
const SWEEP_NOW: Probed = Probed {
    sweep: Some(Duration::ZERO),
    ..IDLE
};

#[tokio::test]
async fn an_empty_shard_costs_one_exists_and_no_type_or_time() {
    let env = Env::new().await;
    // The first call also caches the script (NOSCRIPT, then EVAL).
    assert_eq!(env.run(&probe(10)).await, IDLE);
    env.reset_command_stats();
    assert_eq!(env.run(&probe(10)).await, IDLE);
    assert_eq!(env.command_calls("evalsha"), 1);
    assert_eq!(env.command_calls("exists"), 1);
    assert_eq!(env.command_calls("type"), 0);
    assert_eq!(env.command_calls("time"), 0);
}

#[tokio::test]
async fn it_finds_each_kind_of_work_and_changes_nothing() {
    let env = Env::new().await;
    let k = env.k().clone();
    let now = env.now_ms();

    // Pending: the wait until the earliest is due; zero once one is due.
    env.raw(&["ZADD", &k.pending, &(now + 60_000).to_string(), "later"]);
    let found = env.run(&probe(10)).await;
    let wait = found.next_due.expect("pending is not empty");
    assert!(
        wait > Duration::from_secs(58) && wait <= Duration::from_secs(60),
        "{wait:?}"
    );
    assert_eq!(
        Probed {
            next_due: None,
            ..found
        },
        IDLE,
        "nothing else to do"
    );
    env.raw(&["ZADD", &k.pending, &(now - 5).to_string(), "due"]);
    assert_eq!(env.run(&probe(10)).await.next_due, Some(Duration::ZERO));
    env.raw(&["DEL", &k.pending]);

    // Ready, retry or the priority zset: a claim.
    for seed in [
        ["RPUSH", &k.ready, "r"],
        ["RPUSH", &k.retry, "t"],
        ["ZADD", &k.prio, "1"],
    ] {
        let key = seed[1];
        env.raw(&[seed[0], key, seed[2], "m"]);
        assert_eq!(env.run(&probe(10)).await, Probed { claim: true, ..IDLE }, "{key}");
        env.raw(&["DEL", key]);
    }

    // Processing: a sweep once a lease has run out (leases in µs), and
    // until then how long the earliest lease has left.
    let now_us = env.now_us();
    env.raw(&["ZADD", &k.processing, &(now_us + 60_000_000).to_string(), "running"]);
    let found = env.run(&probe(10)).await;
    let left = found.sweep.expect("a lease is held");
    assert!(
        left > Duration::from_secs(58) && left <= Duration::from_secs(60),
        "{left:?}"
    );
    assert_eq!(Probed { sweep: None, ..found }, IDLE, "a lease still running");
    env.raw(&["ZADD", &k.processing, &(now_us - 1_000).to_string(), "overdue"]);
    assert_eq!(env.run(&probe(10)).await, SWEEP_NOW);
    env.raw(&["DEL", &k.processing]);

    // Dead letters: a sweep once one is past its retention or beyond the
    // cap, and until then how long the oldest has left.
    env.raw(&["ZADD", &k.dead, &now.to_string(), "g1", &now.to_string(), "g2"]);
    let found = env.run(&probe(2)).await;
    let left = found.sweep.expect("dead letters are kept");
    let retention = Duration::from_millis(RETENTION as u64);
    assert!(
        left > retention - Duration::from_secs(2) && left <= retention,
        "{left:?}"
    );
    assert_eq!(Probed { sweep: None, ..found }, IDLE, "within retention and cap");
    assert_eq!(env.run(&probe(1)).await, SWEEP_NOW, "beyond the cap");
    env.raw(&["ZADD", &k.dead, &(now - RETENTION - 1).to_string(), "g0"]);
    assert_eq!(env.run(&probe(10)).await, SWEEP_NOW, "past retention");
    env.raw(&["DEL", &k.dead]);

    // Schedules.
    env.raw(&["ZADD", &k.schedules, "1000", "s"]);
    let before = env.snapshot();
    assert_eq!(
        env.run(&probe(10)).await,
        Probed {
            schedules: true,
            ..IDLE
        }
    );
    assert_eq!(env.snapshot(), before, "read-only");
    env.raw(&["DEL", &k.schedules]);
    // An outbox with entries for the relay (docs/workflows.md).
    env.raw(&["ZADD", &k.outbox, "1", "x p"]);
    assert_eq!(env.run(&probe(10)).await, Probed { relay: true, ..IDLE });
}

/// A key of another type fails the probe with an error that names it,
/// as the scripts that check types up front do.
#[tokio::test]
async fn a_key_of_another_type_fails_it_naming_the_key() {
    let env = Env::new().await;
    let k = env.k().clone();
    for key in [&k.pending, &k.processing, &k.dead] {
        env.raw(&["SET", key, "foreign"]);
        match env.store().run(&probe(10)).await {
            Err(Error::WrongType { detail, .. }) => assert!(detail.contains(key.as_str()), "{detail}"),
            other => panic!("{key}: {other:?}"),
        }
        env.raw(&["DEL", key]);
    }
}
