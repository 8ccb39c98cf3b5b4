//! Sharded queues (`DelayQueueBuilder::shards`): one logical queue spread
//! over several hash tags. On one server: sends spread over every shard,
//! every message is delivered once, by-id operations find their shard,
//! stats / list / dead letters / purge / the integrity check see the whole
//! queue, claims are fair between shards, and a consumer warns about keys
//! of another layout. On a 3-primary cluster: the shards land on every
//! primary and a run with two consumers loses nothing.

mod helpers;
use delayqueue_test_support as support;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use delayqueue::fred::interfaces::HashesInterface;
use delayqueue::fred::util::redis_keyslot;
use delayqueue::{Counts, DelayQueue, Error, HandlerError, Message, MessageId, MessageState, NewMessage};
use helpers::{acking, recording, start_queue, wait_stats, Log};
use support::cluster::RedisCluster;
use support::logs::Logs;
use support::{all_keys, wait_until, WAIT};

const FETCH_INTERVAL: Duration = Duration::from_millis(100);

/// The shard a queue of `shards` shards keeps message `id` in (the
/// documented rule: Redis's key slot of the id, modulo the shard count).
fn shard_of(id: &str, shards: usize) -> usize {
    usize::from(redis_keyslot(id.as_bytes())) % shards
}

/// `n` ids that all live in shard `shard` of `shards`.
fn ids_in_shard(prefix: &str, shard: usize, shards: usize, n: usize) -> Vec<String> {
    (0..)
        .map(|i| format!("{prefix}-{i}"))
        .filter(|id| shard_of(id, shards) == shard)
        .take(n)
        .collect()
}

/// Entries of the pending zset of each shard of queue `name`.
async fn pending_per_shard(client: &delayqueue::fred::clients::Client, name: &str, shards: usize) -> Vec<i64> {
    use delayqueue::fred::interfaces::SortedSetsInterface;
    let mut counts = Vec::new();
    for i in 0..shards {
        counts.push(client.zcard(format!("dq:{{{name}#{i}}}:pending")).await.unwrap());
    }
    counts
}

#[tokio::test]
async fn every_message_is_delivered_once_from_every_shard() {
    let (_server, client, q) = start_queue("spread", FETCH_INTERVAL, |b| b.shards(4).concurrency(8)).await;
    assert_eq!(q.shards(), 4);
    let batch = q
        .send_batch((0..2000).map(|i| NewMessage::new(format!("b{i}")).delay(Duration::from_millis(300 + i % 200))))
        .await
        .unwrap();
    assert!(batch.iter().all(Result::is_ok));
    for i in 0..100 {
        q.send(format!("s{i}")).delay(Duration::from_millis(300)).await.unwrap();
    }
    let spread = pending_per_shard(&client, "spread", 4).await;
    assert_eq!(spread.iter().sum::<i64>(), 2100, "{spread:?}");
    // A fair hash puts about 525 in each; far fewer means it does not spread.
    assert!(spread.iter().all(|&n| n > 350), "{spread:?}");
    assert_eq!(q.counts().await.unwrap().live(), 2100);

    let log = Log::default();
    let consumer = q.start_consume(acking(&log)).await.unwrap();
    assert!(wait_until(2 * WAIT, || log.ids().len() == 2100).await);
    assert_eq!(wait_stats(&q, WAIT, Counts::default()).await, Counts::default());
    consumer.shutdown().await.unwrap();
    assert!(log.counts().values().all(|&n| n == 1), "a message was delivered twice");
    assert!(q.check_integrity().await.unwrap().is_clean());
    assert_eq!(all_keys(&client).await, Vec::<String>::new(), "keys left after ack");
    let status = q.status().await.unwrap();
    assert_eq!((status.totals.sent, status.totals.acked), (2100, 2100));
}

