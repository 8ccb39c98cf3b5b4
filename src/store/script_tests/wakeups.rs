//! Wake-ups: send.lua, nack.lua and timeout.lua publish only when consumers gain from it.

use crate::store::ops::nack::NackMode::Release;

use super::{fail, seed_processing, Env, Msg, NEVER, RETRY};

#[tokio::test]
async fn send_wakes_consumers_only_when_it_brings_the_earliest_due_time_forward() {
    let env = Env::new().await;
    let mut wakes = env.subscribe().await;

    // Pending empty: publishes the delay.
    assert_eq!(env.send("a", "x", 5_000, NEVER, RETRY).await, 1);
    assert_eq!(wakes.next().await, "5000");
    // Due after the current head: nothing.
    assert_eq!(env.send("b", "x", 10_000, NEVER, RETRY).await, 1);
    wakes.assert_quiet(&env, "send due later than the head").await;
    // Due before the head: publishes its delay.
    assert_eq!(env.send("c", "x", 1_000, NEVER, RETRY).await, 1);
    assert_eq!(wakes.next().await, "1000");
    // A batch: one wake-up, for its earliest message.
    let batch: Vec<Msg> = vec![
        ("d", "x", 20_000, NEVER, RETRY),
        ("e", "x", 500, NEVER, RETRY),
        ("f", "x", 200, NEVER, RETRY),
        ("g", "x", 30_000, NEVER, RETRY),
    ];
    assert_eq!(env.send_many(&batch).await, vec![1, 1, 1, 1]);
    assert_eq!(wakes.next().await, "200");
    wakes.assert_quiet(&env, "second wake-up for one batch").await;
    // A batch entirely due after the head: nothing.
    let later: Vec<Msg> = vec![("h", "x", 40_000, NEVER, RETRY), ("i", "x", 50_000, NEVER, RETRY)];
    assert_eq!(env.send_many(&later).await, vec![1, 1]);
    wakes.assert_quiet(&env, "batch due later than the head").await;
    // A batch that stored nothing (duplicate: 0, wrong type: 2): nothing.
    env.raw(&["RPUSH", &env.k().msg("w"), "foreign"]);
    let dups: Vec<Msg> = vec![("a", "x", 0, NEVER, RETRY), ("w", "x", 0, NEVER, RETRY)];
    assert_eq!(env.send_many(&dups).await, vec![0, 2]);
    wakes.assert_quiet(&env, "send that stored nothing").await;
    // Due now into a pending whose head is later: publishes 0.
    assert_eq!(env.send("now", "x", 0, NEVER, RETRY).await, 1);
    assert_eq!(wakes.next().await, "0");
    wakes.assert_quiet(&env, "end").await;
}

#[tokio::test]
async fn nack_wakes_consumers_when_the_message_is_claimable_now_or_due_first() {
    let env = Env::new().await;
    let k = env.k().clone();
    let mut wakes = env.subscribe().await;

    // fail with no delay: to retry, publishes 0.
    let la = seed_processing(&env, "a", "1");
    assert_eq!(env.nack("a", la, fail(0)).await, 1);
    assert_eq!(wakes.next().await, "0");
    // release: to retry, publishes 0 (even with a delay given).
    let lb = seed_processing(&env, "b", "1");
    assert_eq!(env.release_with_delay("b", lb, 30_000).await, 1);
    assert_eq!(wakes.next().await, "0");
    // fail with a delay into an empty pending: publishes the delay.
    let lc = seed_processing(&env, "c", "1");
    assert_eq!(env.nack("c", lc, fail(20_000)).await, 1);
    assert_eq!(wakes.next().await, "20000");
    // fail with a delay later than the head: nothing.
    let ld = seed_processing(&env, "d", "1");
    assert_eq!(env.nack("d", ld, fail(40_000)).await, 1);
    wakes.assert_quiet(&env, "nack due later than the head").await;
    // fail with a delay earlier than the head: publishes the delay.
    let le = seed_processing(&env, "e", "1");
    assert_eq!(env.nack("e", le, fail(7_000)).await, 1);
    assert_eq!(wakes.next().await, "7000");
    assert_eq!(
        env.zset(&k.pending).iter().map(|p| p.0.as_str()).collect::<Vec<_>>(),
        vec!["e", "c", "d"]
    );
    // Out of deliveries, to the dead zset: nothing.
    let lg = seed_processing(&env, "g", "4");
    assert_eq!(env.nack("g", lg, fail(0)).await, 2);
    wakes.assert_quiet(&env, "nack to the dead zset").await;
    // A re-run of a's nack, and a lease the sweep took back: nothing.
    assert_eq!(env.nack_of("a", la, fail(0), "", 1).await, 1);
    let lt = seed_processing(&env, "t", "1");
    env.raw(&["ZADD", &k.processing, &(env.now_us() - 1_000).to_string(), "t"]);
    assert_eq!(env.timeout(10).await, vec![1, 0]);
    assert_eq!(wakes.next().await, "0");
    assert_eq!(env.nack_of("t", lt, Release, "", 1).await, 0);
    wakes.assert_quiet(&env, "nack with a lost lease").await;
}

#[tokio::test]
async fn timeout_wakes_consumers_when_it_moves_something_to_retry() {
    let env = Env::new().await;
    let k = env.k().clone();
    let mut wakes = env.subscribe().await;
    let now = env.now_us();

    // Nothing overdue: nothing.
    env.seed("ontime", Some("1"));
    env.raw(&["ZADD", &k.processing, &(now + 60_000_000).to_string(), "ontime"]);
    assert_eq!(env.timeout(10).await, vec![0, 0]);
    wakes.assert_quiet(&env, "timeout of nothing").await;
    // Overdue but out of deliveries, to the dead zset only: nothing.
    env.seed("dead", Some("4"));
    env.raw(&["ZADD", &k.processing, &(now - 1_000).to_string(), "dead"]);
    assert_eq!(env.timeout(10).await, vec![1, 1]);
    wakes.assert_quiet(&env, "timeout to the dead zset only").await;
    // Overdue with deliveries left (alongside a dead one): one wake-up, 0.
    env.seed("late1", Some("1"));
    env.seed("late2", Some("2"));
    env.seed("dead2", Some("9"));
    for (i, id) in ["late1", "dead2", "late2"].into_iter().enumerate() {
        env.raw(&["ZADD", &k.processing, &(now - 1_000 + i as i64).to_string(), id]);
    }
    assert_eq!(env.timeout(10).await, vec![3, 1]);
    assert_eq!(wakes.next().await, "0");
    wakes.assert_quiet(&env, "second wake-up for one timeout").await;
    assert_eq!(env.list(&k.retry), vec!["late1", "late2"]);
}
