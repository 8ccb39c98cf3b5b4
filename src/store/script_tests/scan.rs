//! scan.lua: the pages the integrity check reads.

use super::{Env, Msg, NEVER, RETRY};

#[tokio::test]
async fn integrity_check_pages_through_a_clean_queue_and_finds_nothing() {
    let env = Env::new().await;
    // More than a page of pending messages, and one message in each other state.
    let ids: Vec<String> = (0..2_500).map(|i| format!("p{i}")).collect();
    for chunk in ids.chunks(500) {
        let batch: Vec<Msg> = chunk
            .iter()
            .map(|id| (id.as_str(), "x", 60_000, NEVER, RETRY))
            .collect();
        env.send_many(&batch).await;
    }
    for id in ["r", "u", "t"] {
        assert_eq!(env.send(id, "x", 0, NEVER, RETRY).await, 1);
    }
    env.promote(10).await;
    assert_eq!(env.claim(1).await.ids(), vec!["r"]);
    env.seed("g", Some("4"));
    env.bury(&["g"]);
    env.mark_stale();
    let report = env.queue.check_integrity().await.unwrap();
    assert!(report.is_clean(), "{report}");
    assert_eq!(report.scanned, 2_500 + 4);
}

#[tokio::test]
async fn integrity_check_reports_each_kind_of_anomaly_once_confirmed() {
    use crate::{Anomaly, MessageState::*};
    let env = Env::new().await;
    let k = env.k().clone();
    for id in ["a", "b", "c"] {
        assert_eq!(env.send(id, "x", 60_000, NEVER, RETRY).await, 1);
    }
    assert_eq!(env.send("d", "x", 0, NEVER, RETRY).await, 1);
    env.promote(10).await;
    let lease = env.claim(1).await.lease;
    env.raw(&["ZADD", &k.pending, "1", "d"]); // pending and processing
    env.raw(&["DEL", &k.msg("a")]); // pending without payload
    env.raw(&["SET", &k.msg("orphan"), "3:x"]); // payload without state
    env.raw(&["HSET", &k.attempts, "ghost", "2"]); // delivery count without message
    env.raw(&["RPUSH", &k.ready, "b"]); // pending and ready

    let mut found = env.queue.check_integrity().await.unwrap().anomalies;
    let key = |a: &Anomaly| format!("{a:?}");
    found.sort_by_key(key);
    let mut want = vec![
        Anomaly::ManyStates {
            id: "d".into(),
            states: vec![Pending, Processing],
        },
        Anomaly::MissingPayload {
            id: "a".into(),
            state: Pending,
        },
        Anomaly::OrphanPayload { id: "orphan".into() },
        Anomaly::OrphanRetryRecord { id: "ghost".into() },
        Anomaly::ManyStates {
            id: "b".into(),
            states: vec![Pending, Ready],
        },
    ];
    want.sort_by_key(key);
    assert_eq!(found, want);

    // While the STALE mark says list entries may be left over, claim skips
    // an entry whose id is pending, so that one is no longer an anomaly.
    env.mark_stale();
    let found = env.queue.check_integrity().await.unwrap().anomalies;
    assert_eq!(found.len(), 4, "{found:?}");
    assert!(env.ack(&[("d", lease)]).await == vec![1]);
}

#[tokio::test]
async fn integrity_check_reports_idle_known_groups_and_groups_not_known() {
    use crate::store::ops::groups::{ChangeGroups, GroupChange};
    use crate::Anomaly;
    let env = Env::new().await;
    let gp = env.k().group_prefix.clone();
    // A clean grouped queue: a group with a due message, one with a
    // setting of its own and nothing else.
    let value = crate::store::stored::encode_stored(&crate::store::stored::ValueParts {
        retry_count: RETRY as u32,
        group: Some("A"),
        payload: b"a1",
        ..Default::default()
    });
    assert_eq!(env.send_values(&[("a1", value, 0, NEVER, false)]).await, vec![1]);
    assert!(
        env.run(&ChangeGroups {
            change: GroupChange::Pause("P")
        })
        .await
    );
    let report = env.queue.check_integrity().await.unwrap();
    assert!(report.is_clean(), "{report}");

    env.raw(&["ZADD", &format!("{gp}known"), "0", "idle"]); // known, nothing in it
    env.raw(&["ZADD", &format!("{gp}:lost:ready"), "1", "x"]); // a zset of a group not known
    env.raw(&["HSET", &format!("{gp}active"), "gone", "1", "lost", "1"]); // counts of groups not known
    let mut found = env.queue.check_integrity().await.unwrap().anomalies;
    found.retain(|a| matches!(a, Anomaly::IdleGroup { .. } | Anomaly::UnknownGroup { .. }));
    assert_eq!(
        found,
        vec![
            Anomaly::IdleGroup { group: "idle".into() },
            Anomaly::UnknownGroup { group: "gone".into() },
            Anomaly::UnknownGroup { group: "lost".into() },
        ]
    );
}

