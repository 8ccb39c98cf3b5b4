//! Groups (docs/groups.md): promote.lua moves a grouped message to its
//! group's zset, claim.lua serves the ring's groups in turn, ack, nack,
//! timeout, cancel and requeue keep each group's count in processing and
//! its place in the ring; groups.lua sets limits, rates and pauses.

use crate::store::ops::groups::{ChangeGroups, GroupChange};
use crate::store::ops::list_groups::ListGroups;
use crate::store::ops::nack::NackMode;
use crate::store::ops::purge::Purge;
use crate::store::ops::requeue::Requeue;
use crate::store::stored::{encode_stored, ValueParts};

use super::{fail, ms, Env, Promote, NEVER, RETRY};
use crate::store::ops::claim::Held;

/// 2^42, the span of one priority's scores (PRIO_SPAN in lua/include/priorities.lua).
const PRIO_SPAN: i64 = 1 << 42;

impl Env {
    /// Sends `id` (payload: its id) in group `group` (none: ''), due now.
    pub(super) async fn send_grouped(&self, id: &str, group: &str) {
        self.send_grouped_at(id, group, 0).await;
    }

    /// Sends `id` (payload: its id) of priority `priority` in group `group`, due now.
    async fn send_grouped_at(&self, id: &str, group: &str, priority: u8) {
        let value = encode_stored(&ValueParts {
            retry_count: RETRY as u32,
            priority,
            group: (!group.is_empty()).then_some(group),
            payload: id.as_bytes(),
            ..Default::default()
        });
        assert_eq!(self.send_values(&[(id, value, 0, NEVER, false)]).await, vec![1]);
    }

    pub(super) fn group_key(&self, name: &str) -> String {
        format!("{}{name}", self.k().group_prefix)
    }

    /// The ids in group `group`'s zset, in order.
    fn group_ids(&self, group: &str) -> Vec<String> {
        self.lines(&["ZRANGE", &self.group_key(&format!(":{group}:ready")), "0", "-1"])
    }

    /// The ring's members, in turn order.
    fn ring(&self) -> Vec<String> {
        self.lines(&["ZRANGE", &self.group_key("ring"), "0", "-1"])
    }

    /// The groups' counts in processing, sorted.
    fn active(&self) -> Vec<String> {
        let mut h = self.lines(&["HGETALL", &self.group_key("active")]);
        h.sort();
        h
    }

    async fn change(&self, change: GroupChange<'_>) -> bool {
        self.run(&ChangeGroups { change }).await
    }

    /// The lease of delivery `id`, from processing.
    fn lease_of(&self, id: &str) -> i64 {
        self.zscore(&self.k().processing, id).expect("in processing")
    }
}

#[tokio::test]
async fn claim_serves_groups_in_turn_and_acks_leave_no_group_key() {
    let env = Env::new().await;
    let k = env.k().clone();
    // u1 pending and due: the grouped messages go through pending too.
    env.send_grouped("u1", "").await;
    for id in ["a1", "a2", "a3", "a4", "a5"] {
        env.send_grouped(id, "A").await;
    }
    env.send_grouped("b1", "B").await;
    assert_eq!(env.stored("b1").as_deref(), Some("3=B:b1"));
    assert_eq!(env.hget(&k.totals, "groups"), "1");
    let due: Vec<(String, i64)> = env.zset(&k.pending);
    assert_eq!(env.promote(1000).await[0], 7);
    assert_eq!(env.list(&k.ready), vec!["u1"], "no group: the ready list");
    assert_eq!(env.group_ids("A"), vec!["a1", "a2", "a3", "a4", "a5"]);
    let score = |id: &str| 10 * PRIO_SPAN + due.iter().find(|(i, _)| i == id).unwrap().1;
    assert_eq!(
        env.zset(&env.group_key(":B:ready")),
        vec![("b1".to_string(), score("b1"))],
        "scored as the priority zset: priority 0, then due time"
    );
    assert_eq!(env.ring(), vec!["A", "B"], "in the order promote found them");
    assert_eq!(env.raw(&["GET", &env.group_key("ready")]), "6", "counted");
    assert_eq!(env.stats().await[1], 7, "ready counts the groups' messages");

    // A request of 3: one each of A, B and the messages without a group
    // (the member '', put at the ring's tail by this claim).
    let c = env.claim(3).await;
    assert_eq!(c.ids(), ["u1", "a1", "b1"]);
    assert_eq!(c.held, None);
    assert_eq!(env.ring(), vec!["A"], "B and '' emptied; A back at the tail");
    assert_eq!(env.raw(&["GET", &env.group_key("ready")]), "4");
    assert_eq!(env.active(), vec!["1", "1", "A", "B"]);
    assert!(!env.exists(&env.group_key(":B:ready")));

    // A big request takes the rest of A: one group may have all of it.
    let c2 = env.claim(10).await;
    assert_eq!(c2.ids(), ["a2", "a3", "a4", "a5"]);
    assert_eq!(env.active(), vec!["1", "5", "A", "B"], "A 5, B 1");
    assert!(!env.exists(&env.group_key("ring")));

    let mut pairs: Vec<(String, i64)> = Vec::new();
    for id in ["u1", "a1", "b1", "a2", "a3", "a4", "a5"] {
        pairs.push((id.to_string(), env.lease_of(id)));
    }
    let pairs: Vec<(&str, i64)> = pairs.iter().map(|(id, l)| (id.as_str(), *l)).collect();
    assert_eq!(env.ack(&pairs).await, vec![1; 7]);
    // The two consumers' receipts (TTL: the lease) and the totals.
    let left: Vec<String> = env.keys().into_iter().filter(|key| !key.contains(":claim:")).collect();
    assert_eq!(left, vec![k.totals.clone()], "no group key left");
}

