//! ACL: the queue run by Redis users that may touch only its own keys
//! (`~dq:{orders}*`) and channels (`&dq:{orders}:wake`, `&dq:{orders}:done`)
//! with only the commands the crate uses: the `ACL SETUSER` lines of
//! docs/scaling.md, run as they are written there (src/acl_tests.rs checks
//! that each role's commands are those its scripts can call):
//!
//! - every connection: `EVALSHA`, `EVAL` (the fallback after NOSCRIPT), and
//!   `PING`, `CLIENT ID`, `INFO` (fred's connection set-up and the consumer's
//!   eviction check; refused, they only leave an ACL log entry);
//! - producers: `WAIT` with `Durability::Replicas` (`WAITAOF` on 7.2 for
//!   `Durability::Aof`), `SUBSCRIBE` for `wait_result`, and what `send`
//!   (with `after` too), `cancel`, `reschedule` and `wait_result` run;
//! - consumers: `SUBSCRIBE`, and what the consumer's scripts (its relay of
//!   flow completions, progress and logs included) run;
//! - an inspecting CLI (`stats`, `check_integrity`): read commands only.
//!
//! Scripts do not widen a user's rights: every command a script runs is
//! checked against the user's ACL, so a user with `EVAL` still reaches no
//! other key.

mod helpers;
use delayqueue_test_support as support;

use std::time::Duration;

use delayqueue::fred::clients::Client;
use delayqueue::fred::prelude::{ClientLike, KeysInterface, LuaInterface, PubsubInterface, Value};
use delayqueue::fred::types::{ClusterHash, CustomCommand};
use delayqueue::{Counts, DelayQueue, Error, Flow, HandlerError, Message, MessageRef, MessageState, NewMessage};
use helpers::{recording, wait_stats, Log};
use support::{client_for, wait_for, wait_until, RawReply, RedisServer, WAIT};

/// docs/scaling.md: its `ACL SETUSER` lines are the users run here
/// (src/acl_tests.rs checks them against the scripts' commands).
const SCALING: &str = include_str!("../docs/scaling.md");

#[derive(Clone, Copy, PartialEq)]
enum Role {
    Producer,
    Consumer,
    Cli,
    /// Producer, consumer, CLI and the operator's writes in one user.
    All,
}

/// `ACL SETUSER <user> ...`: the line of docs/scaling.md for `role`, with
/// the user, its password (`<user>-secret`) and the queue (the docs' is
/// `orders`: its hash tag becomes `{<queue>}`) replaced.
fn setuser(user: &str, role: Role, queue: &str) -> Vec<String> {
    let documented = match role {
        Role::Producer => "orders-producer",
        Role::Consumer => "orders-consumer",
        Role::Cli => "orders-cli",
        Role::All => "orders-app",
    };
    let start = format!("ACL SETUSER {documented} ");
    let line = SCALING
        .lines()
        .find(|l| l.starts_with(&start))
        .unwrap_or_else(|| panic!("docs/scaling.md has no line for {documented}"));
    line.split_whitespace()
        .map(|word| match word {
            w if w == documented => user.to_string(),
            w if w.starts_with('>') => format!(">{user}-secret"),
            w => w.replace("{orders}", &format!("{{{queue}}}")),
        })
        .collect()
}

/// Creates `user` for `role` on queue `orders` and returns a client logged in as it.
async fn user(server: &RedisServer, user: &str, role: Role) -> Client {
    user_of(server, user, role, "orders").await
}

/// Creates `user` for `role` on the queue whose hash tags match `queue`
/// (a glob: `orders#*` for the shards of `orders`).
async fn user_of(server: &RedisServer, user: &str, role: Role, queue: &str) -> Client {
    let args = setuser(user, role, queue);
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    assert_eq!(server.raw_command(&refs), "OK", "{args:?}");
    println!("{}", args.join(" "));
    client_for(&format!("redis://{user}:{user}-secret@127.0.0.1:{}", server.port())).await
}

/// `ACL LOG` entries as "user: reason object" lines.
fn acl_log(server: &RedisServer) -> Vec<String> {
    let RawReply::Array(entries) = server.raw_reply(&["ACL", "LOG"]) else {
        return Vec::new();
    };
    entries
        .iter()
        .map(|entry| {
            let RawReply::Array(fields) = entry else {
                return entry.render();
            };
            let field = |name: &str| {
                fields
                    .chunks(2)
                    .find(|kv| kv[0].render() == name)
                    .map(|kv| kv[1].render())
                    .unwrap_or_default()
            };
            format!("{}: {} {}", field("username"), field("reason"), field("object"))
        })
        .collect()
}

