//! The dashboard's HTTP API against a private redis-server: each test
//! builds the router and calls it with `tower::ServiceExt::oneshot`, as a
//! server would, and checks statuses, JSON shapes and what Redis holds.
#![cfg(feature = "web")]

use delayqueue_test_support as support;

mod helpers;

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, HeaderMap, Method, Request, StatusCode};
use axum::Router;
use delayqueue::fred::clients::Client;
use delayqueue::web::{Auth, Dashboard};
use delayqueue::{DelayQueue, MessageState};
use helpers::make_dead;
use serde_json::{json, Value};
use support::{wait_for, RedisServer, WAIT};
use tokio::sync::Notify;
use tower::ServiceExt;

/// One reply: status, headers, body.
struct Reply {
    status: StatusCode,
    headers: HeaderMap,
    body: Vec<u8>,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }

    fn text(&self) -> String {
        String::from_utf8(self.body.clone()).expect("body is not UTF-8")
    }

    fn header(&self, name: header::HeaderName) -> &str {
        self.headers.get(&name).and_then(|v| v.to_str().ok()).unwrap_or("")
    }
}

async fn call(app: &Router, req: Request<Body>) -> Reply {
    let res = tokio::time::timeout(WAIT, app.clone().oneshot(req))
        .await
        .expect("no reply in time")
        .expect("infallible");
    let status = res.status();
    let headers = res.headers().clone();
    let body = axum::body::to_bytes(res.into_body(), usize::MAX)
        .await
        .unwrap()
        .to_vec();
    Reply { status, headers, body }
}

async fn get(app: &Router, path: &str) -> Reply {
    call(app, Request::get(path).body(Body::empty()).unwrap()).await
}

/// `GET path`, which must answer 200 with JSON.
async fn get_ok(app: &Router, path: &str) -> Value {
    let r = get(app, path).await;
    assert_eq!(r.status, StatusCode::OK, "{path}: {}", r.text());
    r.json()
}

/// The CSRF token the overview hands out.
async fn csrf(app: &Router) -> String {
    get_ok(app, "/api/overview").await["csrf"].as_str().unwrap().to_string()
}

fn post_req(path: &str, csrf: Option<&str>) -> axum::http::request::Builder {
    let mut req = Request::builder()
        .method(Method::POST)
        .uri(path)
        .header(header::CONTENT_TYPE, "application/json");
    if let Some(t) = csrf {
        req = req.header("x-csrf-token", t);
    }
    req
}

async fn post(app: &Router, path: &str, body: Value, csrf: Option<&str>) -> Reply {
    let req = post_req(path, csrf).body(Body::from(body.to_string())).unwrap();
    call(app, req).await
}

/// `POST path` with the right CSRF token, which must answer 200 with JSON.
async fn act(app: &Router, path: &str, body: Value) -> Value {
    let token = csrf(app).await;
    let r = post(app, path, body, Some(&token)).await;
    assert_eq!(r.status, StatusCode::OK, "{path}: {}", r.text());
    r.json()
}

async fn start() -> (RedisServer, Client) {
    let server = RedisServer::start().await;
    let client = server.client().await;
    (server, client)
}

fn queue(client: &Client, name: &str) -> DelayQueue {
    DelayQueue::builder(name, client.clone())
        .fetch_interval(Duration::from_millis(50))
        .build()
        .unwrap()
}

fn keys(v: &Value) -> Vec<&str> {
    let mut k: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    k.sort_unstable();
    k
}

