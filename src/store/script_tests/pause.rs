//! pause.lua: pausing and resuming, and claims of a paused queue.

use crate::store::ops::pause::Pause;
use crate::store::ops::stats::Stats;

use super::{Env, SLACK_MS, VIS};

#[tokio::test]
async fn pause_sets_and_resume_clears_the_flag_once_and_resume_wakes_consumers() {
    let env = Env::new().await;
    let k = env.k().clone();
    let mut wakes = env.subscribe().await;
    let before = env.now_ms();
    assert!(env.run(&Pause { paused: true }).await);
    let since: i64 = env
        .raw(&["HGET", &k.totals, "paused"])
        .parse()
        .expect("paused holds a time");
    assert!((before..before + SLACK_MS).contains(&since), "{since} vs {before}");
    assert!(env.run(&Stats).await.paused);
    // Idempotent: a second pause changes nothing, not even the time.
    assert!(!env.run(&Pause { paused: true }).await);
    assert_eq!(env.raw(&["HGET", &k.totals, "paused"]), since.to_string());
    wakes.assert_quiet(&env, "pause").await;

    assert!(env.run(&Pause { paused: false }).await);
    assert!(!env.exists(&k.totals), "resume leaves no field behind");
    assert_eq!(wakes.next().await, "0", "resume wakes sleeping consumers");
    assert!(!env.run(&Pause { paused: false }).await);
    wakes.assert_quiet(&env, "resume of a queue not paused").await;
    assert!(!env.run(&Stats).await.paused);
}

#[tokio::test]
async fn a_paused_queue_leases_nothing_but_replays_a_resent_claim() {
    let env = Env::new().await;
    let k = env.k().clone();
    for id in ["a", "b"] {
        env.seed(id, Some("0"));
        env.raw(&["RPUSH", &k.ready, id]);
    }
    let first = env.claim_with("w", 1, VIS, 1).await;
    assert_eq!((first.ids(), first.paused), (vec!["a"], false));
    env.run(&Pause { paused: true }).await;
    // The same request again (its reply was lost): the same delivery.
    let replay = env.claim_with("w", 1, VIS, 1).await;
    assert_eq!(
        (replay.ids(), replay.lease, replay.paused),
        (vec!["a"], first.lease, true)
    );
    // A new request leases nothing, reads no list and drops the receipt.
    let state = env.snapshot();
    env.reset_command_stats();
    let paused = env.claim_with("w", 10, VIS, 2).await;
    assert_eq!((paused.popped, paused.got.len(), paused.paused), (0, 0, true));
    assert_eq!(env.command_calls("lrange"), 0, "a list was read");
    assert!(!env.exists(&k.claim("w")), "receipt left");
    // Nothing else changed (the snapshot lists key names: put the receipt back).
    env.raw(&["SET", &k.claim("w"), "1", "PX", "60000"]);
    assert_eq!(env.snapshot(), state, "a paused claim changed the queue");
    // Resumed: the waiting message is leased.
    env.run(&Pause { paused: false }).await;
    let resumed = env.claim_with("w", 10, VIS, 3).await;
    assert_eq!((resumed.ids(), resumed.paused), (vec!["b"], false));
}