/// The scenario's visibility timeout: a renewal comes when a third of it
/// has passed, long enough that a loaded machine does not miss it.
const VIS: Duration = Duration::from_secs(2);

/// A handler for the scenario: "fail" always fails, "slow" outlives the
/// visibility timeout (its lease is renewed), everything else succeeds
/// after 2 ms.
fn handler(log: &Log) -> impl delayqueue::Handler {
    recording(log, |msg: Message| async move {
        match msg.payload() {
            b"fail" => Err::<(), HandlerError>("fails".into()),
            b"slow" => {
                tokio::time::sleep(VIS * 2).await;
                Ok(())
            }
            _ => {
                tokio::time::sleep(Duration::from_millis(2)).await;
                Ok(())
            }
        }
    })
}

/// Sends, cancels, reschedules, consumes (acks, nacks, garbage, lease
/// renewal, releases at shutdown), and checks stats and integrity, each
/// with the client of the role that does it.
async fn scenario(producer: &Client, consumer: &Client, cli: &Client) {
    let builder = |c: &Client| {
        DelayQueue::builder("orders", c.clone())
            .fetch_interval(Duration::from_millis(100))
            .default_retry_count(1)
            .max_consume_duration(VIS)
            .handler_timeout(VIS * 4)
            .nack_redelivery_delay(Duration::ZERO)
            .dead_letter_retention(Duration::ZERO)
    };
    let sender = builder(producer).build().unwrap();
    // Short claims: a long one would outlive the visibility timeout.
    let consuming = builder(consumer).concurrency(1).fetch_limit(4).build().unwrap();
    let inspector = builder(cli).build().unwrap();

    let mut ids = Vec::new();
    for i in 0..200 {
        ids.push(sender.send(format!("m{i}")).await.unwrap());
    }
    let fail = sender.send("fail").await.unwrap();
    let later = sender.send("later").delay(Duration::from_secs(60)).await.unwrap();
    assert!(sender.reschedule(&later, Duration::from_secs(90)).await.unwrap());
    assert!(sender.cancel(&later).await.unwrap());
    sender.send("dup").delay(Duration::from_secs(60)).id("k").await.unwrap();
    assert!(matches!(
        sender.send("dup").delay(Duration::from_secs(60)).id("k").await,
        Err(Error::Duplicate { .. })
    ));
    assert!(sender.cancel("k").await.unwrap());
    assert_eq!(inspector.counts().await.unwrap().ready, 201, "due at once");

    // One worker: shut down early, it releases the deliveries it claimed
    // but had not started; a second consumer then finishes the work.
    let log = Log::default();
    let first = consuming.start_consume(handler(&log)).await.unwrap();
    assert!(wait_until(WAIT, || log.len() >= 5).await);
    first.shutdown().await.unwrap();
    let second = consuming.start_consume(handler(&log)).await.unwrap();
    assert!(
        wait_until(2 * WAIT, || {
            let counts = log.counts();
            ids.iter().all(|id| counts.contains_key(id)) && log.attempts(&fail).len() == 2
        })
        .await,
        "{} deliveries, fail attempts {:?}, stats {:?}",
        log.len(),
        log.attempts(&fail),
        inspector.counts().await
    );
    // Alone in the queue (nothing waits behind it for the one worker), a
    // handler slower than the visibility timeout keeps its lease.
    let slow = sender.send("slow").await.unwrap();
    assert!(wait_until(WAIT, || log.attempts(&slow).len() == 1).await);
    // Acked with its renewed lease once done; were the lease lost, the
    // message would come again.
    assert_eq!(wait_stats(&inspector, WAIT, Counts::default()).await, Counts::default());
    assert_eq!(log.attempts(&slow), vec![1], "the slow handler's lease was not renewed");
    let report = inspector.check_integrity().await.unwrap();
    assert!(report.is_clean(), "{report}");
    // The read-only user sees everything the CLI shows.
    let status = inspector.status().await.unwrap();
    assert_eq!((status.totals.sent, status.totals.dead), (204, 1));
    assert!(inspector.exists().await.unwrap());
    assert!(inspector
        .list(MessageState::Pending, 0, 10)
        .await
        .unwrap()
        .items
        .is_empty());
    assert!(inspector.get(&slow).await.unwrap().is_none(), "acked");
    let found = delayqueue::find_queues(cli, "dq:").await.unwrap();
    assert_eq!(
        found.iter().map(|q| (q.name.as_str(), q.shards)).collect::<Vec<_>>(),
        [("orders", 1)]
    );
    // Browse and search: a cursor whose message stays (ZRANK) and one whose
    // message was cancelled (ZCOUNT).
    for i in 0..2 {
        sender
            .send("later")
            .id(format!("later-{i}"))
            .delay(Duration::from_secs(3600))
            .await
            .unwrap();
    }
    let first = inspector.browse(MessageState::Pending).limit(1).await.unwrap();
    let next = inspector
        .browse(MessageState::Pending)
        .after(first.cursor.clone())
        .await
        .unwrap();
    assert_eq!(next.items[0].id.as_str(), "later-1");
    assert!(sender.cancel("later-0").await.unwrap());
    let next = inspector
        .browse(MessageState::Pending)
        .after(first.cursor)
        .await
        .unwrap();
    assert_eq!(next.items[0].id.as_str(), "later-1");
    let found = inspector.search(MessageState::Pending, "late").await.unwrap();
    assert_eq!(found.items.len(), 1);
    assert_eq!(inspector.shard_statuses().await.unwrap().len(), 1);
    assert!(sender.cancel("later-1").await.unwrap());
    second.shutdown().await.unwrap();
}

