//! Browsing, searching and per-shard status through the handle: a page
//! walk over a queue that changes between pages reads every message that
//! stays exactly once and in order (both directions, one shard and
//! three); a search finds text deep in a queue within its read budget,
//! finds an id at once, and refuses bad input with typed errors; each
//! shard's status adds up to the queue's.

mod helpers;
use delayqueue_test_support as support;

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant, SystemTime};

use delayqueue::fred::util::redis_keyslot;
use delayqueue::{DelayQueue, Error, MessageId, MessageState, NewMessage, Order, MAX_SCAN};
use helpers::start_queue;
use support::WAIT;

const FETCH_INTERVAL: Duration = Duration::from_millis(100);
const HOUR: u64 = 3_600_000;

/// Sends `n` messages with payload `<tag> <i>`, due in 1 to 5 hours (many
/// share a due time: a batch chunk is stored at one instant).
async fn send(q: &DelayQueue, tag: &str, n: usize, rng: &mut fastrand::Rng) -> Vec<MessageId> {
    let msgs: Vec<NewMessage> = (0..n)
        .map(|i| NewMessage::new(format!("{tag} {i}")).delay(Duration::from_millis(HOUR * rng.u64(1..=5))))
        .collect();
    q.send_batch(msgs)
        .await
        .unwrap()
        .into_iter()
        .map(Result::unwrap)
        .collect()
}

/// Walks pending page by page in `order` while cancelling messages on
/// both sides of the cursor and sending new ones between pages; checks
/// that every message that stayed is read once, nothing twice, and the
/// pages are in order within each shard.
async fn walk_a_changing_queue(q: &DelayQueue, order: Order, seed: u64) {
    let mut rng = fastrand::Rng::with_seed(seed);
    let first = send(q, "first", 1000, &mut rng).await;
    let mut left: HashSet<MessageId> = first.iter().cloned().collect();
    let mut unseen: Vec<MessageId> = first.clone();
    let mut seen: HashMap<MessageId, usize> = HashMap::new();
    let mut order_breaks = 0;
    let mut last: Option<(SystemTime, String)> = None;
    let mut cursor = None;
    let (mut pages, end) = (0, Instant::now() + WAIT * 4);
    loop {
        assert!(pages < 200 && Instant::now() < end, "walk did not end: {pages} pages");
        pages += 1;
        let page = q
            .browse(MessageState::Pending)
            .order(order)
            .after(cursor)
            .limit(37)
            .await
            .unwrap();
        for m in &page.items {
            *seen.entry(m.id.clone()).or_default() += 1;
            let key = (m.due.unwrap(), m.id.to_string());
            let in_order = match (&last, order) {
                (Some(prev), Order::Asc) => *prev <= key,
                (Some(prev), Order::Desc) => *prev >= key,
                (None, _) => true,
            };
            order_breaks += usize::from(!in_order);
            last = Some(key);
        }
        unseen.retain(|id| !seen.contains_key(id));
        cursor = page.cursor;
        if cursor.is_none() {
            break;
        }
        // Cancel three messages already read and three not yet read, and
        // send five: before and after the cursor, wherever they fall. Every
        // other page, the cursor's own message goes too.
        if pages % 2 == 0 {
            let id = &page.items.last().unwrap().id;
            q.cancel(id).await.unwrap();
            left.remove(id);
        }
        let read: Vec<MessageId> = seen.keys().cloned().collect();
        for pool in [&read, &unseen] {
            for _ in 0..3.min(pool.len()) {
                let id = &pool[rng.usize(..pool.len())];
                q.cancel(id).await.unwrap();
                left.remove(id);
            }
        }
        unseen.retain(|id| left.contains(id));
        send(q, "later", 5, &mut rng).await;
    }
    let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "{order:?}: read twice: {twice:?}");
    let missed: Vec<_> = left.iter().filter(|id| !seen.contains_key(*id)).collect();
    assert!(
        missed.is_empty(),
        "{order:?}: {} stayed but were never read",
        missed.len()
    );
    assert!(
        order_breaks < q.shards(),
        "{order:?}: {order_breaks} steps against the order for {} shards",
        q.shards()
    );
    q.purge().await.unwrap();
}

