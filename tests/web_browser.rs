//! The dashboard in a real browser: Debian's `chromium`, driven over
//! WebDriver (`chromedriver`) from Rust, against a private redis-server, real
//! queues and real consumers. The dashboard is mounted under a path prefix
//! with bearer auth on, and the browser logs in the documented way (the page
//! opened once with `?token=`).
//!
//! Each scenario waits on conditions (the DOM, the handler's log, Redis) with
//! the generous `support::WAIT`, never on a fixed sleep. The browsers run one
//! at a time: two cores do not run several chromiums well.
//!
//! Without chromium the tests say so and pass, unless `CI` is set or
//! `DELAYQUEUE_BROWSER_REQUIRED=1` (scripts/test.sh sets it): then they fail.
//! With `DELAYQUEUE_SCREENSHOTS=1` the screenshots go to `docs/web/*.png`,
//! else into a temporary directory, so a test run does not dirty the tree.
#![cfg(feature = "web")]

mod helpers;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use delayqueue::fred::clients::Client;
use delayqueue::web::{Auth, Dashboard};
use delayqueue::{Counts, DelayQueue, Event, HandlerError, Message, NewMessage};
use delayqueue_test_support::{self as support, RedisServer};
use fantoccini::actions::{InputSource, MouseActions, PointerAction};
use fantoccini::{ClientBuilder, Locator};
use helpers::Log;
use serde_json::{json, Value};

const TOKEN: &str = "browser-test-token";
const PREFIX: &str = "/admin/queues";
/// Between two looks at the page while waiting for a condition.
const POLL: Duration = Duration::from_millis(50);

/// One chromium at a time across the tests of this binary.
static ONE_BROWSER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn browser_required() -> bool {
    std::env::var_os("CI").is_some() || std::env::var("DELAYQUEUE_BROWSER_REQUIRED").as_deref() == Ok("1")
}

/// `None` after saying why, when the browser is missing and not required.
fn unavailable(why: String) -> Option<Browser> {
    assert!(
        !browser_required(),
        "the browser test cannot run: {why}\n\
         install Debian's chromium and chromium-driver (scripts/test.sh does: \
         apt-get install -y chromium chromium-driver), or set CHROMEDRIVER / CHROMIUM to their paths"
    );
    eprintln!("SKIPPED: {why} (set DELAYQUEUE_BROWSER_REQUIRED=1 to fail instead)");
    None
}

fn program(env: &str, default: &str) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(env) {
        return Some(PathBuf::from(p));
    }
    let p = PathBuf::from(default);
    if p.exists() {
        return Some(p);
    }
    let name = p.file_name()?;
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(name))
        .find(|p| p.exists())
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A chromedriver child on a loopback port. Dropping it asks it to shut
/// down (which quits the browsers it started), then kills it.
struct Chromedriver {
    child: Child,
    port: u16,
}

