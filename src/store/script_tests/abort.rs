//! cancel.lua's abort, and what ack, nack, timeout, extend and purge do
//! with an aborted message (lua/include/abort.lua).

use super::{nack_op, Env, NEVER, RETRY};
use crate::store::ops::cancel::Abort;
use crate::store::ops::nack::NackMode;
use crate::store::ops::purge::Purge;
use crate::store::Keys;
use crate::AbortOutcome;

/// The aborted hash, as lua/include/abort.lua builds it from the base.
fn aborted(k: &Keys) -> String {
    format!("{}aborted", k.base)
}

impl Env {
    async fn abort(&self, id: &str) -> AbortOutcome {
        self.run(&Abort { id }).await
    }

    /// Sends `id` and claims it: its lease.
    async fn running(&self, id: &str) -> i64 {
        self.send(id, "x", 0, NEVER, RETRY).await;
        self.promote(10).await;
        let c = self.claim(1).await;
        assert_eq!(c.ids(), vec![id]);
        c.lease
    }

    /// Asserts `id` left nothing: no payload, record, lease or mark.
    fn assert_gone(&self, id: &str) {
        let k = self.k();
        assert!(self.payload(id).is_none(), "{id} payload");
        assert!(self.record(id).is_none(), "{id} record");
        assert!(self.zscore(&k.processing, id).is_none(), "{id} lease");
        assert!(!self.exists(&aborted(k)), "{id}: the aborted hash is left");
        assert!(self.dead().is_empty() && self.list(&k.retry).is_empty() && self.zset(&k.pending).is_empty());
    }
}

#[tokio::test]
async fn abort_cancels_a_waiting_message_and_answers_unknown_ids_writing_nothing() {
    let env = Env::new().await;
    env.send("w", "x", 60_000, NEVER, RETRY).await;
    assert_eq!(env.abort("w").await, AbortOutcome::Cancelled);
    assert!(env.payload("w").is_none());
    let state = env.snapshot();
    assert_eq!(env.abort("w").await, AbortOutcome::NotFound);
    assert_eq!(env.abort("unknown").await, AbortOutcome::NotFound);
    assert_eq!(env.snapshot(), state);
    // A plain cancel still leaves a running message alone.
    env.running("r").await;
    assert_eq!(env.cancel("r").await, 0);
    assert!(!env.exists(&aborted(env.k())));
}

#[tokio::test]
async fn an_aborted_running_message_is_marked_signalled_once_and_its_ack_ends_it_as_aborted() {
    let env = Env::new().await;
    let k = env.k().clone();
    let lease = env.running("r").await;
    let mut wakes = env.subscribe().await;
    assert_eq!(env.abort("r").await, AbortOutcome::Aborting);
    assert_eq!(wakes.next().await, "abort r");
    assert_eq!(env.lines(&["HKEYS", &aborted(&k)]), vec!["r"]);
    // Again: the same answer for as long as it runs, nothing written, no signal.
    let state = env.snapshot();
    assert_eq!(env.abort("r").await, AbortOutcome::AlreadyAborted);
    assert_eq!(env.snapshot(), state);
    wakes.assert_quiet(&env, "a second abort").await;
    // Still processing: the handler decides when to return.
    assert_eq!(env.zscore(&k.processing, "r"), Some(lease));

    // Its ack, with another message's in the same batch.
    let other = env.running("o").await;
    assert_eq!(env.ack(&[("r", lease), ("o", other)]).await, vec![4, 1]);
    env.assert_gone("r");
    env.assert_gone("o");
    assert_eq!(env.hget(&k.totals, "aborted"), "1");
    assert_eq!(env.hget(&k.totals, "acked"), "1");
    // The ack re-sent finds nothing left; the abort now finds no message.
    assert_eq!(env.ack(&[("r", lease)]).await, vec![2]);
    assert_eq!(env.abort("r").await, AbortOutcome::NotFound);
}