#[tokio::test]
async fn a_group_at_its_concurrency_leaves_the_ring_until_an_ack() {
    let env = Env::new().await;
    let k = env.k().clone();
    assert!(env.change(GroupChange::Limit(None, Some(1))).await);
    assert!(!env.change(GroupChange::Limit(None, Some(1))).await, "so already");
    assert_eq!(env.lines(&["HGETALL", &env.group_key("limits")]), vec!["", "1"]);
    for (id, group) in [("a1", "A"), ("a2", "A"), ("b1", "B")] {
        env.send_grouped(id, group).await;
    }
    env.promote(1000).await;
    let c = env.claim(10).await;
    assert_eq!(c.ids(), ["a1", "b1"]);
    assert_eq!(
        (c.held, c.group_ms),
        (None, None),
        "A's limit holds A alone, and the ack that frees it says so"
    );
    assert!(!env.exists(&env.group_key("ring")), "A at its limit, B empty");
    assert_eq!(env.group_ids("A"), vec!["a2"]);
    let c = env.claim(10).await;
    assert_eq!((c.popped, c.held), (0, None), "nothing in the ring: no group read");

    // An ack frees A's slot: A goes back to the ring.
    assert_eq!(env.ack(&[("a1", env.lease_of("a1"))]).await, vec![1]);
    assert_eq!(env.ring(), vec!["A"]);
    assert_eq!(env.active(), vec!["1", "B"]);
    // Its own limit over the default: 2 lets a second one start.
    env.send_grouped("a3", "A").await;
    env.promote(1000).await;
    assert!(env.change(GroupChange::Limit(Some("A"), Some(2))).await);
    assert_eq!(env.claim(10).await.ids(), ["a2", "a3"]);
    assert_eq!(env.active(), vec!["1", "2", "A", "B"]);
    assert_eq!(env.stats().await[2], 3, "processing");
    let _ = k;
}

#[tokio::test]
async fn one_ack_of_many_groups_counts_each_down_wakes_the_freed_and_forgets_the_emptied() {
    let env = Env::new().await;
    assert!(env.change(GroupChange::Limit(Some("C"), Some(1))).await);
    for (id, group) in [
        ("a1", "A"),
        ("a2", "A"),
        ("a3", "A"),
        ("b1", "B"),
        ("c1", "C"),
        ("c2", "C"),
    ] {
        env.send_grouped(id, group).await;
    }
    env.promote(1000).await;
    // One each, then A's second: C is at its limit, B empty.
    let claim = env.claim(4).await;
    let mut claimed = claim.ids().to_vec();
    claimed.sort();
    assert_eq!(claimed, ["a1", "a2", "b1", "c1"]);
    assert_eq!(env.ring(), ["A"]);
    assert_eq!(env.active(), ["1", "1", "2", "A", "B", "C"]);

    // A count that stays above 0; A stays where it is in the ring.
    assert_eq!(env.ack(&[("a1", env.lease_of("a1"))]).await, [1]);
    assert_eq!(env.active(), ["1", "1", "1", "A", "B", "C"]);
    assert_eq!(env.ring(), ["A"]);

    // Three groups in one call: A (in the ring) is left alone, C (its
    // slot freed) goes back to the ring, B (nothing left) is forgotten.
    let rest: Vec<(&str, i64)> = ["a2", "b1", "c1"].iter().map(|id| (*id, env.lease_of(id))).collect();
    assert_eq!(env.ack(&rest).await, [1, 1, 1]);
    assert!(env.active().is_empty(), "{:?}", env.active());
    assert_eq!(env.ring(), ["A", "C"]);
    assert_eq!(env.lines(&["ZRANGE", &env.group_key("known"), "0", "-1"]), ["A", "C"]);
    assert_eq!(env.claim(10).await.ids(), ["a3", "c2"]);
}

/// Whatever frees a slot of a group at its concurrency (an ack, a timeout
/// or nack that buries, a nack with a delay) puts it back in the ring and
/// publishes a wake-up of 0, so a consumer anywhere starts its next
/// message at once (docs/groups.md).
#[tokio::test]
async fn whatever_frees_a_slot_of_a_group_at_its_concurrency_wakes_consumers() {
    let env = Env::new().await;
    let k = env.k().clone();
    assert!(env.change(GroupChange::Limit(Some("A"), Some(2))).await);
    // a1 has no delivery left: its timeout buries it.
    let value = encode_stored(&ValueParts {
        retry_count: 0,
        group: Some("A"),
        payload: b"a1",
        ..Default::default()
    });
    assert_eq!(env.send_values(&[("a1", value, 0, NEVER, false)]).await, vec![1]);
    for id in ["a2", "a3", "a4", "a5", "a6"] {
        env.send_grouped(id, "A").await;
    }
    env.promote(1000).await;
    assert_eq!(env.claim(10).await.ids(), ["a1", "a2"]);
    assert!(env.ring().is_empty(), "A at its limit");
    let mut wakes = env.subscribe().await;
    assert_eq!(env.ack(&[("a2", env.lease_of("a2"))]).await, vec![1]);
    assert_eq!(
        (env.ring(), wakes.next().await.as_str()),
        (vec!["A".to_string()], "0"),
        "ack"
    );
    assert_eq!(env.claim(10).await.ids(), ["a3"]);
    env.raw(&["ZADD", &k.processing, "XX", "1", "a1"]);
    assert_eq!(env.timeout(10).await, vec![1, 1]);
    assert_eq!(wakes.next().await, "0", "a timeout to the dead zset");
    assert_eq!(env.claim(10).await.ids(), ["a4"]);
    assert_eq!(env.nack("a3", env.lease_of("a3"), NackMode::Dead).await, 2);
    assert_eq!(wakes.next().await, "0", "a nack to the dead zset");
    assert_eq!(env.claim(10).await.ids(), ["a5"]);
    // The retry waits in pending (its own wake-up: its delay); its slot is free now.
    assert_eq!(env.nack("a4", env.lease_of("a4"), fail(30_000)).await, 1);
    assert_eq!(wakes.next().await, "30000");
    assert_eq!(wakes.next().await, "0", "a nack with a delay");
    assert_eq!(env.claim(10).await.ids(), ["a6"]);
    // A slot freed while nothing of the group is due: not in the ring, no wake-up.
    assert_eq!(env.ack(&[("a5", env.lease_of("a5"))]).await, vec![1]);
    assert!(env.ring().is_empty());
    wakes.assert_quiet(&env, "a group with nothing due").await;
}