#[tokio::test]
async fn overview_and_queue_show_what_redis_holds() {
    let (_server, client) = start().await;
    let orders = queue(&client, "orders");
    orders.send("a").delay(Duration::from_secs(60)).await.unwrap();
    orders.send("b").delay(Duration::from_secs(60)).await.unwrap();
    make_dead(&orders, &["c"], "boom").await;
    let sharded = DelayQueue::builder("sharded", client.clone())
        .shards(3)
        .build()
        .unwrap();
    // Fixed ids, which land in every shard (found in Redis: 3 shards).
    for i in 0..30 {
        sharded
            .send("m")
            .delay(Duration::from_secs(60))
            .id(format!("m{i}"))
            .await
            .unwrap();
    }
    let app = delayqueue::web::router(client.clone());

    let v = get_ok(&app, "/api/overview?sort=name").await;
    assert_eq!(
        keys(&v),
        [
            "csrf",
            "limit",
            "listed_ms_ago",
            "messages",
            "now_ms",
            "offset",
            "order",
            "queues",
            "read_only",
            "search",
            "sort",
            "total",
            "user"
        ],
        "{v}"
    );
    assert_eq!(
        (&v["total"], &v["messages"], &v["sort"], &v["order"]),
        (&json!(2), &json!(33), &json!("name"), &json!("asc"))
    );
    assert_eq!((v["read_only"].clone(), v["user"].clone()), (json!(false), Value::Null));
    assert!(v["csrf"].as_str().unwrap().len() >= 32, "{v}");
    assert!(v["now_ms"].as_u64().unwrap() > 1_700_000_000_000, "{v}");
    let queues = v["queues"].as_array().unwrap();
    let names: Vec<&str> = queues.iter().map(|q| q["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["orders", "sharded"]);
    let o = &queues[0];
    assert_eq!(
        keys(o),
        [
            "counts",
            "latency_ms",
            "name",
            "next_due_ms",
            "oldest_dead_ms",
            "paused",
            "rates",
            "shards",
            "totals"
        ],
        "{o}"
    );
    assert_eq!(
        o["counts"],
        json!({"pending": 2, "ready": 0, "processing": 0, "retry": 0, "dead": 1})
    );
    assert_eq!(
        o["totals"],
        json!({"sent": 3, "acked": 0, "failed": 1, "dead": 1, "expired": 0, "aborted": 0})
    );
    assert_eq!(keys(&o["rates"]), ["acked", "dead", "failed", "sent"]);
    assert!(o["latency_ms"].is_null() && o["oldest_dead_ms"].is_u64(), "{o}");
    let due = o["next_due_ms"].as_u64().unwrap();
    assert!((50_000..=60_000).contains(&due), "{o}");
    assert_eq!((o["shards"].clone(), o["paused"].clone()), (json!(1), json!(false)));
    assert_eq!(
        (queues[1]["shards"].clone(), queues[1]["counts"]["pending"].clone()),
        (json!(3), json!(30))
    );

    // One queue: the same, per shard on demand.
    let q = get_ok(&app, "/api/queues/sharded").await;
    assert!(q.get("shard_status").is_none(), "{q}");
    assert_eq!(q["counts"]["pending"], 30);
    let q = get_ok(&app, "/api/queues/sharded?shards=1").await;
    let shards = q["shard_status"].as_array().unwrap();
    assert_eq!(shards.len(), 3, "{q}");
    let per_shard: u64 = shards.iter().map(|s| s["counts"]["pending"].as_u64().unwrap()).sum();
    assert_eq!(per_shard, 30);
    assert!(shards.iter().all(|s| s["counts"]["pending"].as_u64() > Some(0)), "{q}");
    assert_eq!(
        keys(&shards[2]),
        [
            "counts",
            "latency_ms",
            "next_due_ms",
            "oldest_dead_ms",
            "paused",
            "shard",
            "totals"
        ]
    );
    assert_eq!(shards[2]["shard"], 2);

    let r = get(&app, "/api/queues/nope").await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert!(r.json()["error"].as_str().unwrap().contains("nope"));
    assert_eq!(get(&app, "/api/nothing-here").await.status, StatusCode::NOT_FOUND);

    // A queue sent to after the first scan is found by name.
    queue(&client, "later").send("x").await.unwrap();
    assert_eq!(
        get_ok(&app, "/api/queues/later").await["counts"]["ready"],
        1,
        "due at once"
    );
}

/// Script calls the server has run so far.
fn script_calls(server: &RedisServer) -> u64 {
    server
        .raw_command(&["INFO", "commandstats"])
        .lines()
        .filter_map(|l| {
            l.strip_prefix("cmdstat_evalsha:calls=")
                .or(l.strip_prefix("cmdstat_eval:calls="))
        })
        .filter_map(|rest| rest.split(',').next()?.parse::<u64>().ok())
        .sum()
}

fn names_of(v: &Value) -> Vec<String> {
    v["queues"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["name"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn the_overview_is_paged_sorted_and_searched_on_the_server() {
    let (server, client) = start().await;
    // 205 queues of one message, one of 5 (and 2 dead), one of 3.
    for i in 0..205 {
        queue(&client, &format!("q-{i:03}"))
            .send("x")
            .delay(Duration::from_secs(600))
            .await
            .unwrap();
    }
    let big = queue(&client, "big");
    for _ in 0..5 {
        big.send("x").delay(Duration::from_secs(600)).await.unwrap();
    }
    make_dead(&big, &["d1", "d2"], "boom").await;
    let mid = queue(&client, "mid");
    for _ in 0..3 {
        mid.send("x").delay(Duration::from_secs(600)).await.unwrap();
    }
    let app = delayqueue::web::router(client.clone());

    // The default: the largest backlog first, 50 a page; ties in name order.
    let v = get_ok(&app, "/api/overview").await;
    assert_eq!(
        (&v["total"], &v["limit"], &v["offset"]),
        (&json!(207), &json!(50), &json!(0))
    );
    assert_eq!(
        (&v["sort"], &v["order"], &v["messages"]),
        (&json!("backlog"), &json!("desc"), &json!(215))
    );
    let names = names_of(&v);
    assert_eq!(names.len(), 50);
    assert_eq!(names[..4], ["big", "mid", "q-000", "q-001"]);
    // The summary counts the page as read now, the other queues as listed.
    big.send("x").delay(Duration::from_secs(600)).await.unwrap();
    assert_eq!(get_ok(&app, "/api/overview").await["messages"], json!(216));

    // A page reads the status of its queues only (the listing is cached).
    let before = script_calls(&server);
    let v = get_ok(&app, "/api/overview?limit=10&offset=100").await;
    assert_eq!(script_calls(&server) - before, 10, "one status per queue shown");
    assert_eq!(names_of(&v)[0], "q-098");

    // Every queue once over the pages, however many fit one.
    let mut seen = Vec::new();
    for offset in [0, 200, 400] {
        let v = get_ok(&app, &format!("/api/overview?sort=name&limit=200&offset={offset}")).await;
        seen.extend(names_of(&v));
    }
    assert_eq!(seen.len(), 207);
    assert!(seen.windows(2).all(|w| w[0] < w[1]), "name order, no repeat");

    // By dead letters; by name, backwards; a search is the start of a name.
    assert_eq!(
        names_of(&get_ok(&app, "/api/overview?sort=dead&limit=1").await),
        ["big"]
    );
    let v = get_ok(&app, "/api/overview?sort=name&order=desc&limit=2").await;
    assert_eq!(names_of(&v), ["q-204", "q-203"]);
    let v = get_ok(&app, "/api/overview?search=q-1&sort=name&limit=200").await;
    assert_eq!((v["total"].clone(), names_of(&v).len()), (json!(100), 100));
    assert_eq!(names_of(&v)[0], "q-100");
    // Glob and regex characters match nothing but themselves.
    for search in ["q-*", "q-.*", "%5Bq%5D", "q-1%3F", "%25"] {
        let v = get_ok(&app, &format!("/api/overview?search={search}")).await;
        assert_eq!(v["total"], json!(0), "{search}: {v}");
    }

    // Bad parameters: 400, naming the parameter.
    // The longest a URI can be (`http` refuses 64 KiB and more before any handler).
    let huge = "q".repeat(60_000);
    for (query, param) in [
        ("limit=0".to_string(), "limit"),
        ("limit=201".to_string(), "limit"),
        ("limit=18446744073709551616".to_string(), "limit"),
        ("limit=ten".to_string(), "limit"),
        ("offset=-1".to_string(), "offset"),
        ("offset=0x10".to_string(), "offset"),
        ("sort=counts".to_string(), "sort"),
        ("order=sideways".to_string(), "order"),
        (format!("search={}", "q".repeat(129)), "search"),
        (format!("search={huge}"), "search"),
    ] {
        let r = get(&app, &format!("/api/overview?{query}")).await;
        assert_eq!(
            r.status,
            StatusCode::BAD_REQUEST,
            "{}: {}",
            &query[..query.len().min(40)],
            r.text()
        );
        let body = r.json();
        assert_eq!(body["param"], json!(param), "{body}");
        assert!(
            body["error"].as_str().unwrap().len() < 200,
            "the error does not echo the input"
        );
    }
    // A page past the end is empty, not an error.
    let v = get_ok(&app, "/api/overview?offset=18446744073709551615").await;
    assert_eq!((v["total"].clone(), names_of(&v).len()), (json!(207), 0));
}

#[tokio::test]
async fn messages_page_stably_and_one_message_shows_everything() {
    let (_server, client) = start().await;
    let q = queue(&client, "pages");
    let mut sent = Vec::new();
    for i in 0..120u64 {
        let id = q
            .send(format!("{{\"n\":{i}}}"))
            .delay(Duration::from_secs(100 + i))
            .await
            .unwrap();
        sent.push(id.to_string());
    }
    let app = delayqueue::web::router(client.clone());

    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..10 {
        let path = match &cursor {
            Some(c) => format!("/api/queues/pages/messages?state=pending&limit=50&cursor={c}"),
            None => "/api/queues/pages/messages?state=pending&limit=50".to_string(),
        };
        let page = get_ok(&app, &path).await;
        assert_eq!(keys(&page), ["items", "next", "state", "total"]);
        assert_eq!(
            (page["state"].clone(), page["total"].clone()),
            (json!("pending"), json!(120))
        );
        let items = page["items"].as_array().unwrap();
        assert!(items.len() <= 50);
        seen.extend(items.iter().map(|m| m["id"].as_str().unwrap().to_string()));
        cursor = page["next"].as_str().map(str::to_string);
        if cursor.is_none() {
            break;
        }
    }
    assert_eq!(seen, sent, "pages in due order, each message once");
    let desc = get_ok(&app, "/api/queues/pages/messages?state=pending&limit=3&order=desc").await;
    let ids: Vec<&str> = desc["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [sent[119].as_str(), &sent[118], &sent[117]]);
    let next = desc["next"].as_str().unwrap();
    let desc = get_ok(
        &app,
        &format!("/api/queues/pages/messages?state=pending&limit=3&order=desc&cursor={next}"),
    )
    .await;
    assert_eq!(desc["items"][0]["id"], sent[116].as_str());
    // A page is stable: a message cancelled before the cursor moves nothing.
    let page = get_ok(&app, "/api/queues/pages/messages?limit=10").await;
    q.cancel(&sent[3]).await.unwrap();
    let next = page["next"].as_str().unwrap();
    let page = get_ok(&app, &format!("/api/queues/pages/messages?limit=10&cursor={next}")).await;
    assert_eq!(page["items"][0]["id"], sent[10].as_str());

    let m = get_ok(&app, &format!("/api/queues/pages/messages/{}", sent[7])).await;
    assert_eq!(
        keys(&m),
        [
            "attempts",
            "backoff",
            "dead_since_ms",
            "deferrals",
            "deliveries_left",
            "due_ms",
            "expires_at_ms",
            "first_due_ms",
            "group",
            "headers",
            "id",
            "last_error",
            "lease_until_ms",
            "payload_base64",
            "payload_json",
            "payload_len",
            "payload_text",
            "priority",
            "retry_count",
            "sent_ms",
            "state"
        ]
    );
    assert_eq!(m["payload_text"], "{\"n\":7}");
    assert_eq!(m["payload_base64"], "eyJuIjo3fQ==");
    assert_eq!(m["priority"], 0);
    assert_eq!(m["headers"], json!({}));
    assert_eq!(
        (m["payload_json"].clone(), m["payload_len"].clone()),
        (json!(true), json!(7))
    );
    assert_eq!(
        (m["state"].clone(), m["deliveries_left"].clone()),
        (json!("pending"), json!(4))
    );
    let (due, sent_ms) = (m["due_ms"].as_u64().unwrap(), m["sent_ms"].as_u64().unwrap());
    assert!((due - sent_ms).abs_diff(107_000) < 5_000, "{m}");

    // Bad input is 400, unknown is 404, each with an error text.
    for path in [
        "/api/queues/pages/messages?state=lost",
        "/api/queues/pages/messages?limit=0",
        "/api/queues/pages/messages?limit=201",
        "/api/queues/pages/messages?cursor=abc",
        "/api/queues/pages/messages?order=up",
        "/api/queues/pages/messages/bad%20id",
        "/api/queues/pages/search?q=",
    ] {
        let r = get(&app, path).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{path}: {}", r.text());
        assert!(r.json()["error"].is_string(), "{path}");
    }
    for path in ["/api/queues/pages/messages/unknown", "/api/queues/gone/messages"] {
        assert_eq!(get(&app, path).await.status, StatusCode::NOT_FOUND, "{path}");
    }
}

#[tokio::test]
async fn search_finds_by_id_first_then_by_payload_text() {
    let (_server, client) = start().await;
    let q = queue(&client, "search");
    for i in 0..30 {
        q.send(format!("order {i} for alice"))
            .delay(Duration::from_secs(60))
            .await
            .unwrap();
    }
    q.send("order for bob")
        .delay(Duration::from_secs(60))
        .id("bob-1")
        .await
        .unwrap();
    let app = delayqueue::web::router(client.clone());

    let v = get_ok(&app, "/api/queues/search/search?state=pending&q=bob").await;
    assert_eq!(keys(&v), ["id_match", "items", "next", "scanned"]);
    assert_eq!(
        (v["id_match"].clone(), v["scanned"].clone(), v["next"].clone()),
        (json!(false), json!(31), Value::Null)
    );
    assert_eq!(v["items"].as_array().unwrap().len(), 1);
    assert_eq!(v["items"][0]["id"], "bob-1");

    let v = get_ok(&app, "/api/queues/search/search?state=pending&q=bob-1").await;
    assert_eq!(v["id_match"], true);
    assert_eq!(
        v["items"].as_array().unwrap().len(),
        1,
        "the id match is not listed twice: {v}"
    );

    let v = get_ok(&app, "/api/queues/search/search?state=pending&q=alice").await;
    assert_eq!(v["items"].as_array().unwrap().len(), 30);
    let v = get_ok(&app, "/api/queues/search/search?state=dead&q=alice").await;
    assert_eq!(
        (v["items"].as_array().unwrap().len(), v["scanned"].clone()),
        (0, json!(0))
    );
}

#[tokio::test]
async fn actions_change_redis() {
    let (_server, client) = start().await;
    let q = queue(&client, "acts");
    q.send("seed").delay(Duration::from_secs(600)).id("seed").await.unwrap();
    // The application's own handle: its events see the dashboard's actions.
    let app = Dashboard::new(client.clone()).queue(&q).router().unwrap();
    let mut events = q.events();

    // Send, with every option.
    let v = act(
        &app,
        "/api/queues/acts/messages",
        json!({"payload": "hello", "delay_ms": 60000, "id": "m1", "retry_count": 7}),
    )
    .await;
    assert_eq!(v, json!({"id": "m1"}));
    let m = q.get("m1").await.unwrap().unwrap();
    assert_eq!(
        (m.state, m.retry_count, m.payload.as_slice()),
        (MessageState::Pending, Some(7), &b"hello"[..])
    );
    let v = act(&app, "/api/queues/acts/messages", json!({"payload": "now"})).await;
    let now_id = v["id"].as_str().unwrap().to_string();
    let due_now = q.get(&now_id).await.unwrap().unwrap().due;
    assert!(due_now <= Some(std::time::SystemTime::now()), "{due_now:?}");
    let token = csrf(&app).await;
    let dup = post(
        &app,
        "/api/queues/acts/messages",
        json!({"payload": "x", "id": "m1"}),
        Some(&token),
    )
    .await;
    assert_eq!(dup.status, StatusCode::CONFLICT, "{}", dup.text());
    for bad in [
        json!({"payload": "x", "delay_ms": 1, "at_ms": 1}),
        json!({"payload": "x", "id": "has space"}),
        json!({"nope": 1}),
        json!("not an object"),
    ] {
        let r = post(&app, "/api/queues/acts/messages", bad.clone(), Some(&token)).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{bad}: {}", r.text());
        assert!(r.json()["error"].is_string());
    }

    // Reschedule, run now, cancel.
    let v = act(
        &app,
        "/api/queues/acts/messages/m1/reschedule",
        json!({"delay_ms": 300000}),
    )
    .await;
    assert_eq!(v, json!({"done": true}));
    let due = q.get("m1").await.unwrap().unwrap().due.unwrap();
    let left = due.duration_since(std::time::SystemTime::now()).unwrap();
    assert!(left > Duration::from_secs(250), "{left:?}");
    let v = act(&app, "/api/queues/acts/messages/m1/run", json!({})).await;
    assert_eq!(v, json!({"done": true}));
    let due = q.get("m1").await.unwrap().unwrap().due;
    assert!(
        due <= Some(std::time::SystemTime::now()),
        "run now did not make it due: {due:?}"
    );
    assert_eq!(
        act(&app, "/api/queues/acts/messages/seed/cancel", json!({})).await,
        json!({"done": true})
    );
    assert!(q.get("seed").await.unwrap().is_none());
    let cancelled = tokio::time::timeout(WAIT, async {
        loop {
            if let delayqueue::Event::Changed { action, id, .. } = events.recv().await.unwrap() {
                if action == delayqueue::Action::Cancelled {
                    return id;
                }
            }
        }
    })
    .await
    .expect("no Changed event for the cancel");
    assert_eq!(cancelled.as_ref().map(|i| i.as_str()), Some("seed"));
    assert_eq!(
        act(&app, "/api/queues/acts/messages/seed/cancel", json!({})).await,
        json!({"done": false})
    );
    let r = post(&app, "/api/queues/acts/messages/m1/reschedule", json!({}), Some(&token)).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);

    // Dead letters: one, a selection, all; requeue and delete.
    let ids = make_dead(&q, &["d0", "d1", "d2", "d3", "d4", "d5", "d6"], "boom").await;
    let dead = || async { q.counts().await.unwrap().dead };
    let v = act(&app, "/api/queues/acts/dead/requeue", json!({"ids": [ids[0]]})).await;
    assert_eq!((v, dead().await), (json!({"count": 1}), 6));
    assert_eq!(q.get(&ids[0]).await.unwrap().unwrap().state, MessageState::Ready);
    let v = act(
        &app,
        "/api/queues/acts/dead/delete",
        json!({"ids": [ids[1], ids[2], "not-dead"]}),
    )
    .await;
    assert_eq!((v, dead().await), (json!({"count": 2}), 4));
    assert!(q.get(&ids[1]).await.unwrap().is_none());
    let v = act(&app, "/api/queues/acts/dead/requeue", json!({"ids": [ids[3], ids[4]]})).await;
    assert_eq!((v, dead().await), (json!({"count": 2}), 2));
    let v = act(&app, "/api/queues/acts/dead/delete", json!({"all": true})).await;
    assert_eq!((v, dead().await), (json!({"count": 2}), 0));
    for bad in [json!({}), json!({"ids": []}), json!({"ids": ["a"], "all": true})] {
        let r = post(&app, "/api/queues/acts/dead/requeue", bad.clone(), Some(&token)).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{bad}: {}", r.text());
    }
    // (The consumer that kills these also kills the requeued ones again.)
    make_dead(&q, &["e0", "e1"], "boom").await;
    let before = dead().await;
    let v = act(&app, "/api/queues/acts/dead/requeue", json!({"all": true})).await;
    assert_eq!((v, dead().await), (json!({ "count": before }), 0));

    let r = post(
        &app,
        "/api/queues/unknown/messages",
        json!({"payload": "x"}),
        Some(&token),
    )
    .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn actions_need_the_csrf_token_a_same_site_request_and_write_access() {
    let (_server, client) = start().await;
    let q = queue(&client, "guarded");
    q.send("x").delay(Duration::from_secs(60)).id("x").await.unwrap();
    let app = delayqueue::web::router(client.clone());
    let token = csrf(&app).await;
    let path = "/api/queues/guarded/messages/x/cancel";

    let refused = |r: Reply, why: &str| {
        assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.text());
        assert_eq!(r.json(), json!({ "error": why }));
    };
    refused(post(&app, path, json!({}), None).await, "csrf");
    refused(post(&app, path, json!({}), Some("wrong")).await, "csrf");
    for (name, value) in [("origin", "http://evil.example"), ("sec-fetch-site", "cross-site")] {
        let req = post_req(path, Some(&token))
            .header(name, value)
            .header(header::HOST, "localhost:8080")
            .body(Body::from("{}"))
            .unwrap();
        refused(call(&app, req).await, "cross-site");
    }
    assert!(q.get("x").await.unwrap().is_some(), "a refused action changed nothing");
    // The same origin is fine.
    let req = post_req(path, Some(&token))
        .header(header::ORIGIN, "http://localhost:8080")
        .header(header::HOST, "localhost:8080")
        .header("sec-fetch-site", "same-origin")
        .body(Body::from("{}"))
        .unwrap();
    assert_eq!(call(&app, req).await.status, StatusCode::OK);
    assert!(q.get("x").await.unwrap().is_none());

    // Read-only: every action refused, reading works.
    q.send("y").delay(Duration::from_secs(60)).id("y").await.unwrap();
    let ro = Dashboard::new(client.clone()).read_only(true).router().unwrap();
    let v = get_ok(&ro, "/api/overview").await;
    assert_eq!(v["read_only"], true);
    let token = v["csrf"].as_str().unwrap().to_string();
    for (path, body) in [
        ("/api/queues/guarded/messages/y/cancel", json!({})),
        ("/api/queues/guarded/messages", json!({"payload": "p"})),
        ("/api/queues/guarded/dead/delete", json!({"all": true})),
        ("/api/queues/guarded/pause", json!({})),
    ] {
        refused(post(&ro, path, body, Some(&token)).await, "read-only");
    }
    assert!(q.get("y").await.unwrap().is_some());
    assert_eq!(q.counts().await.unwrap().pending, 1);
}

#[tokio::test]
async fn bearer_and_basic_auth_guard_every_route() {
    let (_server, client) = start().await;
    queue(&client, "authq").send("x").await.unwrap();
    let routes = ["/", "/assets/app.js", "/metrics", "/api/overview", "/api/queues/authq"];

    let app = Dashboard::new(client.clone())
        .auth(Auth::Bearer("s3cret".into()))
        .router()
        .unwrap();
    for path in routes {
        let r = get(&app, path).await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{path}");
        assert_eq!(r.header(header::WWW_AUTHENTICATE), "", "no basic prompt for a token");
        let bearer = |t: &str| {
            Request::get(path)
                .header(header::AUTHORIZATION, format!("Bearer {t}"))
                .body(Body::empty())
                .unwrap()
        };
        assert_eq!(
            call(&app, bearer("wrong")).await.status,
            StatusCode::UNAUTHORIZED,
            "{path}"
        );
        assert_eq!(call(&app, bearer("s3cret")).await.status, StatusCode::OK, "{path}");
    }
    // A browser: the token once in the URL, then a cookie, under any mount path.
    let nested = Router::new().nest_service("/admin/queues", app.clone());
    let r = get(&nested, "/admin/queues/?token=s3cret").await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    assert_eq!(r.header(header::LOCATION), "/admin/queues/");
    let cookie = r.header(header::SET_COOKIE).to_string();
    assert_eq!(
        cookie,
        "delayqueue_token=s3cret; Path=/admin/queues; HttpOnly; SameSite=Strict"
    );
    let with_cookie = Request::get("/admin/queues/api/overview")
        .header(header::COOKIE, "delayqueue_token=s3cret")
        .body(Body::empty())
        .unwrap();
    assert_eq!(call(&nested, with_cookie).await.status, StatusCode::OK);
    assert_eq!(
        get(&nested, "/admin/queues/?token=wrong").await.status,
        StatusCode::UNAUTHORIZED
    );
    let r = get(&nested, "/admin/queues?token=s3cret").await;
    assert_eq!(r.header(header::LOCATION), "/admin/queues");
    assert!(r.header(header::SET_COOKIE).contains("; Path=/admin/queues;"));

    let app = Dashboard::new(client.clone())
        .auth(Auth::Basic {
            user: "ops".into(),
            password: "pw:1".into(),
        })
        .router()
        .unwrap();
    let basic = |path: &str, cred: &str| {
        use base64::Engine;
        let cred = base64::engine::general_purpose::STANDARD.encode(cred);
        Request::get(path)
            .header(header::AUTHORIZATION, format!("Basic {cred}"))
            .body(Body::empty())
            .unwrap()
    };
    for path in routes {
        let r = get(&app, path).await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{path}");
        assert!(r
            .header(header::WWW_AUTHENTICATE)
            .starts_with("Basic realm=\"delayqueue\""));
        assert_eq!(
            call(&app, basic(path, "ops:wrong")).await.status,
            StatusCode::UNAUTHORIZED
        );
        assert_eq!(
            call(&app, basic(path, "root:pw:1")).await.status,
            StatusCode::UNAUTHORIZED
        );
        assert_eq!(
            call(&app, basic(path, "ops:pw:1")).await.status,
            StatusCode::OK,
            "{path}"
        );
    }
    let r = call(&app, basic("/api/overview", "ops:pw:1")).await;
    assert_eq!(r.json()["user"], "ops");
}

/// The latency a `/metrics` scrape gives queue `name`, in seconds.
async fn scraped_latency(app: &Router, name: &str) -> Option<f64> {
    let text = get(app, "/metrics").await.text();
    let prefix = format!("delayqueue_queue_latency_seconds{{queue=\"{name}\"}} ");
    text.lines().find_map(|l| l.strip_prefix(&prefix)?.parse().ok())
}

/// A grouped queue without consumer: `/metrics` and the overview show its
/// latency, and it grows.
#[tokio::test]
async fn metrics_and_the_overview_show_a_grouped_queues_latency_grow() {
    let (_server, client) = start().await;
    let q = queue(&client, "tenants");
    for i in 0..20 {
        q.send("job").group(format!("tenant-{}", i % 4)).await.unwrap();
    }
    let app = delayqueue::web::router(client.clone());
    let first = scraped_latency(&app, "tenants").await;
    assert!(first.is_some(), "{}", get(&app, "/metrics").await.text());
    let later = std::cell::Cell::new(None);
    assert!(
        wait_for(WAIT, || async {
            later.set(scraped_latency(&app, "tenants").await);
            later.get() > first.map(|s| s + 0.2)
        })
        .await,
        "no consumer, yet the latency did not grow: {first:?} then {later:?}"
    );
    let o = get_ok(&app, "/api/overview").await;
    let latency = o["queues"][0]["latency_ms"].as_u64();
    assert!(latency.is_some_and(|ms| ms >= 200), "{o}");
}

#[tokio::test]
async fn metrics_are_prometheus_text_read_from_redis() {
    let (_server, client) = start().await;
    let q = queue(&client, "metered");
    for _ in 0..3 {
        q.send("p").delay(Duration::from_secs(60)).await.unwrap();
    }
    make_dead(&q, &["d"], "boom").await;
    let app = delayqueue::web::router(client.clone());
    let r = get(&app, "/metrics").await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(r.header(header::CONTENT_TYPE).starts_with("text/plain; version=0.0.4"));
    let text = r.text();
    for family in [
        ("delayqueue_queue_messages", "gauge"),
        ("delayqueue_queue_latency_seconds", "gauge"),
        ("delayqueue_queue_oldest_dead_seconds", "gauge"),
        ("delayqueue_queue_paused", "gauge"),
        ("delayqueue_queue_sent_total", "counter"),
        ("delayqueue_queue_acked_total", "counter"),
        ("delayqueue_queue_failed_total", "counter"),
        ("delayqueue_queue_dead_total", "counter"),
        ("delayqueue_queue_expired_total", "counter"),
    ] {
        assert!(text.contains(&format!("# HELP {} ", family.0)), "{family:?}\n{text}");
        assert!(
            text.contains(&format!("# TYPE {} {}\n", family.0, family.1)),
            "{family:?}\n{text}"
        );
    }
    for line in [
        "delayqueue_queue_messages{queue=\"metered\",state=\"pending\"} 3",
        "delayqueue_queue_messages{queue=\"metered\",state=\"dead\"} 1",
        "delayqueue_queue_messages{queue=\"metered\",state=\"ready\"} 0",
        "delayqueue_queue_sent_total{queue=\"metered\"} 4",
        "delayqueue_queue_failed_total{queue=\"metered\"} 1",
        "delayqueue_queue_dead_total{queue=\"metered\"} 1",
        "delayqueue_queue_latency_seconds{queue=\"metered\"} 0",
        "delayqueue_queue_paused{queue=\"metered\"} 0",
    ] {
        assert!(text.lines().any(|l| l == line), "{line}\n{text}");
    }
    let dead_age = text
        .lines()
        .find_map(|l| l.strip_prefix("delayqueue_queue_oldest_dead_seconds{queue=\"metered\"} "))
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap();
    assert!((0.0..60.0).contains(&dead_age), "{text}");

    q.pause().await.unwrap();
    let text = get(&app, "/metrics").await.text();
    assert!(
        text.lines()
            .any(|l| l == "delayqueue_queue_paused{queue=\"metered\"} 1"),
        "{text}"
    );
}

#[tokio::test]
async fn pages_and_assets_are_embedded_and_work_under_a_mount_path() {
    let (_server, client) = start().await;
    let app = Router::new().nest_service("/admin/queues", delayqueue::web::router(client.clone()));
    for (path, kind) in [
        ("/admin/queues", "text/html"),
        ("/admin/queues/", "text/html"),
        ("/admin/queues/assets/app.js", "text/javascript"),
        ("/admin/queues/assets/lib.js", "text/javascript"),
        ("/admin/queues/assets/overview.js", "text/javascript"),
        ("/admin/queues/assets/groups.js", "text/javascript"),
        ("/admin/queues/assets/message.js", "text/javascript"),
        ("/admin/queues/assets/flow.js", "text/javascript"),
        ("/admin/queues/assets/app.css", "text/css"),
        ("/admin/queues/assets/favicon.svg", "image/svg+xml"),
    ] {
        let r = get(&app, path).await;
        assert_eq!(r.status, StatusCode::OK, "{path}");
        assert!(r.header(header::CONTENT_TYPE).starts_with(kind), "{path}");
        assert_eq!(r.header(header::CACHE_CONTROL), "no-cache", "{path}");
    }
    assert!(get(&app, "/admin/queues/").await.text().contains("delayqueue"));
    assert_eq!(
        get(&app, "/admin/queues/assets/nope.js").await.status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(get(&app, "/admin/queues/api/overview").await.status, StatusCode::OK);
}

#[tokio::test]
async fn rates_are_sampled_and_the_sampler_stops_with_the_router() {
    let (server, client) = start().await;
    let q = queue(&client, "rated");
    q.send("first").await.unwrap();
    let app = Dashboard::new(client.clone())
        .sample_every(Duration::from_millis(200))
        .router()
        .unwrap();
    get_ok(&app, "/api/overview").await;
    for _ in 0..20 {
        q.send("x").await.unwrap();
    }
    let sent_rate = || async {
        let h = get_ok(&app, "/api/queues/rated/history").await;
        assert_eq!(h["step_ms"], 200);
        h["points"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["sent"].as_f64().unwrap())
            .sum::<f64>()
    };
    assert!(
        wait_for(WAIT, || async { sent_rate().await > 0.0 }).await,
        "no rate sampled"
    );
    let points = get_ok(&app, "/api/queues/rated/history").await["points"].clone();
    assert_eq!(keys(&points[0]), ["acked", "dead", "failed", "sent", "t_ms"]);

    // Once the router is gone, nothing reads Redis any more.
    drop(app);
    let calls = || {
        let info = server.raw_command(&["INFO", "commandstats"]);
        info.lines()
            .filter_map(|l| l.split_once("calls=")?.1.split(',').next()?.parse::<u64>().ok())
            .sum::<u64>()
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let before = calls();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    // Only the INFO calls themselves (1 per look).
    assert!(calls() <= before + 1, "the sampler still runs: {before} -> {}", calls());
}

/// `/metrics` appends the application's recorder (here
/// metrics-exporter-prometheus, installed for this test binary) given to
/// `process_metrics`: the library's per-process metrics with their help
/// texts, next to the queue-wide families read from Redis.
#[tokio::test]
async fn metrics_append_the_process_metrics_of_the_application_recorder() {
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new()
        .install_recorder()
        .expect("the only recorder of this test binary");
    let (_server, client) = start().await;
    let q = queue(&client, "recorded");
    let log = helpers::Log::default();
    let consumer = q.start_consume(helpers::acking(&log)).await.unwrap();
    q.send("x").await.unwrap();
    assert!(support::wait_until(WAIT, || log.len() == 1).await);
    consumer.shutdown().await.unwrap();
    let app = Dashboard::new(client.clone())
        .process_metrics(move || recorder.render())
        .router()
        .unwrap();
    let text = get(&app, "/metrics").await.text();
    for line in [
        "# TYPE delayqueue_queue_acked_total counter",
        "delayqueue_queue_acked_total{queue=\"recorded\"} 1",
        "# TYPE delayqueue_acked_total counter",
        "delayqueue_acked_total{queue=\"recorded\"} 1",
        "# TYPE delayqueue_handler_duration_seconds summary",
    ] {
        assert!(text.lines().any(|l| l == line), "{line}\n{text}");
    }
    assert!(
        text.contains("# HELP delayqueue_acked_total Acks that took effect."),
        "{text}"
    );
}

#[tokio::test]
async fn schedules_are_listed_and_paused_resumed_and_triggered() {
    let (_server, client) = start().await;
    let q = queue(&client, "crons");
    let hourly = delayqueue::Schedule::every(Duration::from_secs(3600), "h").retry_count(2);
    assert!(q.set_schedule("hourly", hourly).await.unwrap());
    let nightly = delayqueue::Schedule::cron("0 3 * * *", "n").timezone("Europe/Berlin");
    assert!(q.set_schedule("nightly", nightly).await.unwrap());
    let app = Dashboard::new(client.clone()).queue(&q).router().unwrap();

    let v = get_ok(&app, "/api/queues/crons/schedules").await;
    assert_eq!(keys(&v), ["items", "now_ms"]);
    let items = v["items"].as_array().unwrap();
    let names: Vec<&str> = items.iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["hourly", "nightly"]);
    let h = &items[0];
    assert_eq!(
        keys(h),
        [
            "fired",
            "last_fire_ms",
            "misfire",
            "misfire_grace_ms",
            "name",
            "next_fire_ms",
            "paused",
            "payload_len",
            "retry_count",
            "spec",
            "timezone"
        ]
    );
    assert_eq!(
        (
            &h["spec"],
            &h["paused"],
            &h["retry_count"],
            &h["misfire"],
            &h["payload_len"]
        ),
        (
            &json!("every 3600000"),
            &json!(false),
            &json!(2),
            &json!("once"),
            &json!(1)
        )
    );
    let now = v["now_ms"].as_u64().unwrap();
    let next = h["next_fire_ms"].as_u64().expect("a next fire");
    assert!(next > now && next <= now + 3_600_000, "next {next}, now {now}");
    assert_eq!(items[1]["spec"], "cron 0 3 * * *");
    assert_eq!(items[1]["timezone"], "Europe/Berlin");

    // Pause, pause again, resume: each as the API says, and in Redis.
    let path = |s: &str, what: &str| format!("/api/queues/crons/schedules/{s}/{what}");
    assert_eq!(
        act(&app, &path("hourly", "pause"), json!({})).await,
        json!({"done": true})
    );
    assert_eq!(
        act(&app, &path("hourly", "pause"), json!({})).await,
        json!({"done": false})
    );
    let info = q.schedule("hourly").await.unwrap().unwrap();
    assert!(info.paused && info.next_fire.is_none(), "{info:?}");
    let v = get_ok(&app, "/api/queues/crons/schedules").await;
    assert_eq!(
        (&v["items"][0]["paused"], &v["items"][0]["next_fire_ms"]),
        (&json!(true), &Value::Null)
    );
    assert_eq!(
        act(&app, &path("hourly", "resume"), json!({})).await,
        json!({"done": true})
    );
    assert!(!q.schedule("hourly").await.unwrap().unwrap().paused);

    // Trigger: one message now, with the schedule's payload.
    let v = act(&app, &path("nightly", "trigger"), json!({})).await;
    let id = v["id"].as_str().unwrap();
    assert!(id.starts_with("{nightly}@t"), "{id}");
    let m = q.get(id).await.unwrap().expect("the triggered fire");
    assert_eq!(m.payload.as_slice(), b"n");

    // An unknown schedule is a 404; no CSRF token a 403; read-only refuses.
    let token = csrf(&app).await;
    let r = post(&app, &path("nope", "pause"), json!({}), Some(&token)).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.text());
    let r = post(&app, &path("nope", "trigger"), json!({}), Some(&token)).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.text());
    let r = post(&app, &path("hourly", "pause"), json!({}), None).await;
    assert_eq!((r.status, r.json()), (StatusCode::FORBIDDEN, json!({"error": "csrf"})));
    let ro = Dashboard::new(client.clone()).read_only(true).router().unwrap();
    let token = csrf(&ro).await;
    for what in ["pause", "resume", "trigger"] {
        let r = post(&ro, &path("hourly", what), json!({}), Some(&token)).await;
        assert_eq!(
            (r.status, r.json()),
            (StatusCode::FORBIDDEN, json!({"error": "read-only"}))
        );
    }
    assert_eq!(
        get_ok(&ro, "/api/queues/crons/schedules").await["items"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    assert!(!q.schedule("hourly").await.unwrap().unwrap().paused);
}

/// The keys of a group in the API's answers, in order.
const GROUP_KEYS: [&str; 7] = [
    "concurrency",
    "name",
    "paused",
    "processing",
    "rate",
    "ready",
    "waiting_until_ms",
];

#[tokio::test]
async fn groups_are_listed_by_page_and_paused_and_resumed() {
    let (_server, client) = start().await;
    let q = queue(&client, "tenants");
    for (g, n) in [("a", 3), ("b", 1), ("c", 2)] {
        for _ in 0..n {
            q.send("x").group(g).await.unwrap();
        }
    }
    q.set_group_concurrency("b", Some(2)).await.unwrap();
    // Groups are known once a consumer has promoted their messages: one
    // runs on the paused queue, so nothing is handled.
    assert!(q.pause().await.unwrap());
    let log = helpers::Log::default();
    let consumer = q.start_consume(helpers::acking(&log)).await.unwrap();
    assert!(wait_for(WAIT, || async { q.groups(0, 10).await.unwrap().total == 3 }).await);
    consumer.shutdown().await.unwrap();
    let app = Dashboard::new(client.clone()).queue(&q).router().unwrap();

    let v = get_ok(&app, "/api/queues/tenants/groups").await;
    assert_eq!(
        keys(&v),
        [
            "default_concurrency",
            "default_rate",
            "items",
            "limit",
            "offset",
            "total"
        ]
    );
    assert_eq!(
        (&v["total"], &v["offset"], &v["limit"]),
        (&json!(3), &json!(0), &json!(50))
    );
    let names: Vec<&str> = v["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a", "b", "c"]);
    let a = &v["items"][0];
    assert_eq!(keys(a), GROUP_KEYS);
    assert_eq!(
        (&a["ready"], &a["processing"], &a["paused"]),
        (&json!(3), &json!(0), &json!(false))
    );
    assert_eq!(v["items"][1]["concurrency"], json!(2));

    // Paging: offset and limit, in name order.
    let v = get_ok(&app, "/api/queues/tenants/groups?offset=1&limit=1").await;
    assert_eq!((&v["total"], &v["items"][0]["name"]), (&json!(3), &json!("b")));
    assert_eq!(v["items"].as_array().unwrap().len(), 1);
    for bad in ["limit=0", "limit=201", "limit=x", "offset=-1"] {
        let r = get(&app, &format!("/api/queues/tenants/groups?{bad}")).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{bad}: {}", r.text());
    }

    // Pause, pause again, resume: as the API says, and as the queue lists it.
    let path = |g: &str, what: &str| format!("/api/queues/tenants/groups/{g}/{what}");
    assert_eq!(
        act(&app, &path("a", "pause"), json!({})).await,
        json!({"paused": true, "changed": true})
    );
    assert_eq!(
        act(&app, &path("a", "pause"), json!({})).await,
        json!({"paused": true, "changed": false})
    );
    assert!(q.groups(0, 10).await.unwrap().items[0].paused);
    assert_eq!(
        get_ok(&app, "/api/queues/tenants/groups").await["items"][0]["paused"],
        json!(true)
    );
    assert_eq!(
        act(&app, &path("a", "resume"), json!({})).await,
        json!({"paused": false, "changed": true})
    );
    assert!(!q.groups(0, 10).await.unwrap().items[0].paused);

    // A bad group name is a 400; no CSRF token a 403; read-only refuses.
    let token = csrf(&app).await;
    for bad in ["a%20b", "%3Cscript%3E", &"g".repeat(65)] {
        let r = post(&app, &path(bad, "pause"), json!({}), Some(&token)).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{bad}: {}", r.text());
        assert!(
            r.json()["error"].as_str().unwrap().contains("invalid group"),
            "{}",
            r.text()
        );
    }
    let r = post(&app, &path("a", "pause"), json!({}), None).await;
    assert_eq!((r.status, r.json()), (StatusCode::FORBIDDEN, json!({"error": "csrf"})));
    let ro = Dashboard::new(client.clone()).read_only(true).router().unwrap();
    let token = csrf(&ro).await;
    for what in ["pause", "resume"] {
        let r = post(&ro, &path("a", what), json!({}), Some(&token)).await;
        assert_eq!(
            (r.status, r.json()),
            (StatusCode::FORBIDDEN, json!({"error": "read-only"}))
        );
    }
    assert_eq!(get_ok(&ro, "/api/queues/tenants/groups").await["total"], json!(3));
    assert!(!q.groups(0, 10).await.unwrap().items[0].paused);
}

#[tokio::test]
async fn one_group_is_read_by_name_and_its_limits_set_and_dropped() {
    let (_server, client) = start().await;
    let q = queue(&client, "tenants");
    q.send("x").group("b").await.unwrap();
    assert!(q.set_default_group_concurrency(Some(4)).await.unwrap());
    let app = Dashboard::new(client.clone()).queue(&q).router().unwrap();
    let one = |g: &str| format!("/api/queues/tenants/groups/{g}");
    let limits = |g: &str| format!("/api/queues/tenants/groups/{g}/limits");

    // Unknown until it has something: 404; a bad name 400.
    let r = get(&app, &one("a")).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.text());
    let r = get(&app, &one("a%20b")).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text());

    let v = act(
        &app,
        &limits("a"),
        json!({"concurrency": 2, "rate": {"limit": 5, "per_ms": 1000}}),
    )
    .await;
    assert_eq!(v["changed"], json!(true));
    assert_eq!(
        (&v["group"]["name"], &v["group"]["concurrency"], &v["group"]["rate"]),
        (&json!("a"), &json!(2), &json!({"limit": 5, "per_ms": 1000}))
    );
    let g = q.group("a").await.unwrap().expect("a has settings of its own");
    assert_eq!(g.concurrency, Some(2));
    let v = get_ok(&app, &one("a")).await;
    let mut want = [&GROUP_KEYS[..], &["default_concurrency", "default_rate"]].concat();
    want.sort_unstable();
    assert_eq!(keys(&v), want);
    assert_eq!((&v["concurrency"], &v["default_concurrency"]), (&json!(2), &json!(4)));

    // A key left out keeps its limit; null drops the group's own.
    let v = act(&app, &limits("a"), json!({"concurrency": null})).await;
    assert_eq!(
        (&v["changed"], &v["group"]["concurrency"]),
        (&json!(true), &Value::Null)
    );
    assert_eq!(v["group"]["rate"]["limit"], json!(5));
    let v = act(&app, &limits("a"), json!({"rate": null})).await;
    assert_eq!(v, json!({"changed": true, "group": null}));
    assert!(q.group("a").await.unwrap().is_none());

    // Bad bodies and names are 400s; no CSRF token a 403; read-only refuses.
    let token = csrf(&app).await;
    for (g, bad) in [
        ("a", json!({})),
        ("a", json!({"concurrency": 0})),
        ("a", json!({"concurrency": "2"})),
        ("a", json!({"rate": {"limit": 5}})),
        ("a", json!({"rate": {"limit": 0, "per_ms": 1000}})),
        ("a", json!({"ordered": true})),
        ("a%20b", json!({"concurrency": 2})),
    ] {
        let r = post(&app, &limits(g), bad.clone(), Some(&token)).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{g} {bad}: {}", r.text());
    }
    let r = post(&app, &limits("a"), json!({"concurrency": 2}), None).await;
    assert_eq!((r.status, r.json()), (StatusCode::FORBIDDEN, json!({"error": "csrf"})));
    let ro = Dashboard::new(client.clone()).read_only(true).router().unwrap();
    let token = csrf(&ro).await;
    let r = post(&ro, &limits("a"), json!({"concurrency": 2}), Some(&token)).await;
    assert_eq!(
        (r.status, r.json()),
        (StatusCode::FORBIDDEN, json!({"error": "read-only"}))
    );
    assert!(q.group("a").await.unwrap().is_none());
}

/// A request to the producer API with a bearer token (`None`: none) and a JSON body.
fn v1_req(method: Method, path: &str, token: Option<&str>) -> axum::http::request::Builder {
    let mut req = Request::builder()
        .method(method)
        .uri(path)
        .header(header::CONTENT_TYPE, "application/json");
    if let Some(t) = token {
        req = req.header(header::AUTHORIZATION, format!("Bearer {t}"));
    }
    req
}

async fn v1(app: &Router, method: Method, path: &str, token: Option<&str>, body: Value) -> Reply {
    let req = v1_req(method, path, token).body(Body::from(body.to_string())).unwrap();
    call(app, req).await
}

#[tokio::test]
async fn producer_api_sends_one_or_a_batch_cancels_reschedules_and_gets() {
    let (_server, client) = start().await;
    let app = Dashboard::new(client.clone())
        .auth(Auth::Bearer("s3".into()))
        .router()
        .unwrap();
    let t = Some("s3");
    let base = "/api/v1/queues/jobs";

    // A queue that does not exist yet is created by its first message.
    let r = v1(
        &app,
        Method::POST,
        &format!("{base}/messages"),
        t,
        json!({"payload": "hi", "delay_ms": 60_000, "id": "a1", "retry_count": 2, "priority": 3,
               "headers": {"tenant": "acme"}}),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text());
    assert_eq!(r.json(), json!({"id": "a1"}));
    let r = v1(
        &app,
        Method::POST,
        &format!("{base}/messages"),
        t,
        json!({"payload": "again", "id": "a1"}),
    )
    .await;
    assert_eq!(r.status, StatusCode::CONFLICT, "a live id is refused: {}", r.text());

    let m = get_ok_v1(&app, &format!("{base}/messages/a1")).await;
    assert_eq!(
        (
            m["payload_text"].as_str(),
            m["retry_count"].as_u64(),
            m["priority"].as_u64()
        ),
        (Some("hi"), Some(2), Some(3))
    );
    assert_eq!(m["headers"], json!({"tenant": "acme"}));
    assert_eq!(m["state"], "pending");

    // Binary payload, and a due time given as at_ms.
    let at = delayqueue_now_ms() + 120_000;
    let r = v1(
        &app,
        Method::POST,
        &format!("{base}/messages"),
        t,
        json!({"payload_base64": "AP8=", "at_ms": at, "id": "bin"}),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text());
    let m = get_ok_v1(&app, &format!("{base}/messages/bin")).await;
    assert_eq!(m["payload_base64"], "AP8=");
    let due = m["due_ms"].as_u64().unwrap();
    assert!(due.abs_diff(at) < 5_000, "due {due}, asked {at}");

    // A batch: one result per message, in order; a duplicate fails alone.
    let r = v1(
        &app,
        Method::POST,
        &format!("{base}/batch"),
        t,
        json!({"messages": [{"payload": "x", "id": "a1"}, {"payload": "y", "id": "b1", "delay_ms": 60_000}, {"payload": "z"}]}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let results = r.json()["results"].as_array().unwrap().clone();
    assert_eq!(results.len(), 3);
    assert_eq!(results[0]["status"], 409);
    assert_eq!(results[1], json!({"id": "b1"}));
    assert!(results[2]["id"].is_string());
    // An invalid message fails the whole batch before anything is sent.
    let r = v1(
        &app,
        Method::POST,
        &format!("{base}/batch"),
        t,
        json!({"messages": [{"payload": "ok", "id": "c1"}, {"payload": "bad", "id": "has space"}]}),
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text());
    let q = queue(&client, "jobs");
    assert!(
        q.get("c1").await.unwrap().is_none(),
        "nothing of a refused batch is stored"
    );
    for bad in [
        json!({"payload": "a", "payload_base64": "YQ=="}),
        json!({"delay_ms": 1}),
        json!({"payload": "a", "delay_ms": 1, "at_ms": 1}),
        json!({"payload_base64": "!!"}),
        json!({"payload": "a", "priority": 10}),
        json!({"payload": "a", "headers": {"no spaces": "x"}}),
    ] {
        let r = v1(&app, Method::POST, &format!("{base}/messages"), t, bad.clone()).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{bad}: {}", r.text());
    }

    let r = v1(
        &app,
        Method::POST,
        &format!("{base}/messages/b1/reschedule"),
        t,
        json!({"delay_ms": 0}),
    )
    .await;
    assert_eq!((r.status, r.json()), (StatusCode::OK, json!({"done": true})));
    let r = v1(&app, Method::POST, &format!("{base}/messages/a1/cancel"), t, json!({})).await;
    assert_eq!((r.status, r.json()), (StatusCode::OK, json!({"done": true})));
    assert!(q.get("a1").await.unwrap().is_none());
    let r = v1(&app, Method::GET, &format!("{base}/messages/a1"), t, json!({})).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    let r = v1(&app, Method::POST, &format!("{base}/messages/a1/cancel"), t, json!({})).await;
    assert_eq!(r.json(), json!({"done": false}));
    assert_eq!(total(&q).await, 3, "bin, b1 and the batch's generated id");
    // Abort: a waiting message is cancelled; then nothing is found (a
    // running one: tests/abort.rs, and the dashboard's button: web_browser.rs).
    let r = v1(&app, Method::POST, &format!("{base}/messages/b1/abort"), t, json!({})).await;
    assert_eq!(
        (r.status, r.json()),
        (StatusCode::OK, json!({"done": true, "outcome": "cancelled"}))
    );
    let r = v1(&app, Method::POST, &format!("{base}/messages/b1/abort"), t, json!({})).await;
    assert_eq!(r.json(), json!({"done": false, "outcome": "not_found"}));
    assert_eq!(total(&q).await, 2);
}

/// `GET` on the producer API with the test's token; must answer 200.
async fn get_ok_v1(app: &Router, path: &str) -> Value {
    let r = v1(app, Method::GET, path, Some("s3"), json!({})).await;
    assert_eq!(r.status, StatusCode::OK, "{path}: {}", r.text());
    r.json()
}

fn delayqueue_now_ms() -> u64 {
    u64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

#[tokio::test]
async fn producer_api_refuses_cookies_missing_credentials_forms_other_sites_and_read_only() {
    let (_server, client) = start().await;
    let app = Dashboard::new(client.clone())
        .auth(Auth::Bearer("s3".into()))
        .router()
        .unwrap();
    let path = "/api/v1/queues/jobs/messages";
    let body = json!({"payload": "p"});
    let send = |req: axum::http::request::Builder| {
        let app = app.clone();
        let body = body.to_string();
        async move { call(&app, req.body(Body::from(body)).unwrap()).await }
    };

    let r = send(v1_req(Method::POST, path, None)).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED, "no credentials");
    let r = send(v1_req(Method::POST, path, Some("wrong"))).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED, "a wrong token");
    // The page's cookie, which a browser adds on its own, does not count here.
    let r = send(v1_req(Method::POST, path, None).header(header::COOKIE, "delayqueue_token=s3")).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED, "cookie-only auth");
    let r =
        send(v1_req(Method::GET, "/api/v1/queues/jobs/messages/x", None).header(header::COOKIE, "delayqueue_token=s3"))
            .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED, "cookie-only read");
    // What a cross-site form can send.
    let r = send(
        Request::builder()
            .method(Method::POST)
            .uri(path)
            .header(header::AUTHORIZATION, "Bearer s3")
            .header(header::CONTENT_TYPE, "text/plain"),
    )
    .await;
    assert_eq!(r.status, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{}", r.text());
    let r = send(
        v1_req(Method::POST, path, Some("s3"))
            .header(header::ORIGIN, "http://evil")
            .header(header::HOST, "dq:8080"),
    )
    .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "another site");
    let q = queue(&client, "jobs");
    assert_eq!(total(&q).await, 0, "nothing refused was sent");
    // With the header and JSON it works, without any CSRF token.
    let r = send(v1_req(Method::POST, path, Some("s3"))).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text());

    let ro = Dashboard::new(client.clone())
        .auth(Auth::Bearer("s3".into()))
        .read_only(true)
        .router()
        .unwrap();
    let r = v1(&ro, Method::POST, path, Some("s3"), body.clone()).await;
    assert_eq!(
        (r.status, r.json()),
        (StatusCode::FORBIDDEN, json!({"error": "read-only"}))
    );
    let r = v1(
        &ro,
        Method::POST,
        "/api/v1/queues/jobs/batch",
        Some("s3"),
        json!({"messages": [body]}),
    )
    .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert_eq!(total(&q).await, 1, "read-only sent nothing");
}

async fn total(q: &DelayQueue) -> u64 {
    let c = q.counts().await.unwrap();
    c.pending + c.ready + c.processing + c.retry + c.dead
}

#[tokio::test]
async fn an_empty_secret_is_refused_when_the_router_is_built() {
    let (_server, client) = start().await;
    let basic = |user: &str, password: &str| Auth::Basic {
        user: user.into(),
        password: password.into(),
    };
    for auth in [Auth::Bearer(String::new()), basic("", "pw"), basic("ops", "")] {
        let what = format!("{auth:?}");
        match Dashboard::new(client.clone()).auth(auth).router() {
            Err(delayqueue::Error::InvalidArgument(e)) => assert!(e.contains("must not be empty"), "{e}"),
            Err(e) => panic!("{what}: {e}"),
            Ok(_) => panic!("{what}: a router with an empty secret"),
        }
    }
}

/// A request as a browser on `host` sends it to the dashboard's address
/// (`Host` and `Origin` of that name: a DNS rebinding attack when the name is
/// the attacker's and resolves to the dashboard's loopback address).
fn from_host(method: Method, path: &str, host: &str) -> axum::http::request::Builder {
    Request::builder()
        .method(method)
        .uri(path)
        .header(header::HOST, host)
        .header(header::ORIGIN, format!("http://{host}"))
        .header(header::CONTENT_TYPE, "application/json")
}

#[tokio::test]
async fn without_auth_only_loopback_and_allowed_hosts_are_served() {
    let (_server, client) = start().await;
    let app = Dashboard::new(client.clone()).router().unwrap();
    let path = "/api/v1/queues/rebound/messages";
    let body = || Body::from(json!({"payload": "p"}).to_string());
    let hostile = "rebind.attacker.example:8080";

    let r = call(&app, from_host(Method::POST, path, hostile).body(body()).unwrap()).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "a rebound send: {}", r.text());
    let r = call(
        &app,
        from_host(Method::GET, "/api/overview", hostile)
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "a rebound overview: {}", r.text());
    assert!(r.text().contains("rebind.attacker.example"), "{}", r.text());
    assert_eq!(total(&queue(&client, "rebound")).await, 0, "nothing refused was sent");

    for own in ["127.0.0.1:8080", "localhost:8080", "[::1]:8080"] {
        let r = call(&app, from_host(Method::POST, path, own).body(body()).unwrap()).await;
        assert_eq!(r.status, StatusCode::CREATED, "{own}: {}", r.text());
    }

    // Behind a proxy: its X-Forwarded-Host counts once allowed, and is what
    // an action's Origin must match.
    let proxied = Dashboard::new(client.clone())
        .allowed_hosts(["dash.example.com"])
        .router()
        .unwrap();
    let via_proxy = |forwarded: &str| {
        Request::post(path)
            .header(header::HOST, "127.0.0.1:8080")
            .header("x-forwarded-host", forwarded)
            .header(header::ORIGIN, format!("https://{forwarded}"))
            .header(header::CONTENT_TYPE, "application/json")
            .body(body())
            .unwrap()
    };
    let r = call(&proxied, via_proxy("dash.example.com")).await;
    assert_eq!(r.status, StatusCode::CREATED, "an allowed proxy name: {}", r.text());
    let r = call(&proxied, via_proxy("rebind.attacker.example")).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "a forwarded name not allowed");
    assert_eq!(total(&queue(&client, "rebound")).await, 4);

    // With a token a rebound page has no credentials: any name is answered.
    let app = Dashboard::new(client.clone())
        .auth(Auth::Bearer("s3".into()))
        .router()
        .unwrap();
    let r = call(
        &app,
        from_host(Method::GET, "/api/overview", hostile)
            .header(header::AUTHORIZATION, "Bearer s3")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
}

