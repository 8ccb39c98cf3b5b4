//! ack.lua with results, note.lua (progress and log lines) and wait.lua:
//! what a delivery leaves behind, fenced by its lease.

use std::time::Duration;

use crate::scribe::NoteKind;
use crate::store::ops::ack::{Ack, Keep};
use crate::store::ops::note::{Note, Noted, Notes};
use crate::store::ops::purge::{Purge, Sweep};
use crate::store::ops::wait::{Wait, Waited};

use super::Env;
use crate::store::Keys;

const DAY: Duration = Duration::from_secs(24 * 3600);

/// Env with messages `ids` claimed under one lease, returned.
async fn claimed(env: &Env, ids: &[&str]) -> i64 {
    for id in ids {
        env.seed(id, Some("0"));
        env.raw(&["RPUSH", &env.k().ready, id]);
    }
    env.claim(10).await.lease
}

/// A call of one note: progress when `progress` is set, else `line`.
fn note<'a>(id: &'a str, lease: i64, progress: Option<&'a str>, line: Option<&'a str>) -> Notes<'a> {
    let (kind, text) = match progress {
        Some(p) => (NoteKind::Progress, p),
        None => (NoteKind::Log, line.unwrap_or_default()),
    };
    notes(vec![Note { id, lease, kind, text }])
}

fn notes(notes: Vec<Note<'_>>) -> Notes<'_> {
    Notes {
        notes,
        max_lines: 3,
        ttl: DAY,
    }
}

fn ack<'a>(leases: Vec<(&'a str, i64, Keep<'a>)>, retention: Duration) -> Ack<'a> {
    Ack {
        leases,
        result_retention: retention,
        notes: Notes::none(),
    }
}

#[tokio::test]
async fn an_ack_writes_the_result_with_the_retention_and_a_late_ack_writes_none() {
    let env = Env::new().await;
    let k = env.k().clone();
    let lease = claimed(&env, &["a", "b", "c"]).await;
    let with = |r: &'static [u8]| Keep {
        result: Some(r),
        noted: false,
    };
    let acked = env
        .run(&ack(
            vec![
                ("a", lease, with(b"\x00bytes")),
                ("b", lease, Keep::default()),
                ("c", lease - 1, with(b"late")),
            ],
            DAY,
        ))
        .await;
    assert_eq!(acked.acks.iter().map(|a| *a as i64).collect::<Vec<_>>(), vec![1, 1, 0]);
    assert_eq!(env.raw(&["GET", &k.result("a")]), "\0bytes");
    let ttl = env.int(&["PTTL", &k.result("a")]);
    assert!(
        ttl > DAY.as_millis() as i64 - 60_000 && ttl <= DAY.as_millis() as i64,
        "{ttl}"
    );
    assert!(
        !env.exists(&k.result("b")),
        "an ack without a result leaves no older one"
    );
    assert!(!env.exists(&k.result("c")), "a lost lease writes no result");
    assert_eq!(env.zset(&k.processing), vec![("c".to_string(), lease)]);

    // The ack of c's redelivery writes its result; the old delivery's re-sent
    // ack (finished already) changes nothing.
    assert_eq!(
        env.nack("c", lease, crate::store::ops::nack::NackMode::Release).await,
        1
    );
    let again = env.claim(1).await.lease;
    env.run(&ack(vec![("c", again, with(b"second"))], DAY)).await;
    let before = env.snapshot();
    env.run(&ack(vec![("c", lease, with(b"first"))], DAY)).await;
    assert_eq!(env.snapshot(), before);
    assert_eq!(env.raw(&["GET", &k.result("c")]), "second");
}

#[tokio::test]
async fn retention_zero_keeps_no_result_and_deletes_the_notes() {
    let env = Env::new().await;
    let k = env.k().clone();
    let lease = claimed(&env, &["a"]).await;
    assert_eq!(env.run(&note("a", lease, Some("50"), None)).await, [Noted::Written]);
    assert_eq!(env.run(&note("a", lease, None, Some("line"))).await, [Noted::Written]);
    let keep = Keep {
        result: Some(b"r"),
        noted: true,
    };
    env.run(&ack(vec![("a", lease, keep)], Duration::ZERO)).await;
    assert!(!env.exists(&k.result("a")) && !env.exists(&k.progress("a")) && !env.exists(&k.log("a")));
    assert_eq!(
        env.int(&["DBSIZE"]),
        2,
        "only the claim receipt and the totals are left"
    );
}