impl Drop for Chromedriver {
    fn drop(&mut self) {
        if let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.port)) {
            let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
            let _ = s.write_all(b"GET /shutdown HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
            let _ = s.read_to_end(&mut Vec::new());
        }
        let end = Instant::now() + Duration::from_secs(5);
        while Instant::now() < end && matches!(self.child.try_wait(), Ok(None)) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A WebDriver session in a fresh headless chromium profile.
struct Browser {
    wd: fantoccini::Client,
    _driver: Chromedriver,
    profile: PathBuf,
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

impl Browser {
    async fn start(dark: bool) -> Option<Browser> {
        let Some(driver) = program("CHROMEDRIVER", "/usr/bin/chromedriver") else {
            return unavailable("chromedriver not found".into());
        };
        let port = free_port();
        let child = match Command::new(&driver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
        {
            Ok(c) => c,
            Err(e) => return unavailable(format!("{} does not start: {e}", driver.display())),
        };
        let driver = Chromedriver { child, port };
        let listening = support::wait_until(support::WAIT, || TcpStream::connect(("127.0.0.1", port)).is_ok()).await;
        if !listening {
            return unavailable(format!("chromedriver did not listen on 127.0.0.1:{port} within 30 s"));
        }
        let profile = std::env::temp_dir().join(format!(
            "delayqueue-chromium-{}-{}",
            std::process::id(),
            SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        let mut args = vec![
            "--headless=new".to_string(),
            "--no-sandbox".into(),
            "--disable-gpu".into(),
            "--disable-dev-shm-usage".into(),
            "--disable-quic".into(),
            "--no-first-run".into(),
            "--disable-background-networking".into(),
            "--disable-component-update".into(),
            "--disable-sync".into(),
            "--hide-scrollbars".into(),
            format!("--user-data-dir={}", profile.display()),
            "--window-size=1400,900".into(),
        ];
        if dark {
            // preferredColorScheme 0 = dark: what prefers-color-scheme reports.
            args.push("--blink-settings=preferredColorScheme=0".into());
            args.push("--force-dark-mode".into());
        }
        let mut options = json!({ "args": args });
        if let Some(chromium) = program("CHROMIUM", "/usr/bin/chromium") {
            options["binary"] = json!(chromium);
        }
        let mut caps = serde_json::Map::new();
        caps.insert("browserName".into(), json!("chrome"));
        caps.insert("goog:chromeOptions".into(), options);
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        match ClientBuilder::new(connector)
            .capabilities(caps)
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
        {
            Ok(wd) => {
                // --window-size counts the window's frame; the pictures want a 1400x900 page.
                let frame = wd
                    .execute("return [outerWidth - innerWidth, outerHeight - innerHeight];", vec![])
                    .await
                    .ok()
                    .and_then(|v| serde_json::from_value::<[u32; 2]>(v).ok())
                    .unwrap_or([0, 0]);
                wd.set_window_size(1400 + frame[0], 900 + frame[1]).await.unwrap();
                Some(Browser {
                    wd,
                    _driver: driver,
                    profile,
                })
            }
            Err(e) => unavailable(format!("chromium does not start under chromedriver: {e}")),
        }
    }

    /// Ends the session (chromium quits); dropping `self` then stops
    /// chromedriver and removes the profile.
    async fn close(self) {
        let _ = self.wd.clone().close().await;
    }

    async fn js(&self, script: &str) -> Value {
        self.wd
            .execute(script, vec![])
            .await
            .unwrap_or_else(|e| panic!("script failed: {e}\n{script}"))
    }

    /// Waits until the JS expression `cond` is truthy; returns its value.
    /// On a timeout, fails with `what` and the page's text.
    async fn wait(&self, what: &str, cond: &str) -> Value {
        let script = format!("return ({cond});");
        let end = Instant::now() + support::WAIT;
        for _ in 0..2000 {
            let v = self.js(&script).await;
            let truthy =
                !matches!(&v, Value::Null | Value::Bool(false)) && v != json!(0) && v != json!("") && v != json!([]);
            if truthy {
                return v;
            }
            if Instant::now() > end {
                break;
            }
            tokio::time::sleep(POLL).await;
        }
        let page = self.js("return location.href + '\\n' + document.body.innerText;").await;
        panic!(
            "{what}: not seen within {:?}\nthe page:\n{}",
            support::WAIT,
            page.as_str().unwrap_or_default()
        );
    }

    /// Waits for the element, then clicks it.
    async fn click(&self, css: &str) {
        self.wait(&format!("{css} to show"), &format!("(() => {{ const e = document.querySelector({css:?}); return !!e && e.offsetParent !== null && !e.disabled; }})()"))
            .await;
        let e = self.wd.find(Locator::Css(css)).await.unwrap();
        e.click().await.unwrap_or_else(|err| panic!("click {css}: {err}"));
    }

    async fn type_into(&self, css: &str, text: &str) {
        self.wait(&format!("{css} to show"), &format!("!!document.querySelector({css:?})"))
            .await;
        let e = self.wd.find(Locator::Css(css)).await.unwrap();
        e.clear().await.unwrap();
        e.send_keys(text).await.unwrap();
    }

    /// Saves a PNG of the viewport as `<name>.png` (see the module docs).
    async fn screenshot(&self, name: &str) {
        // No hovered row or focused button in the pictures.
        let park = MouseActions::new("mouse".into()).then(PointerAction::MoveTo {
            duration: None,
            x: 0.0,
            y: 0.0,
        });
        self.wd.perform_actions(park).await.unwrap();
        self.js("document.activeElement && document.activeElement.blur && document.activeElement.blur(); return 1;")
            .await;
        let png = self.wd.screenshot().await.expect("screenshot");
        let dir = if std::env::var("DELAYQUEUE_SCREENSHOTS").as_deref() == Ok("1") {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs/web")
        } else {
            std::env::temp_dir().join(format!("delayqueue-web-shots-{}", std::process::id()))
        };
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{name}.png"));
        std::fs::write(&path, png).unwrap();
        eprintln!("screenshot {}", path.display());
    }
}

/// A private redis-server and the dashboard serving its queues under
/// [`PREFIX`] on a loopback port, with bearer auth.
struct Dash {
    server: RedisServer,
    client: Client,
    base: String,
    serve: tokio::task::JoinHandle<()>,
}

impl Drop for Dash {
    fn drop(&mut self) {
        self.serve.abort();
    }
}

impl Dash {
    async fn start() -> Dash {
        Dash::start_with(false).await
    }

    async fn start_with(read_only: bool) -> Dash {
        let server = RedisServer::start().await;
        let client = server.client().await;
        let dashboard = Dashboard::new(client.clone())
            .auth(Auth::Bearer(TOKEN.into()))
            .read_only(read_only)
            .sample_every(Duration::from_millis(500))
            .router()
            .unwrap();
        let app = axum::Router::new().nest_service(PREFIX, dashboard);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let serve = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Dash {
            server,
            client,
            base: format!("http://{addr}{PREFIX}"),
            serve,
        }
    }

    fn queue(
        &self,
        name: &str,
        configure: impl FnOnce(delayqueue::DelayQueueBuilder) -> delayqueue::DelayQueueBuilder,
    ) -> DelayQueue {
        configure(helpers::queue_builder(name, &self.client, Duration::from_millis(100)))
            .build()
            .unwrap()
    }

    /// Logs in the way docs/web.md tells a person to: the page once with
    /// `?token=`; then opens `hash`.
    async fn login(&self, b: &Browser, hash: &str) {
        b.wd.goto(&self.base).await.unwrap();
        let refused = b.js("return document.body.innerText;").await;
        assert!(
            b.js("return !!document.querySelector('[data-testid=overview]');").await == json!(false),
            "the dashboard showed without the token: {refused}"
        );
        b.wd.goto(&format!("{}?token={TOKEN}", self.base)).await.unwrap();
        b.wait(
            "the overview after logging in",
            "!!document.querySelector('[data-testid=queue-row], [data-testid=overview] td.empty')",
        )
        .await;
        self.open(b, hash).await;
    }

    async fn open(&self, b: &Browser, hash: &str) {
        b.js(&format!("location.hash = {hash:?}; return 1;")).await;
    }
}

/// The counts one overview row shows, as numbers (its text without separators).
async fn row_counts(b: &Browser, queue: &str) -> Option<Counts> {
    let v = b
        .js(&format!(
            "const r = document.querySelector('[data-testid=queue-row][data-queue=\"{queue}\"]');
             if (!r) return null;
             const n = (s) => Number(r.querySelector('[data-testid=count-' + s + ']').textContent.replace(/[^0-9]/g, ''));
             return [n('pending'), n('ready'), n('processing'), n('retry'), n('dead')];"
        ))
        .await;
    let n: Vec<u64> = serde_json::from_value(v).ok()?;
    let mut c = Counts::default();
    (c.pending, c.ready, c.processing, c.retry, c.dead) = (n[0], n[1], n[2], n[3], n[4]);
    Some(c)
}

/// Waits until the overview row of `queue` shows what Redis holds, read
/// anew at every look, and returns it.
async fn overview_matches_redis(b: &Browser, queue: &DelayQueue) -> Counts {
    let end = Instant::now() + support::WAIT;
    let mut last = (None, Counts::default());
    for _ in 0..2000 {
        let redis = queue.counts().await.unwrap();
        let shown = row_counts(b, queue.name()).await;
        if shown == Some(redis) {
            return redis;
        }
        last = (shown, redis);
        if Instant::now() > end {
            break;
        }
        tokio::time::sleep(POLL).await;
    }
    panic!(
        "overview row {} shows {:?}, Redis holds {:?}",
        queue.name(),
        last.0,
        last.1
    );
}

/// Live traffic for the pictures' rates and charts: a message every 100 ms
/// (at most 6,000, so 10 minutes) due within 20 s, one in ten declined
/// (retried once, then dead), handled by a consumer. Stops when dropped.
struct Trickle {
    sender: tokio::task::JoinHandle<()>,
    _consumer: delayqueue::Consumer,
}

impl Drop for Trickle {
    fn drop(&mut self) {
        self.sender.abort();
    }
}

async fn trickle(queue: DelayQueue) -> Trickle {
    let consumer = queue
        .start_consume(|msg: Message| async move {
            if msg.payload().windows(8).any(|w| w == b"declined") {
                return Err::<(), HandlerError>("card declined: insufficient funds".into());
            }
            Ok(())
        })
        .await
        .unwrap();
    let sender = tokio::spawn(async move {
        for i in 0..6000u64 {
            let status = if i % 10 == 3 { "declined" } else { "ok" };
            let body = json!({"payment": i, "amount_cents": 1999 + i % 7 * 500, "card": status});
            // Background traffic: a send refused at teardown is not what the test checks.
            let _ = queue
                .send(body.to_string())
                .delay(Duration::from_millis(i * 7919 % 20_000))
                .retry_count(1)
                .await;
            // Pacing the traffic, not waiting for anything.
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    Trickle {
        sender,
        _consumer: consumer,
    }
}

/// Waits until the chart shows sends and acks over at least 30 samples
/// (15 s at the test's sampling), so the pictures have something to show.
async fn wait_for_traffic(b: &Browser) {
    b.wait(
        "sent and acked rates and a chart of 30 samples",
        "(() => { const v = [...document.querySelectorAll('.legend b')].map(x => x.textContent);
                  const p = document.querySelector('svg.chart polyline');
                  return v.length === 4 && v[0] !== '0' && v[1] !== '0' && !!p && p.getAttribute('points').split(' ').length >= 30; })()",
    )
    .await;
}

fn failing_while(flag: &Arc<AtomicBool>, log: &Log) -> impl delayqueue::Handler {
    let flag = flag.clone();
    helpers::recording(log, move |_msg: Message| {
        let fail = flag.load(Ordering::SeqCst);
        async move {
            if fail {
                Err::<(), HandlerError>("upstream timed out (HTTP 503)".into())
            } else {
                Ok(())
            }
        }
    })
}

#[tokio::test]
async fn overview_shows_the_counts_redis_holds_and_the_send_form_adds_one() {
    let _one = ONE_BROWSER.lock().await;
    let dash = Dash::start().await;
    let _payments = trickle(dash.queue("payments", |b| b)).await;
    // orders: 7 pending, 1 processing (the handler holds it), 2 dead.
    let orders = dash.queue("orders", |b| {
        b.max_consume_duration(Duration::from_secs(600))
            .concurrency(1)
            .fetch_limit(1)
    });
    for i in 0..7u64 {
        let body = json!({"order_id": 1000 + i, "action": "close_unpaid"}).to_string();
        orders
            .send(body)
            .delay(Duration::from_secs(600 + 60 * i))
            .await
            .unwrap();
    }
    for i in 0..2 {
        orders
            .send(format!("{{\"order_id\": {i}, \"bad\": true}}"))
            .id(format!("broken-{i}"))
            .retry_count(0)
            .await
            .unwrap();
    }
    let log = Log::default();
    let consumer = orders
        .start_consume(helpers::recording(&log, |msg: Message| async move {
            if msg.id().as_str().starts_with("broken") {
                return Err::<(), HandlerError>("invalid order: missing customer".into());
            }
            // Holds its message for the whole test: one stays processing.
            std::future::pending::<()>().await;
            Ok(())
        }))
        .await
        .unwrap();
    assert!(
        support::wait_for(support::WAIT, || async { orders.counts().await.unwrap().dead == 2 }).await,
        "the two broken orders did not die: {:?}",
        orders.counts().await
    );
    orders
        .send("{\"order_id\": 77, \"action\": \"hold\"}")
        .id("held")
        .await
        .unwrap();
    assert!(
        support::wait_for(support::WAIT, || async {
            orders.counts().await.unwrap().processing == 1
        })
        .await,
        "the held order was not claimed: {:?}",
        orders.counts().await
    );
    // emails: two shards, 4 pending; reports: no consumer, 3 pending.
    let emails = dash.queue("emails", |b| b.shards(2));
    for i in 0..4 {
        emails
            .send(format!("welcome mail {i}"))
            .delay(Duration::from_secs(3600))
            .await
            .unwrap();
    }
    let reports = dash.queue("reports", |b| b);
    for i in 0..3 {
        reports
            .send(format!("nightly report {i}"))
            .delay(Duration::from_secs(7200 + i))
            .await
            .unwrap();
    }

    let Some(b) = Browser::start(false).await else { return };
    dash.login(&b, "#/").await;
    let shown = overview_matches_redis(&b, &orders).await;
    let want = {
        let mut c = Counts::default();
        (c.pending, c.processing, c.dead) = (7, 1, 2);
        c
    };
    assert_eq!(shown, want, "orders");
    assert_eq!(overview_matches_redis(&b, &emails).await.pending, 4);
    assert_eq!(overview_matches_redis(&b, &reports).await.pending, 3);
    assert_eq!(
        b.js("return document.querySelectorAll('[data-testid=paused-badge]').length;")
            .await,
        json!(0),
        "no queue is paused"
    );
    // The sharded queue is one row; its shards show on demand and add up.
    b.click("[data-queue=emails] [data-testid=shards-toggle]").await;
    let per_shard = b
        .wait(
            "two shard rows of emails",
            "(() => { const r = [...document.querySelectorAll('[data-testid=shard-row]')]; return r.length === 2 && r.map(x => Number(x.querySelector('[data-testid=count-pending]').textContent)); })()",
        )
        .await;
    let sum: u64 = serde_json::from_value::<Vec<u64>>(per_shard).unwrap().iter().sum();
    assert_eq!(sum, 4, "the shards' pending add up to the row's");
    wait_for_traffic(&b).await;
    b.screenshot("overview").await;

    // A row's name opens the queue.
    b.click("[data-queue=payments] a.qlink").await;
    b.wait(
        "the payments queue view",
        "!!document.querySelector('[data-testid=queue-view][data-queue=payments]')",
    )
    .await;
    b.wait(
        "a page of pending payments",
        "document.querySelectorAll('[data-testid=message-row]').length >= 20",
    )
    .await;
    wait_for_traffic(&b).await;
    b.screenshot("queue-pending").await;
    dash.open(&b, "#/q/orders/pending").await;
    b.wait(
        "the orders queue view",
        "!!document.querySelector('[data-testid=queue-view][data-queue=orders]')",
    )
    .await;
    b.wait(
        "7 pending rows",
        "document.querySelectorAll('[data-testid=message-row]').length === 7",
    )
    .await;

    // Send a message from the form.
    b.click("[data-testid=send-open]").await;
    b.type_into(
        "[data-testid=send-payload]",
        "{\"order_id\": 4242, \"action\": \"close_unpaid\"}",
    )
    .await;
    b.type_into("[data-testid=send-id]", "order-4242").await;
    b.type_into("[data-testid=send-retries]", "5").await;
    b.type_into("[data-testid=send-delay]", "30").await;
    b.screenshot("send-form").await;
    b.click("[data-testid=send-submit]").await;
    b.wait(
        "the sent toast",
        "[...document.querySelectorAll('[data-testid=toast]')].some(t => t.textContent.includes('Sent order-4242'))",
    )
    .await;
    let sent = orders
        .get("order-4242")
        .await
        .unwrap()
        .expect("the sent message is in Redis");
    assert_eq!(sent.retry_count, Some(5));
    assert_eq!(sent.payload, b"{\"order_id\": 4242, \"action\": \"close_unpaid\"}");
    let due_in = sent.due.unwrap().duration_since(SystemTime::now()).unwrap_or_default();
    assert!(
        due_in > Duration::from_secs(20) && due_in <= Duration::from_secs(31),
        "due in 30 s: {due_in:?}"
    );
    b.wait(
        "the sent message first in the pending tab",
        "document.querySelectorAll('[data-testid=message-row]').length === 8 && document.querySelector('[data-testid=message-row]').dataset.id === 'order-4242'",
    )
    .await;
    b.close().await;
    drop(consumer);
}

#[tokio::test]
async fn a_dead_letter_requeued_with_clicks_leaves_the_dead_tab_and_is_handled() {
    let _one = ONE_BROWSER.lock().await;
    let dash = Dash::start().await;
    let jobs = dash.queue("jobs", |b| b);
    let failing = Arc::new(AtomicBool::new(true));
    let log = Log::default();
    let _consumer = jobs.start_consume(failing_while(&failing, &log)).await.unwrap();
    for i in 1..=4 {
        let body = json!({"job": "resize", "image": format!("cat-{i}.png"), "width": 640, "formats": ["webp", "avif"]});
        jobs.send(body.to_string())
            .id(format!("job-{i}"))
            .retry_count(0)
            .await
            .unwrap();
    }
    assert!(
        support::wait_for(support::WAIT, || async { jobs.counts().await.unwrap().dead == 4 }).await,
        "the jobs did not die: {:?}",
        jobs.counts().await
    );
    failing.store(false, Ordering::SeqCst);

    let Some(b) = Browser::start(false).await else { return };
    dash.login(&b, "#/q/jobs/dead").await;
    b.wait(
        "4 dead rows",
        "document.querySelectorAll('[data-testid=message-row]').length === 4",
    )
    .await;
    // A selection of two, requeued with the bulk button.
    for id in ["job-2", "job-3"] {
        b.click(&format!("[data-testid=message-row][data-id={id}] [data-testid=select]"))
            .await;
    }
    b.wait(
        "2 selected",
        "document.querySelectorAll('[data-testid=select]:checked').length === 2",
    )
    .await;
    b.screenshot("dead-selection").await;
    b.click("[data-testid=requeue-selected]").await;
    b.wait(
        "job-2 and job-3 to leave the dead tab",
        "document.querySelectorAll('[data-testid=message-row]').length === 2 && !document.querySelector('[data-id=job-2], [data-id=job-3]')",
    )
    .await;
    let handled = |id: &'static str| {
        let log = log.clone();
        move || log.attempts(&id.into()).len() == 2
    };
    assert!(
        support::wait_until(support::WAIT, handled("job-2")).await,
        "job-2 was not handled again"
    );
    assert!(
        support::wait_until(support::WAIT, handled("job-3")).await,
        "job-3 was not handled again"
    );

    // One dead letter through its page: message view, requeue, confirm.
    b.click("[data-testid=message-row][data-id=job-1] a").await;
    b.wait(
        "job-1's page",
        "!!document.querySelector('[data-testid=message-view][data-id=job-1]')",
    )
    .await;
    let payload = b
        .wait(
            "the payload",
            "document.querySelector('[data-testid=payload]').textContent",
        )
        .await;
    assert!(
        payload.as_str().unwrap().contains("\"image\": \"cat-1.png\""),
        "pretty JSON payload: {payload}"
    );
    b.wait(
        "the last error",
        "document.body.innerText.includes('upstream timed out (HTTP 503)')",
    )
    .await;
    b.screenshot("message").await;
    b.click("[data-testid=requeue]").await;
    b.wait(
        "the confirmation",
        "!!document.querySelector('[data-testid=confirm] [data-testid=confirm-yes]')",
    )
    .await;
    b.screenshot("confirm").await;
    b.click("[data-testid=confirm-yes]").await;
    b.wait(
        "back on the dead tab",
        "!!document.querySelector('[data-testid=queue-view][data-queue=jobs]') && location.hash.endsWith('/dead')",
    )
    .await;
    b.wait(
        "job-1 to leave the dead tab",
        "document.querySelectorAll('[data-testid=message-row]').length === 1 && !!document.querySelector('[data-testid=message-row][data-id=job-4]')",
    )
    .await;
    assert!(
        support::wait_until(support::WAIT, handled("job-1")).await,
        "job-1 was not handled again"
    );
    assert!(log.attempts(&"job-4".into()).len() == 1, "job-4 was left dead");
    b.wait(
        "the tab count",
        "document.querySelector('[data-testid=tab-dead] .n').textContent === '1'",
    )
    .await;
    assert_eq!(jobs.counts().await.unwrap().dead, 1);
    b.close().await;
}

#[tokio::test]
async fn pausing_with_the_button_stops_the_consumers_and_resuming_hands_them_the_due_messages() {
    let _one = ONE_BROWSER.lock().await;
    let dash = Dash::start().await;
    let tasks = dash.queue("tasks", |b| b);
    let log = Log::default();
    let _consumer = tasks.start_consume(helpers::acking(&log)).await.unwrap();
    tasks.send("warm-up").id("warm-up").await.unwrap();
    assert!(
        support::wait_until(support::WAIT, || log.len() == 1).await,
        "the consumer runs"
    );

    let Some(b) = Browser::start(false).await else { return };
    dash.login(&b, "#/q/tasks/pending").await;
    b.click("[data-testid=pause]").await;
    b.wait(
        "the paused badge",
        "!!document.querySelector('[data-testid=queue-view] [data-testid=paused-badge]')",
    )
    .await;
    b.wait("the resume button", "!!document.querySelector('[data-testid=resume]')")
        .await;
    assert!(tasks.is_paused().await.unwrap(), "Redis says paused");

    let sent_at = dash.server.now_ms();
    for i in 0..3 {
        tasks.send(format!("task {i}")).id(format!("task-{i}")).await.unwrap();
    }
    // The consumer's loop runs on (it moves the due messages to ready) but
    // claims nothing. "Nothing" needs a window: ten fetch intervals by
    // Redis's clock after the sends, each a claim the pause refused.
    assert!(
        support::wait_for(support::WAIT, || async { tasks.counts().await.unwrap().ready == 3 }).await,
        "the due tasks wait in ready: {:?}",
        tasks.counts().await
    );
    assert!(
        support::wait_until(support::WAIT, || dash.server.now_ms() >= sent_at + 1000).await,
        "Redis's clock stands still"
    );
    let c = tasks.counts().await.unwrap();
    assert_eq!(
        (c.pending + c.ready, c.processing),
        (3, 0),
        "due messages wait while paused: {c:?}"
    );
    assert_eq!(log.len(), 1, "the handler got nothing while paused: {:?}", log.ids());
    dash.open(&b, "#/").await;
    b.wait(
        "the paused badge on the overview",
        "!!document.querySelector('[data-queue=tasks] [data-testid=paused-badge]')",
    )
    .await;

    dash.open(&b, "#/q/tasks/pending").await;
    b.click("[data-testid=resume]").await;
    b.wait("the pause button again", "!!document.querySelector('[data-testid=pause]') && !document.querySelector('[data-testid=queue-view] [data-testid=paused-badge]')").await;
    assert!(
        support::wait_until(support::WAIT, || log.len() == 4).await,
        "resumed: the 3 tasks are handled: {:?}",
        log.ids()
    );
    assert!(!tasks.is_paused().await.unwrap());
    b.close().await;
}

#[tokio::test]
async fn search_finds_a_message_by_payload_text_and_by_id_among_many() {
    let _one = ONE_BROWSER.lock().await;
    let dash = Dash::start().await;
    let invoices = dash.queue("invoices", |b| b);
    let msgs = (0..500u32).map(|i| {
        let note = if i == 321 {
            "customer disputes: needle-7f3a"
        } else {
            "routine"
        };
        NewMessage::new(json!({"invoice": i, "note": note}).to_string())
            .id(format!("inv-{i:04}"))
            .delay(Duration::from_secs(3600 + u64::from(i)))
    });
    for r in invoices.send_batch(msgs).await.unwrap() {
        r.unwrap();
    }

    let Some(b) = Browser::start(false).await else { return };
    dash.login(&b, "#/q/invoices/pending").await;
    b.wait(
        "a page of 50",
        "document.querySelectorAll('[data-testid=message-row]').length === 50",
    )
    .await;
    b.type_into("[data-testid=search]", "needle-7f3a").await;
    b.click("[data-testid=search-go]").await;
    let found = b
        .wait(
            "the one match",
            "(() => { const r = [...document.querySelectorAll('[data-testid=message-row]')]; return !!document.querySelector('[data-testid=search-info]') && r.length === 1 && r[0].dataset.id; })()",
        )
        .await;
    assert_eq!(found, json!("inv-0321"));
    // The mount path with a trailing slash serves the same page.
    b.wd.goto(&format!("{}/#/q/invoices/pending", dash.base)).await.unwrap();
    b.wait(
        "the queue under the path with a slash",
        "document.querySelectorAll('[data-testid=message-row]').length === 50",
    )
    .await;
    b.type_into("[data-testid=search]", "inv-0007").await;
    b.click("[data-testid=search-go]").await;
    b.wait(
        "the id match",
        "(() => { const r = [...document.querySelectorAll('[data-testid=message-row]')]; return r.length === 1 && r[0].dataset.id === 'inv-0007'; })()",
    )
    .await;
    b.close().await;
}

#[tokio::test]
async fn counts_of_one_are_in_the_singular() {
    let _one = ONE_BROWSER.lock().await;
    let dash = Dash::start().await;
    let single = dash.queue("single", |b| b);
    single.send("x").delay(Duration::from_secs(900)).await.unwrap();
    let Some(b) = Browser::start(false).await else { return };
    dash.login(&b, "#/").await;
    let summary = "document.querySelector('[data-testid=overview] .pagehead .sub')?.textContent";
    b.wait("the overview's summary", summary).await;
    assert_eq!(b.js(&format!("return {summary};")).await, json!("1 queue · 1 message"));
    dash.open(&b, "#/q/single/pending").await;
    let sub = "document.querySelector('[data-testid=queue-view] .pagehead .sub')?.textContent";
    b.wait("the queue's total", sub).await;
    assert_eq!(b.js(&format!("return {sub};")).await, json!("1 message"));
}

#[tokio::test]
async fn the_overview_follows_a_dark_system_theme_and_read_only_shows_no_action() {
    let _one = ONE_BROWSER.lock().await;
    let dash = Dash::start_with(true).await;
    let _payments = trickle(dash.queue("payments", |b| b)).await;
    let audit = dash.queue("audit", |b| b);
    for i in 0..5 {
        audit
            .send(format!("audit {i}"))
            .delay(Duration::from_secs(900))
            .await
            .unwrap();
    }

    let Some(b) = Browser::start(true).await else { return };
    dash.login(&b, "#/").await;
    assert_eq!(
        b.js("return matchMedia('(prefers-color-scheme: dark)').matches;").await,
        json!(true)
    );
    // A dark page: the body's background is darker than mid-grey.
    let bg = b.js("return getComputedStyle(document.body).backgroundColor;").await;
    let rgb: Vec<u32> = bg
        .as_str()
        .unwrap()
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|s| s.parse().ok())
        .collect();
    assert!(rgb.iter().take(3).all(|&c| c < 64), "dark background, got {bg}");
    assert_eq!(overview_matches_redis(&b, &audit).await.pending, 5);
    wait_for_traffic(&b).await;
    b.screenshot("overview-dark").await;

    // Read-only: the badge says so, and no view offers an action. The
    // message looked at is one of audit's, which no consumer takes away.
    b.wait("the read-only badge", "!document.getElementById('ro-badge').hidden")
        .await;
    dash.open(&b, "#/q/audit/pending").await;
    b.wait(
        "a page of pending audit messages",
        "document.querySelectorAll('[data-testid=message-row]').length > 0",
    )
    .await;
    let id = b
        .js("return document.querySelector('[data-testid=message-row]').dataset.id;")
        .await;
    assert_eq!(b.js(NO_ACTIONS).await, json!([]), "actions in a read-only queue view");
    dash.open(&b, &format!("#/q/audit/m/{}", id.as_str().unwrap())).await;
    b.wait(
        "the message view",
        "!!document.querySelector('[data-testid=message-view] [data-testid=payload]')",
    )
    .await;
    b.wait(
        "the read-only note",
        "document.body.innerText.includes('Read-only dashboard')",
    )
    .await;
    assert_eq!(b.js(NO_ACTIONS).await, json!([]), "actions in a read-only message view");
    b.close().await;
}

/// The action buttons on the page, by test id: none in read-only mode.
const NO_ACTIONS: &str = "return ['pause', 'resume', 'send-open', 'requeue-selected', 'delete-selected', 'requeue-all',
    'delete-all', 'requeue', 'delete', 'cancel', 'run-now', 'reschedule', 'select']
    .filter(t => document.querySelector('[data-testid=' + t + ']'));";

#[tokio::test]
async fn the_schedules_section_lists_the_schedules_and_pauses_one_with_a_click() {
    let _one = ONE_BROWSER.lock().await;
    let dash = Dash::start().await;
    let reports = dash.queue("reports", |b| b);
    reports.send("ad hoc").id("ad-hoc").await.unwrap();
    let daily = delayqueue::Schedule::cron("30 9 * * MON-FRI", "{\"report\":\"daily\"}").timezone("Europe/Berlin");
    reports.set_schedule("daily-report", daily).await.unwrap();
    let ping = delayqueue::Schedule::every(Duration::from_secs(10), "ping");
    reports.set_schedule("ping", ping).await.unwrap();
    // A scheduler sends the next fires ahead, so they have a last fire.
    let scheduler = reports.run_schedules();
    assert!(
        support::wait_for(support::WAIT, || async {
            reports.schedules().await.unwrap().iter().all(|s| s.last_fire.is_some())
        })
        .await,
        "fires sent ahead"
    );
    scheduler.shutdown().await.unwrap();

    let Some(b) = Browser::start(false).await else { return };
    dash.login(&b, "#/q/reports/pending").await;
    b.wait(
        "both schedules listed",
        "document.querySelectorAll('[data-testid=schedules] [data-testid=schedule-row]').length === 2",
    )
    .await;
    let row = "[data-testid=schedule-row][data-schedule=daily-report]";
    let text = b
        .js(&format!("return document.querySelector('{row}').innerText;"))
        .await;
    let text = text.as_str().unwrap();
    assert!(
        text.contains("cron 30 9 * * MON-FRI") && text.contains("Europe/Berlin"),
        "{text}"
    );
    b.click(&format!("{row} [data-testid=schedule-pause]")).await;
    b.wait(
        "the paused badge on the schedule",
        &format!("!!document.querySelector('{row} [data-testid=schedule-paused]')"),
    )
    .await;
    assert!(
        reports.schedule("daily-report").await.unwrap().unwrap().paused,
        "Redis says paused"
    );
    b.screenshot("schedules").await;
    b.close().await;
}

/// The names of the overview's rows, in order.
const ROW_NAMES: &str = "[...document.querySelectorAll('[data-testid=queue-row]')].map(r => r.dataset.queue)";

#[tokio::test]
async fn the_overview_pages_through_more_queues_than_fit_one_page() {
    let _one = ONE_BROWSER.lock().await;
    let dash = Dash::start().await;
    // 60 queues of one message, and one of four: 61, more than a page of 50.
    for i in 0..60 {
        dash.queue(&format!("batch-{i:02}"), |b| b)
            .send(format!("job {i}"))
            .delay(Duration::from_secs(3600))
            .await
            .unwrap();
    }
    let hot = dash.queue("hot", |b| b);
    for i in 0..4 {
        hot.send(format!("urgent {i}"))
            .delay(Duration::from_secs(900))
            .await
            .unwrap();
    }

    let Some(b) = Browser::start(false).await else { return };
    dash.login(&b, "#/").await;
    let range = "document.querySelector('[data-testid=queue-range]')?.textContent";
    let first = b
        .wait(
            "the first page of 50, the largest backlog first",
            &format!("(() => {{ const n = {ROW_NAMES}; return n.length === 50 && {range} === '1–50 of 61' && n; }})()"),
        )
        .await;
    assert_eq!(first[0], json!("hot"), "{first}");
    assert_eq!(first[1], json!("batch-00"), "ties in name order: {first}");

    // 25 a page: three pages, each queue on exactly one of them.
    b.js("const s = document.querySelector('[data-testid=queue-page-size]'); s.value = '25'; s.dispatchEvent(new Event('change')); return 1;")
        .await;
    let mut seen: Vec<String> = Vec::new();
    for (want_range, rows) in [("1–25 of 61", 25), ("26–50 of 61", 25), ("51–61 of 61", 11)] {
        let names = b
            .wait(
                &format!("the page {want_range}"),
                &format!("(() => {{ const n = {ROW_NAMES}; return n.length === {rows} && {range} === '{want_range}' && n; }})()"),
            )
            .await;
        seen.extend(
            names
                .as_array()
                .unwrap()
                .iter()
                .map(|n| n.as_str().unwrap().to_string()),
        );
        if rows == 25 {
            b.click("[data-testid=queue-next]").await;
        }
    }
    b.js("window.scrollTo(0, 0); return 1;").await;
    b.screenshot("overview-last-page").await;
    assert_eq!(
        b.js("return document.querySelector('[data-testid=queue-next]').disabled;")
            .await,
        json!(true),
        "no page after the last"
    );
    let mut unique = seen.clone();
    unique.sort();
    unique.dedup();
    assert_eq!((seen.len(), unique.len()), (61, 61), "every queue once: {seen:?}");

    // Back one page, then a search by the start of the name, from its first page.
    b.click("[data-testid=queue-prev]").await;
    b.wait("the middle page again", &format!("{range} === '26–50 of 61'"))
        .await;
    b.type_into("[data-testid=queue-search]", "batch-5").await;
    let found = b
        .wait(
            "the ten queues whose names start with batch-5",
            &format!("(() => {{ const n = {ROW_NAMES}; return n.length === 10 && {range} === '1–10 of 10' && n; }})()"),
        )
        .await;
    assert_eq!(found[0], json!("batch-50"));
    // By name, the other way round.
    b.js("const s = document.querySelector('[data-testid=queue-sort]'); s.value = 'name'; s.dispatchEvent(new Event('change')); return 1;")
        .await;
    b.js("const i = document.querySelector('[data-testid=queue-search]'); i.value = ''; i.dispatchEvent(new Event('input')); return 1;")
        .await;
    let by_name = b
        .wait(
            "the first page by name",
            &format!("(() => {{ const n = {ROW_NAMES}; return n.length === 25 && n[0] === 'batch-00' && n[24] === 'batch-24' && n; }})()"),
        )
        .await;
    assert_eq!(by_name[0], json!("batch-00"));
    b.close().await;
}

#[tokio::test]
async fn a_group_paused_with_a_click_waits_while_another_is_handled_and_resuming_hands_it_over() {
    let _one = ONE_BROWSER.lock().await;
    let dash = Dash::start().await;
    let work = dash.queue("work", |b| b.group_concurrency(4));
    // Settings of their own make the groups known before any message.
    work.set_group_concurrency("tenant-a", Some(2)).await.unwrap();
    let rate = delayqueue::RateLimit::new(10, Duration::from_secs(1));
    work.set_group_rate("tenant-b", Some(rate)).await.unwrap();
    let log = Log::default();
    let _consumer = work.start_consume(helpers::acking(&log)).await.unwrap();
    let handled = |prefix: &str| log.ids().iter().filter(|id| id.as_str().starts_with(prefix)).count();
    // A send makes the queue known to the dashboard.
    work.send("warm-up").id("warm-up").await.unwrap();
    assert!(
        support::wait_until(support::WAIT, || log.len() == 1).await,
        "the consumer runs"
    );

    let Some(b) = Browser::start(false).await else { return };
    dash.login(&b, "#/q/work/groups").await;
    let row = |g: &str| format!("[data-testid=groups] [data-testid=group-row][data-group={g}]");
    b.wait(
        "both groups listed",
        "document.querySelectorAll('[data-testid=groups] [data-testid=group-row]').length === 2",
    )
    .await;
    let text = b
        .js(&format!(
            "return document.querySelector('{}').innerText;",
            row("tenant-b")
        ))
        .await;
    assert!(text.as_str().unwrap().contains("10 / 1"), "tenant-b's rate: {text}");
    // Limits with clicks: tenant-a's concurrency from 2 to 3, seen in its row.
    b.click(&format!("{} [data-testid=group-limits]", row("tenant-a")))
        .await;
    b.type_into("[data-testid=limits-form] [data-testid=limits-concurrency]", "3")
        .await;
    b.screenshot("group-limits").await;
    b.click("[data-testid=limits-submit]").await;
    b.wait(
        "tenant-a's concurrency 3 in its row",
        &format!(
            "document.querySelector('{} [data-testid=group-concurrency]').innerText === '3'",
            row("tenant-a")
        ),
    )
    .await;
    let a = work.group("tenant-a").await.unwrap().expect("tenant-a is known");
    assert_eq!(a.concurrency, Some(3), "Redis has the new limit");
    // Search by exact name: that group's row alone; an unknown one none.
    let bref = &b;
    let search = |name: &'static str| async move {
        bref.type_into("[data-testid=groups-search]", name).await;
        bref.click("[data-testid=groups-search-go]").await;
    };
    search("tenant-b").await;
    b.wait(
        "tenant-b's row alone",
        "(() => { const r = document.querySelectorAll('[data-testid=groups] [data-testid=group-row]'); return r.length === 1 && r[0].dataset.group === 'tenant-b'; })()",
    )
    .await;
    search("tenant-z").await;
    b.wait(
        "no group named tenant-z",
        "document.querySelector('[data-testid=groups]').innerText.includes('No group named tenant-z')",
    )
    .await;
    search("").await;
    b.wait(
        "both groups again",
        "document.querySelectorAll('[data-testid=groups] [data-testid=group-row]').length === 2",
    )
    .await;
    b.click(&format!("{} [data-testid=group-pause]", row("tenant-a"))).await;
    b.wait(
        "the paused badge on tenant-a",
        &format!(
            "!!document.querySelector('{} [data-testid=group-paused]')",
            row("tenant-a")
        ),
    )
    .await;
    let paused = |page: &delayqueue::GroupPage| page.items.iter().any(|g| g.name == "tenant-a" && g.paused);
    assert!(paused(&work.groups(0, 10).await.unwrap()), "Redis says paused");

    let sent_at = dash.server.now_ms();
    for i in 0..3 {
        for g in ["a", "b"] {
            work.send(format!("job {i}"))
                .id(format!("{g}-{i}"))
                .group(format!("tenant-{g}"))
                .await
                .unwrap();
        }
    }
    assert!(
        support::wait_until(support::WAIT, || handled("b-") == 3).await,
        "tenant-b's messages are handled: {:?}",
        log.ids()
    );
    // "Waits" needs a window: ten fetch intervals by Redis's clock after
    // the sends, each a claim that passed tenant-a over.
    assert!(
        support::wait_until(support::WAIT, || dash.server.now_ms() >= sent_at + 1000).await,
        "Redis's clock stands still"
    );
    assert_eq!(handled("a-"), 0, "tenant-a is paused: {:?}", log.ids());
    b.wait(
        "tenant-a's 3 messages ready on the page",
        &format!(
            "document.querySelector('{} [data-testid=group-ready]').innerText === '3'",
            row("tenant-a")
        ),
    )
    .await;
    b.screenshot("groups").await;
    // A waiting message shows its group, a link back to the tab.
    dash.open(&b, "#/q/work/m/a-0").await;
    let group = b
        .wait(
            "a-0's group",
            "(document.querySelector('[data-testid=message-group]') || {}).textContent",
        )
        .await;
    assert_eq!(group, json!("tenant-a"));
    b.click("[data-testid=message-group]").await;

    b.click(&format!("{} [data-testid=group-resume]", row("tenant-a")))
        .await;
    assert!(
        support::wait_until(support::WAIT, || handled("a-") == 3).await,
        "resumed: tenant-a's messages are handled: {:?}",
        log.ids()
    );
    b.wait(
        "tenant-a's pause button again",
        &format!(
            "!!document.querySelector('{} [data-testid=group-pause]')",
            row("tenant-a")
        ),
    )
    .await;
    assert!(!paused(&work.groups(0, 10).await.unwrap()));
    b.close().await;
}

#[tokio::test]
async fn the_message_view_shows_live_progress_and_log_lines_then_the_result() {
    let _one = ONE_BROWSER.lock().await;
    let dash = Dash::start().await;
    let reports = dash.queue("reports", |b| b.max_consume_duration(Duration::from_secs(60)));
    let id = reports.send("quarterly report").id("report-q3").await.unwrap();
    // The handler reports, then waits for the test before each next step.
    let step = Arc::new(tokio::sync::Semaphore::new(0));
    let s = step.clone();
    let _consumer = reports
        .start_consume(move |msg: Message| {
            let s = s.clone();
            async move {
                msg.progress(30).await?;
                msg.log("fetched 1,204 orders").await?;
                msg.log("totals computed for 3 regions").await?;
                s.acquire().await?.forget();
                msg.progress(80).await?;
                msg.log("rendering the PDF").await?;
                s.acquire().await?.forget();
                Ok::<_, HandlerError>(delayqueue::Json(json!({"pages": 12, "url": "s3://reports/q3.pdf"})))
            }
        })
        .await
        .unwrap();

    let Some(b) = Browser::start(false).await else { return };
    dash.login(&b, &format!("#/q/reports/m/{id}")).await;
    b.wait(
        "progress 30% and two log lines",
        "(() => { const p = document.querySelector('[data-testid=message-progress]'); const l = document.querySelector('[data-testid=message-log]'); return !!p && p.innerText.includes('30%') && !!l && l.innerText.includes('totals computed'); })()",
    )
    .await;
    b.screenshot("message-progress").await;
    // Live: the view follows the handler while it runs.
    step.add_permits(1);
    b.wait(
        "progress 80% and the third line",
        "(() => { const p = document.querySelector('[data-testid=message-progress]'); const l = document.querySelector('[data-testid=message-log]'); return !!p && p.innerText.includes('80%') && l.innerText.includes('rendering the PDF'); })()",
    )
    .await;
    step.add_permits(1);
    b.wait(
        "the finished message with its result",
        "(() => { const r = document.querySelector('[data-testid=message-result]'); return !!document.querySelector('[data-testid=finished]') && !!r && r.innerText.includes('s3://reports/q3.pdf'); })()",
    )
    .await;
    b.screenshot("message-result").await;
    let kept: Option<Value> = reports.result_json(&id).await.unwrap();
    assert_eq!(kept, Some(json!({"pages": 12, "url": "s3://reports/q3.pdf"})));
    b.close().await;
}

/// A running handler aborted with the message view's button: it is told,
/// and the message ends as aborted, not retried.
#[tokio::test]
async fn the_abort_button_tells_the_running_handler_and_the_message_ends_as_aborted() {
    let _one = ONE_BROWSER.lock().await;
    let dash = Dash::start().await;
    let exports = dash.queue("exports", |b| b.max_consume_duration(Duration::from_secs(60)));
    let mut events = exports.events();
    let id = exports.send("export all invoices").id("export-7").await.unwrap();
    let told = Arc::new(AtomicUsize::new(0));
    let t = told.clone();
    let _consumer = exports
        .start_consume(move |msg: Message| {
            let t = t.clone();
            async move {
                msg.log("exporting 12,000 invoices").await?;
                msg.aborted().await;
                t.fetch_add(1, Ordering::SeqCst);
                Err::<(), HandlerError>("stopped: aborted".into())
            }
        })
        .await
        .unwrap();

    let Some(b) = Browser::start(false).await else { return };
    dash.login(&b, &format!("#/q/exports/m/{id}")).await;
    b.wait("the abort button", "!!document.querySelector('[data-testid=abort]')")
        .await;
    b.screenshot("message-abort").await;
    b.click("[data-testid=abort]").await;
    b.wait(
        "the confirmation",
        "!!document.querySelector('[data-testid=confirm] [data-testid=confirm-yes]')",
    )
    .await;
    b.click("[data-testid=confirm-yes]").await;
    b.wait(
        "the toast",
        "document.body.innerText.includes('Aborting: its handler is told')",
    )
    .await;
    let ended = tokio::time::timeout(support::WAIT, async {
        loop {
            match events.recv().await.unwrap() {
                Event::Aborted { id: done } => return done,
                e @ (Event::Failed { .. } | Event::Dead { .. }) => panic!("aborted, yet {e:?}"),
                _ => {}
            }
        }
    })
    .await
    .expect("Event::Aborted");
    assert_eq!(ended, id);
    assert_eq!(told.load(Ordering::SeqCst), 1);
    b.wait(
        "the page to say the message left the queue",
        "!!document.querySelector('[data-testid=finished]') || document.body.innerText.includes('has left the queue')",
    )
    .await;
    b.screenshot("message-aborted").await;
    // The state row no longer says processing.
    b.wait(
        "the state row to say gone",
        "!!document.querySelector('[data-testid=finished]') || !!document.querySelector('[data-testid=state-gone]')",
    )
    .await;
    assert_eq!(exports.counts().await.unwrap(), Counts::default());
    assert_eq!(exports.status().await.unwrap().totals.aborted, 1);
    b.close().await;
}

/// A 2-level flow across two queues, some of its children finished: from
/// a child's row, its message view links to the flow, whose tree shows
/// each message's state (or how it ended) and links to its view.
#[tokio::test]
async fn the_flow_view_opened_from_a_child_shows_each_messages_state() {
    use delayqueue::{ChildPolicy, Flow};
    let _one = ONE_BROWSER.lock().await;
    let dash = Dash::start().await;
    let (orders, mail) = (dash.queue("orders", |b| b), dash.queue("mail", |b| b));
    let hour = Duration::from_secs(3600);
    Flow::new(&orders, NewMessage::new("close order 7").id("close-7"))
        .child(Flow::new(&orders, NewMessage::new("charge card").id("charge-7")))
        .child(
            Flow::new(&mail, NewMessage::new("email receipt").id("email-7"))
                .on_dead_child(ChildPolicy::Ignore)
                .child(Flow::new(&mail, NewMessage::new("render receipt").id("render-7")))
                .child(Flow::new(
                    &mail,
                    NewMessage::new("notify").id("notify-7").retry_count(0),
                ))
                .child(Flow::new(
                    &mail,
                    NewMessage::new("attach invoice").id("attach-7").delay(hour),
                ))
                .child(Flow::new(
                    &orders,
                    NewMessage::new("update ledger").id("ledger-7").delay(hour),
                )),
        )
        .send()
        .await
        .unwrap();
    // charge-7 and render-7 succeed with a result, notify-7 dies.
    let handler = |msg: Message| async move {
        if msg.id().as_str() == "notify-7" {
            return Err(HandlerError::from("smtp: mailbox full"));
        }
        Ok(format!("done: {}", String::from_utf8_lossy(msg.payload())))
    };
    let a = orders.start_consume(handler).await.unwrap();
    let m = mail.start_consume(handler).await.unwrap();
    let finished = |q: &DelayQueue, id: &'static str, n: usize| {
        let q = q.clone();
        move || {
            let q = q.clone();
            async move { q.children_results(id, None).await.unwrap().items.len() == n }
        }
    };
    assert!(
        support::wait_for(support::WAIT, finished(&orders, "close-7", 1)).await,
        "charge-7 not relayed"
    );
    assert!(
        support::wait_for(support::WAIT, finished(&mail, "email-7", 2)).await,
        "render-7 and notify-7 not relayed"
    );
    a.shutdown().await.unwrap();
    m.shutdown().await.unwrap();

    let Some(b) = Browser::start(false).await else { return };
    dash.login(&b, "#/q/mail/pending").await;
    b.click("[data-testid=message-row][data-id=attach-7] a").await;
    b.wait(
        "attach-7's page",
        "!!document.querySelector('[data-testid=message-view][data-id=attach-7]')",
    )
    .await;
    b.click("[data-testid=flow-link]").await;
    let states = b
        .wait(
            "the flow's seven messages",
            "(() => { const n = [...document.querySelectorAll('[data-testid=flow-node]')]; return n.length === 7 && n.map((e) => [e.dataset.queue + '/' + e.dataset.id, e.dataset.state]); })()",
        )
        .await;
    assert_eq!(
        states,
        json!([
            ["orders/close-7", "waiting"],
            ["mail/email-7", "waiting"],
            ["mail/attach-7", "pending"],
            ["orders/ledger-7", "pending"],
            ["mail/notify-7", "dead"],
            ["mail/render-7", "acked"],
            ["orders/charge-7", "acked"],
        ])
    );
    let focus = b
        .js("return [...document.querySelectorAll('[data-testid=flow-node].focus')].map((e) => e.dataset.id);")
        .await;
    assert_eq!(focus, json!(["attach-7"]));
    let info = b
        .js("return document.querySelector('[data-testid=flow-info]').textContent;")
        .await;
    assert!(
        info.as_str()
            .unwrap()
            .contains("Its root is close-7 of orders, 2 levels up"),
        "{info}"
    );
    b.screenshot("flow").await;

    // Each node links to its message's view, in its own queue.
    b.click("[data-testid=flow-node][data-id=ledger-7] a").await;
    b.wait(
        "ledger-7's page, of queue orders",
        "!!document.querySelector('[data-testid=message-view][data-id=ledger-7]') && location.hash === '#/q/orders/m/ledger-7'",
    )
    .await;

    // A parent of more children than a node lists: Show more loads the rest.
    let mut digest = Flow::new(&mail, NewMessage::new("digest").id("digest-9"));
    for i in 0..delayqueue::FLOW_PAGE + 3 {
        digest = digest.child(Flow::new(
            &mail,
            NewMessage::new("item").id(format!("item-{i:02}")).delay(hour),
        ));
    }
    digest.send().await.unwrap();
    dash.open(&b, "#/q/mail/flow/digest-9").await;
    let count = "document.querySelectorAll('[data-testid=flow-node]').length";
    b.wait("the parent and a page of its children", &format!("{count} === 51"))
        .await;
    b.click("[data-testid=flow-more]").await;
    b.wait(
        "all 53 children",
        &format!("{count} === 54 && !document.querySelector('[data-testid=flow-more]')"),
    )
    .await;
    b.close().await;
}

/// A grouped queue without consumer: the overview's latency cell and the
/// queue's header show how long its oldest due message has waited, and it
/// grows; the Groups tab says the default limits are none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grouped_queue_without_consumer_shows_its_latency_grow() {
    let _one = ONE_BROWSER.lock().await;
    let dash = Dash::start().await;
    let q = dash.queue("tenants", |b| b);
    for i in 0..30 {
        q.send(format!("job {i}"))
            .group(format!("tenant-{}", i % 5))
            .await
            .unwrap();
    }
    let Some(b) = Browser::start(false).await else { return };
    dash.login(&b, "#/").await;
    let cell = "document.querySelector('[data-testid=queue-row][data-queue=tenants] [data-testid=latency]')";
    let first = b
        .wait(
            "the latency in the overview row",
            &format!("{cell} && /[0-9]/.test({cell}.innerText) && {cell}.innerText"),
        )
        .await;
    b.wait("the latency grows", &format!("{cell}.innerText !== {first}"))
        .await;
    dash.open(&b, "#/q/tenants/ready").await;
    let stat = b
        .wait(
            "the latency in the queue's header",
            "(() => { const e = document.querySelector('[data-testid=latency]'); return !!e && /[0-9]/.test(e.innerText) && e.innerText; })()",
        )
        .await;
    assert!(stat.as_str().unwrap().to_lowercase().starts_with("latency"), "{stat}");
    dash.open(&b, "#/q/tenants/groups").await;
    let limit = b
        .wait(
            "a group's concurrency",
            "(document.querySelector('[data-testid=groups] [data-testid=group-concurrency]') || {}).innerText",
        )
        .await;
    assert_eq!(limit, json!("none default"), "no default stored: none");
    b.close().await;
}

