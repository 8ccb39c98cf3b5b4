//! The flow scripts (flow_deps.lua, send.lua's mode "w", flow_link.lua,
//! outbox.lua, flow_complete.lua, relay.lua) and what ack, nack, cancel and purge do
//! for flows, with exact state; and the relay run after a consumer died
//! between a child's ack and its relay.

use std::time::Duration;

use fred::bytes::Bytes;

use super::{Env, RETENTION};
use crate::flow::wire::{ChildRef, Outcome, ParentLink};
use crate::flow::ChildPolicy;
use crate::store::flows::relay::relay;
use crate::store::ops::ack::{Ack, AckOutcome, Keep};
use crate::store::ops::flow_complete::{Completed, Completion, FlowComplete};
use crate::store::ops::flow_deps::{DepsAdded, FlowDeps};
use crate::store::ops::flow_link::{FlowLink, LinkStatus};
use crate::store::ops::flow_status::{FlowCounts, FlowStatus};
use crate::store::ops::nack::NackMode;
use crate::store::ops::note::Notes;
use crate::store::ops::outbox::OutboxDrop;
use crate::store::ops::purge::Purge;
use crate::store::ops::relay::{OutboxEntry, Relay, Relayed};
use crate::store::ops::send::{Outgoing, SendBatch, SendOutcome};
use crate::store::stored::{encode_stored, ValueParts};
use crate::Error;

/// How the scripts name a child of this queue.
fn child(env: &Env, id: &str) -> ChildRef {
    ChildRef::new(&env.k().base, id)
}

/// `"<base> <id>"`: how the scripts name a child of this queue.
fn member(env: &Env, id: &str) -> String {
    child(env, id).member()
}

/// Stores parent `id` with mode "w" (its children set filled first);
/// returns send.lua's status.
async fn send_parent(env: &Env, id: &str, children: &[&str], delay_ms: u64) -> SendOutcome {
    send_parent_as(env, id, children, delay_ms, &ValueParts::new(3, b"parent")).await
}

/// [`send_parent`] of a parent stored as `parts` say.
async fn send_parent_as(env: &Env, id: &str, children: &[&str], delay_ms: u64, parts: &ValueParts<'_>) -> SendOutcome {
    if !children.is_empty() {
        let members: Vec<ChildRef> = children.iter().map(|c| child(env, c)).collect();
        let op = FlowDeps {
            id,
            children: &members,
            unless_live: true,
        };
        assert_eq!(env.run(&op).await, DepsAdded::Added(members.len() as u64));
    }
    let msg = Outgoing {
        stage: None,
        mode: None,
        id: id.into(),
        value: encode_stored(parts).into(),
        delay: Duration::from_millis(delay_ms),
        expire_after: None,
        own_id: true,
        wait: true,
    };
    env.run(&SendBatch { msgs: vec![msg] }).await[0].0
}

/// Links children `ids` to parent `parent` with `policy`.
async fn link(env: &Env, parent: &str, policy: char, ids: &[&str]) -> Vec<LinkStatus> {
    link_as(env, parent, policy, ids, false).await
}

/// [`link`] as a link pipelined with the children's send (`new`).
async fn link_new(env: &Env, parent: &str, ids: &[&str]) -> Vec<LinkStatus> {
    link_as(env, parent, 'f', ids, true).await
}

/// The link of parent `parent` of this queue with `policy`.
fn parent_link(env: &Env, parent: &str, policy: char) -> ParentLink {
    ParentLink {
        policy: ChildPolicy::of_letter(&policy.to_string()).unwrap(),
        base: env.k().base.clone(),
        id: parent.into(),
    }
}

async fn link_as(env: &Env, parent: &str, policy: char, ids: &[&str], new: bool) -> Vec<LinkStatus> {
    let parent = parent_link(env, parent, policy);
    let ids: Vec<String> = ids.iter().map(|s| s.to_string()).collect();
    env.run(&FlowLink {
        parent: &parent,
        ids: &ids,
        new,
    })
    .await
}

/// Links children `ids` of this queue to parent `id` of the queue whose
/// base is `base` (another slot), policy fail; returns the link.
async fn link_to(env: &Env, base: &str, id: &str, ids: &[&str]) -> ParentLink {
    let parent = ParentLink {
        policy: ChildPolicy::Fail,
        base: base.into(),
        id: id.into(),
    };
    let ids: Vec<String> = ids.iter().map(|s| s.to_string()).collect();
    env.run(&FlowLink {
        parent: &parent,
        ids: &ids,
        new: false,
    })
    .await;
    parent
}

/// The outbox's entries, oldest first.
fn outbox(env: &Env) -> Vec<String> {
    env.zset(&env.k().outbox).into_iter().map(|(entry, _)| entry).collect()
}

/// Claims everything due (after a promote) and returns each delivery's lease.
async fn claim_all(env: &Env) -> Vec<(String, i64)> {
    env.promote(100).await;
    let c = env.claim(100).await;
    c.got.iter().map(|d| (d.0.clone(), c.lease)).collect()
}

/// Child `id`'s completion for `parent`, `how` as flow_complete.lua takes
/// it (outcome then policy letter, e.g. "af").
fn completion(env: &Env, parent: &str, id: &str, how: &str) -> Completion {
    let (outcome, policy) = how.split_at(1);
    Completion {
        parent: parent.into(),
        child: child(env, id),
        outcome: Outcome::of_letter(outcome).unwrap(),
        policy: ChildPolicy::of_letter(policy).unwrap(),
        result: Bytes::new(),
    }
}

fn complete_op(completions: &[Completion]) -> FlowComplete<'_> {
    FlowComplete {
        completions,
        dead_letter_retention: Duration::from_millis(RETENTION as u64),
    }
}

async fn complete(env: &Env, completions: &[Completion]) -> Completed {
    env.run(&complete_op(completions)).await
}

