//! Trace context from enqueue to run: the job's span is a child of the span
//! that enqueued it, through the W3C traceparent header.

use conveyor::{NewJob, Worker};
use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
use serde_json::{Value, json};
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::layer::SubscriberExt;

use crate::common::{TestDb, WAIT};

#[tokio::test]
async fn the_enqueuing_span_is_the_parent_of_the_job_span() {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
    // Global, not scoped: a scoped subscriber races with other test threads
    // over tracing's per-callsite interest cache. Only this test sets one;
    // spans of other tests land here too and are told apart by trace id.
    tracing::subscriber::set_global_default(subscriber).expect("one global subscriber");

    let db = TestDb::new().await;
    let worker = Worker::builder(&db.client)
        .register_fn("traced", |_, _| async move { Ok(Value::Null) })
        .start()
        .unwrap();
    let request = tracing::info_span!("http_request");
    let (trace_id, span_id) = {
        let cx = request.context();
        let sc = cx.span().span_context().clone();
        (sc.trace_id(), sc.span_id())
    };
    let job = request.in_scope(|| NewJob::new("traced", json!({})));
    let handle = db.client.enqueue(job).await.unwrap();
    handle.wait(WAIT).await.unwrap();
    worker.shutdown(WAIT).await.unwrap();

    let headers = handle.job().await.unwrap().headers;
    let traceparent = headers["traceparent"].as_str().unwrap();
    assert_eq!(traceparent, format!("00-{trace_id}-{span_id}-01"));
    drop(request);
    provider.force_flush().unwrap();
    let spans = exporter.get_finished_spans().unwrap();
    let job_span = spans
        .iter()
        .find(|s| s.name == "conveyor.job" && s.span_context.trace_id() == trace_id)
        .expect("a conveyor.job span in the request's trace");
    assert_eq!(job_span.parent_span_id, span_id);
}
