//! walk.lua: browsing a state in order and searching payloads.

use crate::store::ops::walk::{Anchor, Walk, Walked};
use crate::store::scripts;
use crate::{MessageState, Order};

use super::Env;

/// One `walk` step of `state` in `order` after (score or position, id),
/// reading `read` entries for at most `limit` matches of `text`.
async fn walk(
    env: &Env,
    state: MessageState,
    order: Order,
    after: Option<(&str, &str)>,
    (read, limit): (usize, usize),
    text: &str,
) -> Walked {
    let after = after.map(|(at, id)| Anchor {
        at: at.into(),
        id: id.into(),
    });
    let op = Walk {
        state,
        order,
        after: after.as_ref(),
        read,
        limit,
        preview: 4,
        text,
    };
    env.run(&op).await
}

/// The ids of a walk step and its next cursor as (at, id).
fn walked(w: &Walked) -> (Vec<String>, Option<(String, String)>) {
    let ids = w.items.iter().map(|m| m.id.to_string()).collect();
    (ids, w.next.as_ref().map(|a| (a.at.clone(), a.id.clone())))
}

fn strings(ids: &[&str]) -> Vec<String> {
    ids.iter().map(|s| s.to_string()).collect()
}

fn next(at: &str, id: &str) -> Option<(String, String)> {
    Some((at.into(), id.into()))
}

#[tokio::test]
async fn walk_pages_a_zset_by_score_then_id_bytewise_from_a_cursor_that_may_be_gone() {
    let env = Env::new().await;
    let k = env.k().clone();
    // Equal scores order by id, byte by byte ("B" < "a-b" < "ab" < "b"),
    // whatever collation the server's locale has.
    env.raw(&[
        "ZADD", &k.pending, "10", "b", "10", "ab", "10", "a-b", "10", "B", "5", "first", "20", "last",
    ]);
    for id in ["b", "ab", "a-b", "B", "first", "last"] {
        env.seed(id, None);
    }
    env.raw(&["HSET", &k.attempts, "ab", "2:boom"]);
    let pending = MessageState::Pending;

    let w = walk(&env, pending, Order::Asc, None, (3, 3), "").await;
    assert_eq!((w.total, w.read), (6, 3));
    assert_eq!(walked(&w), (strings(&["first", "B", "a-b"]), next("10", "a-b")));
    assert_eq!(w.items[0].payload, b"payl", "4 bytes of preview");
    let w = walk(&env, pending, Order::Asc, Some(("10", "a-b")), (3, 3), "").await;
    assert_eq!(
        walked(&w),
        (strings(&["ab", "b", "last"]), None),
        "the end is reached: no cursor"
    );
    assert_eq!(w.items[0].last_error.as_deref(), Some("boom"));
    let w = walk(&env, pending, Order::Desc, None, (2, 2), "").await;
    assert_eq!(walked(&w), (strings(&["last", "b"]), next("10", "b")));
    let w = walk(&env, pending, Order::Desc, Some(("10", "b")), (10, 10), "").await;
    assert_eq!(walked(&w), (strings(&["ab", "a-b", "B", "first"]), None));

    // The cursor's entry is gone, or has another score: the walk goes on
    // strictly after (score, id), wherever that falls among equal scores.
    env.raw(&["ZREM", &k.pending, "a-b"]);
    env.raw(&["ZADD", &k.pending, "10", "aa"]);
    let w = walk(&env, pending, Order::Asc, Some(("10", "a-b")), (2, 2), "").await;
    assert_eq!(walked(&w), (strings(&["aa", "ab"]), next("10", "ab")));
    let w = walk(&env, pending, Order::Desc, Some(("10", "a-b")), (5, 5), "").await;
    assert_eq!(walked(&w), (strings(&["B", "first"]), None));
    env.raw(&["ZADD", &k.pending, "30", "b"]);
    let w = walk(&env, pending, Order::Asc, Some(("10", "b")), (5, 5), "").await;
    assert_eq!(
        walked(&w),
        (strings(&["last", "b"]), None),
        "b moved on to 30: read again there"
    );
    let w = walk(&env, pending, Order::Asc, Some(("15", "zz")), (5, 5), "").await;
    assert_eq!(walked(&w), (strings(&["last", "b"]), None));
    let w = walk(&env, pending, Order::Asc, Some(("30", "b")), (5, 5), "").await;
    assert_eq!((walked(&w), w.read), ((vec![], None), 0));

    // Dead letters walk the same way; one whose payload is gone is listed.
    env.raw(&["ZADD", &k.dead, "7", "g1", "8", "g2"]);
    let w = walk(&env, MessageState::Dead, Order::Desc, None, (1, 1), "").await;
    assert_eq!(walked(&w), (strings(&["g2"]), next("8", "g2")));
    assert_eq!(w.items[0].payload_len, 0);
}

