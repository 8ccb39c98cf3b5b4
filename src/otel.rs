//! W3C trace context in message headers (feature `otel`): a send inside a
//! `tracing` span writes its `traceparent` and `tracestate`, and the
//! delivery's `delayqueue.handle` span takes them as its parent.

use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::TraceContextExt;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The header the W3C trace context lives in; a send that set it itself
/// keeps its own.
const TRACEPARENT: &str = "traceparent";

struct Writer<'a>(&'a mut Vec<(String, String)>);

impl Injector for Writer<'_> {
    fn set(&mut self, key: &str, value: String) {
        // An empty `tracestate` says nothing: not stored.
        if value.is_empty() {
            return;
        }
        match self.0.iter_mut().find(|(n, _)| n == key) {
            Some(entry) => entry.1 = value,
            None => self.0.push((key.to_string(), value)),
        }
    }
}

struct Reader<'a>(&'a [(String, String)]);

impl Extractor for Reader<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.iter().find(|(n, _)| n == key).map(|(_, v)| v.as_str())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.iter().map(|(n, _)| n.as_str()).collect()
    }
}

/// Adds the current span's trace context to `headers`; nothing outside a
/// span (or without an OpenTelemetry layer), so such a message stays as
/// small as one sent without the feature.
pub(crate) fn inject(headers: &mut Vec<(String, String)>) {
    if headers.iter().any(|(n, _)| n == TRACEPARENT) {
        return;
    }
    let cx = tracing::Span::current().context();
    TraceContextPropagator::new().inject_context(&cx, &mut Writer(headers));
}

/// Makes the trace context in `headers`, if any, the parent of `span`.
pub(crate) fn continue_trace(span: &tracing::Span, headers: &[(String, String)]) {
    let cx = TraceContextPropagator::new().extract(&Reader(headers));
    if cx.span().span_context().is_valid() {
        // Fails only when `span` is disabled: there is nothing to trace then.
        let _ = span.set_parent(cx);
    }
}