/// Each shard's wake-ups reach the consumer: with a sweep far apart,
/// messages sent to every shard after it started still come, and not early.
#[tokio::test]
async fn wake_ups_of_every_shard_reach_the_consumer() {
    // Far longer than the test waits: only wake-ups bring messages in time.
    let (_server, _client, q) = start_queue("woken", Duration::from_secs(600), |b| b.shards(3)).await;
    let log = Log::default();
    let consumer = q.start_consume(acking(&log)).await.unwrap();
    // Once a first message of each shard went through, each shard's first
    // sweep has passed.
    let first: Vec<String> = (0..3).flat_map(|s| ids_in_shard("first", s, 3, 1)).collect();
    for id in &first {
        q.send("x").id(id.as_str()).await.unwrap();
    }
    assert!(wait_until(WAIT, || log.len() == first.len()).await);
    let ids: Vec<String> = (0..3).flat_map(|s| ids_in_shard("w", s, 3, 2)).collect();
    let sent = Instant::now();
    for id in &ids {
        q.send("x")
            .delay(Duration::from_millis(200))
            .id(id.as_str())
            .await
            .unwrap();
    }
    assert!(
        wait_until(WAIT, || log.len() == first.len() + ids.len()).await,
        "{} of {} delivered",
        log.len() - first.len(),
        ids.len()
    );
    let earliest = log.snapshot()[first.len()..].iter().map(|d| d.2).min().unwrap();
    assert!(
        earliest - sent >= Duration::from_millis(195),
        "early: {:?}",
        earliest - sent
    );
    consumer.shutdown().await.unwrap();
}

#[tokio::test]
async fn by_id_operations_and_inspection_cover_every_shard() {
    let (_server, client, q) = start_queue("byid", FETCH_INTERVAL, |b| {
        b.shards(3).default_retry_count(0).nack_redelivery_delay(Duration::ZERO)
    })
    .await;
    assert!(!q.exists().await.unwrap());
    let ids: Vec<MessageId> = (0..30).map(|i| MessageId::from(format!("id-{i}"))).collect();
    for id in &ids {
        q.send("later").delay(Duration::from_secs(600)).id(id).await.unwrap();
    }
    assert!(q.exists().await.unwrap());
    assert_eq!(pending_per_shard(&client, "byid", 3).await.len(), 3);
    assert!(pending_per_shard(&client, "byid", 3).await.iter().all(|&n| n > 0));
    // Idempotent ids: the second send finds the first in its shard.
    for id in &ids[..5] {
        assert!(matches!(q.send("again").id(id).await, Err(Error::Duplicate { .. })));
    }
    for id in &ids {
        let info = q.get(id).await.unwrap().expect("found in its shard");
        assert_eq!(
            (info.state, info.payload.as_slice()),
            (MessageState::Pending, &b"later"[..])
        );
    }
    assert!(q.cancel(&ids[0]).await.unwrap());
    assert!(!q.cancel(&ids[0]).await.unwrap());
    assert!(q.get(&ids[0]).await.unwrap().is_none());

    // Pages of 7 walk all shards: every id once, none missing.
    let mut seen = Vec::new();
    let mut offset = Some(0);
    for _ in 0..10 {
        let Some(at) = offset else { break };
        let page = q.list(MessageState::Pending, at, 7).await.unwrap();
        assert_eq!(page.total, 29);
        seen.extend(page.items.into_iter().map(|m| m.id));
        offset = page.next;
    }
    assert_eq!(offset, None, "paging did not end");
    assert_eq!(seen.len(), 29);
    assert_eq!(seen.iter().collect::<HashSet<_>>().len(), 29, "an id listed twice");
    let past_the_end = q.list(MessageState::Pending, 29, 7).await.unwrap();
    assert_eq!((past_the_end.items.len(), past_the_end.next), (0, None));

    // Reschedule makes two due now; they fail once and die, in their shards.
    for id in &ids[1..3] {
        assert!(q.reschedule(id, Duration::ZERO).await.unwrap());
    }
    let log = Log::default();
    let consumer = q
        .start_consume(recording(&log, |_m: Message| async move {
            Err::<(), HandlerError>("no".into())
        }))
        .await
        .unwrap();
    assert!(wait_until(WAIT, || log.len() == 2).await);
    let mut want = Counts::default();
    want.pending = 27;
    want.dead = 2;
    assert_eq!(wait_stats(&q, WAIT, want).await, want);
    consumer.shutdown().await.unwrap();
    let status = q.status().await.unwrap();
    assert_eq!((status.totals.sent, status.totals.dead), (30, 2));
    assert!(status.next_due > Some(Duration::from_secs(500)));
    assert!(status.oldest_dead.is_some());
    assert_eq!(q.list(MessageState::Dead, 0, 10).await.unwrap().items.len(), 2);
    assert_eq!(q.requeue_all_dead().await.unwrap(), 2);
    assert_eq!(q.counts().await.unwrap().ready, 2);
    assert!(q.check_integrity().await.unwrap().is_clean());
    assert_eq!(q.purge().await.unwrap(), 29);
    assert_eq!(all_keys(&client).await, Vec::<String>::new());
}

