//! inspect.lua: where each id lives, read atomically.

use crate::store::ops::inspect::Inspect;

use super::{Env, NEVER, RETRY};

#[tokio::test]
async fn inspect_reports_where_each_id_lives_atomically() {
    let env = Env::new().await;
    let k = env.k().clone();
    assert_eq!(env.send("a", "x", 60_000, NEVER, RETRY).await, 1);
    env.raw(&["RPUSH", &k.ready, "b", "b"]);
    // A unique_for marker held for a live message has no TTL.
    env.raw(&["SET", &k.marker("b"), "60000"]);
    env.raw(&["SET", &k.marker("none"), "60000", "PX", "60000"]);
    // A flow's parent waiting for its children.
    env.raw(&["ZADD", &k.flow_waiting, "1", "w"]);
    // The reply as it comes: the score is left out of the typed one.
    let inspect = Inspect {
        ids: vec!["a", "b", "none", "w"],
    };
    let reply = env.store().eval(&inspect).await.expect("inspect");
    let text: Vec<String> = reply
        .into_array()
        .iter()
        .map(|v| v.as_string().unwrap_or_default())
        .collect();
    let due = env.zscore(&k.pending, "a").unwrap().to_string();
    let want: Vec<String> = [
        "0", // no STALE mark
        &due, "0", "", "0", "0", "1", "", "0", "0", // a: pending with payload
        "", "2", "", "0", "0", "0", "", "1", "0", // b: twice in ready, no payload, a marker without TTL
        "", "0", "", "0", "0", "0", "", "0", "0", // none (its marker's window runs)
        "", "0", "", "0", "0", "0", "", "0", "1", // w: waiting
    ]
    .map(String::from)
    .to_vec();
    assert_eq!(text, want);
}