/// Asserts that `err` is a [`Error::WrongType`] naming `key`.
fn assert_wrong_type(key: &str, err: &Error) {
    match err {
        Error::WrongType { detail, .. } => assert!(detail.contains(key), "{detail}"),
        other => panic!("with {key} of another type: {other:?}"),
    }
}

#[tokio::test]
async fn a_parent_waits_until_its_last_child_completes() {
    let env = Env::new().await;
    let k = env.k().clone();
    env.send_own("c1", "one", 0, 0, 3).await;
    env.send_own("c2", "two", 0, 0, 3).await;
    let before = env.now_ms();
    assert_eq!(
        send_parent(&env, "p", &["c1", "c2", "gone"], 50_000).await,
        SendOutcome::Stored
    );
    // Waiting, at its own due time; nowhere else.
    let waiting = env.zset(&k.flow_waiting);
    assert_eq!(waiting.len(), 1);
    assert!(waiting[0].1 >= before + 50_000, "{waiting:?}");
    assert_eq!(
        env.zset(&k.pending).iter().map(|e| e.0.as_str()).collect::<Vec<_>>(),
        ["c1", "c2"]
    );
    assert_eq!(env.hget(&k.totals, "flows"), "1");
    assert_eq!(env.int(&["SCARD", &k.deps("p")]), 3);
    // A parent stored again (a re-send) stays as it is.
    assert_eq!(send_parent(&env, "p", &[], 0).await, SendOutcome::Live);
    assert_eq!(env.zset(&k.flow_waiting), waiting);

    assert_eq!(
        link(&env, "p", 'f', &["c1", "c2", "gone"]).await,
        [LinkStatus::Linked, LinkStatus::Linked, LinkStatus::Gone]
    );
    // Linked twice: one link.
    link(&env, "p", 'f', &["c1"]).await;
    assert_eq!(env.hget(&k.parents(), "c1"), format!("f {} p", k.base));

    // The child no longer stored completes at once (what link() in
    // queue/flows/links.rs does with a Gone status).
    let done = complete(&env, &[completion(&env, "p", "gone", "af")]).await;
    assert_eq!(
        done,
        Completed {
            applied: 1,
            due: 0,
            dead: 0,
            removed: 0
        }
    );

    // c1's ack completes its parent, in this slot, in the same script:
    // no outbox entry, nothing for the relay.
    let leases = claim_all(&env).await;
    let c1 = leases.iter().find(|l| l.0 == "c1").unwrap().1;
    let acked = env.run(&Ack::plain(&[("c1", c1)])).await;
    assert_eq!(acked.acks, [AckOutcome::Acked]);
    assert!(acked.recorded.is_empty());
    assert_eq!(env.int(&["HEXISTS", &k.parents(), "c1"]), 0);
    assert!(!env.exists(&k.outbox));
    assert_eq!(env.int(&["SISMEMBER", &k.deps("p"), &member(&env, "c1")]), 0);
    assert_eq!(env.hget(&k.children("p"), &member(&env, "c1")), "a");
    assert_eq!(env.zset(&k.flow_waiting), waiting);
    // Its completion delivered again (a relay's): nothing changes.
    let state = env.snapshot();
    let again = complete(&env, &[completion(&env, "p", "c1", "af")]).await;
    assert_eq!(again, Completed::default());
    assert_eq!(env.snapshot(), state);

    // The last child: the parent goes to pending at its own due time.
    let c2 = leases.iter().find(|l| l.0 == "c2").unwrap().1;
    assert_eq!(env.ack(&[("c2", c2)]).await, [1]);
    assert!(!env.exists(&k.outbox));
    assert!(!env.exists(&k.flow_waiting) && !env.exists(&k.deps("p")));
    assert_eq!(env.zset(&k.pending), waiting);
    let mut children = env.lines(&["HGETALL", &k.children("p")]);
    children.sort();
    let mut want = vec![
        member(&env, "c1"),
        member(&env, "c2"),
        member(&env, "gone"),
        "a".into(),
        "a".into(),
        "a".into(),
        " a".into(),
        "3".into(),
    ];
    want.sort();
    assert_eq!(children, want);
    // The parent's ack takes its children's results with it.
    env.raw(&["ZADD", &k.pending, "0", "p"]);
    let leases = claim_all(&env).await;
    assert_eq!(env.ack(&[("p", leases[0].1)]).await, [1]);
    assert!(!env.exists(&k.children("p")) && !env.exists(&k.parents()));
}

#[tokio::test]
async fn a_parents_set_expires_until_its_send_stores_it() {
    let env = Env::new().await;
    let k = env.k().clone();
    let ttl = |id: &str| env.int(&["PTTL", &k.deps(id)]);
    let fill = |id: &'static str, unless_live: bool| {
        let members = vec![child(&env, "c1"), child(&env, "c2")];
        let env = &env;
        async move {
            env.run(&FlowDeps {
                id,
                children: &members,
                unless_live,
            })
            .await
        }
    };
    // Filled for a parent not stored yet: the set goes on its own within
    // the hour, should the parent's send never come.
    assert_eq!(fill("p", true).await, DepsAdded::Added(2));
    let left = ttl("p");
    assert!(left > 3_500_000 && left <= 3_600_000, "{left}");
    // Stored waiting: the set lives as long as the parent waits.
    assert_eq!(send_parent(&env, "p", &[], 0).await, SendOutcome::Stored);
    assert_eq!(ttl("p"), -1);
    // A re-send of the live parent changes nothing.
    assert_eq!(fill("p", true).await, DepsAdded::Live(vec![true, true]));
    assert_eq!(ttl("p"), -1);
    // A parent over its dead letter is not live: its set expires until stored.
    assert_eq!(fill("q", true).await, DepsAdded::Added(2));
    env.raw(&["SET", &k.msg("q"), "dead", "PX", "60000"]);
    assert_eq!(fill("q", true).await, DepsAdded::Added(0));
    assert!(ttl("q") > 3_500_000);
    // A cohort's member joining its callback (no payload key given): no TTL.
    assert_eq!(fill("r", false).await, DepsAdded::Added(2));
    assert_eq!(ttl("r"), -1);
}

