//! Tests of the byte bounds of the scripts, exact Redis state after each
//! call: a claim leases at most `CLAIM_BYTES` of stored values (a bigger
//! one alone), and a big send is staged, its payload never passing
//! through Lua (lua/claim.lua, lua/send.lua, `staged` in lua/include/store.lua).

use std::time::Duration;

use fred::prelude::{KeysInterface, Value};

use super::Env;

use crate::message::Receipt;
use crate::store::ops::claim::{Claim, Claimed, Held, CLAIM_BYTES};
use crate::store::ops::promote::Promote;
use crate::store::ops::send::{Outgoing, SendBatch, SendOutcome};
use crate::store::scripts;
use crate::store::stored::{encode_staged, ValueParts};
use crate::store::Op;
use crate::Error;

/// 600 KiB: two do not fit the 1 MiB budget, one does.
const BIG: usize = 600 * 1024;

impl Env {
    /// The script of `op` alone, without staging what it stages.
    async fn call<O: Op>(&self, op: &O) -> Result<Value, fred::error::Error> {
        O::script()
            .call(&self.client, op.keys(self.k()), op.args(self.k()))
            .await
    }

    /// Sends `payload` under `id` through the API (staged when big).
    async fn send_big(&self, id: &str, payload: Vec<u8>) {
        self.queue.send(payload).id(id).await.expect("send");
    }

    /// Sends, then promotes everything due.
    async fn send_ready(&self, msgs: &[(&str, usize)]) {
        for &(id, size) in msgs {
            self.send_big(id, payload(id, size)).await;
        }
        let moved = self
            .run(&Promote {
                limit: 1000,
                room: 1000,
            })
            .await
            .moved;
        assert_eq!(moved as usize, msgs.len(), "all due");
    }

    /// Claim request `seq` of consumer "c" for `limit`, with `budget` bytes
    /// (`CLAIM_BYTES` unless given).
    async fn claim_bytes(&self, seq: u64, limit: usize, budget: Option<u64>) -> Claimed {
        let receipt = self.k().claim("c");
        let op = Claim {
            receipt: &receipt,
            limit,
            max_consume_duration: Duration::from_secs(60),
            seq,
            dead_letter_retention: Duration::from_secs(3600),
            group_share: 0,
        };
        let mut args = op.args(self.k());
        if let Some(budget) = budget {
            // ARGV[8]: the byte budget.
            args[7] = i64::try_from(budget).expect("budget").into();
        }
        let reply = scripts::CLAIM
            .call(&self.client, op.keys(self.k()), args)
            .await
            .expect("claim");
        op.reply(reply).expect("claim reply")
    }

    fn ready(&self) -> Vec<String> {
        self.lines(&["LRANGE", &self.k().ready, "0", "-1"])
    }

    fn processing(&self) -> Vec<String> {
        self.lines(&["ZRANGE", &self.k().processing, "0", "-1"])
    }

    /// The totals' field 'big', "" when missing.
    fn big(&self) -> String {
        let big = self.raw(&["HGET", &self.k().totals, "big"]);
        if big == "(nil)" {
            String::new()
        } else {
            big
        }
    }

    /// Keys under the queue's staging prefix.
    fn staging_keys(&self) -> Vec<String> {
        self.lines(&["KEYS", &format!("{}*", self.k().staging(""))])
    }

    async fn value(&self, id: &str) -> Vec<u8> {
        let v: Vec<u8> = self.client.get(self.k().msg(id)).await.expect("GET");
        v
    }
}

/// A payload of `size` bytes that names its message.
fn payload(id: &str, size: usize) -> Vec<u8> {
    let mut p = id.as_bytes().to_vec();
    p.resize(size, b'.');
    p
}