/// Payload bytes one search step searches at most (`SEARCH_BYTES` in
/// `lua/walk.lua`).
const SEARCH_BYTES: usize = 128 * 1024;

#[tokio::test]
async fn a_search_step_stops_at_its_byte_budget_and_the_search_goes_on_from_its_cursor() {
    let env = Env::new().await;
    let k = env.k().clone();
    let kib = |n: usize| "x".repeat(n * 1024);
    // Searched bytes: 100 KiB, 100 KiB, the first 128 KiB of 200 KiB, 6.
    let payloads = [
        kib(100),
        kib(100) + "needle",
        kib(150) + "needle" + &kib(50),
        "needle".to_string(),
    ];
    for (i, payload) in payloads.iter().enumerate() {
        let id = format!("m{i}");
        env.raw(&["ZADD", &k.dead, &i.to_string(), &id]);
        env.seed_value(&id, &format!("3:{payload}"), None);
    }
    let dead = MessageState::Dead;
    let w = walk(&env, dead, Order::Asc, None, (10, 10), "needle").await;
    assert_eq!(
        (walked(&w), w.read),
        ((vec![], next("0", "m0")), 1),
        "a second 100 KiB is past the budget"
    );
    let w = walk(&env, dead, Order::Asc, Some(("0", "m0")), (10, 10), "needle").await;
    assert_eq!((walked(&w), w.read), ((strings(&["m1"]), next("1", "m1")), 1));
    assert_eq!(w.items[0].payload, b"xxxx", "a preview, not the bytes searched");
    assert_eq!(w.items[0].payload_len, 100 * 1024 + 6);
    // A payload longer than the budget: its first SEARCH_BYTES are searched, alone.
    let w = walk(&env, dead, Order::Asc, Some(("1", "m1")), (10, 10), "needle").await;
    assert_eq!((walked(&w), w.read), ((vec![], next("2", "m2")), 1));
    let w = walk(&env, dead, Order::Asc, Some(("2", "m2")), (10, 10), "needle").await;
    assert_eq!((walked(&w), w.read), ((strings(&["m3"]), None), 1));
    // A browse reads no payload whole: no budget.
    let w = walk(&env, dead, Order::Asc, None, (10, 10), "").await;
    assert_eq!((w.items.len(), w.read), (4, 4));

    // The search goes on from step to step and finds both.
    let found = env.queue.search(dead, "needle").await.unwrap();
    let ids: Vec<String> = found.items.iter().map(|m| m.id.to_string()).collect();
    assert_eq!((ids, found.scanned), (strings(&["m1", "m3"]), 4));
    // The budget these steps assume is the script's.
    assert!(scripts::WALK
        .source()
        .contains(&format!("local SEARCH_BYTES = {SEARCH_BYTES}\n")));
}

/// The longest Redis call of a search over 64 payloads of 1 MiB that
/// never match (the worst case for the text search: a run of the text's
/// first byte), from SLOWLOG. A measurement, not a test:
/// `cargo test --features cli,tls,otel --lib store::script_tests::walk::measure_ -- --ignored --nocapture`
#[tokio::test]
#[ignore = "a measurement"]
async fn measure_the_longest_call_of_a_search_over_64_payloads_of_1_mib() {
    let env = Env::new().await;
    let k = env.k().clone();
    let payload = format!("3:{}", "x".repeat(1024 * 1024));
    for i in 0..64 {
        let id = format!("m{i:02}");
        env.raw(&["ZADD", &k.dead, &i.to_string(), &id]);
        env.seed_value(&id, &payload, None);
    }
    let text = format!("{}Q", "x".repeat(48));
    env.raw(&["CONFIG", "SET", "slowlog-log-slower-than", "0"]);
    env.raw(&["CONFIG", "SET", "slowlog-max-len", "100000"]);
    for _ in 0..3 {
        env.raw(&["SLOWLOG", "RESET"]);
        let found = env.queue.search(MessageState::Dead, text.as_str()).await.unwrap();
        assert_eq!((found.items.len(), found.scanned), (0, 64));
        let crate::test_support::RawReply::Array(entries) = env.server.raw_reply(&["SLOWLOG", "GET", "100000"]) else {
            panic!("SLOWLOG GET")
        };
        // Each entry: id, when, µs, [command, args...], ...
        let mut us: Vec<i64> = entries
            .iter()
            .filter_map(|e| match e {
                crate::test_support::RawReply::Array(f) if f[3].render().starts_with("EVAL") => {
                    f[2].render().parse().ok()
                }
                _ => None,
            })
            .collect();
        us.sort_unstable();
        println!(
            "search over 64 x 1 MiB: {} script calls, longest {} us, total {} us",
            us.len(),
            us.last().unwrap(),
            us.iter().sum::<i64>()
        );
    }
}