/// A flow's children are sent and linked in the round trip of their
/// parent's send, so a child may finish before its parent is stored (a
/// send that went out behind the links). Its completion, in its ack or
/// from the relay, finds the parent's set with the TTL of a set not stored
/// yet: the set stays whole and only gets the mark, nothing else is
/// written (not even for a dead child under 'f'); the parent's send takes
/// the mark out and says so (status 8), and the link again that its
/// sender then makes completes the child as usual.
#[tokio::test]
async fn a_child_that_finishes_before_its_parent_is_stored_marks_its_set_for_the_send() {
    let env = Env::new().await;
    let k = env.k().clone();
    let members = |id: &str| {
        let mut m = env.lines(&["SMEMBERS", &k.deps(id)]);
        m.sort();
        m
    };
    env.send_own("c1", "one", 0, 0, 3).await;
    env.send_own("c2", "two", 0, 0, 3).await;
    let all = vec![child(&env, "c1"), child(&env, "c2")];
    let fill = FlowDeps {
        id: "p",
        children: &all,
        unless_live: true,
    };
    assert_eq!(env.run(&fill).await, DepsAdded::Added(2));
    let filled = members("p");
    assert_eq!(link(&env, "p", 'f', &["c1", "c2"]).await, [LinkStatus::Linked; 2]);
    let leases = claim_all(&env).await;
    let lease = leases.iter().find(|(id, _)| id == "c1").unwrap().1;
    let ack = Ack {
        leases: vec![("c1", lease, Keep::default())],
        result_retention: Duration::from_secs(60),
        notes: Notes::none(),
    };
    env.run(&ack).await;
    // c2 died, reported by a relay of another slot.
    let dead = complete(&env, &[completion(&env, "p", "c2", "df")]).await;
    assert_eq!(dead, Completed::default());
    let mut marked = filled.clone();
    marked.push("!".into());
    marked.sort();
    assert_eq!(members("p"), marked);
    assert!(env.int(&["PTTL", &k.deps("p")]) > 0, "the set keeps its TTL");
    assert!(!env.exists(&k.children("p")) && !env.exists(&k.flow_waiting));
    assert!(env.dead().is_empty() && env.list(&k.ready).is_empty());

    assert_eq!(send_parent(&env, "p", &[], 0).await, SendOutcome::Overtaken);
    assert_eq!(members("p"), filled);
    assert_eq!(env.zset(&k.flow_waiting).len(), 1);
    // Linked again: c1 is gone (acked), c2 is still processing.
    assert_eq!(
        link(&env, "p", 'f', &["c1", "c2"]).await,
        [LinkStatus::Gone, LinkStatus::Linked]
    );
    let done = complete(&env, &[completion(&env, "p", "c1", "af")]).await;
    assert_eq!(done.applied, 1);
    assert_eq!(members("p"), [member(&env, "c2")]);
    // A parent with no set (its fill not run yet) gets nothing at all.
    complete(&env, &[completion(&env, "q", "c1", "af")]).await;
    assert!(!env.exists(&k.deps("q")));
}

#[tokio::test]
async fn a_completion_left_by_a_dead_consumer_is_relayed_by_the_next() {
    let env = Env::new().await;
    let k = env.k().clone();
    // The parent is in another queue: its completion goes by the outbox.
    let other = crate::DelayQueue::builder("other", env.client.clone()).build().unwrap();
    let ok = other.inner.shards[0].clone();
    let store = other.store(&ok);
    env.send_own("c", "child", 0, 0, 3).await;
    let deps = FlowDeps {
        id: "p",
        children: &[child(&env, "c")],
        unless_live: true,
    };
    assert_eq!(store.run(&deps).await.unwrap(), DepsAdded::Added(1));
    let parent = Outgoing {
        stage: None,
        mode: None,
        id: "p".into(),
        value: encode_stored(&ValueParts::new(3, b"parent")).into(),
        delay: Duration::ZERO,
        expire_after: None,
        own_id: true,
        wait: true,
    };
    let sent = store.run(&SendBatch { msgs: vec![parent] }).await.unwrap();
    assert_eq!(sent[0].0, SendOutcome::Stored);
    link_to(&env, &ok.base, "p", &["c"]).await;
    // The consumer acks and dies before its relay: the ack recorded the
    // completion, with the child's result (as the results' ack writes it).
    let leases = claim_all(&env).await;
    env.raw(&["SET", &format!("{}c", k.result_prefix), "42"]);
    assert_eq!(env.ack(&[("c", leases[0].1)]).await, [3]);
    assert_eq!(env.zset(&ok.flow_waiting).len(), 1);
    // Another consumer's relay (its tick: the probe finds the outbox).
    let retention = Duration::from_millis(RETENTION as u64);
    assert_eq!(relay(&env.client, &k, retention).await.unwrap(), 1);
    assert!(!env.exists(&ok.flow_waiting) && !env.exists(&k.outbox));
    // Due now: ready at once, no promote in between.
    assert_eq!(env.list(&ok.ready), ["p"]);
    assert!(!env.exists(&ok.pending));
    assert_eq!(env.hget(&ok.children("p"), &member(&env, "c")), "a42");
    // Again: nothing to do.
    assert_eq!(relay(&env.client, &k, retention).await.unwrap(), 0);
}