/// The dashboard runs before the application first uses a sharded queue:
/// a message sent through the producer API must reach that queue's
/// consumers (or be refused), never land in an unsharded layout no consumer
/// reads; and the dashboard shows the queue with its shard count.
#[tokio::test]
async fn the_producer_api_sends_to_a_queue_sharded_after_the_dashboard_started() {
    let (_server, client) = start().await;
    let app = Dashboard::new(client.clone()).router().unwrap();
    assert_eq!(
        get_ok(&app, "/api/overview").await["queues"],
        json!([]),
        "the list is cached empty"
    );

    let orders = DelayQueue::builder("orders", client.clone())
        .shards(3)
        .fetch_interval(Duration::from_millis(50))
        .build()
        .unwrap();
    orders.send("from the app").await.unwrap();
    let r = v1(
        &app,
        Method::POST,
        "/api/v1/queues/orders/messages",
        None,
        json!({"payload": "via http"}),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text());
    let id = r.json()["id"].as_str().unwrap().to_string();
    assert!(
        orders.get(&id).await.unwrap().is_some(),
        "{id} is not in the 3-shard queue"
    );

    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = seen.clone();
    let consumer = orders
        .start_consume(move |m: delayqueue::Message| {
            let log = log.clone();
            async move {
                log.lock().unwrap().push(m.id().to_string());
                Ok::<(), delayqueue::HandlerError>(())
            }
        })
        .await
        .unwrap();
    assert!(
        support::wait_until(WAIT, || seen.lock().unwrap().contains(&id)).await,
        "{id} not delivered"
    );
    consumer.shutdown().await.unwrap();

    let v = get_ok(&app, "/api/queues/orders").await;
    assert_eq!(v["shards"], 3, "{v}");

    // The other order: the producer API created the queue unsharded (and
    // keeps that handle), then the application shards it. The send script
    // refuses the old handle with nothing written; the API sends again to
    // the queue as Redis records it.
    let path = "/api/v1/queues/grown/messages";
    let r = v1(&app, Method::POST, path, None, json!({"payload": "first"})).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text());
    let grown = DelayQueue::builder("grown", client.clone()).shards(3).build().unwrap();
    grown.send("from the app").await.unwrap();
    let r = v1(&app, Method::POST, path, None, json!({"payload": "second"})).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text());
    let id = r.json()["id"].as_str().unwrap().to_string();
    assert!(
        grown.get(&id).await.unwrap().is_some(),
        "{id} is not in the 3-shard queue"
    );
}

