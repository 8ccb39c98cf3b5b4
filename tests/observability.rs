//! What the library tells its operators: one log line per event, at the
//! level the event deserves, and metrics, described, that reach a recorder
//! whenever it was installed.
//!
//! One test of this binary installs the global `metrics` recorder, after
//! building its queue; the others use none or a local one.

mod helpers;
use delayqueue_test_support as support;

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use delayqueue::fred::clients::Client;
use delayqueue::{Counts, DelayQueue, HandlerError, Message, SkipRetry};
use helpers::{ok_else_fail, recording, start_queue, wait_stats, Log};
use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use support::logs::Logs;
use support::{wait_until, WAIT};

/// How often the consumers in these tests poll.
const FETCH_INTERVAL: Duration = Duration::from_millis(100);

/// Every metric of the library, as docs/operations.md §6 lists them.
const METRICS: [&str; 14] = [
    "delayqueue_sent_total",
    "delayqueue_delivered_total",
    "delayqueue_acked_total",
    "delayqueue_nacked_total",
    "delayqueue_retried_total",
    "delayqueue_dead_total",
    "delayqueue_expired_total",
    "delayqueue_timed_out_total",
    "delayqueue_aborted_total",
    "delayqueue_lease_lost_total",
    "delayqueue_consumer_paused",
    "delayqueue_schedule_fires_total",
    "delayqueue_handler_duration_seconds",
    "delayqueue_lateness_seconds",
];

/// On a fresh Redis (no script cached yet): sends and an acked delivery
/// log nothing that needs attention, and the script loads are routine
/// DEBUG lines; a `SkipRetry` is one WARN line, a failure is one WARN line
/// per delivery (with its outcome), and a purge is one INFO line.
#[tokio::test]
async fn each_event_is_one_log_line_at_its_level() {
    let (_server, _client, q) = start_queue("lines", FETCH_INTERVAL, |b| {
        // Long leases: a stalled test process must not add time-out lines.
        b.default_retry_count(1)
            .nack_redelivery_delay(Duration::ZERO)
            .max_consume_duration(WAIT)
    })
    .await;
    let logs = Logs::capture("lines");
    let log = Log::default();
    let consumer = q
        .start_consume(recording(&log, |msg: Message| async move {
            match msg.payload() {
                b"skip" => Err(SkipRetry::new("cannot be handled").into()),
                b"fail" => Err::<(), HandlerError>("boom".into()),
                _ => Ok(()),
            }
        }))
        .await
        .unwrap();
    let ok = q.send("ok").await.unwrap();
    let skip = q.send("skip").await.unwrap();
    let fail = q.send("fail").await.unwrap();
    let mut want = Counts::default();
    want.dead = 2;
    assert_eq!(wait_stats(&q, WAIT, want).await, want);
    // The nack logs after its reply, which may come after the stats show it.
    let lines_about = |id: &str| {
        logs.warnings()
            .into_iter()
            .filter(|l| l.contains(id))
            .collect::<Vec<_>>()
    };
    wait_until(WAIT, || {
        lines_about(fail.as_str()).len() >= 2 && !lines_about(skip.as_str()).is_empty()
    })
    .await;
    consumer.shutdown().await.unwrap();
    assert_eq!(q.purge().await.unwrap(), 2);

    let warnings = logs.warnings();
    let all = warnings.join("\n");
    assert_eq!(lines_about(ok.as_str()), Vec::<String>::new(), "{all}");
    let skipped = lines_about(skip.as_str());
    assert_eq!(skipped.len(), 1, "one line for the SkipRetry:\n{all}");
    assert!(
        skipped[0].contains("WARN") && skipped[0].contains("cannot be handled") && skipped[0].contains("dead letters"),
        "{all}"
    );
    let failed = lines_about(fail.as_str());
    assert_eq!(failed.len(), 2, "one line per failed delivery:\n{all}");
    assert!(failed[0].contains("retrying") && failed[0].contains("boom"), "{all}");
    assert!(failed[1].contains("used up its deliveries"), "{all}");
    assert_eq!(warnings.len(), 3, "nothing else needs attention:\n{all}");

    let text = logs.text();
    let purged: Vec<&str> = text.lines().filter(|l| l.contains("purged")).collect();
    assert!(purged.len() == 1 && purged[0].contains(" INFO "), "{text}");
    // Every script's first call meets NOSCRIPT on a fresh server: routine.
    let everything = logs.all_text();
    let loads: Vec<&str> = everything.lines().filter(|l| l.contains(" script=")).collect();
    assert!(!loads.is_empty(), "no script was loaded? {everything}");
    assert!(
        loads.iter().all(|l| l.contains("DEBUG") && !l.contains("NOSCRIPT")),
        "script loads read like errors:\n{}",
        loads.join("\n")
    );
}