/// A group at its rate waits out of the ring: the claim that starts the
/// earliest wait publishes its ms (every consumer sets a timer to it),
/// every claim says how long until the earliest wait is over, and the
/// promote at that instant puts the group back and says so (a claim
/// follows though no message moved).
#[tokio::test]
async fn a_group_held_by_its_rate_says_when_its_window_opens() {
    let env = Env::new().await;
    assert_eq!(env.claim(10).await.group_ms, None, "no group: no wait");
    assert!(env.change(GroupChange::Rate(Some("A"), Some((2, 1000)))).await);
    for id in ["a1", "a2", "a3"] {
        env.send_grouped(id, "A").await;
    }
    env.promote(1000).await;
    let mut wakes = env.subscribe().await;
    let c = env.claim(10).await;
    assert_eq!(c.ids(), ["a1"], "one in this bucket");
    let ms = c.group_ms.expect("A waits");
    assert!((1..=20).contains(&ms), "until the next bucket: {ms}");
    assert_eq!(wakes.next().await, ms.to_string());
    // A claim that starts no wait publishes nothing, and still says when.
    let far = env.now_ms() + 60_000;
    env.raw(&["ZADD", &env.group_key("wait"), "XX", &far.to_string(), "A"]);
    let c = env.claim(10).await;
    assert_eq!(c.popped, 0);
    assert!((59_000..=60_000).contains(&c.group_ms.expect("A waits")));
    wakes.assert_quiet(&env, "a claim that started no wait").await;
    // Its wait over: promote puts it back in the ring, and says so.
    env.raw(&["ZADD", &env.group_key("wait"), "XX", "1", "A"]);
    wakes.assert_quiet(&env, "before the promote").await;
    let promoted = env.run(&Promote { limit: 10, room: 0 }).await;
    assert_eq!((promoted.moved, promoted.woken, promoted.next_due), (0, 1, None));
    assert_eq!(env.ring(), vec!["A"]);
    // Its caller was busy (room 0): the other consumers claim it now.
    assert_eq!(wakes.next().await, "0");
}

#[tokio::test]
async fn an_ordered_group_keeps_a_failed_message_at_its_head_until_its_retry() {
    let env = Env::new().await;
    assert!(env.change(GroupChange::Limit(Some("A"), Some(1))).await);
    for id in ["a1", "a2"] {
        env.send_grouped(id, "A").await;
    }
    env.promote(1000).await;
    assert_eq!(env.claim(10).await.ids(), ["a1"]);
    let score = env.zset(&env.group_key(":A:ready"))[0].1;
    assert_eq!(env.nack("a1", env.lease_of("a1"), fail(60_000)).await, 1);
    // Back at the head, scored as when it was due; the group waits out
    // the backoff; nothing else of it starts.
    assert_eq!(env.group_ids("A"), vec!["a1", "a2"]);
    assert!(env.zscore(&env.group_key(":A:ready"), "a1").unwrap() <= score);
    let until = env.zscore(&env.group_key("wait"), "A").expect("waiting");
    assert!((env.now_ms() + 59_000..=env.now_ms() + 60_000).contains(&until));
    assert!(!env.exists(&env.k().pending), "not in pending: it waits in its group");
    assert_eq!(env.claim(10).await.popped, 0);
    let before = until - env.now_ms();
    let next = env.promote(1000).await;
    assert_eq!(next[0], 0);
    assert!(
        (before - 1_000..=before).contains(&next[1]),
        "promote knows when: {next:?}"
    );

    // The wait over: a1 again (its second delivery), then a2.
    env.raw(&["ZADD", &env.group_key("wait"), "1", "A"]);
    let c = env.claim(10).await;
    assert_eq!(c.got, vec![("a1".to_string(), "a1".to_string(), 2)]);
    assert!(!env.exists(&env.group_key("wait")));
    assert_eq!(env.ack(&[("a1", env.lease_of("a1"))]).await, vec![1]);
    assert_eq!(env.claim(10).await.ids(), ["a2"]);

    // A timeout of an ordered group's message: back at its head too.
    env.raw(&["ZADD", &env.k().processing, "XX", "1", "a2"]);
    env.send_grouped("a3", "A").await;
    env.promote(1000).await;
    assert_eq!(env.timeout(10).await, vec![1, 0]);
    assert_eq!(env.group_ids("A"), vec!["a2", "a3"]);
    assert!(env.active().is_empty());
    assert_eq!(env.ring(), vec!["A"]);
    assert_eq!(env.claim(10).await.ids(), ["a2"]);
    // Dead: the group goes on with the next.
    let lease = env.lease_of("a2");
    assert_eq!(env.nack("a2", lease, NackMode::Dead).await, 2);
    assert_eq!(env.ring(), vec!["A"]);
    assert_eq!(env.claim(10).await.ids(), ["a3"]);
}