/// The options of docs/dedup.md in the producer API: a refused send is
/// 409, a replace of a message that is not pending 409 (due or processing)
/// or 404 (none), bad input 400; nothing is written for any of them.
#[tokio::test]
async fn producer_api_offers_unique_for_throttle_debounce_and_replace() {
    let (_server, client) = start().await;
    let app = Dashboard::new(client.clone())
        .auth(Auth::Bearer("s3".into()))
        .router()
        .unwrap();
    let (t, path) = (Some("s3"), "/api/v1/queues/dedup/messages");
    let post = |body: Value| v1(&app, Method::POST, path, t, body);
    let r = post(json!({"payload": "u", "id": "u", "delay_ms": 60_000, "unique_for_ms": 3_600_000})).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text());
    let r = post(json!({"payload": "u2", "id": "u", "unique_for_ms": 3_600_000})).await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.text());
    let r = post(json!({"payload": "t", "id": "t", "throttle_ms": 60_000})).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text());
    let r = post(json!({"payload": "t2", "id": "t", "throttle_ms": 60_000})).await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.text());
    assert!(
        r.text().contains("held until"),
        "the window's end is named: {}",
        r.text()
    );
    for payload in ["d1", "d2"] {
        let r = post(json!({"payload": payload, "id": "d", "debounce_ms": 60_000})).await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.text());
    }
    let r = post(json!({"payload": "d3", "id": "d", "replace": true})).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text());
    let m = get_ok_v1(&app, "/api/v1/queues/dedup/messages/d").await;
    assert_eq!(m["payload_text"].as_str(), Some("d3"));
    let before = queue(&client, "dedup").counts().await.unwrap();
    let r = post(json!({"payload": "x", "id": "none", "replace": true})).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.text());
    for bad in [
        json!({"payload": "x", "unique_for_ms": 1_000}),
        json!({"payload": "x", "id": "b", "throttle_ms": 0}),
        json!({"payload": "x", "id": "b", "throttle_ms": 1_000, "debounce_ms": 1_000}),
        json!({"payload": "x", "id": "b", "debounce_ms": 1_000, "delay_ms": 5}),
    ] {
        let r = post(bad.clone()).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{bad}: {}", r.text());
    }
    assert_eq!(
        queue(&client, "dedup").counts().await.unwrap(),
        before,
        "nothing written"
    );
}