#[tokio::test]
async fn an_ack_completes_a_parent_in_its_slot_and_records_one_elsewhere() {
    let env = Env::new().await;
    let k = env.k().clone();
    env.send_own("c", "child", 0, 0, 3).await;
    send_parent(&env, "p", &["c"], 0).await;
    link(&env, "p", 'f', &["c"]).await;
    // c also has a parent in another queue.
    let elsewhere = link_to(&env, "dq:{other}:", "q", &["c"]).await;
    let leases = claim_all(&env).await;
    let mut wake = env.subscribe().await;
    let result = b"42";
    let ack = Ack {
        leases: vec![(
            "c",
            leases[0].1,
            Keep {
                result: Some(result),
                noted: false,
            },
        )],
        result_retention: Duration::from_secs(60),
        notes: Notes::none(),
    };
    let acked = env.run(&ack).await;
    // The parent here: ready at once, with the child's result, in the ack.
    assert_eq!(env.list(&k.ready), ["p"]);
    assert!(!env.exists(&k.flow_waiting) && !env.exists(&k.deps("p")));
    assert_eq!(env.hget(&k.children("p"), &member(&env, "c")), "a42");
    assert_eq!(wake.next().await, "0", "the ack's wake-up for the parent made ready");
    // The parent elsewhere: recorded, returned for the relay.
    let entry = format!("a c f {} q", elsewhere.base);
    assert_eq!(acked.acks, [AckOutcome::AckedChild]);
    assert_eq!(acked.recorded, [(0, entry.clone())]);
    assert_eq!(outbox(&env), [entry]);
    assert!(!env.exists(&k.parents()));
}

#[tokio::test]
async fn relay_applies_and_drops_the_completions_of_parents_in_its_slot_and_reads_the_rest() {
    let env = Env::new().await;
    let k = env.k().clone();
    // Children acked before they were linked, their results kept: each
    // link records its completion in the outbox.
    for id in ["c1", "c2"] {
        env.raw(&["SET", &format!("{}{id}", k.result_prefix), &format!("r-{id}")]);
    }
    send_parent(&env, "p", &["c1", "c2"], 0).await;
    link(&env, "p", 'f', &["c1", "c2"]).await;
    // c1 also has a parent in another queue.
    let elsewhere = link_to(&env, "dq:{other}:", "q", &["c1"]).await;
    assert_eq!(outbox(&env).len(), 3);
    let op = Relay {
        limit: 10,
        dead_letter_retention: Duration::from_millis(RETENTION as u64),
    };
    let taken = env.run(&op).await;
    // The parent here is ready with its children's results, in one call.
    assert_eq!(
        (taken.more, taken.applied, taken.due, taken.dead, taken.removed),
        (false, 2, 1, 0, 0)
    );
    assert_eq!(env.list(&k.ready), ["p"]);
    assert!(!env.exists(&k.flow_waiting) && !env.exists(&k.deps("p")));
    assert_eq!(env.hget(&k.children("p"), &member(&env, "c1")), "ar-c1");
    assert_eq!(env.hget(&k.children("p"), &member(&env, "c2")), "ar-c2");
    // The completion for the parent elsewhere is read, and stays.
    let [OutboxEntry::Done {
        child, parent, result, ..
    }] = &taken.left[..]
    else {
        panic!("{taken:?}")
    };
    assert_eq!(
        (child.as_str(), parent, result.as_ref()),
        ("c1", &elsewhere, &b"r-c1"[..])
    );
    assert_eq!(outbox(&env), [taken.left[0].entry()]);
    // Again: nothing applied, the same read.
    let state = env.snapshot();
    let again = env.run(&op).await;
    assert_eq!(
        again,
        Relayed {
            left: taken.left.clone(),
            ..Relayed::default()
        }
    );
    assert_eq!(env.snapshot(), state);
    // At its limit it says more may be left.
    let one = Relay { limit: 1, ..op };
    assert!(env.run(&one).await.more);
}

#[tokio::test]
async fn a_dead_child_records_its_death_unless_its_parent_waits_for_it() {
    let env = Env::new().await;
    let k = env.k().clone();
    for id in ["f", "w"] {
        env.send_own(id, id, 0, 0, 0).await;
    }
    send_parent(&env, "pf", &["f"], 0).await;
    send_parent(&env, "pw", &["w"], 0).await;
    link(&env, "pf", 'f', &["f"]).await;
    link(&env, "pw", 'w', &["w"]).await;
    for (id, lease) in claim_all(&env).await {
        assert_eq!(env.nack(&id, lease, NackMode::Dead).await, 2);
    }
    // 'f': recorded and unlinked; 'w': linked still, nothing recorded.
    assert_eq!(outbox(&env), [format!("d f f {} pf", k.base)]);
    assert_eq!(env.lines(&["HKEYS", &k.parents()]), ["w"]);
    // A dead child under a policy that does not wait is not linked again.
    assert_eq!(link(&env, "pf", 'f', &["f"]).await, [LinkStatus::Dead]);
    assert_eq!(link(&env, "pw", 'w', &["w"]).await, [LinkStatus::Linked]);

    let done = complete(&env, &[completion(&env, "pf", "f", "df")]).await;
    assert_eq!(
        done,
        Completed {
            applied: 1,
            due: 0,
            dead: 1,
            removed: 0
        }
    );
    assert_eq!(env.record("pf").as_deref(), Some("0:child q/f dead"));
    assert!(env.dead().contains(&"pf".to_string()));
    assert!(env.pttl("pf") > 0);
    // Its set goes; its children hash stays with the dead letter, the
    // child that failed it recorded (docs/workflows.md).
    assert!(!env.exists(&k.deps("pf")));
    assert_eq!(
        env.lines(&["HKEYS", &k.children("pf")]),
        [member(&env, "f"), " d".into()]
    );
    assert_eq!(
        env.zset(&k.flow_waiting)
            .iter()
            .map(|e| e.0.as_str())
            .collect::<Vec<_>>(),
        ["pw"]
    );

    // Deleting the dead child that pw waits for records it cancelled: pw
    // can never run, so it fails too.
    assert_eq!(env.gc_with(10, 0, 0, &["w"]).await, 1);
    let entries = outbox(&env);
    assert!(entries.contains(&format!("c w w {} pw", k.base)), "{entries:?}");
    let done = complete(&env, &[completion(&env, "pw", "w", "cw")]).await;
    assert_eq!(
        done,
        Completed {
            applied: 1,
            due: 0,
            dead: 1,
            removed: 0
        }
    );
    assert_eq!(env.record("pw").as_deref(), Some("0:child q/w cancelled"));
}