#[tokio::test]
async fn a_page_walk_reads_every_message_that_stays_once_in_order() {
    let (_server, _client, q) = start_queue("walk", FETCH_INTERVAL, |b| b).await;
    walk_a_changing_queue(&q, Order::Asc, 1).await;
    walk_a_changing_queue(&q, Order::Desc, 2).await;
}

#[tokio::test]
async fn a_page_walk_of_a_sharded_queue_goes_shard_after_shard() {
    let (_server, _client, q) = start_queue("walk", FETCH_INTERVAL, |b| b.shards(3)).await;
    walk_a_changing_queue(&q, Order::Asc, 3).await;
    walk_a_changing_queue(&q, Order::Desc, 4).await;
    // An empty state: one page, no cursor.
    let page = q.browse(MessageState::Dead).await.unwrap();
    assert_eq!((page.items.len(), page.total, page.cursor), (0, 0, None));
}

#[tokio::test]
async fn browse_walks_the_ready_list_head_first_and_tail_first() {
    let (_server, _client, q) = start_queue("lists", FETCH_INTERVAL, |b| b.default_retry_count(0)).await;
    // Five dead letters (no retries, a failing handler), requeued in
    // order of death to the ready list, where no consumer takes them.
    let consumer = q.start_consume(helpers::ok_else_fail()).await.unwrap();
    for i in 0..5 {
        q.send(format!("r{i}")).id(format!("r{i}")).await.unwrap();
        let dead = support::wait_for(WAIT, || async { q.counts().await.unwrap().dead == i + 1 }).await;
        assert!(dead, "r{i} did not die");
    }
    consumer.shutdown().await.unwrap();
    assert_eq!(q.requeue_all_dead().await.unwrap(), 5);
    for (order, want) in [
        (Order::Asc, ["r0", "r1", "r2", "r3", "r4"]),
        (Order::Desc, ["r4", "r3", "r2", "r1", "r0"]),
    ] {
        let (ids, pages) = helpers::browse_all(&q, MessageState::Ready, order, 2, 5).await;
        assert_eq!((ids, pages), (want.map(String::from).to_vec(), 3), "{order:?}");
    }
}

/// Due messages of groups are in the ready state's walks after the ready
/// list, group by group in name order, each group's in due order: browse
/// pages in both directions and a search read them.
#[tokio::test]
async fn browse_and_search_of_ready_go_on_into_the_groups() {
    let (_server, _client, q) = start_queue("grouped", FETCH_INTERVAL, |b| b).await;
    q.pause().await.unwrap();
    let sends = [
        ("u0", None),
        ("b0", Some("beta")),
        ("a0", Some("alpha")),
        ("u1", None),
        ("b1", Some("beta")),
        ("a1", Some("alpha")),
    ];
    for (id, group) in sends {
        let send = q.send(format!("payload {id}")).id(id);
        match group {
            Some(g) => send.group(g).await.unwrap(),
            None => send.await.unwrap(),
        };
    }
    // A consumer of the paused queue moves them to ready and leases none.
    let consumer = q.start_consume(helpers::ok_else_fail()).await.unwrap();
    let ready = support::wait_for(WAIT, || async { q.counts().await.unwrap().ready == 6 }).await;
    assert!(ready, "not all ready: {:?}", q.counts().await.unwrap());
    consumer.shutdown().await.unwrap();
    let asc = ["u0", "u1", "a0", "a1", "b0", "b1"].map(String::from).to_vec();
    let desc: Vec<String> = asc.iter().rev().cloned().collect();
    for (order, want) in [(Order::Asc, &asc), (Order::Desc, &desc)] {
        for limit in [1, 2, 4, 6] {
            let (ids, _) = helpers::browse_all(&q, MessageState::Ready, order, limit, 6).await;
            assert_eq!(&ids, want, "{order:?} by {limit}");
        }
    }
    let found = q.search(MessageState::Ready, "payload").limit(10).await.unwrap();
    let ids: Vec<&str> = found.items.iter().map(|m| m.id.as_str()).collect();
    assert_eq!(
        (ids, found.scanned, found.cursor),
        (asc.iter().map(String::as_str).collect(), 6, None)
    );
    let found = q
        .search(MessageState::Ready, "payload b")
        .order(Order::Desc)
        .await
        .unwrap();
    let ids: Vec<&str> = found.items.iter().map(|m| m.id.as_str()).collect();
    assert_eq!(ids, ["b1", "b0"]);
    let found = q.search(MessageState::Ready, "a1").await.unwrap();
    let ids: Vec<&str> = found.items.iter().map(|m| m.id.as_str()).collect();
    assert_eq!(ids, ["a1"], "by id, once");
}

