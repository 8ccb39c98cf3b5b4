//! The docs' log targets and sample log lines, checked against a run.
//!
//! Every `delayqueue...` log target that docs/*.md or README.md name (a
//! `RUST_LOG` directive, a target named in prose, the target of a sample
//! line) must be the target of an event the crate logs, or a module above
//! one (as `EnvFilter` matches it): a filter on a target that no event has
//! shows nothing, silently. Every sample log line in the docs must be a line
//! this run printed, in `tracing-subscriber`'s fmt format without
//! timestamps. The run is the one docs/operations.md §8 describes, plus an
//! acked message and, with the `web` feature, a dashboard action.

use delayqueue_test_support as support;

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;
use std::sync::{Mutex, Once};
use std::time::Duration;

use delayqueue::{Backoff, DelayQueue, Event, HandlerError, Message, SkipRetry};
use support::{wait_until, RedisServer, WAIT};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

/// Every formatted line the run printed.
static LINES: Mutex<String> = Mutex::new(String::new());
/// The target of every event the run logged.
static TARGETS: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());

/// Appends fmt's output (one `write` per event) to [`LINES`].
struct Buffer;

impl std::io::Write for Buffer {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        lock(&LINES).push_str(&String::from_utf8_lossy(b));
        Ok(b.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Records each event's target in [`TARGETS`].
struct RecordTargets;

impl<S: tracing::Subscriber> Layer<S> for RecordTargets {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        lock(&TARGETS).insert(event.metadata().target().to_string());
    }
}

/// The data even after a panic while it was held (appends keep it whole).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// One global subscriber at TRACE: a thread-local one misses events whose
/// callsite interest another thread cached first.
fn capture() {
    static INSTALLED: Once = Once::new();
    INSTALLED.call_once(|| {
        let fmt = tracing_subscriber::fmt::layer()
            .without_time()
            .with_ansi(false)
            .with_writer(|| Buffer);
        let subscriber = tracing_subscriber::registry()
            .with(tracing_subscriber::filter::LevelFilter::TRACE)
            .with(fmt)
            .with(RecordTargets);
        tracing::subscriber::set_global_default(subscriber).expect("a global subscriber was set already");
    });
}

/// What the docs say about logs: the targets they name, and their sample
/// lines, each with the file that has it.
#[derive(Default)]
struct Named {
    targets: BTreeSet<(String, String)>,
    lines: Vec<(String, String)>,
}

const LEVELS: [&str; 5] = ["TRACE", "DEBUG", "INFO", "WARN", "ERROR"];

impl Named {
    fn read() -> Named {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut files = vec![root.join("README.md")];
        let mut docs: Vec<_> = fs::read_dir(root.join("docs"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "md"))
            .collect();
        docs.sort();
        files.extend(docs);
        let mut named = Named::default();
        for path in files {
            let file = path.strip_prefix(root).unwrap().display().to_string();
            let text = fs::read_to_string(&path).unwrap();
            for target in targets_in(&text) {
                named.targets.insert((target, file.clone()));
            }
            for line in text.lines().filter(|l| sample_target(l).is_some()) {
                named.lines.push((line.trim_end().to_string(), file.clone()));
            }
        }
        named
    }
}

/// The target of a sample log line (`" WARN delayqueue::x: message ..."`).
fn sample_target(line: &str) -> Option<&str> {
    let mut words = line.split_whitespace();
    let level = words.next()?;
    let target = words.next()?.strip_suffix(':')?;
    (LEVELS.contains(&level) && is_crate_target(target)).then_some(target)
}

fn is_crate_target(t: &str) -> bool {
    t == "delayqueue" || t.starts_with("delayqueue::")
}

/// The targets `text` names: in `RUST_LOG=` directives, right after the
/// word "target" or "targets" (the backticked words that follow, "and" and
/// "or" between them), in the first column of a table whose first header
/// is "Target", and in sample lines.
fn targets_in(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (at, _) in text.match_indices("RUST_LOG=") {
        let value = &text[at + "RUST_LOG=".len()..];
        let end = value.find(|c: char| c.is_whitespace() || "`'\")".contains(c));
        for directive in value[..end.unwrap_or(value.len())].split(',') {
            let target = directive.split(['=', '[']).next().unwrap_or_default();
            if is_crate_target(target) {
                out.push(target.to_string());
            }
        }
    }
    let words: Vec<&str> = text.split_whitespace().collect();
    for (i, w) in words.iter().enumerate() {
        let w = w.trim_start_matches('(').to_ascii_lowercase();
        if w != "target" && w != "targets" {
            continue;
        }
        for next in &words[i + 1..] {
            if matches!(*next, "and" | "or") {
                continue;
            }
            let Some((name, _)) = next
                .trim_start_matches('(')
                .strip_prefix('`')
                .and_then(|n| n.split_once('`'))
            else {
                break;
            };
            if is_crate_target(name) {
                out.push(name.to_string());
            }
        }
    }
    let mut in_table = false;
    for line in text.lines() {
        let first = line.strip_prefix('|').and_then(|l| l.split('|').next()).map(str::trim);
        match first {
            Some(cell) if cell.eq_ignore_ascii_case("target") => in_table = true,
            Some(cell) if in_table => {
                let name = cell.trim_matches('`');
                if is_crate_target(name) {
                    out.push(name.to_string());
                }
            }
            _ => in_table = false,
        }
    }
    out.extend(text.lines().filter_map(sample_target).map(str::to_string));
    out
}

/// Whether some event the run logged has `target` or a target below it.
fn logged(target: &str) -> bool {
    lock(&TARGETS)
        .iter()
        .any(|t| t == target || t.strip_prefix(target).is_some_and(|rest| rest.starts_with("::")))
}

/// Whether the run printed `line` (compared without trailing space).
fn printed(line: &str) -> bool {
    lock(&LINES).lines().any(|l| l.trim_end() == line)
}

#[test]
fn the_reader_finds_the_docs_targets_and_lines() {
    let named = Named::read();
    let targets: BTreeSet<&str> = named.targets.iter().map(|(t, _)| t.as_str()).collect();
    for t in [
        "delayqueue",
        "delayqueue::consume",
        "delayqueue::consume::acker",
        "delayqueue::web",
    ] {
        assert!(targets.contains(t), "{t} not found in the docs: {targets:?}");
    }
    assert!(named.lines.len() >= 5, "{:?}", named.lines);
    assert_eq!(
        targets_in("targets `delayqueue::a`, `delayqueue::b` and `delayqueue::c`; x `delayqueue::d`"),
        ["delayqueue::a", "delayqueue::b", "delayqueue::c"]
    );
    assert_eq!(targets_in("`RUST_LOG=warn,delayqueue::x=debug`"), ["delayqueue::x"]);
    let table = "| Target | What |\n|---|---|\n| `delayqueue::t` | x |\n\n| a |\n| `delayqueue::u` |";
    assert_eq!(targets_in(table), ["delayqueue::t"]);
}

#[tokio::test]
async fn the_targets_and_sample_lines_the_docs_show_are_logged() {
    capture();
    let named = Named::read();
    let server = RedisServer::start().await;
    let client = server.client().await;
    // docs/operations.md §8: fixed 100 ms backoff, two retries; `hook-1`'s
    // handler always fails, `order-7`'s returns SkipRetry.
    let queue = DelayQueue::builder("ops-probe", client.clone())
        .backoff(Backoff::fixed(Duration::from_millis(100)))
        .default_retry_count(2)
        .fetch_interval(Duration::from_millis(100))
        .build()
        .unwrap();
    let mut events = queue.events();
    let consumer = queue
        .start_consume(|msg: Message| async move {
            match msg.id().as_str() {
                "hook-1" => Err::<(), HandlerError>("HTTP 500 from hooks.example.com".into()),
                "order-7" => Err(SkipRetry::new("order 7 no longer exists").into()),
                _ => Ok(()),
            }
        })
        .await
        .unwrap();
    for id in ["hook-1", "order-7", "paid-3"] {
        queue.send(id).id(id).await.unwrap();
    }
    let (mut dead, mut acked) = (0, 0);
    let settled = tokio::time::timeout(WAIT, async {
        while dead < 2 || acked < 1 {
            match events.recv().await {
                Ok(Event::Dead { .. }) => dead += 1,
                Ok(Event::Acked { .. }) => acked += 1,
                Ok(_) => {}
                Err(e) => panic!("events: {e}"),
            }
        }
    })
    .await;
    assert!(settled.is_ok(), "after {WAIT:?}: {dead} dead, {acked} acked");
    consumer.shutdown().await.unwrap();
    assert!(queue.requeue_dead("order-7").await.unwrap());
    #[cfg(feature = "web")]
    dashboard_send(&client, &queue).await;

    // Without the `web` feature no dashboard runs: its target goes unchecked.
    let web = cfg!(feature = "web");
    let checked = |t: &str| web || !t.starts_with("delayqueue::web");
    // A nack logs after its reply, which may come after its event.
    wait_until(WAIT, || {
        named.targets.iter().all(|(t, _)| !checked(t) || logged(t)) && named.lines.iter().all(|(l, _)| printed(l))
    })
    .await;
    let unknown: Vec<String> = named
        .targets
        .iter()
        .filter(|(t, _)| checked(t) && !logged(t))
        .map(|(t, file)| format!("{file}: {t}"))
        .collect();
    let unseen: Vec<String> = named
        .lines
        .iter()
        .filter(|(l, _)| !printed(l))
        .map(|(l, file)| format!("{file}: {l}"))
        .collect();
    assert!(
        unknown.is_empty() && unseen.is_empty(),
        "log targets the docs name that no event has:\n{}\n\nsample lines the run did not print:\n{}\n\nthe targets logged: {:?}\n\nthe lines printed:\n{}",
        unknown.join("\n"),
        unseen.join("\n"),
        lock(&TARGETS),
        lock(&LINES)
    );
}

/// One dashboard action (a send), which logs at `delayqueue::web`.
#[cfg(feature = "web")]
async fn dashboard_send(client: &delayqueue::fred::clients::Client, queue: &DelayQueue) {
    use axum::body::Body;
    use axum::http::{header, Request, StatusCode};
    use tower::ServiceExt;

    let app = delayqueue::web::Dashboard::new(client.clone())
        .queue(queue)
        .router()
        .unwrap();
    let call = |req: Request<Body>| async {
        let res = tokio::time::timeout(WAIT, app.clone().oneshot(req))
            .await
            .unwrap()
            .unwrap();
        let status = res.status();
        let body = axum::body::to_bytes(res.into_body(), usize::MAX).await.unwrap();
        assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
        serde_json::from_slice::<serde_json::Value>(&body).unwrap()
    };
    let overview = call(Request::get("/api/overview").body(Body::empty()).unwrap()).await;
    let send = Request::post("/api/queues/ops-probe/messages")
        .header(header::CONTENT_TYPE, "application/json")
        .header("x-csrf-token", overview["csrf"].as_str().unwrap())
        .body(Body::from(r#"{"payload": "from the dashboard"}"#))
        .unwrap();
    call(send).await;
}