#[tokio::test]
async fn an_ack_first_wins_the_race_and_the_abort_then_finds_nothing() {
    let env = Env::new().await;
    let lease = env.running("r").await;
    assert_eq!(env.ack(&[("r", lease)]).await, vec![1]);
    let state = env.snapshot();
    assert_eq!(env.abort("r").await, AbortOutcome::NotFound);
    assert_eq!(env.snapshot(), state);
}

#[tokio::test]
async fn whatever_the_nack_mode_an_aborted_message_ends_as_aborted_not_retried_nor_dead() {
    let env = Env::new().await;
    let k = env.k().clone();
    let modes = [
        NackMode::Fail {
            delay: std::time::Duration::ZERO,
        },
        NackMode::Dead,
        NackMode::Release,
        NackMode::Defer {
            delay: std::time::Duration::from_secs(60),
        },
    ];
    for (i, mode) in modes.into_iter().enumerate() {
        let id = format!("n{i}");
        let lease = env.running(&id).await;
        assert_eq!(env.abort(&id).await, AbortOutcome::Aborting);
        let attempt = env.attempt(&id);
        let op = nack_op(&id, lease, mode, "boom", attempt);
        assert_eq!(env.run(&op).await as i64, 4, "{id}");
        env.assert_gone(&id);
        // A re-run finds nothing left.
        assert_eq!(env.run(&op).await as i64, 3, "{id} again");
    }
    assert_eq!(env.hget(&k.totals, "aborted"), "4");
    assert_eq!(env.int(&["HEXISTS", &k.totals, "failed"]), 0);
    assert_eq!(env.int(&["HEXISTS", &k.totals, "dead"]), 0);
}

#[tokio::test]
async fn a_lease_that_runs_out_on_an_aborted_message_ends_it_instead_of_redelivering() {
    let env = Env::new().await;
    let k = env.k().clone();
    let lease = env.running("r").await;
    let other = env.running("o").await;
    assert_eq!(env.abort("r").await, AbortOutcome::Aborting);
    // Both leases run out (the consumer holding them died).
    for id in ["r", "o"] {
        env.raw(&["ZADD", &k.processing, "1", id]);
    }
    let reply = env.timed_out(10).await;
    assert_eq!(reply.count, 1, "only o is taken back");
    assert_eq!(reply.aborted, vec![crate::MessageId::from("r")]);
    assert!(reply.dead.is_empty());
    assert!(env.payload("r").is_none() && env.record("r").is_none());
    assert!(!env.exists(&aborted(&k)));
    assert_eq!(env.list(&k.retry), vec!["o"]);
    assert_eq!(env.hget(&k.totals, "aborted"), "1");
    // Its consumer's late ack changes nothing.
    assert_eq!(env.ack(&[("r", lease)]).await, vec![2]);
    let _ = other;
    // Only aborted ones overdue: the same.
    let env = Env::new().await;
    let k = env.k().clone();
    env.running("s").await;
    env.abort("s").await;
    env.raw(&["ZADD", &k.processing, "1", "s"]);
    let reply = env.timed_out(10).await;
    assert_eq!((reply.count, reply.aborted.len()), (0, 1));
    assert!(!env.exists(&aborted(&k)) && env.payload("s").is_none());
}

#[tokio::test]
async fn a_renewal_tells_the_consumer_of_the_abort_and_still_renews() {
    let env = Env::new().await;
    let k = env.k().clone();
    let lease = env.running("r").await;
    let other = env.running("o").await;
    env.abort("r").await;
    let renewed = env
        .extend(&[("r", lease, lease + 1_000), ("o", other, other + 1_000), ("gone", 1, 2)])
        .await;
    assert_eq!(renewed, vec![2, 1, 0]);
    assert_eq!(env.zscore(&k.processing, "r"), Some(lease + 1_000));
}

#[tokio::test]
async fn purge_deletes_the_aborted_hash_with_the_messages() {
    let env = Env::new().await;
    env.running("r").await;
    env.abort("r").await;
    while env.run(&Purge { limit: 10 }).await != 0 {}
    assert!(!env.exists(&aborted(env.k())));
    // The claim receipt alone stays (it has a TTL).
    assert_eq!(env.keys().len(), 1, "{:?}", env.keys());
}