#[tokio::test]
async fn an_ordered_groups_head_stays_its_head_whatever_was_sent_since_and_however_it_came_back() {
    // Each way a delivery of an ordered group's head comes back, while a
    // message of priority 9 was sent to the group during it.
    let ways: [(&str, Option<NackMode>); 4] = [
        ("fail", Some(fail(60_000))),
        ("defer", Some(NackMode::Defer { delay: ms(60_000) })),
        ("release", Some(NackMode::Release)),
        ("timeout", None),
    ];
    let mut heads = Vec::new();
    for (way, mode) in ways {
        let env = Env::new().await;
        assert!(env.change(GroupChange::Limit(Some("A"), Some(1))).await);
        env.send_grouped("a1", "A").await;
        env.promote(1000).await;
        assert_eq!(env.claim(10).await.ids(), ["a1"], "{way}");
        env.send_grouped_at("p9", "A", 9).await;
        env.promote(1000).await;
        match mode {
            Some(mode) => assert_eq!(env.nack("a1", env.lease_of("a1"), mode).await, 1, "{way}"),
            None => {
                env.raw(&["ZADD", &env.k().processing, "XX", "1", "a1"]);
                assert_eq!(env.timeout(10).await, vec![1, 0], "{way}");
            }
        }
        heads.push((way, env.group_ids("A")));
        // Its wait over, the head goes first, then the others.
        env.raw(&["DEL", &env.group_key("wait")]);
        env.raw(&["ZADD", &env.group_key("ring"), "1", "A"]);
        let first: Vec<String> = env.claim(10).await.ids().iter().map(|s| s.to_string()).collect();
        heads.push((way, first));
    }
    let a1_first = |way| {
        [
            (way, vec!["a1".to_string(), "p9".to_string()]),
            (way, vec!["a1".to_string()]),
        ]
    };
    assert_eq!(
        heads,
        [
            a1_first("fail"),
            a1_first("defer"),
            a1_first("release"),
            a1_first("timeout")
        ]
        .concat()
    );
}

#[tokio::test]
async fn an_ordered_groups_head_failed_twice_stays_ahead_of_messages_due_before_its_retry() {
    let env = Env::new().await;
    assert!(env.change(GroupChange::Limit(Some("A"), Some(1))).await);
    for id in ["a1", "a2"] {
        env.send_grouped(id, "A").await;
    }
    env.promote(1000).await;
    assert_eq!(env.claim(10).await.ids(), ["a1"]);
    // The first failure's retry is due after a2 was: it is a1's due time
    // from now on (its attempt record).
    assert_eq!(env.nack("a1", env.lease_of("a1"), fail(100)).await, 1);
    env.raw(&["ZADD", &env.group_key("wait"), "1", "A"]);
    env.promote(1000).await;
    let c = env.claim(10).await;
    assert_eq!(c.got, vec![("a1".to_string(), "a1".to_string(), 2)]);
    assert_eq!(env.nack("a1", env.lease_of("a1"), fail(100)).await, 1);
    assert_eq!(env.group_ids("A"), vec!["a1", "a2"], "a1 is still the head");
    // A re-sent nack of that delivery changes nothing.
    assert_eq!(env.nack_of("a1", 1, fail(100), "", 2).await, 1);
    assert_eq!(env.group_ids("A"), vec!["a1", "a2"]);
}

#[tokio::test]
async fn a_paused_group_waits_while_the_others_are_served() {
    let env = Env::new().await;
    for (id, group) in [("a1", "A"), ("b1", "B")] {
        env.send_grouped(id, group).await;
    }
    assert!(env.change(GroupChange::Pause("A")).await);
    assert!(!env.change(GroupChange::Pause("A")).await, "so already");
    env.promote(1000).await;
    assert_eq!(env.claim(10).await.ids(), ["b1"]);
    assert!(!env.exists(&env.group_key("ring")), "A dropped while paused");
    assert_eq!(env.group_ids("A"), vec!["a1"]);
    assert!(env.change(GroupChange::Resume("A")).await);
    assert!(!env.exists(&env.group_key("paused")));
    assert_eq!(env.ring(), vec!["A"]);
    assert_eq!(env.claim(10).await.ids(), ["a1"]);
}

#[tokio::test]
async fn cancel_release_and_requeue_keep_a_message_in_its_group() {
    let env = Env::new().await;
    let k = env.k().clone();
    for id in ["a1", "a2", "a3"] {
        env.send_grouped(id, "A").await;
    }
    env.promote(1000).await;
    // Cancel takes it out of its group's zset: no STALE entry.
    assert_eq!(env.cancel("a2").await, 1);
    assert_eq!(env.group_ids("A"), vec!["a1", "a3"]);
    assert_eq!(env.raw(&["GET", &env.group_key("ready")]), "2");
    assert!(!env.stale());
    // Release: back to its group at the due time it had (the head).
    assert_eq!(env.claim(1).await.ids(), ["a1"]);
    assert_eq!(env.nack("a1", env.lease_of("a1"), NackMode::Release).await, 1);
    assert_eq!(env.group_ids("A"), vec!["a1", "a3"]);
    assert!(env.active().is_empty());
    // A failure without delay in a group that is not ordered: due now,
    // behind what was due before.
    assert_eq!(env.claim(1).await.ids(), ["a1"]);
    assert_eq!(env.nack("a1", env.lease_of("a1"), fail(0)).await, 1);
    assert_eq!(env.group_ids("A"), vec!["a3", "a1"]);
    assert!(!env.exists(&k.retry));
    // Requeue of a dead letter: back to its group.
    assert_eq!(env.claim(1).await.ids(), ["a3"]);
    assert_eq!(env.nack("a3", env.lease_of("a3"), NackMode::Dead).await, 2);
    let reply = env
        .run(&Requeue {
            limit: 10,
            ids: vec!["a3"],
        })
        .await;
    assert_eq!((reply.requeued, reply.taken), (1, 1));
    assert_eq!(env.group_ids("A"), vec!["a1", "a3"]);
    assert_eq!(
        env.raw(&["GET", &env.group_key("ready")]),
        "2",
        "each move counted once"
    );
    assert!(!env.exists(&k.ready));
    let info = env.queue.get("a3").await.unwrap().expect("found");
    assert_eq!(
        (info.state, info.group.as_deref()),
        (crate::MessageState::Ready, Some("A"))
    );
}