/// The Consumers page: a Worker over two queues listed with its host, pid,
/// queues and weights, and the messages its handlers run now (each linked
/// to its message page); an entry another writer left listed apart with the
/// reason; and the consumer gone once shut down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_consumers_page_lists_each_consumer_with_what_it_runs() {
    let _one = ONE_BROWSER.lock().await;
    let dash = Dash::start().await;
    let slow = |b: delayqueue::DelayQueueBuilder| {
        b.max_consume_duration(Duration::from_secs(60))
            .heartbeat(Duration::from_millis(200))
    };
    let emails = dash.queue("emails", slow);
    let reports = dash.queue("reports", slow);
    // The handlers wait for the test, so the messages are running.
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let handler = |gate: Arc<tokio::sync::Semaphore>| {
        move |_m: Message| {
            let gate = gate.clone();
            async move {
                gate.acquire().await?.forget();
                Ok::<_, HandlerError>(())
            }
        }
    };
    let consumer = delayqueue::Worker::new()
        .queue(&emails, 3, handler(gate.clone()))
        .queue(&reports, 1, handler(gate.clone()))
        .concurrency(4)
        .start()
        .await
        .unwrap();
    for id in ["welcome-ada", "welcome-grace"] {
        emails.send("hello").id(id).await.unwrap();
    }
    reports.send("q3").id("report-q3").await.unwrap();
    // An entry of a later version, as another deployment could leave.
    let later = (u64::MAX / 2).to_string();
    dash.server.raw_command(&[
        "SET",
        "dq:{#consumers}:consumer:from-v2",
        r#"{"v":2,"host":"<b>x</b>"}"#,
    ]);
    dash.server
        .raw_command(&["ZADD", "dq:{#consumers}:consumers", &later, "from-v2"]);

    let Some(b) = Browser::start(false).await else { return };
    dash.login(&b, "#/consumers").await;
    b.wait(
        "one consumer running three messages",
        "(() => { const c = document.querySelectorAll('[data-testid=consumer]'); return c.length === 1 && c[0].querySelectorAll('[data-testid=running-row]').length === 3; })()",
    )
    .await;
    let card = b
        .js("return document.querySelector('[data-testid=consumer]').innerText;")
        .await;
    let card = card.as_str().unwrap();
    assert!(card.contains(&format!("pid {}", std::process::id())), "{card}");
    assert!(card.contains("emails ×3") && card.contains("reports"), "{card}");
    assert!(card.contains("welcome-ada") && card.contains("report-q3"), "{card}");
    assert!(card.contains(env!("CARGO_PKG_VERSION")), "{card}");
    let skipped = b
        .wait(
            "the entry of another version, apart",
            "(() => { const s = document.querySelector('[data-testid=skipped]'); return s && s.innerText; })()",
        )
        .await;
    let skipped = skipped.as_str().unwrap();
    assert!(
        skipped.contains("from-v2") && skipped.contains("entry version 2"),
        "{skipped}"
    );
    assert!(
        b.js("return document.querySelectorAll('[data-testid=skipped] b').length;")
            .await
            == json!(0),
        "another process's text is never markup"
    );
    b.screenshot("consumers").await;

    // A running message links to its page.
    b.click("[data-testid=running-row][data-id=report-q3] a").await;
    b.wait(
        "the running message's page",
        "!!document.querySelector('[data-testid=message-view]') && location.hash.includes('report-q3')",
    )
    .await;

    // Shut down: gone from the page at once (no TTL to wait out).
    gate.add_permits(3);
    consumer.shutdown().await.unwrap();
    dash.open(&b, "#/consumers").await;
    b.wait(
        "no live consumer",
        "!document.querySelector('[data-testid=consumer]') && document.body.innerText.includes('No live consumers')",
    )
    .await;
    b.close().await;
}
