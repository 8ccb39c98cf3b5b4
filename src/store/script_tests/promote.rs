//! promote.lua: moving due messages from pending to ready.

use std::time::Duration;

use crate::store::ops::promote::Promote;

use super::{Env, Msg, NEVER, RETRY, SLACK_MS};

#[tokio::test]
async fn promote_moves_due_ids_in_due_order_in_batches() {
    let env = Env::new().await;
    let k = env.k().clone();
    assert_eq!(env.promote(1000).await, vec![0, -1], "empty queue");

    // 2500 due ids whose due order differs from their name order, and one future id.
    const N: i64 = 2500;
    let now = env.now_ms();
    let past = now - 10_000;
    let mut due: Vec<(i64, String)> = (0..N).map(|i| (past + (i * 7919) % N, format!("m{i:04}"))).collect();
    let mut cmd = vec!["ZADD".to_string(), k.pending.clone()];
    for (score, id) in &due {
        cmd.push(score.to_string());
        cmd.push(id.clone());
    }
    let future_due = now + 30_000;
    cmd.push(future_due.to_string());
    cmd.push("future".into());
    env.raw(&cmd.iter().map(String::as_str).collect::<Vec<_>>());
    // No payloads: promote does not look at them (claim drops what expired).
    due.sort();
    let due_order: Vec<String> = due.into_iter().map(|(_, id)| id).collect();

    assert_eq!(env.promote(1000).await, vec![1000, 0], "more are due: wait 0");
    assert_eq!(env.list(&k.ready), due_order[..1000]);
    assert_eq!(env.int(&["ZCARD", &k.pending]), N - 1000 + 1);

    assert_eq!(env.promote(1000).await, vec![1000, 0]);
    assert_eq!(env.list(&k.ready), due_order[..2000]);

    let reply = env.promote(1000).await;
    let after = env.now_ms();
    assert_eq!(reply[0], 500);
    let wait = reply[1];
    assert!(
        wait <= future_due - now && wait >= future_due - after,
        "wait {wait} for an id due in {} ms",
        future_due - now
    );
    assert_eq!(env.list(&k.ready), due_order);
    assert_eq!(env.zset(&k.pending), vec![("future".to_string(), future_due)]);

    // Idempotent: a re-run moves nothing and reports the same next due time.
    let again = env.promote(1000).await;
    assert_eq!(again[0], 0);
    assert!(again[1] <= wait && again[1] > wait - SLACK_MS, "{again:?}");
    assert_eq!(env.list(&k.ready).len(), N as usize);

    env.raw(&["ZREM", &k.pending, "future"]);
    assert_eq!(env.promote(1000).await, vec![0, -1]);
    assert!(!env.exists(&k.attempts), "promote never writes the attempts hash");
}

#[tokio::test]
async fn promote_moves_what_send_made_due() {
    let env = Env::new().await;
    let k = env.k().clone();
    assert_eq!(env.send("now", "x", 0, NEVER, RETRY).await, 1);
    assert_eq!(env.send("later", "y", 60_000, NEVER, RETRY).await, 1);
    let reply = env.promote(1000).await;
    assert_eq!(reply[0], 1);
    assert!(reply[1] > 60_000 - SLACK_MS && reply[1] <= 60_000, "{reply:?}");
    assert_eq!(env.list(&k.ready), vec!["now"]);
    assert_eq!(env.zset(&k.pending).len(), 1);
    // Promote does not touch the payload, nor create a record.
    assert_eq!(env.stored("now").as_deref(), Some("3:x"));
    assert!(env.record("now").is_none());
    assert_eq!(env.pttl("now"), -1);
}

