//! Trace context across enqueue → run: the enqueuing span's OpenTelemetry
//! context travels in the job's headers as W3C `traceparent` / `tracestate`,
//! and becomes the parent of the job's span. Without an OpenTelemetry layer
//! in the subscriber (or without the `otel` feature) nothing is added.

use serde_json::{Map, Value};

/// Adds the current span's trace context to `headers` (unless they carry one).
#[cfg(feature = "otel")]
pub(crate) fn inject(headers: &mut Map<String, Value>) {
    use opentelemetry::propagation::TextMapPropagator;
    use opentelemetry::trace::TraceContextExt;
    use tracing_opentelemetry::OpenTelemetrySpanExt;

    if headers.contains_key("traceparent") {
        return;
    }
    let cx = tracing::Span::current().context();
    if !cx.span().span_context().is_valid() {
        return;
    }
    let mut carrier = std::collections::HashMap::new();
    opentelemetry_sdk::propagation::TraceContextPropagator::new().inject_context(&cx, &mut carrier);
    for (key, value) in carrier {
        headers.insert(key, Value::String(value));
    }
}

/// Makes the trace context in `headers`, if any, the parent of `span`.
#[cfg(feature = "otel")]
pub(crate) fn set_parent(span: &tracing::Span, headers: &Value) {
    use opentelemetry::propagation::TextMapPropagator;
    use tracing_opentelemetry::OpenTelemetrySpanExt;

    let Some(object) = headers.as_object() else {
        return;
    };
    if !object.contains_key("traceparent") {
        return;
    }
    let carrier: std::collections::HashMap<String, String> = object
        .iter()
        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
        .collect();
    let parent = opentelemetry_sdk::propagation::TraceContextPropagator::new().extract(&carrier);
    // Fails only when no OpenTelemetry layer is installed: nothing to link.
    let _ = span.set_parent(parent);
}

#[cfg(not(feature = "otel"))]
pub(crate) fn inject(_headers: &mut Map<String, Value>) {}

#[cfg(not(feature = "otel"))]
pub(crate) fn set_parent(_span: &tracing::Span, _headers: &Value) {}