#[tokio::test]
async fn progress_and_log_are_fenced_by_the_lease_and_the_log_is_trimmed() {
    let env = Env::new().await;
    let k = env.k().clone();
    let lease = claimed(&env, &["a"]).await;

    // An old lease writes nothing.
    let before = env.snapshot();
    assert_eq!(
        env.run(&note("a", lease - 1, Some("10"), None)).await,
        [Noted::LeaseLost]
    );
    assert_eq!(
        env.run(&note("a", lease - 1, None, Some("x"))).await,
        [Noted::LeaseLost]
    );
    assert_eq!(
        env.run(&note("nope", lease, Some("10"), None)).await,
        [Noted::LeaseLost]
    );
    assert_eq!(env.snapshot(), before);

    assert_eq!(
        env.run(&note("a", lease, Some("{\"done\":3}"), None)).await,
        [Noted::Written]
    );
    assert_eq!(env.raw(&["GET", &k.progress("a")]), "{\"done\":3}");
    for line in ["1", "2", "3", "4", "5"] {
        assert_eq!(env.run(&note("a", lease, None, Some(line))).await, [Noted::Written]);
    }
    assert_eq!(env.list(&k.log("a")), vec!["3", "4", "5"], "the last max_lines");
    for key in [k.progress("a"), k.log("a")] {
        let ttl = env.int(&["PTTL", &key]);
        assert!(ttl > 0 && ttl <= DAY.as_millis() as i64, "{key}: {ttl}");
    }

    // Acked: the notes get the result retention.
    let keep = Keep {
        result: None,
        noted: true,
    };
    env.run(&ack(vec![("a", lease, keep)], Duration::from_secs(60))).await;
    for key in [k.progress("a"), k.log("a")] {
        let ttl = env.int(&["PTTL", &key]);
        assert!(ttl > 50_000 && ttl <= 60_000, "{key}: {ttl}");
    }
    // After the ack, the delivery's lease is gone: nothing more is written.
    assert_eq!(env.run(&note("a", lease, None, Some("6"))).await, [Noted::LeaseLost]);
    assert_eq!(env.list(&k.log("a")), vec!["3", "4", "5"]);
}

#[tokio::test]
async fn one_call_writes_the_notes_of_many_deliveries_each_fenced_by_its_own_lease() {
    let env = Env::new().await;
    let k = env.k().clone();
    let first = claimed(&env, &["a", "b"]).await;
    let second = claimed(&env, &["c"]).await;
    assert_ne!(first, second);
    // d's log key holds another type: its note alone fails.
    env.raw(&["SET", &k.log("d"), "not a list"]);
    env.raw(&["ZADD", &k.processing, &first.to_string(), "d"]);
    let n = |id, lease, kind, text| Note { id, lease, kind, text };
    let outcomes = env
        .run(&notes(vec![
            n("a", first, NoteKind::Progress, "10"),
            n("c", first, NoteKind::Log, "c under a's lease"),
            n("b", first, NoteKind::Log, "b1"),
            n("d", first, NoteKind::Log, "d1"),
            n("c", second, NoteKind::Log, "c1"),
            n("a", first, NoteKind::Log, "a1"),
            n("b", first, NoteKind::Log, "b2"),
            n("nope", first, NoteKind::Progress, "1"),
            n("a", first, NoteKind::Progress, "20"),
        ]))
        .await;
    use Noted::{LeaseLost, Written, WrongType};
    assert_eq!(
        outcomes,
        [Written, LeaseLost, Written, WrongType, Written, Written, Written, LeaseLost, Written]
    );
    assert_eq!(
        env.raw(&["GET", &k.progress("a")]),
        "20",
        "in order: the last progress wins"
    );
    assert_eq!(env.list(&k.log("a")), vec!["a1"]);
    assert_eq!(env.list(&k.log("b")), vec!["b1", "b2"], "in order");
    assert_eq!(env.list(&k.log("c")), vec!["c1"], "only under c's own lease");
    assert_eq!(env.raw(&["GET", &k.log("d")]), "not a list");
    assert!(!env.exists(&k.progress("nope")) && !env.exists(&k.progress("c")));
    assert_eq!(
        env.run(&notes(vec![])).await,
        Vec::<Noted>::new(),
        "no notes, no writes"
    );
}

/// An ack of `leases` kept for `retention`, with `notes` (3 lines kept, a day's TTL).
fn ack_with<'a>(leases: Vec<(&'a str, i64, Keep<'a>)>, retention: Duration, notes: Vec<Note<'a>>) -> Ack<'a> {
    Ack {
        notes: self::notes(notes),
        ..ack(leases, retention)
    }
}

const NOTED: Keep<'static> = Keep {
    result: None,
    noted: true,
};