/// Results and flows, each step by the client of the role that does it: a
/// producer waits for a result (`wait_result`, woken on `done`) while a
/// consumer acks it; a parent sent with `after` and a `Flow` (children in
/// queue `children`) run once their children were acked, the parents
/// reading their children's results; a cancelled parent cancels its
/// waiting child (the relay the cancel runs). Nothing of the flows is left.
async fn results_and_flows(producer: &Client, consumer: &Client, cli: &Client, children: &str) {
    let builder = |c: &Client, name: &str| {
        DelayQueue::builder(name, c.clone())
            .fetch_interval(Duration::from_millis(100))
            .dead_letter_retention(Duration::ZERO)
    };
    let (sender, child_sender) = (
        builder(producer, "orders").build().unwrap(),
        builder(producer, children).build().unwrap(),
    );
    let consumers = [
        builder(consumer, "orders").build().unwrap(),
        builder(consumer, children).build().unwrap(),
    ];
    let inspector = builder(cli, "orders").build().unwrap();
    // A parent's handler returns what its children returned, joined.
    let handler = |q: &DelayQueue| {
        let q = q.clone();
        move |msg: Message| {
            let q = q.clone();
            async move {
                let page = q.children_results(msg.id(), None).await?;
                let mut results: Vec<Vec<u8>> = page.items.into_iter().filter_map(|c| c.result).collect();
                results.sort();
                let mut out = msg.payload().to_vec();
                for r in results {
                    out.extend_from_slice(b"+");
                    out.extend(r);
                }
                Ok::<_, HandlerError>(out)
            }
        }
    };
    let running = [
        consumers[0].start_consume(handler(&consumers[0])).await.unwrap(),
        consumers[1].start_consume(handler(&consumers[1])).await.unwrap(),
    ];
    let job = sender.send("job").await.unwrap();
    assert_eq!(
        sender.wait_result(&job, WAIT).await.unwrap().as_deref(),
        Some(&b"job"[..])
    );

    // The children wait until the parents are linked to them (a child
    // acked before would be taken as finished without its result), then
    // are made due.
    let hour = Duration::from_secs(3600);
    let a = sender.send("a").delay(hour).await.unwrap();
    let b = child_sender.send("b").delay(hour).await.unwrap();
    let parent = sender
        .send("after")
        .after([MessageRef::from(a.clone()), MessageRef::new(&child_sender, b.clone())])
        .await
        .unwrap();
    let flow = Flow::new(&sender, NewMessage::new("flow"))
        .child(Flow::new(&child_sender, NewMessage::new("c").id("c").delay(hour)))
        .child(Flow::new(&sender, NewMessage::new("d").id("d").delay(hour)));
    let root = flow.send().await.unwrap();
    for (q, id) in [
        (&sender, a.as_str()),
        (&child_sender, b.as_str()),
        (&child_sender, "c"),
        (&sender, "d"),
    ] {
        assert!(q.reschedule(id, Duration::ZERO).await.unwrap(), "{id}");
    }
    for (id, want) in [(&parent, &b"after+a+b"[..]), (&root, &b"flow+c+d"[..])] {
        assert_eq!(sender.wait_result(id, WAIT).await.unwrap().as_deref(), Some(want));
    }
    assert_eq!(
        inspector.result(&root).await.unwrap().as_deref(),
        Some(&b"flow+c+d"[..])
    );

    // Cancelling a waiting parent cancels the child it waits for.
    let later = child_sender
        .send("later")
        .delay(Duration::from_secs(3600))
        .await
        .unwrap();
    let waiting = sender
        .send("waiting")
        .after([MessageRef::new(&child_sender, later.clone())])
        .await
        .unwrap();
    assert!(sender.cancel(&waiting).await.unwrap());
    let gone = wait_for(WAIT, || async { child_sender.get(&later).await.unwrap().is_none() }).await;
    assert!(gone, "the cancelled parent's child is still stored");
    for r in running {
        r.shutdown().await.unwrap();
    }
    assert_eq!(inspector.counts().await.unwrap(), Counts::default());
}

