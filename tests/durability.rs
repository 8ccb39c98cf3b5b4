//! The durability option: a send that waits for a replica (WAIT) or for
//! append-only files (WAITAOF), against a primary and a replica
//! `redis-server` spawned by the test.

use delayqueue_test_support as support;

use std::time::{Duration, Instant};

use delayqueue::{DelayQueue, Durability, Error, MessageId, NewMessage};
use support::{wait_until, RedisServer, ServerOptions, WAIT};

/// A primary and a replica of it, linked.
async fn primary_and_replica() -> (RedisServer, RedisServer) {
    let primary = RedisServer::start().await;
    let replica = RedisServer::start_with(ServerOptions {
        extra_args: vec!["--replicaof".into(), "127.0.0.1".into(), primary.port().to_string()],
        ..Default::default()
    })
    .await;
    let linked = wait_until(WAIT, || {
        replica
            .raw_command(&["INFO", "replication"])
            .contains("master_link_status:up")
    })
    .await;
    assert!(linked, "replica never linked to its primary");
    (primary, replica)
}

/// How long a send that cannot be confirmed waits.
const SHORT: Duration = Duration::from_millis(300);

fn replicas(n: u32, timeout: Duration) -> Durability {
    Durability::Replicas { replicas: n, timeout }
}

#[tokio::test]
async fn a_durable_send_returns_once_the_replica_has_the_message() {
    let (primary, mut replica) = primary_and_replica().await;
    let client = primary.client().await;
    // Sends that must be confirmed get all the time a loaded machine may
    // need; those that cannot be (replica away) give up after SHORT.
    let q = DelayQueue::builder("pay", client.clone())
        .durability(replicas(1, WAIT))
        .build()
        .unwrap();
    let short = DelayQueue::builder("pay", client.clone())
        .durability(replicas(1, SHORT))
        .build()
        .unwrap();
    for _ in 0..20 {
        let id = q.send("x").delay(Duration::from_secs(60)).await.unwrap();
        // Read from the replica right after Ok: WAIT means it is there already.
        let key = format!("dq:{{pay}}:m:{id}");
        assert_eq!(replica.raw_command(&["EXISTS", &key]), "1", "{id} not on the replica");
    }
    let batch = (0..500).map(|i| NewMessage::new(format!("m{i}")).delay(Duration::from_secs(60)));
    let results = q.send_batch(batch).await.unwrap();
    assert!(results.iter().all(Result::is_ok));
    assert_eq!(replica.raw_command(&["ZCARD", "dq:{pay}:pending"]), "520");

    // Without its replica the confirmation cannot come: a typed error after
    // the timeout, while the primary holds the message all the same.
    replica.kill();
    let started = Instant::now();
    let err = short
        .send("y")
        .delay(Duration::from_secs(60))
        .id("order-1")
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::NotDurable {
                confirmed: 0,
                wanted: 1,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        started.elapsed() >= SHORT - Duration::from_millis(50),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(q.counts().await.unwrap().pending, 521);
    // Sending again with the same id is how a caller makes sure: still
    // unconfirmed while the replica is away ...
    let again = short.send("y").delay(Duration::from_secs(60)).id("order-1").await;
    assert!(matches!(again, Err(Error::NotDurable { .. })), "{again:?}");

    // The replica comes back and resyncs: durable sends succeed again.
    replica.start_again().await;
    assert!(
        wait_until(WAIT, || replica
            .raw_command(&["INFO", "replication"])
            .contains("master_link_status:up"))
        .await
    );
    // ... and Duplicate once it is back: stored, and now confirmed.
    let again = q.send("y").delay(Duration::from_secs(60)).id("order-1").await;
    assert!(matches!(again, Err(Error::Duplicate { .. })), "{again:?}");
    q.send("z").delay(Duration::from_secs(60)).await.unwrap();
    assert_eq!(replica.raw_command(&["ZCARD", "dq:{pay}:pending"]), "522");
}

#[tokio::test]
async fn asking_for_more_replicas_than_exist_fails_each_send_with_not_durable() {
    let (primary, _replica) = primary_and_replica().await;
    let q = DelayQueue::builder("pay", primary.client().await)
        .durability(replicas(2, SHORT))
        .build()
        .unwrap();
    let err = q.send("x").await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::NotDurable {
                confirmed: 1,
                wanted: 2,
                ..
            }
        ),
        "{err:?}"
    );
}

/// A server with an append-only file, and queue "pay" on it with
/// `Durability::Aof` of the local file.
async fn aof_queue() -> (RedisServer, DelayQueue) {
    let server = RedisServer::start_with(ServerOptions {
        appendonly: true,
        appendfsync: Some("everysec".into()),
        ..Default::default()
    })
    .await;
    let q = DelayQueue::builder("pay", server.client().await)
        .durability(Durability::Aof {
            local: true,
            replicas: 0,
            timeout: WAIT,
        })
        .build()
        .unwrap();
    (server, q)
}