#[tokio::test]
async fn an_ack_writes_the_notes_first_and_its_own_deliveries_get_the_retention_at_once() {
    let env = Env::new().await;
    let k = env.k().clone();
    let lease = claimed(&env, &["a", "b"]).await;
    // a wrote three lines before; a fourth comes with its ack.
    for line in ["1", "2", "3"] {
        assert_eq!(env.run(&note("a", lease, None, Some(line))).await, [Noted::Written]);
    }
    let n = |id, lease, kind, text| Note { id, lease, kind, text };
    let acked = env
        .run(&ack_with(
            vec![("a", lease, NOTED)],
            Duration::from_secs(60),
            vec![
                n("a", lease, NoteKind::Progress, "50"),
                n("b", lease, NoteKind::Log, "b still runs"),
                n("a", lease, NoteKind::Log, "4"),
                n("a", lease - 1, NoteKind::Log, "an old delivery's"),
                n("nope", lease, NoteKind::Progress, "1"),
            ],
        ))
        .await;
    use Noted::{LeaseLost, Written};
    assert_eq!(acked.acks.iter().map(|a| *a as i64).collect::<Vec<_>>(), [1]);
    assert_eq!(acked.notes, [Written, Written, Written, LeaseLost, LeaseLost]);
    assert_eq!(env.raw(&["GET", &k.progress("a")]), "50");
    assert_eq!(
        env.list(&k.log("a")),
        ["2", "3", "4"],
        "written before the ack, trimmed"
    );
    for key in [k.progress("a"), k.log("a")] {
        let ttl = env.int(&["PTTL", &key]);
        assert!(ttl > 50_000 && ttl <= 60_000, "acked: the retention; {key}: {ttl}");
    }
    // b is still running: its line has the notes' own TTL, past any end.
    assert_eq!(env.list(&k.log("b")), ["b still runs"]);
    assert!(env.int(&["PTTL", &k.log("b")]) > 60_000);
    assert!(!env.exists(&k.progress("nope")));

    // The reply was lost and the call re-sent: nothing acked, nothing appended.
    let again = env
        .run(&ack_with(
            vec![("a", lease, NOTED)],
            Duration::from_secs(60),
            vec![n("a", lease, NoteKind::Log, "4")],
        ))
        .await;
    assert_eq!(again.acks.iter().map(|a| *a as i64).collect::<Vec<_>>(), [2]);
    assert_eq!(again.notes, [LeaseLost]);
    assert_eq!(env.list(&k.log("a")), ["2", "3", "4"]);
}

#[tokio::test]
async fn an_ack_with_retention_zero_writes_none_of_its_notes_and_a_bad_log_key_fails_only_its_note() {
    let env = Env::new().await;
    let k = env.k().clone();
    let lease = claimed(&env, &["a", "b"]).await;
    assert_eq!(env.run(&note("a", lease, None, Some("before"))).await, [Noted::Written]);
    env.raw(&["SET", &k.log("b"), "not a list"]);
    let n = |id, kind, text| Note { id, lease, kind, text };
    let acked = env
        .run(&ack_with(
            vec![("a", lease, NOTED), ("b", lease, NOTED)],
            Duration::ZERO,
            vec![
                n("a", NoteKind::Progress, "50"),
                n("a", NoteKind::Log, "with the ack"),
                n("b", NoteKind::Log, "b"),
            ],
        ))
        .await;
    assert_eq!(acked.acks.iter().map(|a| *a as i64).collect::<Vec<_>>(), [1, 1]);
    assert_eq!(
        acked.notes,
        [Noted::Written, Noted::Written, Noted::Written],
        "kept for no time: as if written and deleted by the ack"
    );
    assert!(!env.exists(&k.progress("a")) && !env.exists(&k.log("a")) && !env.exists(&k.log("b")));

    // Kept for a while, the log of another type fails its note alone.
    let lease = claimed(&env, &["c"]).await;
    env.raw(&["SET", &k.log("c"), "not a list"]);
    let acked = env
        .run(&ack_with(
            vec![("c", lease, NOTED)],
            DAY,
            vec![Note {
                id: "c",
                lease,
                kind: NoteKind::Log,
                text: "c",
            }],
        ))
        .await;
    assert_eq!(acked.acks.iter().map(|a| *a as i64).collect::<Vec<_>>(), [1]);
    assert_eq!(acked.notes, [Noted::WrongType]);
    assert_eq!(env.raw(&["GET", &k.log("c")]), "not a list");
}

