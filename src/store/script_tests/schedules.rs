//! Schedules: change_schedule.lua, fire.lua and read_schedules.lua together.

use std::time::Duration;

use crate::store::ops::change_schedule::{Change, ChangeSchedule, Changed};
use crate::store::ops::fire::{Fire, Fired};
use crate::store::ops::purge::Purge;
use crate::store::ops::read_schedules::{ReadSchedules, SchedulePage, Which};
use crate::store::stored::decode_stored;
use crate::store::Keys;

use super::{Env, SLACK_MS};

/// A definition as `set_schedule` writes it: every second, fires "2:tick".
fn every_second() -> Change {
    every_second_at_most(2)
}

/// [`every_second`] where the shard may hold `max` schedules.
fn every_second_at_most(max: usize) -> Change {
    let text = |s: &str| fred::bytes::Bytes::from(s.to_string());
    Change::Set {
        fields: vec![
            ("spec", text("every 1000")),
            ("tz", text("UTC")),
            ("misfire", text("once")),
            ("grace", text("60000")),
            ("value", text("2:tick")),
        ],
        max,
    }
}

impl Env {
    async fn schedule(&self, name: &str, change: Change) -> Changed {
        self.run(&ChangeSchedule { name, change }).await
    }

    /// Fire of schedule `name` at `at` (cursor to `at`) with `version`.
    async fn fire(&self, name: &str, version: &str, at: i64) -> Fired {
        let id = crate::schedule::fire_id(name, at);
        self.run(&Fire {
            name,
            id: &id,
            version: Some(version),
            at_ms: at,
            cursor_ms: at,
            expire_after: None,
        })
        .await
    }

    /// The queue's snapshot plus the schedules' cursors and hashes.
    fn schedules_snapshot(&self) -> String {
        let k = self.k();
        let mut out = self.snapshot();
        out += &format!(
            "cursors {:?}\n",
            self.lines(&["ZRANGE", &k.schedules, "0", "-1", "WITHSCORES"])
        );
        out += &format!("totals {:?}\n", self.lines(&["HGETALL", &k.totals]));
        for name in self.lines(&["ZRANGE", &k.schedules, "0", "-1"]) {
            let mut h = self.lines(&["HGETALL", &k.schedule(&name)]);
            h.sort();
            out += &format!("{name} {h:?}\n");
        }
        out
    }

    fn cursor(&self, name: &str) -> String {
        self.raw(&["ZSCORE", &self.k().schedules, name])
    }
}