/// `after` and `on_dead_child` (docs/workflows.md): a parent waits for
/// children of its queue and of another, linked in each child's queue; a
/// child no longer stored is taken as finished; a bad ref, policy or
/// combination is a 400 with nothing written.
#[tokio::test]
async fn producer_api_sends_a_parent_that_waits_for_its_children() {
    use delayqueue::fred::prelude::HashesInterface;
    let (_server, client) = start().await;
    let app = Dashboard::new(client.clone())
        .auth(Auth::Bearer("s3".into()))
        .router()
        .unwrap();
    let t = Some("s3");
    let (flows, mail) = (queue(&client, "flows"), queue(&client, "mail"));
    for (q, id) in [(&flows, "c1"), (&mail, "r1")] {
        q.send("child").id(id).delay(Duration::from_secs(60)).await.unwrap();
    }
    let r = v1(
        &app,
        Method::POST,
        "/api/v1/queues/flows/messages",
        t,
        json!({"payload": "close", "id": "p1", "after": ["c1", {"queue": "mail", "id": "r1"}],
               "on_dead_child": "ignore"}),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text());
    let p1 = flows.get("p1").await.unwrap().unwrap();
    assert_eq!(p1.state, MessageState::Waiting);
    for (key, child) in [("dq:{flows}:parents", "c1"), ("dq:{mail}:parents", "r1")] {
        let link: Option<String> = client.hget(key, child).await.unwrap();
        assert_eq!(link.as_deref(), Some("i dq:{flows}: p1"), "{child}");
    }
    // In a batch; a child never sent is taken as finished: due at once.
    let r = v1(
        &app,
        Method::POST,
        "/api/v1/queues/flows/batch",
        t,
        json!({"messages": [{"payload": "p2", "id": "p2", "after": [{"id": "gone"}, {"queue": "flows", "id": "c1"}]}]}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert_eq!(r.json()["results"][0]["id"], "p2");
    assert_eq!(flows.get("p2").await.unwrap().unwrap().state, MessageState::Waiting);

    let before = (flows.counts().await.unwrap(), mail.counts().await.unwrap());
    for bad in [
        json!({"payload": "x", "after": ["a b"]}),
        json!({"payload": "x", "after": [{"queue": "no queue!", "id": "c"}]}),
        json!({"payload": "x", "after": [{"queue": "mail"}]}),
        json!({"payload": "x", "after": [{"queue": "mail", "id": "r1", "policy": "wait"}]}),
        json!({"payload": "x", "after": [5]}),
        json!({"payload": "x", "after": "c1"}),
        json!({"payload": "x", "after": ["r1"], "on_dead_child": "retry"}),
        json!({"payload": "x", "id": "self", "after": ["self"]}),
        json!({"payload": "x", "id": "u", "after": ["r1"], "unique_for_ms": 1_000}),
    ] {
        let r = v1(&app, Method::POST, "/api/v1/queues/flows/messages", t, bad.clone()).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{bad}: {}", r.text());
    }
    let r = v1(
        &app,
        Method::POST,
        "/api/v1/queues/flows/batch",
        t,
        json!({"messages": [{"payload": "ok"}, {"payload": "x", "after": ["a b"]}]}),
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text());
    assert_eq!(
        (flows.counts().await.unwrap(), mail.counts().await.unwrap()),
        before,
        "nothing written"
    );
    assert!(flows.get("self").await.unwrap().is_none());
}

#[tokio::test]
async fn one_message_shows_its_progress_and_log_and_an_acked_ones_result() {
    let (_server, client) = start().await;
    let q = DelayQueue::builder("results", client.clone())
        .fetch_interval(Duration::from_millis(50))
        .concurrency(2)
        .build()
        .unwrap();
    let app = delayqueue::web::router(client.clone());
    let (id, done) = (q.send("x").await.unwrap(), q.send("y").await.unwrap());
    let (written, release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let (w, r) = (written.clone(), release.clone());
    let consumer = q
        .start_consume(move |msg: delayqueue::Message| {
            let (w, r) = (w.clone(), r.clone());
            async move {
                if msg.payload() == b"x" {
                    msg.progress(40).await?;
                    msg.log("step 1").await?;
                    w.notify_one();
                    r.notified().await;
                }
                Ok::<_, delayqueue::HandlerError>("done")
            }
        })
        .await
        .unwrap();
    tokio::time::timeout(WAIT, written.notified())
        .await
        .expect("progress written");
    let m = get_ok(&app, &format!("/api/v1/queues/results/messages/{id}")).await;
    assert_eq!(
        (m["state"].as_str(), m["progress"].as_str()),
        (Some("processing"), Some("40"))
    );
    assert_eq!(m["log"], json!(["step 1"]));
    assert_eq!(q.wait_result(&done, WAIT).await.unwrap().as_deref(), Some(&b"done"[..]));
    let m = get_ok(&app, &format!("/api/v1/queues/results/messages/{done}")).await;
    assert_eq!(
        m,
        json!({"id": done.as_str(), "finished": true, "result_text": "done", "result_base64": "ZG9uZQ=="})
    );
    release.notify_one();
    consumer.shutdown().await.unwrap();
}

/// `/metrics` has gauges for the groups with the most due messages only,
/// as many as `group_metrics` says.
#[tokio::test]
async fn metrics_show_the_groups_with_the_most_due_messages() {
    let (_server, client) = start().await;
    let q = queue(&client, "tenants");
    for (g, n) in [("a", 3), ("b", 1), ("c", 2)] {
        for _ in 0..n {
            q.send("x").group(g).await.unwrap();
        }
    }
    q.pause_group("c").await.unwrap();
    let app = Dashboard::new(client.clone()).group_metrics(2).router().unwrap();
    let text = get(&app, "/metrics").await.text();
    assert!(text.contains("# TYPE delayqueue_group_messages gauge\n"), "{text}");
    let grouped: Vec<&str> = text.lines().filter(|l| l.starts_with("delayqueue_group_")).collect();
    assert_eq!(
        grouped,
        [
            "delayqueue_group_messages{queue=\"tenants\",group=\"a\",state=\"ready\"} 3",
            "delayqueue_group_messages{queue=\"tenants\",group=\"a\",state=\"processing\"} 0",
            "delayqueue_group_messages{queue=\"tenants\",group=\"c\",state=\"ready\"} 2",
            "delayqueue_group_messages{queue=\"tenants\",group=\"c\",state=\"processing\"} 0",
            "delayqueue_group_paused{queue=\"tenants\",group=\"a\"} 0",
            "delayqueue_group_paused{queue=\"tenants\",group=\"c\"} 1",
        ]
    );
    let none = Dashboard::new(client.clone()).group_metrics(0).router().unwrap();
    assert!(!get(&none, "/metrics").await.text().contains("delayqueue_group_"));
}

/// `GET .../messages/{id}/flow` (both APIs, read-only too) reads a flow as
/// a tree from any of its messages, across queues; `.../flow/children`
/// pages a node's children; unknown ids are 404, bad ids and cursors 400.
#[tokio::test]
async fn a_flow_is_read_as_a_tree_and_its_children_paged() {
    use delayqueue::{Flow, NewMessage, FLOW_PAGE};
    let (_server, client) = start().await;
    let (orders, mail) = (queue(&client, "orders"), queue(&client, "mail"));
    let hour = Duration::from_secs(3600);
    let mut email = Flow::new(&mail, NewMessage::new("email").id("email-1"));
    for i in 0..FLOW_PAGE + 3 {
        email = email.child(Flow::new(
            &orders,
            NewMessage::new("line").id(format!("line-{i:02}")).delay(hour),
        ));
    }
    Flow::new(&orders, NewMessage::new("close").id("close-1"))
        .child(email)
        .child(Flow::new(&mail, NewMessage::new("charge").id("charge-1")))
        .send()
        .await
        .unwrap();
    // charge-1 is acked with a result: close-1 records it.
    let consumer = mail
        .start_consume(|m: delayqueue::Message| async move { Ok::<_, delayqueue::HandlerError>(m.payload().to_vec()) })
        .await
        .unwrap();
    let relayed = wait_for(WAIT, || async {
        orders.children_results("close-1", None).await.unwrap().items.len() == 1
    })
    .await;
    assert!(relayed, "charge-1's completion did not reach close-1");
    consumer.shutdown().await.unwrap();

    let app = Dashboard::new(client.clone()).read_only(true).router().unwrap();
    for base in ["/api/queues", "/api/v1/queues"] {
        let t = get_ok(&app, &format!("{base}/orders/messages/line-07/flow")).await;
        assert_eq!(keys(&t), ["id", "parents", "path", "queue", "root", "truncated"]);
        assert_eq!(
            t["path"],
            json!([{"queue": "mail", "id": "email-1", "policy": "fail"}, {"queue": "orders", "id": "close-1", "policy": "fail"}])
        );
        let root = &t["root"];
        assert_eq!((&root["id"], &root["state"]), (&json!("close-1"), &json!("waiting")));
        assert_eq!(
            (&root["unfinished"], &root["finished"], &root["more"]),
            (&json!(1), &json!(1), &json!(0))
        );
        let kids = root["children"].as_array().unwrap();
        assert_eq!(kids[0]["id"], "email-1");
        assert_eq!(
            (
                &kids[1]["id"],
                &kids[1]["state"],
                &kids[1]["outcome"],
                &kids[1]["has_result"]
            ),
            (&json!("charge-1"), &Value::Null, &json!("acked"), &json!(true))
        );
        let email = &kids[0];
        assert_eq!(email["children"].as_array().unwrap().len(), FLOW_PAGE);
        assert_eq!(email["more"], 3);
        assert_eq!(email["children"][0]["queue"], "orders");
        assert_eq!(email["children"][0]["state"], "pending");

        // Every child of email-1, page after page.
        let mut seen = std::collections::BTreeSet::new();
        let mut cursor = String::new();
        for _ in 0..10 {
            let p = get_ok(
                &app,
                &format!("{base}/mail/messages/email-1/flow/children?cursor={cursor}"),
            )
            .await;
            seen.extend(
                p["children"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|c| c["id"].as_str().unwrap().to_string()),
            );
            match p["next"].as_str() {
                Some(next) => cursor = next.to_string(),
                None => break,
            }
        }
        assert_eq!(seen.len(), FLOW_PAGE + 3);

        let r = get(&app, &format!("{base}/orders/messages/nope/flow")).await;
        assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.text());
        assert!(r.json()["error"].as_str().unwrap().contains("nope"));
        let r = get(&app, &format!("{base}/orders/messages/a%20b/flow")).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text());
        let r = get(&app, &format!("{base}/mail/messages/email-1/flow/children?cursor=zz")).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text());
        assert_eq!(r.json()["param"], "cursor");
        let r = get(&app, &format!("{base}/nosuch/messages/x/flow")).await;
        assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.text());
    }
}