#[tokio::test]
async fn cancelling_a_waiting_parent_leaves_its_children_to_the_relay() {
    let env = Env::new().await;
    let k = env.k().clone();
    env.send_own("a", "a", 60_000, 0, 3).await;
    env.send_own("b", "b", 60_000, 0, 3).await;
    send_parent(&env, "p", &["a", "b"], 0).await;
    link(&env, "p", 'f', &["a", "b"]).await;
    assert_eq!(env.cancel("p").await, 1);
    assert!(env.payload("p").is_none() && !env.exists(&k.flow_waiting));
    // The relay's call reads the entry and some of p's children, and
    // leaves it for the relay to cancel them.
    let retention = Duration::from_millis(RETENTION as u64);
    let taken = env
        .run(&Relay {
            limit: 10,
            dead_letter_retention: retention,
        })
        .await;
    assert_eq!(taken.applied, 0);
    let [OutboxEntry::Cancelled { parent, children, .. }] = &taken.left[..] else {
        panic!("{taken:?}")
    };
    assert_eq!(parent, "p");
    let mut children = children.clone();
    children.sort();
    assert_eq!(children, [member(&env, "a"), member(&env, "b")]);
    // The relay cancels them; their own completions find p gone.
    relay(&env.client, &k, retention).await.unwrap();
    relay(&env.client, &k, retention).await.unwrap();
    assert!(env.zset(&k.pending).is_empty());
    for key in [k.outbox.clone(), k.deps("p"), k.children("p"), k.parents()] {
        assert!(!env.exists(&key), "{key} left");
    }
}

#[tokio::test]
async fn purge_takes_waiting_parents_and_every_flow_key() {
    let env = Env::new().await;
    let k = env.k().clone();
    env.send_own("a", "a", 60_000, 0, 3).await;
    send_parent(&env, "p", &["a", "x"], 0).await;
    link(&env, "p", 'f', &["a"]).await;
    send_parent(&env, "q", &["a"], 0).await;
    assert_eq!(env.cancel("q").await, 1);
    assert!(env.exists(&k.outbox));
    while env.run(&Purge { limit: 10 }).await > 0 {}
    assert_eq!(env.keys(), Vec::<String>::new());
}

#[tokio::test]
async fn each_purge_page_drops_its_children_s_links_and_parents_sets() {
    let env = Env::new().await;
    let k = env.k().clone();
    // a and b (pending) are children of waiting parent p; a page of 2 takes
    // a and b (pending is read first), the next takes p.
    for id in ["a", "b"] {
        env.send_own(id, id, 60_000, 0, 3).await;
    }
    send_parent(&env, "p", &["a", "b"], 0).await;
    link(&env, "p", 'f', &["a", "b"]).await;
    assert_eq!(env.run(&Purge { limit: 2 }).await, 2);
    assert!(!env.exists(&k.parents()), "a's and b's links went with them");
    assert_eq!(
        env.lines(&["SMEMBERS", &k.deps("p")]).len(),
        2,
        "p's set waits for its page"
    );
    assert_eq!(env.run(&Purge { limit: 2 }).await, 1);
    assert!(!env.exists(&k.deps("p")) && !env.exists(&k.flow_waiting));
    assert_eq!(env.run(&Purge { limit: 2 }).await, 0);
    assert_eq!(env.keys(), Vec::<String>::new());
}

#[tokio::test]
async fn a_cohort_callback_waits_for_its_close_and_a_dead_member_removes_on_success() {
    let env = Env::new().await;
    let k = env.k().clone();
    // The open member: the callback's base and an empty id.
    let open = ChildRef::cohort_open(&k.base);
    for cb in ["done", "ok"] {
        env.run(&FlowDeps {
            id: cb,
            children: &[open.clone(), child(&env, "m")],
            unless_live: false,
        })
        .await;
        send_parent(&env, cb, &[], 0).await;
    }
    let status = |id: &'static str| FlowStatus { id, open_member: None };
    let open_status = env
        .run(&FlowStatus {
            id: "done",
            open_member: Some(&open),
        })
        .await;
    assert_eq!(
        open_status,
        FlowCounts {
            waiting: true,
            stored: true,
            left: 1,
            open: true,
            ..FlowCounts::default()
        }
    );
    // The member dies: 'i' counts it, 'r' removes the parent outright.
    let done = complete(
        &env,
        &[completion(&env, "done", "m", "di"), completion(&env, "ok", "m", "dr")],
    )
    .await;
    assert_eq!(
        done,
        Completed {
            applied: 2,
            due: 0,
            dead: 0,
            removed: 1
        }
    );
    assert!(env.payload("ok").is_none() && !env.exists(&k.deps("ok")) && !env.exists(&k.children("ok")));
    assert!(env.dead().is_empty());
    let read = env.run(&status("done")).await;
    assert_eq!((read.waiting, read.left, read.dead), (true, 1, 1));
    // The close: nothing recorded, the callback becomes due.
    let closed = Completion {
        parent: "done".into(),
        child: open.clone(),
        outcome: Outcome::Closed,
        policy: ChildPolicy::Ignore,
        result: Bytes::new(),
    };
    let done = complete(&env, std::slice::from_ref(&closed)).await;
    assert_eq!((done.applied, done.due), (1, 1));
    assert_eq!(complete(&env, &[closed]).await, Completed::default());
    assert_eq!(env.list(&k.ready), ["done"]);
    let read = env.run(&status("done")).await;
    assert_eq!(
        read,
        FlowCounts {
            stored: true,
            dead: 1,
            ..FlowCounts::default()
        }
    );
}