#[tokio::test]
async fn walk_finds_payload_text_within_its_read_budget_and_stops_at_the_limit() {
    let env = Env::new().await;
    let k = env.k().clone();
    for (i, payload) in ["no", "a needle", "no", "needle twice", "no:needle", "needle"]
        .iter()
        .enumerate()
    {
        let id = format!("m{i}");
        env.raw(&["ZADD", &k.dead, &i.to_string(), &id]);
        env.seed_value(&id, &format!("3;f100:{payload}"), None);
    }
    // An id equal to the text is left out (the caller looks it up), and the
    // header is not searched.
    env.raw(&["ZADD", &k.dead, "9", "needle"]);
    env.seed_value("needle", "3:needle", None);
    env.raw(&["ZADD", &k.dead, "10", "h"]);
    env.seed_value("h", "3;needle:x", None);
    let dead = MessageState::Dead;
    let w = walk(&env, dead, Order::Asc, None, (3, 10), "needle").await;
    assert_eq!((walked(&w), w.read), ((strings(&["m1"]), next("2", "m2")), 3));
    assert_eq!(w.items[0].payload, b"a ne", "preview of the payload");
    assert_eq!(w.items[0].payload_len, 8);
    let w = walk(&env, dead, Order::Asc, Some(("2", "m2")), (10, 2), "needle").await;
    assert_eq!(
        (walked(&w), w.read),
        ((strings(&["m3", "m4"]), next("4", "m4")), 2),
        "stops at the limit"
    );
    let w = walk(&env, dead, Order::Asc, Some(("4", "m4")), (10, 10), "needle").await;
    assert_eq!((walked(&w), w.read), ((strings(&["m5"]), None), 3));
    let w = walk(&env, dead, Order::Asc, None, (10, 10), "Needle").await;
    assert!(w.items.is_empty(), "case-sensitive");
}

#[tokio::test]
async fn walk_finds_its_place_in_a_list_after_pops_and_pushes_at_the_head() {
    let env = Env::new().await;
    let k = env.k().clone();
    for id in ["a", "b", "c", "d", "e"] {
        env.seed(id, None);
    }
    env.raw(&["RPUSH", &k.ready, "a", "b", "c", "d", "e"]);
    let ready = MessageState::Ready;
    let w = walk(&env, ready, Order::Asc, None, (2, 2), "").await;
    assert_eq!((walked(&w), w.total), ((strings(&["a", "b"]), next("1", "b")), 5));
    assert_eq!(w.items[0].due, None, "lists have no score");
    // Claims pop "a": "b" is found again one nearer the head.
    env.raw(&["LPOP", &k.ready]);
    let w = walk(&env, ready, Order::Asc, Some(("1", "b")), (2, 2), "").await;
    assert_eq!(walked(&w), (strings(&["c", "d"]), next("2", "d")));
    // A release pushes at the head: "d" is found one further back.
    env.seed("r", None);
    env.raw(&["LPUSH", &k.ready, "r"]);
    let w = walk(&env, ready, Order::Asc, Some(("2", "d")), (2, 2), "").await;
    assert_eq!(walked(&w), (strings(&["e"]), None));
    // "d" was claimed, and everything before it: the walk goes on from the head.
    env.raw(&["LTRIM", &k.ready, "4", "-1"]);
    let w = walk(&env, ready, Order::Asc, Some(("3", "d")), (2, 2), "").await;
    assert_eq!(walked(&w), (strings(&["e"]), None));

    // Descending: tail first; a cursor that was popped ends the walk.
    env.raw(&["RPUSH", &k.retry, "a", "b", "c"]);
    let retry = MessageState::Retry;
    let w = walk(&env, retry, Order::Desc, None, (2, 2), "").await;
    assert_eq!(walked(&w), (strings(&["c", "b"]), next("1", "b")));
    env.raw(&["LPUSH", &k.retry, "r"]);
    let w = walk(&env, retry, Order::Desc, Some(("1", "b")), (5, 5), "").await;
    assert_eq!(walked(&w), (strings(&["a", "r"]), None));
    env.raw(&["LTRIM", &k.retry, "3", "-1"]);
    let w = walk(&env, retry, Order::Desc, Some(("1", "b")), (5, 5), "").await;
    assert_eq!((walked(&w), w.read), ((vec![], None), 0));

    // Entries of cancelled messages are read, never returned.
    env.raw(&["RPUSH", &k.retry, "gone", "a"]);
    env.mark_stale();
    let w = walk(&env, retry, Order::Asc, None, (2, 2), "").await;
    assert_eq!((walked(&w), w.read), ((strings(&["c"]), next("1", "gone")), 2));
}