#[tokio::test]
async fn fire_sends_each_fire_once_and_never_again_after_its_message_is_gone() {
    let env = Env::new().await;
    let k = env.k().clone();
    let before = env.now_ms();
    assert_eq!(env.schedule("s", every_second()).await, Changed::Yes);
    let cursor: i64 = env.cursor("s").parse().unwrap();
    assert!((before..before + SLACK_MS).contains(&cursor), "cursor starts at now");
    assert_eq!(env.hget(&k.schedule("s"), "anchor"), cursor.to_string());
    // The version: Redis time in µs of the change, the last the queue gave.
    let v = env.hget(&k.schedule("s"), "version");
    let v_us: i64 = v.parse().unwrap();
    assert!((before * 1000..(before + SLACK_MS) * 1000).contains(&v_us), "{v}");
    assert_eq!(env.hget(&k.totals, "schedule_version"), v);
    // The same definition again writes nothing.
    let state = env.schedules_snapshot();
    assert_eq!(env.schedule("s", every_second()).await, Changed::Same);
    assert_eq!(env.schedules_snapshot(), state);

    let at = cursor + 5_000;
    let id = format!("{{s}}@{at}");
    assert_eq!(env.fire("s", &v, at).await, Fired::Sent);
    // Due at the fire time exactly, stored as send stores it.
    assert_eq!(env.zset(&k.pending), vec![(id.clone(), at)]);
    let value = env.raw(&["GET", &k.msg(&id)]);
    assert!(value.starts_with("2/") && value.ends_with(":tick"), "{value}");
    let stored = decode_stored(value.as_bytes()).unwrap().times.unwrap();
    assert_eq!(stored.due_at_ms, at as u64);
    assert_eq!(env.cursor("s"), at.to_string());
    let h = k.schedule("s");
    assert_eq!(
        (env.hget(&h, "last"), env.hget(&h, "ahead"), env.hget(&h, "fired")),
        (at.to_string(), at.to_string(), "1".into())
    );
    assert_eq!(env.hget(&k.totals, "sent"), "1");

    // A second scheduler with the same plan, or a re-sent call: nothing.
    let state = env.schedules_snapshot();
    assert_eq!(env.fire("s", &v, at).await, Fired::Behind);
    assert_eq!(env.fire("s", &v, at - 1_000).await, Fired::Behind);
    // Its message delivered and acked (gone), its id free again: still nothing.
    env.raw(&["ZREM", &k.pending, &id]);
    env.raw(&["DEL", &k.msg(&id)]);
    let state_after_ack = env.schedules_snapshot();
    assert_eq!(env.fire("s", &v, at).await, Fired::Behind);
    assert_eq!(env.schedules_snapshot(), state_after_ack);
    assert_ne!(state, state_after_ack);
    // A plan made from another version writes nothing.
    assert_eq!(env.fire("s", "0", at + 1_000).await, Fired::Changed);
    assert_eq!(env.fire("gone", &v, at + 1_000).await, Fired::Changed);
    assert_eq!(env.schedules_snapshot(), state_after_ack);
    // A fire in the past is due now; a passed fire leaves 'ahead'.
    let past = at + 1_000 - 60_000;
    env.raw(&["ZADD", &k.schedules, &(past - 1).to_string(), "s"]);
    let now = env.now_ms();
    assert_eq!(env.fire("s", &v, past).await, Fired::Sent);
    let due = env.zset(&k.pending)[0].1;
    assert!((now..now + SLACK_MS).contains(&due), "{due} vs {now}");
    assert_eq!(env.hget(&h, "ahead"), at.to_string(), "only fires not yet due");
}

/// A queue with schedule "s" set ([`every_second`]): the queue, its keys,
/// the schedule's hash and its version.
async fn with_schedule_s() -> (Env, Keys, String, String) {
    let env = Env::new().await;
    let k = env.k().clone();
    let h = k.schedule("s");
    env.schedule("s", every_second()).await;
    let version = env.hget(&h, "version");
    (env, k, h, version)
}