/// WAITAOF exists from Redis 7.2; on older servers the send says so.
#[tokio::test]
async fn aof_durability_confirms_the_local_append_only_file() {
    let (server, q) = aof_queue().await;
    let version = server.info_server("redis_version").unwrap_or_default();
    let sent = q.send("x").await;
    let (major, minor) = {
        let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
        (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
    };
    if (major, minor) >= (7, 2) {
        sent.unwrap();
        q.send_batch((0..3).map(|i| NewMessage::new(format!("m{i}"))))
            .await
            .unwrap()
            .into_iter()
            .for_each(|r| drop(r.unwrap()));
        assert_eq!(q.counts().await.unwrap().live(), 4);
    } else {
        // Refused before anything is stored, naming the version needed.
        let err = sent.unwrap_err();
        assert!(
            matches!(&err, Error::WaitAofUnsupported { server, .. } if server.contains(&version)),
            "{err:?}"
        );
        assert!(err.to_string().contains("Redis 7.2 or later"), "{err}");
        assert!(!err.is_retryable());
        let batch = q.send_batch([NewMessage::new("y").id("order-1")]).await;
        assert!(matches!(batch, Err(Error::WaitAofUnsupported { .. })), "{batch:?}");
        assert_eq!(server.raw_command(&["DBSIZE"]), "0", "the refused sends wrote keys");
        println!("Redis {version} has no WAITAOF: {err}");
    }
}

/// How many `INFO` commands the server has run (`INFO commandstats`; the
/// asking `INFO` is counted once it finished, so not in its own answer).
fn info_calls(server: &RedisServer) -> u64 {
    let stats = server.raw_command(&["INFO", "commandstats"]);
    stats
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_info:calls="))
        .and_then(|v| v.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

/// `Durability::Aof` asks the server whether it has `WAITAOF` once per
/// connection, whatever the answer: sends on a server without it are
/// refused without asking again each time.
#[tokio::test]
async fn aof_durability_asks_the_server_once_per_connection() {
    let (server, q) = aof_queue().await;
    let before = info_calls(&server);
    let first = q.send("x").await.map(drop);
    for i in 0..5 {
        let again = q.send(format!("m{i}")).await.map(drop);
        assert_eq!(again.is_ok(), first.is_ok(), "{again:?} after {first:?}");
    }
    // One INFO of the queue's, one of this count's own.
    let asked = info_calls(&server) - before - 1;
    assert_eq!(asked, 1, "6 sends asked INFO {asked} times ({first:?})");
}

/// A durable send whose `WAIT` loses its connection (killed by another
/// client while it waits for a replica that never answers): the message
/// is stored, and the error says the outcome is unknown and names the id
/// to send again with, which is safe.
#[tokio::test]
async fn a_send_whose_wait_loses_its_connection_is_unconfirmed() {
    // No replica: WAIT 1 waits out its whole timeout.
    let server = RedisServer::start().await;
    let client = server.client().await;
    let q = DelayQueue::builder("pay", client.clone())
        .durability(replicas(1, 4 * WAIT))
        .build()
        .unwrap();
    let sending = tokio::spawn({
        let q = q.clone();
        async move { q.send("x").delay(Duration::from_secs(60)).id("order-7").await }
    });
    let waiting = || {
        server
            .raw_command(&["CLIENT", "LIST"])
            .lines()
            .find(|l| l.contains("cmd=wait "))
            .and_then(|l| l.split(' ').find_map(|f| f.strip_prefix("id=")))
            .map(str::to_string)
    };
    assert!(
        wait_until(WAIT, || waiting().is_some()).await,
        "the send never reached WAIT"
    );
    let id = waiting().unwrap();
    assert_eq!(server.raw_command(&["CLIENT", "KILL", "ID", &id]), "1");

    let err = sending.await.unwrap().unwrap_err();
    let Error::Unconfirmed { ids, .. } = &err else {
        panic!("{err:?}");
    };
    assert_eq!(ids, &[MessageId::from("order-7")]);
    assert!(err.is_retryable());
    let text = err.to_string();
    assert!(
        text.contains("may or may not be stored") && text.contains("send again with the same id"),
        "{text}"
    );
    assert_eq!(server.raw_command(&["EXISTS", "dq:{pay}:m:order-7"]), "1", "not stored");
    // Sending again with the id stores nothing twice. The client may
    // announce its reconnect only during this send, which then takes the
    // identical stored message for its own: `Ok` and `Duplicate` both
    // mean stored once.
    let plain = DelayQueue::builder("pay", client).build().unwrap();
    let again = plain.send("x").delay(Duration::from_secs(60)).id("order-7").await;
    assert!(matches!(again, Ok(_) | Err(Error::Duplicate { .. })), "{again:?}");
    assert_eq!(plain.counts().await.unwrap().live(), 1);
}
