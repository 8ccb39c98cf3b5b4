//! The queue's format version: written by the first send, checked by every producer and consumer.

use std::time::Duration;

use crate::store::ops::fire::{Fire, Fired};
use crate::store::ops::pause::Pause;
use crate::store::ops::promote::Promote;
use crate::store::ops::purge::Purge;
use crate::store::ops::send::{Outgoing, SendBatch};
use crate::store::stored::{encode_stored, ValueParts, FORMAT_VERSION};
use crate::Error;

use super::{claim_op, Env, NEVER, RETRY, VIS};

/// A manual trigger of schedule "s".
fn manual_fire() -> Fire<'static> {
    Fire {
        name: "s",
        id: "{s}@1",
        version: None,
        at_ms: 1,
        cursor_ms: 1,
        expire_after: None,
    }
}

#[tokio::test]
async fn the_first_send_writes_the_format_version_and_purge_deletes_it_with_the_last_key() {
    let env = Env::new().await;
    let k = env.k().clone();
    let version = FORMAT_VERSION.to_string();
    // A batch whose every id is live stores nothing and writes no version.
    env.seed("a", None);
    env.raw(&["ZADD", &k.processing, "1", "a"]);
    assert_eq!(env.send("a", "x", 0, NEVER, RETRY).await, 0);
    assert!(!env.exists(&k.totals), "a send that stored nothing wrote the totals");
    env.raw(&["DEL", &k.processing, &k.msg("a")]);

    assert_eq!(env.send("b", "x", 0, NEVER, RETRY).await, 1);
    assert_eq!(env.lines(&["HGETALL", &k.totals]), ["sent", "1", "format", &version]);
    // Promote and claim of the same version only read it.
    assert_eq!(env.promote(10).await[0], 1);
    assert_eq!(env.claim(10).await.got.len(), 1);
    assert_eq!(env.send("c", "x", 0, NEVER, RETRY).await, 1);
    assert_eq!(env.lines(&["HGETALL", &k.totals]), ["sent", "2", "format", &version]);
    // Purge keeps the version while a setting (here a pause) stays, as the
    // setting is in that format, and deletes it with the last one.
    env.run(&Pause { paused: true }).await;
    while env.run(&Purge { limit: 10 }).await != 0 {}
    let mut fields = env.lines(&["HKEYS", &k.totals]);
    fields.sort();
    assert_eq!(fields, ["format", "paused"]);
    env.run(&Pause { paused: false }).await;
    while env.run(&Purge { limit: 10 }).await != 0 {}
    assert!(
        !env.exists(&k.totals),
        "a purged queue without settings leaves no totals"
    );

    // A fire is a send: it writes the version of a queue that has none.
    env.raw(&["DEL", &k.totals]);
    env.raw(&["HSET", &k.schedule("s"), "version", "1", "value", "3:tick"]);
    let fire = manual_fire();
    assert_eq!(env.run(&fire).await, Fired::Sent);
    assert_eq!(env.hget(&k.totals, "format"), version);
}

#[tokio::test]
async fn producers_and_consumers_refuse_a_queue_in_another_format_before_any_write() {
    let env = Env::new().await;
    let k = env.k().clone();
    assert_eq!(env.send("due", "x", 0, NEVER, RETRY).await, 1);
    assert_eq!(env.send("ready", "x", 0, NEVER, RETRY).await, 1);
    assert_eq!(env.promote(1).await[0], 1);
    env.raw(&["HSET", &k.schedule("s"), "version", "1", "value", "3:tick"]);
    env.raw(&["HSET", &k.totals, "format", "2"]);
    let before = (env.snapshot(), env.lines(&["HGETALL", &k.totals]));
    let expect_format_error = |what: &str, res: Result<(), Error>| match res {
        Err(Error::FormatVersion {
            queue,
            found,
            supported,
        }) => assert_eq!(
            (queue.as_str(), found.as_str(), supported),
            ("q", "2", FORMAT_VERSION),
            "{what}"
        ),
        other => panic!("{what}: expected FormatVersion, got {other:?}"),
    };
    let store = env.store();
    let outgoing = || Outgoing {
        stage: None,
        mode: None,
        id: "new".into(),
        value: encode_stored(&ValueParts::new(3, b"x")).into(),
        delay: Duration::ZERO,
        expire_after: None,
        own_id: true,
        wait: false,
    };
    expect_format_error("send", store.run(&SendBatch { msgs: vec![outgoing()] }).await.map(drop));
    expect_format_error("promote", store.run(&Promote { limit: 10, room: 10 }).await.map(drop));
    let receipt = k.claim("c");
    expect_format_error("claim", store.run(&claim_op(&receipt, 10, VIS, 1)).await.map(drop));
    expect_format_error("claim 0", store.run(&claim_op(&receipt, 0, VIS, 2)).await.map(drop));
    let fire = manual_fire();
    expect_format_error("fire", store.run(&fire).await.map(drop));
    expect_format_error("the API's send", env.queue.send("y").await.map(drop));
    assert_eq!((env.snapshot(), env.lines(&["HGETALL", &k.totals])), before);

    // A version that is no decimal integer is refused too, nothing written.
    let err = env
        .run_with_arg(&SendBatch { msgs: vec![outgoing()] }, 2, "1.0".into())
        .await
        .unwrap_err();
    assert!(err.details().contains("format version must be"), "{err:?}");
    assert_eq!((env.snapshot(), env.lines(&["HGETALL", &k.totals])), before);

    // Back at this version, everything runs.
    env.raw(&["HSET", &k.totals, "format", &FORMAT_VERSION.to_string()]);
    assert_eq!(env.send("new", "x", 0, NEVER, RETRY).await, 1);
    assert_eq!(env.claim(10).await.got.len(), 1);
}
