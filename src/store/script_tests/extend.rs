//! extend.lua: renewing leases.

use super::{seed_processing, Env};

#[tokio::test]
async fn extend_renews_only_current_leases_and_leaves_payloads_alone() {
    let env = Env::new().await;
    let k = env.k().clone();
    let la = seed_processing(&env, "a", "1");
    let lb = seed_processing(&env, "b", "1");
    let (na, nb) = (la + 60_000_000, lb + 60_000_000);
    let reply = env.extend(&[("a", la, na), ("b", lb - 1, nb), ("nope", la, na)]).await;
    assert_eq!(
        reply,
        vec![1, 0, 0],
        "only the pair holding the current lease is renewed"
    );
    assert_eq!(env.zscore(&k.processing, "a"), Some(na));
    assert_eq!(env.zscore(&k.processing, "b"), Some(lb), "a lost lease is left alone");
    assert!(!env.exists(&k.msg("nope")) && env.zscore(&k.processing, "nope").is_none());
    // A live payload has no TTL to extend.
    assert_eq!(env.pttl("a"), -1);

    // A re-sent request (reply lost) finds its own renewal and says so.
    let state = env.snapshot();
    assert_eq!(env.extend(&[("a", la, na)]).await, vec![1]);
    assert_eq!(env.snapshot(), state);

    // The renewed lease fences ack: the old one no longer acks.
    assert_eq!(env.ack(&[("a", la)]).await, vec![0]);
    assert_eq!(env.ack(&[("a", na)]).await, vec![1]);
}

#[tokio::test]
async fn extend_does_not_renew_into_the_past_or_a_redelivered_message() {
    let env = Env::new().await;
    let k = env.k().clone();
    let lease = seed_processing(&env, "a", "1");
    let past = env.now_us() - 1_000;
    assert_eq!(env.extend(&[("a", lease, past)]).await, vec![0]);
    assert_eq!(env.zscore(&k.processing, "a"), Some(lease));

    // Timed out and taken back: a renewal of the old lease does nothing.
    env.raw(&["ZADD", &k.processing, "1", "a"]);
    assert_eq!(env.timeout(10).await[0], 1);
    let state = env.snapshot();
    assert_eq!(env.extend(&[("a", lease, lease + 60_000_000)]).await, vec![0]);
    assert_eq!(env.snapshot(), state);
    assert_eq!(env.list(&k.retry), vec!["a"]);
    assert_eq!(env.extend(&[]).await, Vec::<i64>::new());
}