#[tokio::test]
async fn schedule_changes_withdraw_the_fires_sent_ahead_and_flip_once() {
    let (env, k, h, v) = with_schedule_s().await;
    let cursor: i64 = env.cursor("s").parse().unwrap();
    let (a, b) = (cursor + 10_000, cursor + 11_000);
    assert_eq!(env.fire("s", &v, a).await, Fired::Sent);
    assert_eq!(env.fire("s", &v, b).await, Fired::Sent);
    assert_eq!(env.hget(&h, "ahead"), format!("{a} {b}"));
    assert_eq!(env.hget(&h, "fired"), "2");
    env.seed("other", None);
    env.raw(&["ZADD", &k.pending, "1", "other"]);

    assert_eq!(env.schedule("s", Change::Pause).await, Changed::Yes);
    assert_eq!(
        env.zset(&k.pending),
        vec![("other".to_string(), 1)],
        "fires ahead withdrawn"
    );
    assert!(!env.exists(&k.msg(&format!("{{s}}@{a}"))));
    assert_eq!(env.hget(&h, "fired"), "0", "withdrawn fires are not counted as fired");
    assert_eq!(env.cursor("s"), "inf");
    let paused = env.hget(&h, "version");
    assert!(
        paused.parse::<i64>().unwrap() > v.parse().unwrap(),
        "{paused} after {v}"
    );
    assert_eq!(env.fire("s", &v, b + 1_000).await, Fired::Changed);
    assert_eq!(env.fire("s", &paused, b + 1_000).await, Fired::Paused);
    let state = env.schedules_snapshot();
    assert_eq!(env.schedule("s", Change::Pause).await, Changed::No);
    assert_eq!(env.schedules_snapshot(), state);

    let now = env.now_ms();
    assert_eq!(env.schedule("s", Change::Resume).await, Changed::Yes);
    let cursor: i64 = env.cursor("s").parse().unwrap();
    assert!((now..now + SLACK_MS).contains(&cursor), "resumed from now");
    assert_eq!(env.schedule("s", Change::Resume).await, Changed::No);

    // A changed definition: the old fires ahead go, the version moves on.
    let resumed = env.hget(&h, "version");
    assert_eq!(env.fire("s", &resumed, cursor + 5_000).await, Fired::Sent);
    let Change::Set { mut fields, max } = every_second() else {
        unreachable!()
    };
    fields[0].1 = "every 2000".into();
    assert_eq!(env.schedule("s", Change::Set { fields, max }).await, Changed::No);
    assert_eq!(env.zset(&k.pending).len(), 1, "only 'other' is left");
    let changed = env.hget(&h, "version");
    assert_eq!(env.hget(&h, "spec"), "every 2000");
    assert!(
        changed.parse::<i64>().unwrap() > resumed.parse().unwrap(),
        "{changed} after {resumed}"
    );

    // The shard holds at most `max` schedules.
    assert_eq!(env.schedule("t", every_second()).await, Changed::Yes);
    assert_eq!(env.schedule("u", every_second()).await, Changed::Full);
    assert!(!env.exists(&k.schedule("u")));

    assert_eq!(env.fire("s", &changed, cursor + 9_000).await, Fired::Sent);
    assert_eq!(env.schedule("s", Change::Remove).await, Changed::Yes);
    assert!(!env.exists(&h));
    assert_eq!(env.lines(&["ZRANGE", &k.schedules, "0", "-1"]), vec!["t".to_string()]);
    assert_eq!(
        env.zset(&k.pending).len(),
        1,
        "the removed schedule's fire is withdrawn"
    );
    let state = env.schedules_snapshot();
    for change in [Change::Remove, Change::Pause, Change::Resume] {
        assert_eq!(env.schedule("s", change).await, Changed::Same, "no such schedule");
    }
    assert_eq!(env.schedules_snapshot(), state);
}

#[tokio::test]
async fn a_fire_planned_before_a_remove_never_fires_the_schedule_created_again() {
    let (env, _, h, old) = with_schedule_s().await;
    let at = env.cursor("s").parse::<i64>().unwrap() + 5_000;
    // A scheduler planned the interval's fire at `at`; before its call
    // arrives, the schedule is removed, the queue purged, and the name set
    // again as a yearly cron.
    assert_eq!(env.schedule("s", Change::Remove).await, Changed::Yes);
    while env.run(&Purge { limit: 10 }).await > 0 {}
    let Change::Set { mut fields, max } = every_second() else {
        unreachable!()
    };
    fields[0].1 = "cron 0 0 1 1 *".into();
    assert_eq!(env.schedule("s", Change::Set { fields, max }).await, Changed::Yes);
    let state = env.schedules_snapshot();
    assert_eq!(
        env.fire("s", &old, at).await,
        Fired::Changed,
        "the old definition's fire was sent: {}",
        env.schedules_snapshot()
    );
    assert_eq!(env.schedules_snapshot(), state);
    // Every change gives a version no change of this name had before.
    let mut seen = vec![old, env.hget(&h, "version")];
    for change in [Change::Pause, Change::Resume, Change::Remove, every_second()] {
        env.schedule("s", change).await;
        if env.exists(&h) {
            seen.push(env.hget(&h, "version"));
        }
    }
    let mut unique = seen.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), seen.len(), "a version repeats: {seen:?}");
}