/// `/metrics` counts the live consumers in all and per queue (0 for a
/// queue none reads), and `/api/consumers` lists them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_and_the_api_count_the_live_consumers_per_queue() {
    let (_server, client) = start().await;
    let read = queue(&client, "read");
    let unread = queue(&client, "unread");
    for q in [&read, &unread] {
        q.send("p").delay(Duration::from_secs(60)).await.unwrap();
    }
    let consumer = read
        .start_consume(|_m: delayqueue::Message| async { Ok::<(), delayqueue::HandlerError>(()) })
        .await
        .unwrap();
    let app = delayqueue::web::router(client.clone());
    let listed = wait_for(WAIT, || {
        let app = app.clone();
        async move {
            get_ok(&app, "/api/consumers").await["consumers"]
                .as_array()
                .is_some_and(|c| c.len() == 1)
        }
    })
    .await;
    assert!(listed);
    let api = get_ok(&app, "/api/consumers").await;
    assert_eq!(api["consumers"][0]["queues"][0]["name"], json!("read"));
    assert_eq!(api["consumers"][0]["pid"], json!(std::process::id()));
    assert_eq!(api["skipped"], json!([]));
    let text = get(&app, "/metrics").await.text();
    for line in [
        "# TYPE delayqueue_queue_consumers gauge",
        "delayqueue_consumers 1",
        "delayqueue_consumer_entries_skipped 0",
        "delayqueue_queue_consumers{queue=\"read\"} 1",
        "delayqueue_queue_consumers{queue=\"unread\"} 0",
    ] {
        assert!(text.lines().any(|l| l == line), "{line}\n{text}");
    }
    consumer.shutdown().await.unwrap();
    let text = get(&app, "/metrics").await.text();
    assert!(
        text.lines()
            .any(|l| l == "delayqueue_queue_consumers{queue=\"read\"} 0"),
        "{text}"
    );
}