#[tokio::test]
async fn search_finds_text_deep_in_the_queue_within_its_scan_budget() {
    let (_server, _client, q) = start_queue("search", FETCH_INTERVAL, |b| b).await;
    let msgs = (0..3000u64).map(|i| {
        let payload = if i == 2500 {
            "the needle here".to_string()
        } else {
            format!("hay {i}")
        };
        NewMessage::new(payload)
            .id(format!("m{i:04}"))
            .delay(Duration::from_millis(HOUR + i))
    });
    assert!(q.send_batch(msgs).await.unwrap().iter().all(Result::is_ok));
    let pending = MessageState::Pending;
    let (mut cursor, mut calls, mut found) = (None, 0, Vec::new());
    let end = Instant::now() + WAIT;
    loop {
        assert!(calls < 10 && Instant::now() < end, "search did not end");
        let f = q
            .search(pending, "needle")
            .after(cursor)
            .limit(1)
            .scan(1000)
            .await
            .unwrap();
        calls += 1;
        assert!(f.scanned <= 1000, "read {} of a budget of 1000", f.scanned);
        found.extend(f.items.iter().map(|m| (m.id.to_string(), m.payload.clone())));
        cursor = f.cursor;
        if !found.is_empty() || cursor.is_none() {
            break;
        }
    }
    assert_eq!(found, vec![("m2500".to_string(), b"the needle here".to_vec())]);
    assert_eq!(calls, 3, "found in the third thousand");
    // The limit stopped it at the match: the rest goes on after it.
    let rest = q.search(pending, "needle").after(cursor).scan(MAX_SCAN).await.unwrap();
    assert_eq!((rest.items.len(), rest.scanned, rest.cursor), (0, 499, None));

    // Descending, from the other end: the 500th message read.
    let f = q.search(pending, "needle").order(Order::Desc).scan(500).await.unwrap();
    assert_eq!((f.items.len(), f.scanned), (1, 500));
    assert!(f.cursor.is_some());

    // By id: looked up first, wherever it lies, and read once in the walk.
    let f = q.search(pending, "m2999").scan(1).await.unwrap();
    assert_eq!(f.items.iter().map(|m| m.id.as_str()).collect::<Vec<_>>(), ["m2999"]);
    let f = q.search(pending, "m1234").limit(1000).scan(MAX_SCAN).await.unwrap();
    assert_eq!(f.items.len(), 1, "the id, not again from its payload: {:?}", f.items);
    let f = q.search(pending, "hay 1").limit(5).await.unwrap();
    let ids: Vec<&str> = f.items.iter().map(|m| m.id.as_str()).collect();
    assert_eq!(ids, ["m0001", "m0010", "m0011", "m0012", "m0013"], "the limit stops it");
    assert_eq!(f.scanned, 14);
    let f = q.search(MessageState::Dead, "m1234").await.unwrap();
    assert_eq!((f.items.len(), f.cursor), (0, None), "the id is in another state");
}