#[tokio::test]
async fn schedules_reads_the_due_ones_in_cursor_order_or_one_by_name() {
    let env = Env::new().await;
    let k = env.k().clone();
    for name in ["a", "b", "c"] {
        env.schedule(name, every_second_at_most(10)).await;
    }
    let now = env.now_ms();
    env.raw(&["ZADD", &k.schedules, &(now + 60_000).to_string(), "b"]);
    env.schedule("c", Change::Pause).await;
    let page = |horizon: Option<Duration>, after| ReadSchedules {
        which: Which::Page {
            horizon,
            after,
            limit: 10,
        },
    };
    let names = |r: &SchedulePage| r.schedules.iter().map(|s| s.name.clone()).collect::<Vec<_>>();
    let due = env.run(&page(Some(Duration::from_secs(1)), None)).await;
    assert!((now..now + SLACK_MS).contains(&due.now_ms));
    assert_eq!(names(&due), ["a"]);
    assert_eq!(due.schedules[0].text("value"), Some("2:tick"));
    assert!(due.schedules[0].timing().unwrap().next_after(0).is_some());
    let all = env.run(&page(None, None)).await;
    assert_eq!(names(&all), ["a", "b", "c"]);
    assert_eq!(all.schedules[2].cursor, None, "paused");
    assert_eq!(names(&env.run(&page(None, Some(&all.schedules[1]))).await), ["c"]);
    assert!(env.run(&page(None, Some(&all.schedules[2]))).await.schedules.is_empty());
    // A page goes on after the last schedule read, wherever that one moved
    // since: one moved past it is read again, none is skipped.
    env.raw(&["ZADD", &k.schedules, &(now + 90_000).to_string(), "a"]);
    assert_eq!(
        names(&env.run(&page(None, Some(&all.schedules[0]))).await),
        ["b", "a", "c"]
    );
    let one = env
        .run(&ReadSchedules {
            which: Which::Named("b"),
        })
        .await;
    assert_eq!(
        (names(&one), one.schedules[0].cursor),
        (vec!["b".to_string()], Some(now + 60_000))
    );
    assert!(env
        .run(&ReadSchedules {
            which: Which::Named("x")
        })
        .await
        .schedules
        .is_empty());
}

#[tokio::test]
async fn schedules_pages_on_after_the_last_read_when_fires_moved_it_out_of_the_horizon() {
    let env = Env::new().await;
    let k = env.k().clone();
    let now = env.now_ms().to_string();
    for name in ["d1", "d2", "d3"] {
        env.schedule(name, every_second_at_most(10)).await;
        // Due at once, equal cursors: ordered by name.
        env.raw(&["ZADD", &k.schedules, &now, name]);
    }
    let page = |after| ReadSchedules {
        which: Which::Page {
            horizon: Some(Duration::from_secs(1)),
            after,
            limit: 1,
        },
    };
    let first = env.run(&page(None)).await;
    assert_eq!(first.schedules[0].name, "d1");
    // d1's fires move its cursor beyond the horizon: it leaves the due ones.
    env.raw(&["ZADD", &k.schedules, "+inf", "d1"]);
    let next = env.run(&page(first.schedules.first())).await;
    assert_eq!(next.schedules[0].name, "d2", "the page after d1 skipped d2");
    // A cursor equal to the last read's, a name after it: read next.
    env.raw(&["ZADD", &k.schedules, &now, "d20"]);
    env.raw(&["HSET", &k.schedule("d20"), "version", "1"]);
    let next = env.run(&page(next.schedules.first())).await;
    assert_eq!(next.schedules[0].name, "d20");
}

/// A set or a resume that makes a schedule due wakes sleeping consumers,
/// whose probe then has their scheduler read it; a pause, a remove, a
/// set of a paused schedule and a change that changes nothing do not.
#[tokio::test]
async fn a_set_or_resume_wakes_consumers() {
    let env = Env::new().await;
    let mut wakes = env.subscribe().await;
    assert_eq!(env.schedule("s", every_second()).await, Changed::Yes);
    assert_eq!(wakes.next().await, "0");
    assert_eq!(env.schedule("s", every_second()).await, Changed::Same);
    wakes.assert_quiet(&env, "the same definition").await;
    assert_eq!(env.schedule("s", Change::Pause).await, Changed::Yes);
    wakes.assert_quiet(&env, "pause").await;
    let Change::Set { mut fields, max } = every_second() else {
        unreachable!()
    };
    fields[4].1 = fred::bytes::Bytes::from("2:tock");
    assert_eq!(env.schedule("s", Change::Set { fields, max }).await, Changed::No);
    wakes.assert_quiet(&env, "a set of a paused schedule").await;
    assert_eq!(env.schedule("s", Change::Resume).await, Changed::Yes);
    assert_eq!(wakes.next().await, "0");
    assert_eq!(env.schedule("s", Change::Remove).await, Changed::Yes);
    wakes.assert_quiet(&env, "remove").await;
}