fn ids(c: &Claimed) -> Vec<String> {
    c.deliveries
        .iter()
        .map(|d| d.id.as_ref().expect("id").as_str().to_string())
        .collect()
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[tokio::test]
async fn a_claim_leases_what_fits_its_byte_budget_and_says_more_waits() {
    let env = Env::new().await;
    env.send_ready(&[("a", BIG), ("b", BIG), ("c", BIG)]).await;
    assert_eq!(env.big(), "1", "send marks a queue that stored a big value");
    assert_eq!(env.ready(), strings(&["a", "b", "c"]));

    let first = env.claim_bytes(1, 10, None).await;
    assert_eq!(
        (ids(&first), first.popped, first.held),
        (strings(&["a"]), 1, Some(Held::Cut))
    );
    let a = &first.deliveries[0];
    let receipt = Receipt {
        id: a.id.clone().expect("a text id"),
        attempt: a.attempt,
        lease: first.lease,
        deadline: tokio::time::Instant::now(),
    };
    let message = a.message(receipt).expect("a stored value");
    assert_eq!(message.payload, payload("a", BIG));
    assert_eq!((env.ready(), env.processing()), (strings(&["b", "c"]), strings(&["a"])));

    let second = env.claim_bytes(2, 10, None).await;
    assert_eq!((ids(&second), second.held), (strings(&["b"]), Some(Held::Cut)));
    // The last one fits: the lists, not the budget, end the request.
    let third = env.claim_bytes(3, 10, None).await;
    assert_eq!((ids(&third), third.popped, third.held), (strings(&["c"]), 1, None));
    assert_eq!((env.ready(), env.processing()), (vec![], strings(&["a", "b", "c"])));
    let fourth = env.claim_bytes(4, 10, None).await;
    assert_eq!((fourth.popped, fourth.held), (0, None));
}

#[tokio::test]
async fn messages_that_fit_together_are_leased_together() {
    let env = Env::new().await;
    let small = usize::try_from(CLAIM_BYTES).unwrap() / 4 - 64;
    env.send_ready(&[("a", small), ("b", small), ("c", small), ("d", small), ("e", small)])
        .await;
    let first = env.claim_bytes(1, 10, None).await;
    assert_eq!(
        (ids(&first), first.held),
        (strings(&["a", "b", "c", "d"]), Some(Held::Cut))
    );
    assert_eq!(env.ready(), strings(&["e"]));
}

#[tokio::test]
async fn a_message_bigger_than_the_budget_is_leased_alone() {
    let env = Env::new().await;
    env.send_ready(&[("big1", BIG), ("small", 100), ("big2", BIG)]).await;
    let budget = Some(100 * 1024);
    // First of the call: leased however big, and alone.
    let first = env.claim_bytes(1, 10, budget).await;
    assert_eq!((ids(&first), first.held), (strings(&["big1"]), Some(Held::Cut)));
    // A small one first: the big one after it waits for the next call.
    let second = env.claim_bytes(2, 10, budget).await;
    assert_eq!((ids(&second), second.held), (strings(&["small"]), Some(Held::Cut)));
    assert_eq!(env.ready(), strings(&["big2"]));
    let third = env.claim_bytes(3, 10, budget).await;
    assert_eq!((ids(&third), third.held), (strings(&["big2"]), None));
    assert_eq!(env.processing().len(), 3);
}

#[tokio::test]
async fn a_repeated_claim_returns_the_same_deliveries_and_leases_no_more() {
    let env = Env::new().await;
    env.send_ready(&[("a", BIG), ("b", BIG), ("c", BIG)]).await;
    let first = env.claim_bytes(7, 10, None).await;
    // The same request again (its reply lost): a replay.
    let again = env.claim_bytes(7, 10, None).await;
    assert_eq!((ids(&again), again.lease), (ids(&first), first.lease));
    assert_eq!(again.deliveries[0].value, first.deliveries[0].value);
    assert_eq!((env.ready(), env.processing()), (strings(&["b", "c"]), strings(&["a"])));
    // A new request leases the next.
    let next = env.claim_bytes(8, 10, None).await;
    assert_eq!(ids(&next), strings(&["b"]));
}

#[tokio::test]
async fn a_queue_whose_big_values_came_unmarked_is_marked_by_the_claim_that_reads_one() {
    let env = Env::new().await;
    // As a producer that does not mark big values stores them: no 'big'.
    let k = env.k();
    for id in ["a", "b", "c", "d", "e"] {
        let mut value = b"3/1700000000000+0:".to_vec();
        value.extend(payload(id, BIG));
        let _: () = env.client.set(k.msg(id), value, None, None, false).await.unwrap();
        env.raw(&["RPUSH", &k.ready, id]);
    }
    assert_eq!(env.big(), "");
    // Without the mark sizes are not read: the list heads come whole.
    let first = env.claim_bytes(1, 2, None).await;
    assert_eq!((ids(&first), first.held), (strings(&["a", "b"]), None));
    assert_eq!(env.big(), "1");
    let second = env.claim_bytes(2, 10, None).await;
    assert_eq!((ids(&second), second.held), (strings(&["c"]), Some(Held::Cut)));
    assert_eq!(env.ready(), strings(&["d", "e"]));
}

#[tokio::test]
async fn small_values_leave_the_queue_unmarked_and_purge_clears_the_mark() {
    let env = Env::new().await;
    env.send_ready(&[("a", 100), ("b", 4000)]).await;
    assert_eq!(env.big(), "", "no value over BIG_VALUE (4096 bytes)");
    env.send_big("c", payload("c", 5000)).await;
    assert_eq!(env.big(), "1");
    while env.queue.purge().await.unwrap() > 0 {}
    assert_eq!(env.big(), "");
}

#[tokio::test]
async fn a_big_send_is_stored_with_its_times_and_leaves_no_staged_value() {
    let env = Env::new().await;
    let before = env.server.now_ms();
    let id = env
        .queue
        .send(payload("x", 10_000))
        .id("x")
        .delay(Duration::from_millis(5_000))
        .expire_after(Duration::from_secs(60))
        .await
        .unwrap();
    let after = env.server.now_ms();
    let value = env.value(id.as_str()).await;
    let colon = value.iter().position(|&b| b == b':').unwrap();
    let header = std::str::from_utf8(&value[..colon]).unwrap();
    let (retry, times) = header.split_once('/').unwrap();
    let (sent, rest) = times.split_once('+').unwrap();
    let (delay, expires) = rest.split_once('@').unwrap();
    let sent: u64 = sent.parse().unwrap();
    assert!(
        (before..=after).contains(&sent) && sent.to_string().len() == 13,
        "{header}"
    );
    assert_eq!((retry, delay), ("3", "000000005000"));
    assert_eq!(expires.parse::<u64>().unwrap(), sent + 5_000 + 60_000);
    assert_eq!(&value[colon + 1..], payload("x", 10_000).as_slice());
    let pttl: i64 = env.client.pttl(env.k().msg("x")).await.unwrap();
    assert_eq!(pttl, -1, "a live payload has no TTL");
    let due = env.raw(&["ZSCORE", &env.k().pending, "x"]);
    assert_eq!(due.parse::<u64>().unwrap(), sent + 5_000);
    assert_eq!(env.staging_keys(), Vec::<String>::new());
    // What the consumer reads.
    let got = env.queue.get(&id).await.unwrap().expect("stored");
    assert_eq!(got.payload, payload("x", 10_000));
    // Rescheduled, the delay keeps its width: written in place.
    assert!(env.queue.reschedule(&id, Duration::from_secs(100)).await.unwrap());
    let moved = env.value(id.as_str()).await;
    assert_eq!(moved.len(), value.len());
    let times = crate::store::stored::decode_stored(&moved).unwrap().times.unwrap();
    let due = env.raw(&["ZSCORE", &env.k().pending, "x"]);
    assert_eq!(times.due_at_ms, due.parse::<u64>().unwrap());
}

#[tokio::test]
async fn a_big_send_of_a_live_id_changes_nothing_and_deletes_its_staged_value() {
    let env = Env::new().await;
    env.send_big("x", payload("x", 10_000)).await;
    let stored = env.value("x").await;
    let again = env.queue.send(payload("y", 20_000)).id("x").await;
    assert!(matches!(again, Err(Error::Duplicate { .. })), "{again:?}");
    assert_eq!(env.value("x").await, stored);
    assert_eq!(env.staging_keys(), Vec::<String>::new());
}

/// One staged message "x" of 10 KB, due now, never expiring.
fn staged_batch(value: Vec<u8>) -> SendBatch {
    SendBatch {
        msgs: vec![Outgoing {
            id: "x".into(),
            value: value.into(),
            delay: Duration::ZERO,
            expire_after: None,
            own_id: true,
            wait: false,
            stage: Some("t1".into()),
            mode: None,
        }],
    }
}

#[tokio::test]
async fn a_staged_value_gone_before_the_script_stores_nothing() {
    let env = Env::new().await;
    let value = encode_staged(&ValueParts::new(3, &payload("x", 10_000)), 0, false);
    let op = staged_batch(value);
    // The script alone: nothing was SET at the staging string.
    let reply = env.call(&op).await.expect("send");
    assert_eq!(op.reply(reply).unwrap(), vec![(SendOutcome::StagedGone, None)]);
    assert_eq!(env.raw(&["EXISTS", &env.k().msg("x")]), "0");
    assert_eq!(env.raw(&["ZCARD", &env.k().pending]), "0");
    assert_eq!(env.raw(&["HGET", &env.k().totals, "sent"]), "(nil)");
}

#[tokio::test]
async fn a_staged_value_without_its_placeholders_fails_the_send_before_any_write() {
    let env = Env::new().await;
    let op = staged_batch(b"3:no times here".to_vec());
    let staging = env.k().staging("t1");
    let _: () = env
        .client
        .set(&staging, b"3:no times here".to_vec(), None, None, false)
        .await
        .unwrap();
    let err = env.call(&op).await.expect_err("a malformed staged value");
    assert!(err.details().contains("lacks its time placeholders"), "{err:?}");
    assert_eq!(env.raw(&["EXISTS", &env.k().msg("x")]), "0");
    assert_eq!(env.raw(&["ZCARD", &env.k().pending]), "0");
    assert_eq!(env.raw(&["EXISTS", &staging]), "1", "left to its TTL");
}

#[tokio::test]
async fn requeue_drops_a_big_values_deadline_in_place() {
    let env = Env::new().await;
    env.queue
        .send(payload("x", BIG))
        .id("x")
        .expire_after(Duration::from_millis(1))
        .await
        .unwrap();
    let sent = env.value("x").await;
    let deadline = crate::store::stored::decode_stored(&sent)
        .unwrap()
        .expires_at_ms
        .unwrap();
    assert!(crate::test_support::wait_until(crate::test_support::WAIT, || env.server.now_ms() > deadline).await);
    env.run(&Promote { limit: 10, room: 10 }).await;
    let buried = env.claim_bytes(1, 10, None).await;
    assert_eq!(buried.expired.len(), 1, "expired into the dead letters");
    let done = env
        .run(&crate::store::ops::requeue::Requeue {
            limit: 10,
            ids: vec!["x"],
        })
        .await;
    assert_eq!(done.requeued, 1);
    let requeued = env.value("x").await;
    let (old, new) = (
        crate::store::stored::decode_stored(&sent).unwrap(),
        crate::store::stored::decode_stored(&requeued).unwrap(),
    );
    assert_eq!(requeued.len(), sent.len(), "rewritten in place");
    assert_eq!((new.expires_at_ms, new.times), (None, old.times));
    assert_eq!(new.payload, payload("x", BIG).as_slice());
    let pttl: i64 = env.client.pttl(env.k().msg("x")).await.unwrap();
    assert_eq!(pttl, -1, "live again: no TTL");
    let again = env.claim_bytes(2, 10, None).await;
    assert_eq!(ids(&again), strings(&["x"]));
}