/// Metric name -> (kind, unit, help text).
type Described = HashMap<String, (&'static str, Option<Unit>, String)>;

/// A recorder that keeps the descriptions it is given.
#[derive(Default)]
struct Descriptions(Mutex<Described>);

impl Descriptions {
    fn keep(&self, kind: &'static str, key: KeyName, unit: Option<Unit>, help: SharedString) {
        let entry = (kind, unit, help.to_string());
        self.0.lock().unwrap().insert(key.as_str().to_string(), entry);
    }

    fn taken(&self) -> Described {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

impl Recorder for Descriptions {
    fn describe_counter(&self, key: KeyName, unit: Option<Unit>, help: SharedString) {
        self.keep("counter", key, unit, help);
    }

    fn describe_gauge(&self, key: KeyName, unit: Option<Unit>, help: SharedString) {
        self.keep("gauge", key, unit, help);
    }

    fn describe_histogram(&self, key: KeyName, unit: Option<Unit>, help: SharedString) {
        self.keep("histogram", key, unit, help);
    }

    fn register_counter(&self, _: &Key, _: &Metadata<'_>) -> Counter {
        Counter::noop()
    }

    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }

    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::noop()
    }
}

/// Every metric has a help text and a unit (seconds for the histograms),
/// given by `describe_metrics` and by every queue build.
#[test]
fn every_metric_is_described_with_its_unit() {
    let recorder = Descriptions::default();
    let check = |how: &str, described: Described| {
        let mut names: Vec<&str> = described.keys().map(String::as_str).collect();
        names.sort_unstable();
        let mut want = METRICS.to_vec();
        want.sort_unstable();
        assert_eq!(names, want, "{how}");
        for (name, (kind, unit, help)) in &described {
            let expected = if name.ends_with("_seconds") {
                ("histogram", Some(Unit::Seconds))
            } else if name.ends_with("_total") {
                ("counter", Some(Unit::Count))
            } else {
                ("gauge", Some(Unit::Count))
            };
            assert_eq!((*kind, *unit), expected, "{how}: {name}");
            assert!(help.len() > 10, "{how}: {name} has no help text");
        }
    };
    metrics::with_local_recorder(&recorder, delayqueue::describe_metrics);
    check("describe_metrics", recorder.taken());
    metrics::with_local_recorder(&recorder, || {
        DelayQueue::builder("described", Client::default()).build()
    })
    .unwrap();
    check("build", recorder.taken());
}

/// The recorder comes after the queue: it still gets every event, and the
/// lateness of due messages in seconds with sub-millisecond precision.
#[tokio::test]
async fn a_recorder_installed_after_the_queue_is_built_gets_its_metrics() {
    let (_server, _client, q) = start_queue("metrics", FETCH_INTERVAL, |b| b.default_retry_count(0)).await;
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder.install().expect("only this test installs a global recorder");
    let consumer = q.start_consume(ok_else_fail()).await.unwrap();
    for payload in ["ok", "ok", "bad"] {
        q.send(payload).await.unwrap();
    }
    let mut want = Counts::default();
    want.dead = 1;
    assert_eq!(wait_stats(&q, WAIT, want).await, want);
    consumer.shutdown().await.unwrap();
    let mut counters = HashMap::new();
    let mut histograms = HashMap::new();
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        // Other tests of this binary record too.
        if !key.key().labels().any(|l| l.key() == "queue" && l.value() == "metrics") {
            continue;
        }
        let name = key.key().name().to_string();
        match value {
            DebugValue::Counter(n) => {
                counters.insert(name, n);
            }
            DebugValue::Histogram(v) => {
                histograms.insert(name, v.into_iter().map(|x| x.into_inner()).collect::<Vec<f64>>());
            }
            DebugValue::Gauge(_) => {}
        }
    }
    for (name, n) in [
        ("delayqueue_sent_total", 3),
        ("delayqueue_delivered_total", 3),
        ("delayqueue_acked_total", 2),
        ("delayqueue_nacked_total", 1),
        ("delayqueue_dead_total", 1),
    ] {
        assert_eq!(counters.get(name), Some(&n), "{name}: {counters:?}");
    }
    assert_eq!(histograms["delayqueue_handler_duration_seconds"].len(), 3);
    let lateness = &histograms["delayqueue_lateness_seconds"];
    assert_eq!(lateness.len(), 3, "{lateness:?}");
    assert!(
        lateness.iter().all(|s| *s > 0.0 && *s < WAIT.as_secs_f64()),
        "lateness in seconds: {lateness:?}"
    );
    // Three whole milliseconds by chance: one in a billion.
    assert!(
        lateness
            .iter()
            .any(|s| !((s * 1e6).round() as u64).is_multiple_of(1000)),
        "lateness in whole milliseconds: {lateness:?}"
    );
}