/// Checks that `attempt` was refused for lack of permission: it failed,
/// and the server logged an ACL denial (`ACL LOG`, emptied first) for it.
/// The error's words are the server's: Redis says NOPERM, or "The user
/// executing the script can't" for a command in a script; Valkey says "ACL
/// failure in script" there.
async fn assert_refused<T: std::fmt::Debug, E: std::fmt::Display>(
    server: &RedisServer,
    what: &str,
    attempt: impl std::future::IntoFuture<Output = Result<T, E>>,
) {
    assert_eq!(server.raw_command(&["ACL", "LOG", "RESET"]), "OK");
    match attempt.await {
        Ok(v) => panic!("{what}: not refused, got {v:?}"),
        Err(e) => assert!(
            !acl_log(server).is_empty(),
            "{what}: failed, but no ACL denial logged: {e}"
        ),
    }
}

/// Checks that `client` reaches nothing outside queue `orders`: other
/// keys, another queue's keys (directly, through a queue, and through a
/// script), other channels, admin commands.
async fn cannot_touch_anything_else(client: &Client, server: &RedisServer) {
    server.raw_command(&["SET", "secret", "s3cret"]);
    assert_refused(server, "GET secret", client.get::<Option<String>, _>("secret")).await;
    assert_refused(
        server,
        "SET of another queue's key",
        client.set::<(), _, _>("dq:{payments}:pending", "x", None, None, false),
    )
    .await;
    let other = DelayQueue::builder("payments", client.clone()).build().unwrap();
    assert_refused(server, "send to another queue", other.send("x")).await;
    assert_refused(server, "stats of another queue", other.counts()).await;
    // A script of ours builds key names from ARGV: the built key is checked too.
    assert_refused(
        server,
        "GET inside a script",
        client.eval::<Option<String>, _, _, _>(
            "return redis.call('GET', 'secret')",
            Vec::<String>::new(),
            Vec::<String>::new(),
        ),
    )
    .await;
    assert_refused(
        server,
        "PUBLISH to another channel",
        client.publish::<i64, _, _>("dq:{payments}:wake", "0"),
    )
    .await;
    let admin: [(&'static str, Vec<&str>); 3] =
        [("FLUSHALL", vec![]), ("KEYS", vec!["*"]), ("CONFIG", vec!["GET", "*"])];
    for (command, args) in admin {
        let custom = client.custom::<Value, _>(CustomCommand::new_static(command, ClusterHash::Random, false), args);
        assert_refused(server, command, custom).await;
    }
    assert_eq!(server.raw_command(&["GET", "secret"]), "s3cret");
    assert_eq!(server.raw_command(&["EXISTS", "dq:{payments}:pending"]), "0");
}

/// One user with the rules of all roles runs the whole scenario, leaves no
/// ACL log entry, and cannot touch anything else.
#[tokio::test]
async fn a_queue_runs_as_an_acl_user_limited_to_its_keys_and_channel() {
    let server = RedisServer::start().await;
    let app = user(&server, "orders-app", Role::All).await;
    scenario(&app, &app, &app).await;
    results_and_flows(&app, &app, &app, "orders").await;
    assert_eq!(
        acl_log(&server),
        Vec::<String>::new(),
        "refused while running the queue"
    );
    cannot_touch_anything_else(&app, &server).await;
    assert!(!acl_log(&server).is_empty());
}

/// A producer, a consumer and a read-only CLI user, each with only its own
/// role's commands, run the scenario between them; the CLI user cannot
/// write to the queue.
#[tokio::test]
async fn producer_consumer_and_cli_users_each_with_only_their_commands() {
    let server = RedisServer::start().await;
    let producer = user(&server, "orders-producer", Role::Producer).await;
    let consumer = user(&server, "orders-consumer", Role::Consumer).await;
    let cli = user(&server, "orders-cli", Role::Cli).await;
    scenario(&producer, &consumer, &cli).await;
    results_and_flows(&producer, &consumer, &cli, "orders").await;
    assert_eq!(
        acl_log(&server),
        Vec::<String>::new(),
        "refused while running the queue"
    );

    let inspector = DelayQueue::builder("orders", cli.clone()).build().unwrap();
    assert_refused(&server, "send as the CLI user", inspector.send("x")).await;
    assert!(inspector.cancel("x").await.is_err());
    // fred 10.1 answers Ok to a SUBSCRIBE that Redis refused (so a consumer
    // without channel rights does not log its "cannot subscribe" warning);
    // the ACL log shows the refusal.
    let sub = cli.clone_new();
    sub.init().await.unwrap();
    sub.subscribe("dq:{orders}:wake").await.unwrap();
    let refusal = "orders-cli: command subscribe".to_string();
    assert!(
        wait_until(WAIT, || acl_log(&server).contains(&refusal)).await,
        "{:?}",
        acl_log(&server)
    );
    for client in [&producer, &consumer, &cli] {
        cannot_touch_anything_else(client, &server).await;
    }
    assert_eq!(server.raw_command(&["EXISTS", "dq:{orders}:pending"]), "0");
}

/// A sharded queue as a user limited to `~dq:{orders#*}*`, the shard count
/// record `~dq:{orders}:totals` and `&dq:{orders#*}:wake`
/// (docs/scaling.md): records its shard count, sends, consumes with
/// wake-ups, inspects and purges every shard, and is refused nothing.
#[tokio::test]
async fn a_sharded_queue_runs_as_a_user_limited_to_its_shards() {
    let server = RedisServer::start().await;
    let app = user_of(&server, "orders-sharded", Role::All, "orders#*").await;
    server.raw_command(&["ACL", "SETUSER", "orders-sharded", "~dq:{orders}:totals"]);
    let q = DelayQueue::builder("orders", app.clone())
        .shards(3)
        .fetch_interval(Duration::from_secs(600))
        .build()
        .unwrap();
    let log = Log::default();
    let consumer = q.start_consume(handler(&log)).await.unwrap();
    let msgs = (0..30).map(|i| delayqueue::NewMessage::new(format!("m{i}")).delay(Duration::from_millis(100)));
    assert!(q.send_batch(msgs).await.unwrap().iter().all(Result::is_ok));
    // Woken on every shard: long before the 600 s sweep.
    assert!(wait_until(WAIT, || log.len() == 30).await, "{} delivered", log.len());
    assert_eq!(wait_stats(&q, WAIT, Counts::default()).await, Counts::default());
    consumer.shutdown().await.unwrap();
    // Pause and resume (an operator's writes) on every shard.
    assert!(q.pause().await.unwrap() && q.is_paused().await.unwrap());
    assert!(q.resume().await.unwrap() && !q.is_paused().await.unwrap());
    q.send("later").delay(Duration::from_secs(60)).await.unwrap();
    assert_eq!(q.list(MessageState::Pending, 0, 10).await.unwrap().total, 1);
    assert!(q.check_integrity().await.unwrap().is_clean());
    assert_eq!(q.purge().await.unwrap(), 1);
    assert_eq!(
        acl_log(&server),
        Vec::<String>::new(),
        "refused while running the queue"
    );
    assert!(app.get::<Option<String>, _>("dq:{orders}:pending").await.is_err());
    assert_eq!(
        delayqueue::recorded_shards(&app, "dq:", "orders").await.unwrap(),
        Some(3)
    );
}

/// A flow across queues `orders` and `mail` runs as a user with both
/// queues' key patterns and channels (docs/scaling.md, ACL), refused
/// nothing.
#[tokio::test]
async fn a_flow_across_two_queues_runs_as_a_user_with_both_queues() {
    let server = RedisServer::start().await;
    let app = user(&server, "orders-app", Role::All).await;
    let more = [
        "ACL",
        "SETUSER",
        "orders-app",
        "~dq:{mail}*",
        "&dq:{mail}:done",
        "&dq:{mail}:wake",
    ];
    assert_eq!(server.raw_command(&more), "OK");
    results_and_flows(&app, &app, &app, "mail").await;
    assert_eq!(
        acl_log(&server),
        Vec::<String>::new(),
        "refused while running the flows"
    );
}
