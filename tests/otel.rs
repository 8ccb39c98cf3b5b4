//! Feature `otel`: a send inside a span and the handler's
//! `delayqueue.handle` span are one trace, through the message's
//! `traceparent` header, recorded by an in-memory exporter.

mod helpers;
use delayqueue_test_support as support;

use std::future::IntoFuture;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use helpers::{recording_headers, start_queue, Headed};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
use support::{wait_until, WAIT};
use tracing::Instrument;
use tracing_subscriber::layer::SubscriberExt;

const FETCH: Duration = Duration::from_millis(200);

// A current-thread runtime (tokio::test's default): the consumer's tasks
// run on this thread, under the subscriber set here.
#[tokio::test]
async fn the_handler_span_is_a_child_of_the_sending_span() {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let subscriber =
        tracing_subscriber::registry().with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
    let _guard = tracing::subscriber::set_default(subscriber);

    let (_server, _client, queue) = start_queue("otel", FETCH, |b| b).await;
    let traced = queue
        .send("traced")
        .header("tenant", "acme")
        .into_future()
        .instrument(tracing::info_span!("producer"))
        .await
        .unwrap();
    let untraced = queue.send("untraced").await.unwrap();
    let stored = queue.get(&untraced).await.unwrap().unwrap();
    assert!(stored.headers.is_empty(), "outside a span nothing is added");

    let seen: Arc<Mutex<Vec<Headed>>> = Arc::default();
    let consumer = queue.start_consume(recording_headers(&seen, b"")).await.unwrap();
    assert!(wait_until(WAIT, || seen.lock().unwrap().len() == 2).await);
    consumer.shutdown().await.unwrap();
    provider.force_flush().unwrap();

    let spans = exporter.get_finished_spans().unwrap();
    let producer = spans.iter().find(|s| s.name == "producer").expect("producer span");
    let handles: Vec<_> = spans.iter().filter(|s| s.name == "delayqueue.handle").collect();
    assert_eq!(handles.len(), 2, "{spans:#?}");
    let (trace, span) = (producer.span_context.trace_id(), producer.span_context.span_id());
    let child: Vec<_> = handles.iter().filter(|h| h.span_context.trace_id() == trace).collect();
    assert_eq!(child.len(), 1, "one handler span in the producer's trace");
    assert_eq!(child[0].parent_span_id, span, "its parent is the producer's span");

    let seen = seen.lock().unwrap().clone();
    let headers = &seen.iter().find(|d| d.0 == traced).unwrap().2;
    let traceparent = format!("00-{trace}-{span}-01");
    assert_eq!(
        headers,
        &[
            ("tenant".to_string(), "acme".to_string()),
            ("traceparent".to_string(), traceparent)
        ]
    );
    assert!(seen.iter().any(|d| d.0 == untraced && d.2.is_empty()));
}