#[tokio::test]
async fn wait_reads_a_result_and_registers_a_wait_the_ack_publishes() {
    let env = Env::new().await;
    let k = env.k().clone();
    let read = |id| Wait {
        id,
        wait: Duration::ZERO,
    };
    assert_eq!(env.run(&read("nope")).await, Waited::Neither);
    let lease = claimed(&env, &["a"]).await;
    assert_eq!(env.run(&read("a")).await, Waited::Stored);
    assert!(!env.exists(&k.waiters), "a read registers nothing");

    let wait = Wait {
        id: "a",
        wait: Duration::from_secs(30),
    };
    assert_eq!(env.run(&wait).await, Waited::Stored);
    let until = env.zscore(&k.waiters, "a").expect("registered");
    assert!(until > env.now_ms() + 20_000, "{until}");
    let ttl = env.int(&["PTTL", &k.waiters]);
    assert!(ttl > 20_000 && ttl <= 30_000, "{ttl}");

    let mut done = env.subscribe_to(&k.done).await;
    let keep = Keep {
        result: Some(b"42"),
        noted: false,
    };
    env.run(&ack(vec![("a", lease, keep)], DAY)).await;
    assert_eq!(done.next().await, "a");
    assert!(!env.exists(&k.waiters), "the waited id leaves the zset");
    assert_eq!(env.run(&read("a")).await, Waited::Result(b"42".to_vec()));
}

/// Writes progress and a log line for `id` under `lease`, then nacks it
/// (released: back in retry), so its notes outlive its delivery.
async fn noted_then_released(env: &Env, id: &str, lease: i64) {
    assert_eq!(env.run(&note(id, lease, Some("50"), None)).await, [Noted::Written]);
    assert_eq!(env.run(&note(id, lease, None, Some("line"))).await, [Noted::Written]);
    assert_eq!(env.nack(id, lease, crate::store::ops::nack::NackMode::Release).await, 1);
}

#[tokio::test]
async fn cancel_and_gc_delete_the_progress_and_log_with_the_message() {
    let env = Env::new().await;
    let k = env.k().clone();
    let lease = claimed(&env, &["a", "b", "c"]).await;
    for id in ["a", "b", "c"] {
        noted_then_released(&env, id, lease).await;
    }
    // a: cancelled in ready; b: dead, deleted by gc; c stays.
    assert_eq!(env.cancel("a").await, 1);
    env.bury(&["b"]);
    assert_eq!(env.gc_with(10, 0, 1000, &["b"]).await, 1);
    env.assert_keys_left(
        vec![
            k.attempts.clone(),
            k.log("c"),
            k.msg("c"),
            k.progress("c"),
            k.ready.clone(),
        ],
        "a's and b's notes went with them",
    );
    // Their entries stay in ready until claim pops and skips them (STALE).
    assert_eq!(env.list(&k.ready).len(), 3);
}

#[tokio::test]
async fn purge_sweeps_results_and_notes_but_those_of_a_running_delivery() {
    let env = Env::new().await;
    let k = env.k().clone();
    let lease = claimed(&env, &["a", "b", "run"]).await;
    let keep = Keep {
        result: Some(b"r"),
        noted: true,
    };
    assert_eq!(env.run(&note("a", lease, Some("50"), None)).await, [Noted::Written]);
    env.run(&ack(vec![("a", lease, keep)], DAY)).await;
    noted_then_released(&env, "b", lease).await;
    assert_eq!(env.run(&note("run", lease, Some("10"), None)).await, [Noted::Written]);
    // A key of another queue whose name starts the same is not this queue's.
    let other = Keys::new("dq:", "q2").unwrap();
    env.raw(&["SET", &other.result("x"), "r", "PX", "60000"]);
    while env.run(&Purge { limit: 10 }).await > 0 {}
    // The messages went; a's result and progress, b's notes are left to the sweep.
    assert!(env.exists(&k.result("a")) && env.exists(&k.progress("b")));
    // Processing is emptied by purge: seed a delivery that started since.
    env.raw(&["ZADD", &k.processing, "1", "run"]);
    let (mut cursor, mut deleted, mut calls) = ("0".to_string(), 0, 0);
    loop {
        let (next, n) = env
            .run(&Sweep {
                cursor: &cursor,
                limit: 2,
            })
            .await;
        deleted += n;
        calls += 1;
        assert!(calls < 1000, "the sweep ends");
        if next == "0" {
            break;
        }
        cursor = next;
    }
    assert_eq!(deleted, 4, "a's result and progress, b's progress and log");
    env.assert_keys_left(
        vec![k.processing.clone(), k.progress("run"), other.result("x")],
        "the running delivery's progress and the other queue's result",
    );
}