#[tokio::test]
async fn browse_and_search_refuse_bad_input_with_typed_errors() {
    let (_server, _client, q) = start_queue("bad", FETCH_INTERVAL, |b| b).await;
    q.send("x").id("a").delay(Duration::from_secs(60)).await.unwrap();
    let pending = MessageState::Pending;
    let invalid = |r: Result<_, Error>, what: &str| match r {
        Err(Error::InvalidArgument(text)) => text,
        other => panic!("{what}: {other:?}"),
    };
    for cursor in [
        "",
        "x",
        "pa",
        "pa1",
        "pa0:",
        "pa0:1:",
        "pa0:abc:a",
        "pa0:nan:a",
        "da0",
        "pd0",
        "pa0:1:a b",
    ] {
        let text = invalid(q.browse(pending).after(Some(cursor.into())).await.map(|_| ()), cursor);
        assert!(text.contains("invalid cursor"), "{cursor}: {text}");
        invalid(
            q.search(pending, "x").after(Some(cursor.into())).await.map(|_| ()),
            cursor,
        );
    }
    // A list's cursor is a position; past the ready list, a group's
    // message (`<group>/<score>:<id>`) or past a group (`<group>/:`).
    for cursor in [
        "ra0:1.5:a",
        "ra0:A/:a",
        "ra0:A/x:a",
        "ra0:a b/1:a",
        "ra0:A/1:",
        "ra0:/1:a",
    ] {
        let text = invalid(
            q.browse(MessageState::Ready)
                .after(Some(cursor.into()))
                .await
                .map(|_| ()),
            cursor,
        );
        assert!(text.contains("invalid cursor"), "{cursor}: {text}");
    }
    invalid(
        q.browse(pending).after(Some("pa0:A/1:a".into())).await.map(|_| ()),
        "pending",
    );
    for cursor in ["ra0:A/:", "ra0:A/5:a"] {
        let page = q.browse(MessageState::Ready).after(Some(cursor.into())).await.unwrap();
        assert_eq!((page.items.len(), page.cursor), (0, None), "{cursor}");
    }
    for n in [0, 1001] {
        invalid(q.browse(pending).limit(n).await.map(|_| ()), "browse limit");
        invalid(q.search(pending, "x").limit(n).await.map(|_| ()), "search limit");
    }
    for n in [0, MAX_SCAN + 1] {
        invalid(q.search(pending, "x").scan(n).await.map(|_| ()), "scan");
    }
    invalid(q.search(pending, "").await.map(|_| ()), "empty text");
    // A good cursor works, from browse to search too.
    let page = q.browse(pending).limit(1).await.unwrap();
    assert_eq!((page.items.len(), page.total, page.cursor.as_deref()), (1, 1, None));
    let page = q.browse(pending).after(Some("pa0:0:a".into())).await.unwrap();
    assert_eq!(page.items[0].id.as_str(), "a", "0 < its due time");
}

#[tokio::test]
async fn shard_statuses_give_each_shard_in_order_and_add_up_to_status() {
    let (_server, _client, q) = start_queue("parts", FETCH_INTERVAL, |b| b.shards(3)).await;
    let ids: Vec<String> = (0..40).map(|i| format!("s{i}")).collect();
    let msgs = ids
        .iter()
        .map(|id| NewMessage::new("x").id(id.as_str()).delay(Duration::from_secs(3600)));
    assert!(q.send_batch(msgs).await.unwrap().iter().all(Result::is_ok));
    let statuses = q.shard_statuses().await.unwrap();
    let want: Vec<u64> = (0..3)
        .map(|s| {
            ids.iter()
                .filter(|id| usize::from(redis_keyslot(id.as_bytes())) % 3 == s)
                .count() as u64
        })
        .collect();
    let got: Vec<u64> = statuses.iter().map(|s| s.counts.pending).collect();
    assert_eq!(got, want);
    assert!(want.iter().all(|n| *n > 0), "every shard holds some: {want:?}");
    let sent: Vec<u64> = statuses.iter().map(|s| s.totals.sent).collect();
    assert_eq!(sent, want);
    let status = q.status().await.unwrap();
    assert_eq!((status.counts.pending, status.totals.sent), (40, 40));
    let (_server1, _client1, one) = start_queue("one", FETCH_INTERVAL, |b| b).await;
    one.send("x").await.unwrap();
    let statuses = one.shard_statuses().await.unwrap();
    assert_eq!(statuses.len(), 1);
    assert_eq!(statuses[0].counts, one.counts().await.unwrap());
}