#[tokio::test]
async fn a_queue_without_groups_reads_no_group_key() {
    let env = Env::new().await;
    env.send("p", "x", 0, NEVER, RETRY).await;
    env.reset_command_stats();
    env.promote(1000).await;
    let c = env.claim(10).await;
    assert_eq!(env.command_calls("getrange"), 0, "promote reads no header");
    assert_eq!(
        env.command_calls("zrange"),
        2,
        "promote's two reads of pending, no group key"
    );
    assert_eq!(env.ack(&[("p", c.lease)]).await, vec![1]);
    assert_eq!(env.command_calls("getrange"), 0, "ack reads no header");
    assert!(env.keys().iter().all(|key| !key.contains(":g")));
}

#[tokio::test]
async fn a_group_at_its_rate_waits_out_of_the_ring_and_counts_its_leases() {
    let env = Env::new().await;
    // 2 per second: at most one per fiftieth of it (20 ms), as the queue's rate.
    assert!(env.change(GroupChange::Rate(Some("A"), Some((2, 1000)))).await);
    assert_eq!(env.hget(&env.group_key("rates"), "A"), "2 1000");
    for (id, group) in [("a1", "A"), ("a2", "A"), ("a3", "A"), ("b1", "B")] {
        env.send_grouped(id, group).await;
    }
    env.promote(1000).await;
    let before = env.now_ms();
    let c = env.claim(10).await;
    assert_eq!(c.ids(), ["a1", "b1"], "A: one in this bucket; B has no rate");
    let rate_key = env.group_key(":A:rate");
    let used = env.raw(&["GET", &rate_key]);
    assert!(used.ends_with(" 1"), "one lease in the current bucket: {used}");
    let pttl = env.int(&["PTTL", &rate_key]);
    assert!((1_000..=2_000).contains(&pttl), "two periods: {pttl}");
    let until = env.zscore(&env.group_key("wait"), "A").expect("A waits");
    assert!(
        (before..=env.now_ms() + 20).contains(&until),
        "until the next bucket: {until}"
    );
    assert!(!env.exists(&env.group_key("ring")));
    assert_eq!(env.active(), vec!["1", "1", "A", "B"]);
    // Its wait over (moved here, not waited for): a2 in the next bucket,
    // then the window of 2 is full until a1's lease is a period old.
    env.raw(&["ZADD", &env.group_key("wait"), "1", "A"]);
    let mut got = Vec::new();
    for _ in 0..2000 {
        let c = env.claim(10).await;
        got.extend(c.ids().iter().map(|s| s.to_string()));
        if !got.is_empty() {
            break;
        }
        env.raw(&["ZADD", &env.group_key("wait"), "1", "A"]);
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    assert_eq!(got, vec!["a2"]);
    let until = env.zscore(&env.group_key("wait"), "A").expect("A waits");
    assert!(
        until >= before + 900,
        "the window is full for about a period: {}",
        until - before
    );
    // A changed rate starts with a full window.
    assert!(env.change(GroupChange::Rate(Some("A"), None)).await);
    assert!(!env.exists(&rate_key));
}

#[tokio::test]
async fn purge_deletes_grouped_messages_and_keeps_group_settings() {
    let env = Env::new().await;
    let k = env.k().clone();
    assert!(env.change(GroupChange::Pause("C")).await);
    assert!(env.change(GroupChange::Limit(Some("A"), Some(1))).await);
    for (id, group) in [("a1", "A"), ("a2", "A"), ("b1", "B"), ("c1", "C")] {
        env.send_grouped(id, group).await;
    }
    env.promote(1000).await;
    assert_eq!(env.claim(2).await.ids(), ["a1", "b1"]);
    assert_eq!(env.run(&Purge { limit: 1000 }).await, 4);
    assert_eq!(
        env.lines(&["ZRANGE", &env.group_key("known"), "0", "-1"]),
        vec!["A", "B", "C"],
        "B known while its count in processing is left"
    );
    assert_eq!(
        env.run(&Purge { limit: 1000 }).await,
        -1,
        "B forgotten with the counts, a call each for at most 1000 known groups"
    );
    assert_eq!(env.run(&Purge { limit: 1000 }).await, 0);
    env.assert_keys_left(
        vec![
            env.group_key("known"),
            env.group_key("limits"),
            env.group_key("paused"),
            k.totals.clone(),
        ],
        "the settings stay, nothing else",
    );
    assert_eq!(env.raw(&["HEXISTS", &k.totals, "groups"]), "0");
    assert_eq!(
        env.lines(&["ZRANGE", &env.group_key("known"), "0", "-1"]),
        vec!["A", "C"],
        "their settings"
    );
}

#[tokio::test]
async fn list_groups_pages_the_known_groups_with_their_counts() {
    let env = Env::new().await;
    assert!(env.change(GroupChange::Limit(None, Some(2))).await);
    assert!(env.change(GroupChange::Limit(Some("B"), Some(1))).await);
    assert!(env.change(GroupChange::Rate(Some("C"), Some((5, 1000)))).await);
    assert!(env.change(GroupChange::Pause("D")).await);
    for (id, group) in [("a1", "A"), ("a2", "A"), ("a3", "A"), ("b1", "B")] {
        env.send_grouped(id, group).await;
    }
    env.promote(1000).await;
    assert_eq!(env.claim(10).await.ids(), ["a1", "a2", "b1"]);
    let page = env
        .run(&ListGroups {
            offset: 0,
            limit: 3,
            only: None,
        })
        .await;
    assert_eq!(
        (page.total, page.default_concurrency, page.default_rate),
        (4, Some(2), None)
    );
    let rows: Vec<(&str, u64, u64, bool, Option<u64>)> = page
        .groups
        .iter()
        .map(|g| (g.name.as_str(), g.ready, g.processing, g.paused, g.concurrency))
        .collect();
    assert_eq!(
        rows,
        [
            ("A", 1, 2, false, None),
            ("B", 0, 1, false, Some(1)),
            ("C", 0, 0, false, None)
        ]
    );
    assert_eq!(page.groups[2].rate.map(|r| r.limit), Some(5));
    let page = env
        .run(&ListGroups {
            offset: 3,
            limit: 3,
            only: None,
        })
        .await;
    assert_eq!(page.groups.len(), 1);
    assert!(page.groups[0].paused);
    // By name: that group alone, with the same counts; an unknown one none.
    let one = env
        .run(&ListGroups {
            offset: 0,
            limit: 1,
            only: Some("A"),
        })
        .await;
    assert_eq!((one.total, one.groups.len()), (4, 1));
    let a = &one.groups[0];
    assert_eq!((a.name.as_str(), a.ready, a.processing), ("A", 1, 2));
    let none = env
        .run(&ListGroups {
            offset: 0,
            limit: 1,
            only: Some("E"),
        })
        .await;
    assert!(none.groups.is_empty());
    // Acked and emptied, B keeps only its setting; A is forgotten.
    let leases: Vec<(String, i64)> = ["a1", "a2", "b1"]
        .iter()
        .map(|id| (id.to_string(), env.lease_of(id)))
        .collect();
    let pairs: Vec<(&str, i64)> = leases.iter().map(|(id, l)| (id.as_str(), *l)).collect();
    assert_eq!(env.ack(&pairs).await, vec![1; 3]);
    assert_eq!(env.claim(10).await.ids(), ["a3"]);
    assert_eq!(env.ack(&[("a3", env.lease_of("a3"))]).await, vec![1]);
    assert_eq!(
        env.lines(&["ZRANGE", &env.group_key("known"), "0", "-1"]),
        vec!["B", "C", "D"]
    );
    assert!(env.change(GroupChange::Resume("D")).await);
    assert_eq!(
        env.lines(&["ZRANGE", &env.group_key("known"), "0", "-1"]),
        vec!["B", "C"]
    );
}

#[tokio::test]
async fn a_grouped_message_out_of_deliveries_or_past_its_deadline_frees_its_group() {
    let env = Env::new().await;
    let k = env.k().clone();
    assert!(env.change(GroupChange::Limit(Some("A"), Some(1))).await);
    let value = encode_stored(&ValueParts {
        retry_count: 0,
        group: Some("B"),
        payload: b"b1",
        ..Default::default()
    });
    assert_eq!(env.send_values(&[("b1", value, 0, NEVER, false)]).await, vec![1]);
    for id in ["a1", "a2"] {
        env.send_grouped(id, "A").await;
    }
    env.promote(1000).await;
    let claimed = env.claim(10).await;
    let mut ids = claimed.ids();
    ids.sort_unstable();
    assert_eq!(ids, ["a1", "b1"], "one of each group, in the order promote found them");
    // b1 times out with no delivery left: dead, and B has nothing left.
    env.raw(&["ZADD", &k.processing, "XX", "1", "b1"]);
    assert_eq!(env.timeout(10).await, vec![1, 1]);
    assert_eq!(env.active(), vec!["1", "A"]);
    assert_eq!(env.lines(&["ZRANGE", &env.group_key("known"), "0", "-1"]), vec!["A"]);
    // a1 fails; while the ordered A waits its backoff, a1's deadline
    // passes: once the wait is over the claim buries it as expired, and A
    // goes on with a2.
    assert_eq!(env.nack("a1", env.lease_of("a1"), fail(60_000)).await, 1);
    let stored = env.stored_whole("a1").expect("stored");
    env.raw(&["SET", &k.msg("a1"), &stored.replacen(":a1", "@1:a1", 1)]);
    env.raw(&["ZADD", &env.group_key("wait"), "1", "A"]);
    let c = env.claim(10).await;
    assert_eq!((c.expired_ids.clone(), c.popped), (vec!["a1".to_string()], 1));
    assert!(env.active().is_empty());
    assert_eq!(env.ring(), vec!["A"], "a2 due, A has room");
    assert_eq!(env.claim(10).await.ids(), ["a2"]);
    assert_eq!(env.ack(&[("a2", env.lease_of("a2"))]).await, vec![1]);
    assert!(env.active().is_empty());
    assert!(!env.exists(&env.group_key("ring")));
    assert!(!env.exists(&env.group_key("wait")));
    assert!(!env.exists(&env.group_key("ready")));
    assert_eq!(
        env.lines(&["ZRANGE", &env.group_key("known"), "0", "-1"]),
        vec!["A"],
        "for its own limit"
    );
    assert_eq!(env.zset(&k.dead).len(), 2);
}

#[tokio::test]
async fn a_group_emptied_while_it_waits_is_forgotten_when_its_wait_is_over() {
    let env = Env::new().await;
    assert!(env.change(GroupChange::Limit(None, Some(1))).await);
    env.send_grouped("a1", "A").await;
    env.promote(1000).await;
    assert_eq!(env.claim(10).await.ids(), ["a1"]);
    assert_eq!(env.nack("a1", env.lease_of("a1"), fail(60_000)).await, 1);
    assert!(
        env.zscore(&env.group_key("wait"), "A").is_some(),
        "A waits a1's backoff"
    );
    // Cancelled while its group waits: A is known until its wait is over.
    assert_eq!(env.cancel("a1").await, 1);
    let known = || env.lines(&["ZRANGE", &env.group_key("known"), "0", "-1"]);
    assert_eq!(known(), vec!["A"]);
    env.raw(&["ZADD", &env.group_key("wait"), "1", "A"]);
    assert_eq!(env.promote(1000).await, vec![0, -1]);
    assert!(known().is_empty(), "nothing of A is left");
    let left: Vec<String> = env
        .keys()
        .into_iter()
        .filter(|key| key.starts_with(&env.k().group_prefix))
        .collect();
    assert_eq!(left, vec![env.group_key("limits")], "only the default's setting");
}

#[tokio::test]
async fn promote_over_many_groups_moves_fewer_per_call_and_says_more_are_due() {
    let env = Env::new().await;
    // 0u pending and due (first in pending, whatever the ms): the grouped
    // messages go through pending too.
    env.send_grouped("0u", "").await;
    for i in 0..5 {
        env.send_grouped(&format!("m{i}"), &format!("G{i}")).await;
    }
    // A budget of 20: 0u costs 1, each group's first message 1 + 8, so the
    // third group's spends it; the rest is due now (wait 0).
    assert_eq!(env.promote(20).await, vec![4, 0]);
    assert_eq!(env.ring(), vec!["G0", "G1", "G2"]);
    assert_eq!(env.promote(20).await, vec![2, -1]);
    assert_eq!(env.ring(), vec!["G0", "G1", "G2", "G3", "G4"]);

    // One group: 8 for the group, then 1 a message, read in slices until
    // the budget is spent.
    env.send_grouped("0v", "").await;
    for i in 0..20 {
        env.send_grouped(&format!("n{i:02}"), "H").await;
    }
    assert_eq!(env.promote(20).await, vec![12, 0], "0v, then 11 of H");
    assert_eq!(env.group_ids("H").len(), 11);
    assert_eq!(env.promote(20).await, vec![9, -1]);
}

#[tokio::test]
async fn a_claim_reads_more_than_16_groups_only_while_those_have_too_little_room() {
    let env = Env::new().await;
    // 40 groups of 10 messages each: the first 16 fill a claim of 100.
    for i in 0..400 {
        env.send_grouped(&format!("m{i:03}"), &format!("G{:02}", i % 40)).await;
    }
    assert_eq!(env.ring().len(), 40);
    let c = env.claim(100).await;
    let mut groups: Vec<String> = c
        .ids()
        .iter()
        .map(|id| id[1..].parse::<usize>().unwrap() % 40)
        .map(|g| format!("G{g:02}"))
        .collect();
    groups.sort();
    groups.dedup();
    assert_eq!(
        groups.len(),
        16,
        "the ring's first 16 groups, {} messages",
        c.ids().len()
    );
    assert_eq!(c.ids().len(), 100, "shared among them");
    // Paused groups have no room: the claim reads past them.
    for i in 16..40 {
        env.run(&crate::store::ops::groups::ChangeGroups {
            change: crate::store::ops::groups::GroupChange::Pause(&format!("G{i:02}")),
        })
        .await;
    }
    let c = env.claim(100).await;
    assert_eq!(
        c.ids().len(),
        60,
        "the 16 groups not paused, read past the 24 paused ahead of them"
    );
}

#[tokio::test]
async fn a_claim_serves_at_most_64_groups_within_its_budget_and_says_claim_again() {
    let env = Env::new().await;
    for i in 0..70 {
        env.send_grouped(&format!("m{i:02}"), &format!("G{i:02}")).await;
    }
    assert_eq!(
        env.promote(1000).await,
        vec![0, -1],
        "sent due to an empty pending: straight to their groups"
    );
    assert_eq!(env.ring().len(), 70);
    assert_eq!(env.stats().await[1], 70, "ready");
    let c = env.claim(100).await;
    assert_eq!(c.ids().len(), 64, "one message of each of the first 64 groups");
    assert_eq!(c.held, Some(Held::Cut), "cut short: more may be ready now");
    assert_eq!(env.ring().len(), 6);
    let c = env.claim(100).await;
    assert_eq!(c.ids(), ["m64", "m65", "m66", "m67", "m68", "m69"]);
    assert_eq!(c.held, None);

    // A budget of 256: 1 a message, 2 more a group.
    for i in 0..300 {
        env.send_grouped(&format!("h{i:03}"), "H").await;
    }
    let c = env.claim(300).await;
    assert_eq!(c.ids().len(), 254);
    assert_eq!(c.held, Some(Held::Cut), "cut short: more may be ready now");
    assert_eq!(env.claim(300).await.ids().len(), 46);
}

#[tokio::test]
async fn a_group_key_of_another_type_fails_send_promote_claim_and_cancel_before_they_write() {
    use crate::Error;
    let env = Env::new().await;
    let k = env.k().clone();
    // 0u pending and due: b1 goes through pending, so promote has work.
    env.send_grouped("0u", "").await;
    env.send_grouped("b1", "B").await;
    env.raw(&["SET", &env.group_key("known"), "not a zset"]);
    let before = env.snapshot();
    let err = env.store().run(&Promote { limit: 10, room: 10 }).await.unwrap_err();
    assert!(matches!(err, Error::WrongType { .. }), "{err:?}");
    assert_eq!(env.snapshot(), before, "promote wrote nothing");
    env.raw(&["DEL", &env.group_key("known")]);
    env.promote(10).await;

    env.raw(&["SET", &env.group_key("ring"), "not a zset"]);
    let before = env.snapshot();
    let receipt = k.claim("c");
    let err = env
        .store()
        .run(&super::claim_op(&receipt, 10, 60_000, 0))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::WrongType { .. }), "{err:?}");
    assert_eq!(env.snapshot(), before, "claim wrote nothing");

    // Nothing pending is due: a grouped send goes to its group, so checks
    // its keys first.
    env.raw(&["SET", &env.group_key(":C:ready"), "not a zset"]);
    let before = env.snapshot();
    let value = encode_stored(&ValueParts {
        retry_count: RETRY as u32,
        group: Some("C"),
        payload: b"c1",
        ..Default::default()
    });
    let msgs = vec![crate::store::ops::send::Outgoing {
        id: "c1".into(),
        value: value.into(),
        delay: std::time::Duration::ZERO,
        expire_after: None,
        own_id: false,
        wait: false,
        stage: None,
        mode: None,
    }];
    let err = env
        .store()
        .run(&crate::store::ops::send::SendBatch { msgs })
        .await
        .unwrap_err();
    assert!(matches!(err, Error::WrongType { .. }), "{err:?}");
    assert_eq!(env.snapshot(), before, "send wrote nothing");

    // b1 waits in its group: a cancel checks the group keys first too.
    env.raw(&["DEL", &env.group_key("ring"), &env.group_key(":C:ready")]);
    env.raw(&["SET", &env.group_key("known"), "not a zset"]);
    let before = env.snapshot();
    let err = env
        .store()
        .run(&crate::store::ops::cancel::Cancel { id: "b1" })
        .await
        .unwrap_err();
    assert!(matches!(err, Error::WrongType { .. }), "{err:?}");
    assert_eq!(env.snapshot(), before, "cancel wrote nothing");
}