#[tokio::test]
async fn walk_refuses_limits_out_of_range_before_reading() {
    let env = Env::new().await;
    let op = Walk {
        state: MessageState::Pending,
        order: Order::Asc,
        after: None,
        read: 1,
        limit: 1,
        preview: 1,
        text: "",
    };
    for (i, bad) in [(5, "0"), (5, "1001"), (6, "0"), (8, "x")] {
        let err = env.run_with_arg(&op, i, bad.into()).await.unwrap_err();
        assert!(err.details().contains("limit must be"), "ARGV[{i}] {bad}: {err:?}");
    }
}

/// The ready state of a queue with groups goes on after its list with the
/// groups' due messages, group by group in name order, each by rank; the
/// cursor of a grouped entry is `<group>/<score>`, and a step that visits
/// MAX_LIMIT groups without filling goes on past the last one.
#[tokio::test]
async fn walk_of_ready_goes_on_into_the_groups_in_name_order() {
    let env = Env::new().await;
    // u1 pending and due: the grouped messages go through pending behind it.
    env.send_grouped("u1", "").await;
    for (id, group) in [("b1", "B"), ("a1", "A"), ("a2", "A")] {
        env.send_grouped(id, group).await;
    }
    assert_eq!(env.promote(1000).await[0], 4);
    let at = |id: &str, group: &str| {
        let score = env.zscore(&env.group_key(&format!(":{group}:ready")), id).unwrap();
        format!("{group}/{score}")
    };
    let ready = MessageState::Ready;
    let (a1, a2) = (at("a1", "A"), at("a2", "A"));

    let w = walk(&env, ready, Order::Asc, None, (2, 2), "").await;
    assert_eq!((w.total, w.read), (4, 2), "the groups' messages count in the state");
    assert_eq!(walked(&w), (strings(&["u1", "a1"]), next(&a1, "a1")));
    assert_eq!(w.items[1].payload, b"a1");
    let w = walk(&env, ready, Order::Asc, Some((&a1, "a1")), (2, 2), "").await;
    assert_eq!(walked(&w), (strings(&["a2", "b1"]), None), "read one ahead: the end");
    let w = walk(&env, ready, Order::Asc, None, (3, 3), "").await;
    assert_eq!(walked(&w), (strings(&["u1", "a1", "a2"]), next(&a2, "a2")));

    // Descending: the groups from the last, then the list from its tail.
    let w = walk(&env, ready, Order::Desc, None, (2, 2), "").await;
    assert_eq!(walked(&w), (strings(&["b1", "a2"]), next(&a2, "a2")));
    let w = walk(&env, ready, Order::Desc, Some((&a2, "a2")), (2, 2), "").await;
    assert_eq!(walked(&w), (strings(&["a1", "u1"]), None));
    let w = walk(&env, ready, Order::Desc, None, (3, 3), "").await;
    assert_eq!(walked(&w), (strings(&["b1", "a2", "a1"]), next(&a1, "a1")));
    let w = walk(&env, ready, Order::Desc, Some((&a1, "a1")), (3, 3), "").await;
    assert_eq!(walked(&w), (strings(&["u1"]), None));

    // A search reads the groups too.
    let w = walk(&env, ready, Order::Asc, None, (10, 10), "a").await;
    assert_eq!((walked(&w), w.read), ((strings(&["a1", "a2"]), None), 4));

    // The cursor's entry left its group (claimed): the walk goes on after its place.
    env.raw(&["ZREM", &env.group_key(":A:ready"), "a1"]);
    let w = walk(&env, ready, Order::Asc, Some((&a1, "a1")), (5, 5), "").await;
    assert_eq!(walked(&w), (strings(&["a2", "b1"]), None));

    // Known groups with nothing due: a step visits at most 1000 of them,
    // then the cursor is past the last one visited, with no id.
    let mut known = vec!["ZADD".to_string(), env.group_key("known")];
    for i in 0..1000 {
        known.extend(["0".to_string(), format!("e{i:04}")]);
    }
    env.raw(&known.iter().map(String::as_str).collect::<Vec<_>>());
    env.send_grouped("f1", "f").await;
    let w = walk(&env, ready, Order::Asc, Some(("B/", "")), (10, 10), "").await;
    assert_eq!((walked(&w), w.read), ((vec![], next("e0999/", "")), 0));
    let w = walk(&env, ready, Order::Asc, Some(("e0999/", "")), (10, 10), "").await;
    assert_eq!(walked(&w), (strings(&["f1"]), None));
    let w = walk(&env, ready, Order::Desc, None, (10, 10), "").await;
    assert_eq!(walked(&w), (strings(&["f1"]), next("e0001/", "")));
    let w = walk(&env, ready, Order::Desc, Some(("e0001/", "")), (10, 10), "").await;
    assert_eq!(walked(&w), (strings(&["b1", "a2", "u1"]), None));
}