#[tokio::test]
async fn a_parent_failed_or_removed_by_a_child_tells_its_own_parent() {
    // gp waits for pf and pr, each waiting for a child that dies: pf
    // under 'f' becomes a dead letter, pr under 'r' is deleted. Either is
    // how gp's child finished, so gp's slot must hear of it (found by the
    // history checker: a grandparent waited forever).
    let env = Env::new().await;
    let k = env.k().clone();
    for id in ["cf", "cr"] {
        env.send_own(id, id, 0, 0, 0).await;
    }
    send_parent(&env, "gp", &["pf", "pr"], 0).await;
    send_parent(&env, "pf", &["cf"], 0).await;
    send_parent(&env, "pr", &["cr"], 0).await;
    link(&env, "gp", 'i', &["pf", "pr"]).await;
    link(&env, "pf", 'f', &["cf"]).await;
    link(&env, "pr", 'r', &["cr"]).await;
    for (id, lease) in claim_all(&env).await {
        assert_eq!(env.nack(&id, lease, NackMode::Dead).await, 2);
    }
    let drop: Vec<(String, Vec<String>)> = outbox(&env).into_iter().map(|e| (e, Vec::new())).collect();
    assert_eq!(env.run(&OutboxDrop { entries: &drop }).await, 2);
    let done = complete(
        &env,
        &[completion(&env, "pf", "cf", "df"), completion(&env, "pr", "cr", "dr")],
    )
    .await;
    assert_eq!(
        done,
        Completed {
            applied: 2,
            due: 0,
            dead: 1,
            removed: 1
        }
    );
    // pf died and pr was deleted: each records it for gp, as a child's
    // death (a requeued pf may still finish) and a deletion do.
    let mut got = outbox(&env);
    got.sort();
    assert_eq!(got, [format!("c pr i {} gp", k.base), format!("d pf i {} gp", k.base)]);
    assert!(!env.exists(&k.parents()));
    let done = complete(
        &env,
        &[completion(&env, "gp", "pf", "di"), completion(&env, "gp", "pr", "ci")],
    )
    .await;
    assert_eq!(
        done,
        Completed {
            applied: 2,
            due: 1,
            dead: 0,
            removed: 0
        }
    );
}

/// How many values Redis freed off its main thread so far.
fn lazyfreed(env: &Env) -> i64 {
    let info = env.raw(&["INFO", "memory"]);
    let line = info.lines().find_map(|l| l.trim().strip_prefix("lazyfreed_objects:"));
    line.and_then(|n| n.parse().ok())
        .expect("lazyfreed_objects in INFO memory")
}