#[tokio::test]
async fn a_grouped_message_due_now_goes_straight_to_its_group_unless_pending_ones_are_due() {
    let env = Env::new().await;
    let k = env.k().clone();
    env.send_grouped("a1", "A").await;
    assert!(env.zset(&k.pending).is_empty(), "not pending");
    assert_eq!(env.group_ids("A"), vec!["a1"]);
    assert_eq!(env.ring(), vec!["A"]);
    assert_eq!(env.raw(&["GET", &env.group_key("ready")]), "1");
    assert_eq!(env.stats().await[1], 1, "ready");
    assert_eq!(env.hget(&k.totals, "groups"), "1");

    // Behind a due pending message, a grouped one goes through pending,
    // so that its group keeps due order.
    env.send_grouped("0u", "").await;
    env.raw(&["ZADD", &k.pending, "XX", "0", "0u"]);
    env.send_grouped("a2", "A").await;
    let pending: Vec<String> = env
        .zset(&k.pending)
        .into_iter()
        .map(|(id, _): (String, i64)| id)
        .collect();
    assert_eq!(pending, ["0u", "a2"]);
    assert_eq!(env.promote(1000).await[0], 2);
    assert_eq!(env.group_ids("A"), vec!["a1", "a2"]);
}

#[tokio::test]
async fn the_ready_listing_shows_grouped_messages_after_the_lists_group_by_group() {
    use crate::MessageState;
    let env = Env::new().await;
    env.send_grouped("u1", "").await;
    env.promote(1000).await;
    for (id, group) in [("b1", "B"), ("a1", "A"), ("b2", "B")] {
        env.send_grouped(id, group).await;
    }
    let ids = |page: &crate::Page| page.items.iter().map(|m| m.id.to_string()).collect::<Vec<_>>();
    let page = env.queue.list(MessageState::Ready, 0, 10).await.unwrap();
    assert_eq!(ids(&page), ["u1", "a1", "b1", "b2"], "the list, then A's, then B's");
    assert_eq!(page.total, 4);
    assert_eq!(page.items[1].group.as_deref(), Some("A"));
    let page = env.queue.list(MessageState::Ready, 2, 1).await.unwrap();
    assert_eq!(ids(&page), ["b1"]);
    let page = env.queue.list(MessageState::Ready, 3, 5).await.unwrap();
    assert_eq!(ids(&page), ["b2"]);
}