#[tokio::test]
async fn promote_moves_an_id_without_payload_and_claim_buries_and_counts_it() {
    let env = Env::new().await;
    let k = env.k().clone();
    let batch: Vec<Msg> = vec![
        ("gone", "x", 0, NEVER, RETRY),
        ("live", "y", 0, NEVER, RETRY),
        ("gone-later", "z", 60_000, NEVER, RETRY),
    ];
    assert_eq!(env.send_many(&batch).await, vec![1, 1, 1]);
    // Their payloads were deleted by something else.
    env.raw(&["DEL", &k.msg("gone"), &k.msg("gone-later")]);

    let reply = env.promote(10).await;
    assert_eq!(reply[0], 2, "promote moves the id without payload too: {reply:?}");
    assert!(reply[1] > 60_000 - SLACK_MS && reply[1] <= 60_000, "{reply:?}");
    assert_eq!(env.list(&k.ready), vec!["gone", "live"]);
    // Not due yet: stays pending even without payload, until it is due.
    let pending = env.zset(&k.pending);
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].0, "gone-later");
    assert!(!env.exists(&k.attempts));

    // The claim buries the id without payload as an expired dead letter,
    // counts it and returns its id (no STALE mark: no cancelled message).
    let c = env.claim(10).await;
    assert_eq!(
        (c.popped, c.expired, c.expired_ids.clone()),
        (2, 1, vec!["gone".to_string()])
    );
    assert_eq!(c.ids(), vec!["live"]);
    assert!(env.zscore(&k.processing, "gone").is_none());
    assert_eq!(env.dead(), vec!["gone"]);
    assert_eq!(
        env.records(),
        vec![
            ("gone".to_string(), "0:expired".to_string()),
            ("live".to_string(), "1".to_string())
        ]
    );
    assert_eq!(env.lines(&["HMGET", &k.totals, "expired"]), vec!["1"]);
    assert!(!env.exists(&k.ready));

    // Once due it is moved too; a limit counts every id alike.
    env.raw(&["ZADD", &k.pending, "XX", "0", "gone-later"]);
    assert_eq!(env.send("live2", "w", 0, NEVER, RETRY).await, 1);
    env.raw(&["ZADD", &k.pending, "XX", "1", "live2"]);
    assert_eq!(env.promote(1).await, vec![1, 0], "the limit reached by an expired id");
    assert_eq!(env.promote(1).await, vec![1, -1]);
    assert_eq!(env.list(&k.ready), vec!["gone-later", "live2"]);
    assert!(!env.exists(&k.pending));
    let c = env.claim(10).await;
    assert_eq!((c.popped, c.expired, c.ids()), (2, 1, vec!["live2"]));
    assert_eq!(env.dead(), vec!["gone", "gone-later"]);
}

#[tokio::test]
async fn promote_reports_how_late_each_moved_id_is() {
    let env = Env::new().await;
    let k = env.k().clone();
    let now = env.now_ms();
    env.raw(&[
        "ZADD",
        &k.pending,
        &(now - 300).to_string(),
        "a",
        &(now - 100).to_string(),
        "b",
    ]);
    let reply = env.run(&Promote { limit: 10, room: 10 }).await;
    assert_eq!((reply.moved, reply.next_due), (2, None));
    let late: Vec<u128> = reply.late.iter().map(Duration::as_millis).collect();
    assert!(
        (300..1300).contains(&late[0]) && (100..1100).contains(&late[1]),
        "{late:?}"
    );
    assert!(late[0] > late[1], "oldest first");
}

#[tokio::test]
async fn promote_wakes_the_other_consumers_when_it_moves_more_than_its_caller_claims() {
    let env = Env::new().await;
    let k = env.k().clone();
    let mut wakes = env.subscribe().await;
    let due = (env.now_ms() - 10).to_string();
    env.raw(&["ZADD", &k.pending, &due, "a", &due, "b"]);
    // Its caller claims both: nobody else needs to hear.
    assert_eq!(env.run(&Promote { limit: 10, room: 2 }).await.moved, 2);
    wakes.assert_quiet(&env, "a promote its caller claims whole").await;
    // A busy caller (no free handler) moves one: the others claim it now.
    env.raw(&["ZADD", &k.pending, &due, "c"]);
    assert_eq!(env.run(&Promote { limit: 10, room: 0 }).await.moved, 1);
    assert_eq!(wakes.next().await, "0");
    // Nothing moved: no wake-up, whatever the room.
    assert_eq!(env.run(&Promote { limit: 10, room: 0 }).await.moved, 0);
    wakes.assert_quiet(&env, "a promote that moved nothing").await;
}