#[tokio::test]
async fn integrity_check_reports_flow_keys_left_behind_and_a_stuck_outbox() {
    use crate::Anomaly;
    use std::time::Duration;
    let env = Env::new().await;
    let k = env.k().clone();
    let member = |id: &str| format!("{} {id}", k.base);
    // A clean flow: parent p waits for child c (linked), a finished child
    // recorded; cancelled parent x's set waits for its relay, as does a
    // completion recorded now.
    assert_eq!(env.send("c", "x", 60_000, NEVER, RETRY).await, 1);
    env.seed("p", None);
    env.raw(&["ZADD", &k.flow_waiting, "1", "p"]);
    env.raw(&["SADD", &k.deps("p"), &member("c")]);
    env.raw(&["HSET", &k.children("p"), &member("z"), "a", " a", "1"]);
    env.raw(&["HSET", &k.parents(), "c", &format!("f {} p", k.base)]);
    env.raw(&["SADD", &k.deps("x"), &member("y")]);
    let now = env.now_ms();
    env.raw(&["ZADD", &k.outbox, &now.to_string(), "x x"]);
    env.raw(&["HSET", &k.totals, "flows", "1"]);
    let report = env.queue.check_integrity().await.unwrap();
    assert!(report.is_clean(), "{report}");

    // A dead child whose payload expired before gc deleted it keeps its
    // link and its own children's results: gc drops them with it.
    env.raw(&["ZADD", &k.dead, "1", "d"]);
    env.raw(&["HSET", &k.parents(), "d", &format!("w {} p", k.base)]);
    env.raw(&["HSET", &k.children("d"), &member("z"), "a"]);
    // Left behind: a set and results of parents gone (q) or no longer
    // waiting (r, pending), a link of a child gone, an entry 10 min old.
    env.raw(&["SADD", &k.deps("q"), &member("c")]);
    env.raw(&["HSET", &k.children("q"), &member("z"), "a"]);
    assert_eq!(env.send("r", "x", 60_000, NEVER, RETRY).await, 1);
    env.raw(&["SADD", &k.deps("r"), &member("c")]);
    env.raw(&["HSET", &k.children("r"), &member("z"), "a"]);
    env.raw(&["HSET", &k.parents(), "gone", &format!("f {} p", k.base)]);
    // Not left behind: the set of a parent whose send has not come yet
    // (flow_deps gave it a TTL) goes on its own.
    env.raw(&["SADD", &k.deps("t"), &member("c")]);
    env.raw(&["PEXPIRE", &k.deps("t"), "3600000"]);
    let old = "a gone f dq:{q}: p";
    env.raw(&["ZADD", &k.outbox, &(now - 600_000).to_string(), old]);
    let mut found = env.queue.check_integrity().await.unwrap().anomalies;
    let age = found.iter().find_map(|a| match a {
        Anomaly::StuckOutbox { age, .. } => Some(*age),
        _ => None,
    });
    assert!(
        age.is_some_and(|a| a >= Duration::from_secs(600) && a < Duration::from_secs(660)),
        "{age:?}"
    );
    let key = |a: &Anomaly| format!("{a:?}");
    found.sort_by_key(key);
    let mut want = vec![
        Anomaly::OrphanFlowKey {
            parent: "q".into(),
            key: "deps",
        },
        Anomaly::OrphanFlowKey {
            parent: "q".into(),
            key: "children",
        },
        Anomaly::OrphanFlowKey {
            parent: "r".into(),
            key: "deps",
        },
        Anomaly::OrphanParentLink { child: "gone".into() },
        // Only its payload is reported missing.
        Anomaly::MissingPayload {
            id: "d".into(),
            state: crate::MessageState::Dead,
        },
        Anomaly::StuckOutbox {
            entry: old.into(),
            age: age.unwrap(),
        },
    ];
    want.sort_by_key(key);
    assert_eq!(found, want, "r's results are kept while it is stored");
}