#[tokio::test]
async fn a_claim_hands_the_ungrouped_messages_first_then_each_groups_in_turn_order() {
    let env = Env::new().await;
    let value = |id: &'static str, priority: u8, group: Option<&'static str>| {
        let value = encode_stored(&ValueParts {
            retry_count: RETRY as u32,
            priority,
            group,
            payload: id.as_bytes(),
            ..Default::default()
        });
        (id, value, 0, NEVER, true)
    };
    // Group B's turn comes before A's, whose message has the top priority.
    let grouped = [value("b1", 0, Some("B")), value("a1", 9, Some("A"))];
    assert_eq!(env.send_values(&grouped).await, vec![1, 1]);
    assert_eq!(env.ring(), vec!["B", "A"]);
    let ungrouped = [value("u0", 0, None), value("u2", 2, None), value("u0b", 0, None)];
    assert_eq!(env.send_values(&ungrouped).await, vec![1, 1, 1]);
    assert_eq!(env.promote(1000).await[0], 3);
    // The member '' joins the ring's tail, yet its lists come first, in
    // their order (priority, then due order): a consumer of one handler
    // starts the claim's deliveries so.
    assert_eq!(env.claim(10).await.ids(), ["u2", "u0", "u0b", "b1", "a1"]);
}

/// Sends group A's backlog of 40 (a00..a39), then group B's one (b1).
async fn send_backlog_beside_one(env: &Env) {
    for i in 0..40 {
        env.send_grouped(&format!("a{i:02}"), "A").await;
    }
    env.send_grouped("b1", "B").await;
}