/// One shard with a backlog must not make another shard's messages wait
/// behind it: each shard claims at most its share of `fetch_limit` while
/// others have work, so messages that arrive in a quiet shard wait behind
/// at most one share (64 here) of the busy shard's claimed messages, not
/// behind all 256.
#[tokio::test]
async fn claims_are_fair_between_shards() {
    let (_server, _client, q) = start_queue("fair", FETCH_INTERVAL, |b| b.shards(4).fetch_limit(256)).await;
    let big = ids_in_shard("big", 0, 4, 1000);
    let small = ids_in_shard("small", 3, 4, 20);
    let send = |ids: &[String]| {
        let msgs: Vec<NewMessage> = ids.iter().map(|id| NewMessage::new("x").id(id.as_str())).collect();
        let q = q.clone();
        async move { assert!(q.send_batch(msgs).await.unwrap().iter().all(Result::is_ok)) }
    };
    send(&big).await;
    let order = Arc::new(Mutex::new(Vec::new()));
    let seen = order.clone();
    let consumer = q
        .start_consume(move |msg: Message| {
            seen.lock().unwrap().push(msg.id().to_string());
            async move {
                tokio::time::sleep(Duration::from_millis(1)).await;
                Ok::<(), HandlerError>(())
            }
        })
        .await
        .unwrap();
    // The busy shard has claimed all it may by the time its 10th is done.
    assert!(wait_until(WAIT, || order.lock().unwrap().len() >= 10).await);
    let before = order.lock().unwrap().len();
    send(&small).await;
    assert!(wait_until(2 * WAIT, || order.lock().unwrap().len() >= 1020).await);
    consumer.shutdown().await.unwrap();
    let order = order.lock().unwrap().clone();
    let last_small = order.iter().rposition(|id| id.starts_with("small")).unwrap();
    let waited = last_small - before - small.len();
    assert!(
        waited < 150,
        "the quiet shard's messages waited behind {waited} of the busy shard's"
    );
}

#[tokio::test]
async fn a_consumer_warns_about_shards_beyond_its_count() {
    let (_server, client, wide) = start_queue("layout", FETCH_INTERVAL, |b| b.shards(3)).await;
    let in_last = ids_in_shard("x", 2, 3, 1);
    wide.send("x")
        .delay(Duration::from_secs(60))
        .id(in_last[0].as_str())
        .await
        .unwrap();
    // Sharded by a version that recorded no shard count.
    let _: i64 = client.hdel("dq:{layout}:totals", "shards").await.unwrap();
    let logs = Logs::capture("layout");
    let narrow = DelayQueue::builder("layout", client.clone()).shards(2).build().unwrap();
    let consumer = narrow.start_consume(|_m: Message| async { Ok(()) }).await.unwrap();
    consumer.shutdown().await.unwrap();
    let warnings = logs.warnings();
    assert!(
        warnings.iter().any(|w| w.contains("a shard beyond its shard count")),
        "{warnings:#?}"
    );
    // The consumer recorded its count: the wider producer is refused now.
    let again = DelayQueue::builder("layout", client.clone()).shards(3).build().unwrap();
    assert!(matches!(again.send("x").await, Err(Error::ShardCount { found: 2, .. })));
}