#[tokio::test]
async fn a_parent_s_big_children_hash_and_set_are_freed_off_the_main_thread() {
    let env = Env::new().await;
    let k = env.k().clone();
    let children: Vec<String> = (0..1000).map(|i| format!("c{i}")).collect();
    let names: Vec<&str> = children.iter().map(String::as_str).collect();
    send_parent(&env, "p", &names, 0).await;
    send_parent(&env, "q", &names, 0).await;
    let before = lazyfreed(&env);
    // p's children all acked: its children hash holds 1000 results.
    let done: Vec<Completion> = names.iter().map(|c| completion(&env, "p", c, "af")).collect();
    assert_eq!(complete(&env, &done).await.due, 1);
    // q fails on its first dead child with 999 left in its set.
    assert_eq!(complete(&env, &[completion(&env, "q", "c0", "df")]).await.dead, 1);
    let leases = claim_all(&env).await;
    assert_eq!(leases.len(), 1);
    assert_eq!(env.ack(&[("p", leases[0].1)]).await, [1]);
    assert!(!env.exists(&k.children("p")) && !env.exists(&k.deps("q")));
    // Both big values (p's hash, q's set) went by UNLINK, whose freeing
    // Redis does in the background: the ack and the burial stay O(1).
    // Counted once the background thread freed them.
    let freed = || lazyfreed(&env) - before;
    for _ in 0..1000 {
        if freed() >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(freed(), 2);
}

#[tokio::test]
async fn a_relay_read_is_bounded_by_bytes_at_the_maximum_result_size() {
    use fred::prelude::KeysInterface;
    let env = Env::new().await;
    let k = env.k().clone();
    let big = "r".repeat(crate::MAX_RESULT_SIZE);
    // Children acked before they were linked, their results kept: each
    // link records its completion in the outbox.
    for id in ["c1", "c2", "c3"] {
        let key = format!("{}{id}", k.result_prefix);
        let _: () = env.client.set(key, big.as_str(), None, None, false).await.unwrap();
    }
    send_parent(&env, "p", &["c1", "c2", "c3"], 0).await;
    link(&env, "p", 'f', &["c1", "c2", "c3"]).await;
    assert_eq!(outbox(&env).len(), 3);
    // Each result is at the maximum: one entry a call, however many wait.
    let retention = Duration::from_millis(RETENTION as u64);
    let first = env
        .run(&Relay {
            limit: 1000,
            dead_letter_retention: retention,
        })
        .await;
    assert_eq!((first.applied, first.more), (1, true), "{first:?}");
    // The relay delivers the others, each call within its bound.
    assert_eq!(relay(&env.client, &k, retention).await.unwrap(), 2);
    assert!(!env.exists(&k.outbox));
    assert_eq!(env.list(&k.ready), ["p"]);
    assert_eq!(
        env.int(&["HSTRLEN", &k.children("p"), &member(&env, "c1")]),
        1 + big.len() as i64
    );
}

/// One call of many completions, for several parents, duplicates and
/// completions after a parent's end among them, leaves what the same
/// completions one call each leave.
#[tokio::test]
async fn completions_in_one_call_do_what_they_do_one_call_each() {
    let parents: [(&str, &[&str]); 3] = [
        ("p1", &["a1", "a2", "a3", "a4"]),
        ("p2", &["b1", "b2", "b3"]),
        ("p3", &["c1", "c2"]),
    ];
    let script = [
        ("p1", "a1", "af"),
        ("p2", "b1", "ai"),
        ("p1", "a2", "af"),
        ("p3", "c1", "ar"),
        ("p1", "a1", "af"),
        ("p2", "b2", "di"),
        ("p1", "a3", "df"),
        ("p3", "c2", "dr"),
        ("p2", "b3", "ci"),
        ("p1", "a4", "af"),
    ];
    let (one_by_one, together) = (Env::new().await, Env::new().await);
    for env in [&one_by_one, &together] {
        for (parent, children) in parents {
            send_parent(env, parent, children, 0).await;
        }
    }
    let mut sum = Completed::default();
    for (parent, child, how) in script {
        let done = complete(&one_by_one, &[completion(&one_by_one, parent, child, how)]).await;
        sum.applied += done.applied;
        sum.due += done.due;
        sum.dead += done.dead;
        sum.removed += done.removed;
    }
    let all: Vec<Completion> = script
        .iter()
        .map(|(parent, child, how)| completion(&together, parent, child, how))
        .collect();
    assert_eq!(complete(&together, &all).await, sum);
    assert_eq!(
        sum,
        Completed {
            applied: 8,
            due: 1,
            dead: 1,
            removed: 1
        }
    );
    // The same keys, sets and hashes; pending and dead by id (their
    // scores are the clock's).
    let state = |env: &Env| {
        let k = env.k();
        let mut keys = env.lines(&["KEYS", "*"]);
        keys.sort();
        let ids = |z: Vec<(String, i64)>| z.into_iter().map(|e| e.0).collect::<Vec<_>>();
        let mut out = vec![format!("{keys:?}"), format!("{:?}", ids(env.zset(&k.pending)))];
        out.push(format!("{:?}", env.dead()));
        out.push(format!("{:?}", env.zset(&k.flow_waiting)));
        for (parent, _) in parents {
            let mut children = env.lines(&["HGETALL", &k.children(parent)]);
            children.sort();
            let mut deps = env.lines(&["SMEMBERS", &k.deps(parent)]);
            deps.sort();
            out.push(format!("{parent}: {children:?} {deps:?}"));
        }
        out
    };
    assert_eq!(state(&together), state(&one_by_one));
}

/// A parent whose last child finished goes where promote would put it
/// when it is due now: ready, or the priority zset by its priority, so a
/// claim takes it without a promote; due later, or in a group (promote
/// moves it to its group), to pending.
#[tokio::test]
async fn a_parent_due_now_goes_straight_to_ready_and_one_due_later_or_grouped_to_pending() {
    let env = Env::new().await;
    let k = env.k().clone();
    let plain = ValueParts::new(3, b"parent");
    let prio = ValueParts {
        priority: 7,
        ..ValueParts::new(3, b"parent")
    };
    let grouped = ValueParts {
        group: Some("g"),
        ..ValueParts::new(3, b"parent")
    };
    let parents = [
        ("now", 0, &plain),
        ("later", 60_000, &plain),
        ("prio", 0, &prio),
        ("grouped", 0, &grouped),
    ];
    let mut done = Vec::new();
    for (id, delay, parts) in parents {
        let c = format!("c-{id}");
        assert_eq!(send_parent_as(&env, id, &[&c], delay, parts).await, SendOutcome::Stored);
        done.push(completion(&env, id, &c, "af"));
    }
    // Parked parents alone mark the queue as using priorities and groups,
    // so promote and claim serve them by theirs.
    assert_eq!(
        (env.hget(&k.totals, "prios"), env.hget(&k.totals, "groups")),
        ("1".into(), "1".into())
    );
    let completed = complete(&env, &done).await;
    assert_eq!((completed.applied, completed.due), (4, 4));
    assert!(!env.exists(&k.flow_waiting));
    assert_eq!(env.list(&k.ready), ["now"]);
    assert_eq!(env.lines(&["ZRANGE", &k.prio, "0", "-1"]), ["prio"]);
    let mut pending: Vec<String> = env.zset(&k.pending).into_iter().map(|e| e.0).collect();
    pending.sort();
    assert_eq!(pending, ["grouped", "later"]);
    // Claimed with no promote in between, by priority.
    assert_eq!(env.claim(10).await.ids(), ["prio", "now"]);
}

#[tokio::test]
async fn a_parent_sent_before_its_set_is_filled_stores_nothing_unless_live() {
    let env = Env::new().await;
    let k = env.k().clone();
    // Its flow_deps has not run (a pipeline whose order broke).
    let before = env.keys();
    assert_eq!(send_parent(&env, "p", &[], 0).await, SendOutcome::Unfilled);
    assert_eq!(env.keys(), before, "nothing written");
    // Filled, it goes again and waits.
    assert_eq!(send_parent(&env, "p", &["c1"], 0).await, SendOutcome::Stored);
    assert_eq!(env.zset(&k.flow_waiting).len(), 1);
    // Live, an empty set is a re-send's: a duplicate, as any.
    env.raw(&["DEL", &k.deps("p")]);
    assert_eq!(send_parent(&env, "p", &[], 0).await, SendOutcome::Live);
}

#[tokio::test]
async fn a_link_pipelined_with_the_send_leaves_children_not_stored_or_dead_to_link_again() {
    let env = Env::new().await;
    let k = env.k().clone();
    send_parent(&env, "p", &["c1", "old", "dead"], 0).await;
    env.send_own("c1", "one", 0, 0, 3).await;
    env.send_own("dead", "was", 0, 0, 3).await;
    env.bury(&["dead"]);
    // "old" is not stored but an earlier message of its id left a result:
    // without `new` that result would complete the parent.
    env.raw(&["SET", &k.result("old"), "stale"]);
    assert_eq!(
        link_new(&env, "p", &["c1", "old", "dead"]).await,
        [LinkStatus::Linked, LinkStatus::NotYet, LinkStatus::NotYet]
    );
    assert_eq!(env.hget(&k.parents(), "c1"), format!("f {} p", k.base));
    assert_eq!(env.int(&["HEXISTS", &k.parents(), "old"]), 0);
    assert_eq!(env.int(&["HEXISTS", &k.parents(), "dead"]), 0);
    assert!(outbox(&env).is_empty(), "nothing recorded");
    // Once its send has run, the child links as any.
    env.send_own("old", "new", 0, 0, 3).await;
    assert_eq!(link(&env, "p", 'f', &["old"]).await, [LinkStatus::Linked]);
    assert_eq!(env.int(&["SCARD", &k.deps("p")]), 3);
}

#[tokio::test]
async fn a_link_fails_naming_a_parents_hash_dead_zset_or_outbox_of_another_type_and_writes_nothing() {
    let env = Env::new().await;
    let k = env.k().clone();
    send_parent(&env, "p", &["c1", "c2", "r1"], 0).await;
    env.send_own("c1", "one", 0, 0, 3).await;
    env.send_own("c2", "two", 0, 0, 3).await;
    // r1 finished with its result kept: its link records an outbox entry.
    env.raw(&["SET", &k.result("r1"), "done"]);
    for key in [k.parents(), k.dead.clone(), k.outbox.clone()] {
        env.raw(&["SET", &key, "foreign"]);
        let parent = parent_link(&env, "p", 'f');
        let ids = vec!["c1".to_string(), "c2".to_string(), "r1".to_string()];
        let err = env
            .store()
            .run(&FlowLink {
                parent: &parent,
                ids: &ids,
                new: false,
            })
            .await
            .unwrap_err();
        assert_wrong_type(&key, &err);
        // Nothing written: the key as it was, no link, no entry.
        assert_eq!(env.raw(&["GET", &key]), "foreign");
        assert_eq!(env.int(&["EXISTS", &k.parents()]), i64::from(key == k.parents()));
        assert_eq!(env.int(&["EXISTS", &k.outbox]), i64::from(key == k.outbox));
        env.raw(&["DEL", &key]);
    }
    assert_eq!(
        link(&env, "p", 'f', &["c1", "c2", "r1"]).await,
        [LinkStatus::Linked, LinkStatus::Linked, LinkStatus::Recorded]
    );
    assert_eq!(outbox(&env).len(), 1);
}

#[tokio::test]
async fn a_ready_list_or_priority_zset_of_another_type_fails_a_completion_before_it_writes() {
    let env = Env::new().await;
    let k = env.k().clone();
    let prio = ValueParts {
        priority: 7,
        ..ValueParts::new(3, b"parent")
    };
    assert_eq!(send_parent(&env, "plain", &["c1"], 0).await, SendOutcome::Stored);
    assert_eq!(
        send_parent_as(&env, "prio", &["c2"], 0, &prio).await,
        SendOutcome::Stored
    );
    let done = [
        completion(&env, "plain", "c1", "af"),
        completion(&env, "prio", "c2", "af"),
    ];
    for key in [k.ready.clone(), k.prio.clone()] {
        env.raw(&["SET", &key, "foreign"]);
        let err = env.store().run(&complete_op(&done)).await.unwrap_err();
        assert_wrong_type(&key, &err);
        // Nothing written: both parents still wait for their child.
        assert_eq!(env.zset(&k.flow_waiting).len(), 2);
        assert_eq!(env.int(&["SCARD", &k.deps("plain")]), 1);
        assert_eq!(env.int(&["SCARD", &k.deps("prio")]), 1);
        env.raw(&["DEL", &key]);
    }
    // No completion: nothing to apply.
    assert_eq!(complete(&env, &[]).await.applied, 0);
    let completed = complete(&env, &done).await;
    assert_eq!((completed.applied, completed.due), (2, 2));
    assert_eq!(env.list(&k.ready), ["plain"]);
}

#[tokio::test]
async fn flow_keys_of_another_type_fail_an_ack_or_a_completion_before_it_writes() {
    let env = Env::new().await;
    let k = env.k().clone();
    env.send_own("c1", "one", 0, 0, 3).await;
    assert_eq!(send_parent(&env, "p", &["c1"], 0).await, SendOutcome::Stored);
    assert_eq!(link(&env, "p", 'f', &["c1"]).await, [LinkStatus::Linked]);
    let leases = claim_all(&env).await;
    let lease = leases.iter().find(|l| l.0 == "c1").unwrap().1;
    // The ack's outbox entry, and the links it drops, are written after
    // its first write: their keys are checked before it.
    let links = env.hget(&k.parents(), "c1");
    assert!(!env.exists(&k.outbox));
    for key in [k.outbox.clone(), k.parents()] {
        env.raw(&["DEL", &key]);
        env.raw(&["SET", &key, "foreign"]);
        let err = env.store().run(&Ack::plain(&[("c1", lease)])).await.unwrap_err();
        assert_wrong_type(&key, &err);
        assert!(env.zscore(&k.processing, "c1").is_some(), "{key}: c1 still processing");
        assert!(env.exists(&k.msg("c1")), "{key}: c1's payload kept");
        env.raw(&["DEL", &key]);
    }
    env.raw(&["HSET", &k.parents(), "c1", &links]);
    assert_eq!(env.hget(&k.parents(), "c1"), links);
    // A completion writes the parent's children hash after its set.
    env.raw(&["SET", &k.children("p"), "foreign"]);
    let done = [completion(&env, "p", "c1", "af")];
    let err = env.store().run(&complete_op(&done)).await.unwrap_err();
    assert_wrong_type(&k.children("p"), &err);
    assert_eq!(env.int(&["SCARD", &k.deps("p")]), 1, "the set as it was");
    env.raw(&["DEL", &k.children("p")]);
    assert_eq!(complete(&env, &done).await.due, 1);
}