#[tokio::test]
async fn a_claim_takes_at_most_its_share_a_group_while_several_are_due() {
    let env = Env::new().await;
    send_backlog_beside_one(&env).await;
    // Two groups due: 8 a group, what B does not take goes to A.
    let got = env.claim_sharing(100, 8).await;
    assert_eq!(got.ids().len(), 16);
    assert!(got.ids().contains(&"b1"), "{:?}", got.ids());
    assert_eq!(got.held, Some(Held::Cut), "cut short: claim again at once");
    // A alone: no cap but the request's.
    let got = env.claim_sharing(100, 8).await;
    assert_eq!(got.ids().len(), 25, "the rest of A");
    assert_eq!(got.held, None);
}

#[tokio::test]
async fn backlogs_of_several_groups_get_full_claims_whatever_the_share() {
    let env = Env::new().await;
    for i in 0..40 {
        env.send_grouped(&format!("a{i:02}"), "A").await;
        env.send_grouped(&format!("b{i:02}"), "B").await;
    }
    let got = env.claim_sharing(60, 8).await;
    assert_eq!(got.ids().len(), 60, "neither group has 8 or fewer due: no cap");
    assert_eq!(got.held, None);
}

#[tokio::test]
async fn a_paused_group_with_few_due_does_not_shorten_the_claims_of_the_others() {
    let env = Env::new().await;
    send_backlog_beside_one(&env).await;
    assert!(env.change(GroupChange::Pause("B")).await);
    env.promote(1000).await;
    let got = env.claim_sharing(100, 8).await;
    assert_eq!(got.ids().len(), 40, "B cannot start one: no share cap");
    assert_eq!(env.group_ids("B"), vec!["b1"]);
}