/// Shards of one queue on a 3-primary cluster: keys on every primary, two
/// consumers and concurrent producers, every message delivered, nothing left.
#[tokio::test]
async fn a_sharded_queue_uses_every_primary_of_a_cluster() {
    const SHARDS: usize = 6;
    let cluster = RedisCluster::start(3).await;
    let client = cluster.client().await;
    // A name whose shards land on all three primaries.
    let name = (0..)
        .map(|i| format!("wide{i}"))
        .find(|name| {
            let owners: HashSet<usize> = (0..SHARDS)
                .map(|s| cluster.owner_of(RedisCluster::slot_of(&format!("{{{name}#{s}}}"))))
                .collect();
            owners.len() == 3
        })
        .unwrap();
    let build = || {
        DelayQueue::builder(name.as_str(), client.clone())
            .shards(SHARDS)
            .concurrency(8)
            .fetch_interval(FETCH_INTERVAL)
            .build()
            .unwrap()
    };
    let q = build();
    let first = q
        .send_batch((0..600).map(|i| NewMessage::new(format!("{i}")).delay(Duration::from_millis(400))))
        .await
        .unwrap();
    assert!(first.iter().all(Result::is_ok));
    for node in 0..3 {
        let here = cluster.keys_of(node).iter().filter(|k| k.contains(&name)).count();
        assert!(here > 0, "no shard of {name} on primary {node}");
    }
    let log = Log::default();
    let consumers = [
        build().start_consume(acking(&log)).await.unwrap(),
        build().start_consume(acking(&log)).await.unwrap(),
    ];
    let producers = (0..3).map(|p| {
        let q = build();
        async move {
            for round in 0..10 {
                let msgs =
                    (0..80).map(|i| NewMessage::new(format!("{p}-{round}-{i}")).delay(Duration::from_millis(i % 50)));
                assert!(q.send_batch(msgs).await.unwrap().iter().all(Result::is_ok));
                q.send("single").await.unwrap();
            }
        }
    });
    futures::future::join_all(producers).await;
    let total = 600 + 3 * 10 * 81;
    wait_until(2 * WAIT, || log.ids().len() >= total).await;
    assert_eq!(log.ids().len(), total, "messages lost");
    assert_eq!(wait_stats(&q, WAIT, Counts::default()).await, Counts::default());
    for c in consumers {
        c.shutdown().await.unwrap();
    }
    let twice = log.counts().values().filter(|&&n| n > 1).count();
    assert_eq!(twice, 0, "delivered twice without any fault");
    assert!(q.check_integrity().await.unwrap().is_clean());
    assert_eq!(q.status().await.unwrap().totals.acked, total as u64);
    assert_eq!(cluster.all_keys(), Vec::<String>::new(), "keys left in the cluster");
}

/// Tools read a queue's shard count from the record its handle writes, not
/// from the shards that hold data: a 3-shard queue whose last shards are
/// still empty is still 3 shards to `find_queues` (and so to the dashboard
/// and the CLI).
#[tokio::test]
async fn find_queues_reads_the_shard_count_a_handle_recorded() {
    let (_server, client, q) = start_queue("recorded", FETCH_INTERVAL, |b| b.shards(3)).await;
    let id = &ids_in_shard("only", 0, 3, 1)[0];
    q.send("x").id(id.as_str()).await.unwrap();
    let found = delayqueue::find_queues(&client, "dq:").await.unwrap();
    let found: Vec<(&str, usize)> = found.iter().map(|f| (f.name.as_str(), f.shards)).collect();
    assert_eq!(found, [("recorded", 3)]);
}

/// Handles of one queue with different shard counts would split it: every
/// one after the first that recorded its count gets a typed error instead,
/// producers (whose send script checks the record) and consumers alike.
#[tokio::test]
async fn a_handle_with_another_shard_count_than_recorded_is_refused() {
    let (_server, client, three) = start_queue("counted", FETCH_INTERVAL, |b| b.shards(3)).await;
    three.send("x").await.unwrap();
    let wrong = |shards: usize| {
        DelayQueue::builder("counted", client.clone())
            .shards(shards)
            .build()
            .unwrap()
    };
    let refused = |r: Result<(), Error>, expected: usize| match r {
        Err(Error::ShardCount {
            queue,
            found,
            expected: e,
        }) => {
            assert_eq!((queue.as_str(), found, e), ("counted", 3, expected));
        }
        Err(e) => panic!("expected ShardCount, got {e}"),
        Ok(()) => panic!("a handle of {expected} shards was used on a queue of 3"),
    };
    let consume = |q: DelayQueue| async move {
        q.start_consume(|_m: Message| async { Ok::<(), HandlerError>(()) })
            .await
            .map(drop)
    };
    refused(wrong(1).send("y").await.map(drop), 1);
    refused(wrong(4).send("y").await.map(drop), 4);
    refused(consume(wrong(1)).await, 1);
    refused(consume(wrong(2)).await, 2);
    assert_eq!(three.counts().await.unwrap().live(), 1, "nothing else was stored");
    assert_eq!(
        all_keys(&client)
            .await
            .iter()
            .filter(|k| k.starts_with("dq:{counted}:m:"))
            .count(),
        0
    );
}
