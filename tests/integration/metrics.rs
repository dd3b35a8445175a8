//! The Prometheus endpoint, scraped through its router; values match the table.

use std::time::Duration;

use conveyor::{Metrics, NewJob, TaskError, Worker};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

use crate::common::{TestDb, WAIT};

async fn scrape(metrics: &Metrics, client: &conveyor::Client) -> String {
    let response = metrics
        .router(client.clone())
        .oneshot(
            axum::http::Request::get("/metrics")
                .body(axum::body::Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8(body.to_vec()).unwrap()
}

/// The value of the sample `name{labels}` in `text`.
fn sample(text: &str, name_and_labels: &str) -> f64 {
    text.lines()
        .find_map(|line| line.strip_prefix(name_and_labels)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no sample {name_and_labels} in:\n{text}"))
}

#[tokio::test]
async fn the_metrics_endpoint_reports_what_the_table_holds() {
    let db = TestDb::new().await;
    let metrics = Metrics::new().unwrap();
    let c = &db.client;
    for i in 0..3 {
        c.enqueue(NewJob::new("ok", json!(i)).queue("media"))
            .await
            .unwrap();
    }
    let bad = c
        .enqueue(NewJob::new("bad", json!({})).queue("media").max_retries(0))
        .await
        .unwrap();
    c.enqueue(
        NewJob::new("later", json!({}))
            .queue("media")
            .delay(Duration::from_secs(3600)),
    )
    .await
    .unwrap();
    c.enqueue(NewJob::new("idle", json!({})).queue("idle"))
        .await
        .unwrap();
    c.pause_queue("idle").await.unwrap();

    let worker = Worker::builder(c)
        .queues(["media"])
        .metrics(metrics.clone())
        .register_fn("ok", |_, args| async move { Ok(args) })
        .register_fn("bad", |_, _| async move {
            Err::<Value, _>(TaskError::fail("nope"))
        })
        .start()
        .unwrap();
    bad.wait_job(WAIT).await.unwrap();
    crate::common::eventually(WAIT, "ok jobs done", || async {
        (crate::common::count_jobs(&db.pool, "task = 'ok' AND state = 'success'").await == 3)
            .then_some(())
    })
    .await;
    // The registry: one live worker, serving media and not idle.
    let text = crate::common::eventually(WAIT, "the worker registered", || async {
        let text = scrape(&metrics, c).await;
        text.contains("conveyor_workers{state=\"live\"} 1")
            .then_some(text)
    })
    .await;
    assert_eq!(
        sample(&text, "conveyor_queue_live_workers{queue=\"media\"}"),
        1.0
    );
    assert_eq!(
        sample(&text, "conveyor_queue_live_workers{queue=\"idle\"}"),
        0.0
    );
    worker.shutdown(WAIT).await.unwrap();

    let text = scrape(&metrics, c).await;
    assert_eq!(sample(&text, "conveyor_workers{state=\"live\"}"), 0.0);
    let table: Vec<(String, String, i64)> =
        sqlx::query_as("SELECT queue, state, count(*) FROM conveyor.jobs GROUP BY 1, 2")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    for (queue, state, n) in &table {
        let got = sample(
            &text,
            &format!("conveyor_jobs{{queue=\"{queue}\",state=\"{state}\"}}"),
        );
        assert_eq!(got, *n as f64, "{queue}/{state}");
    }
    assert_eq!(
        sample(&text, "conveyor_jobs{queue=\"media\",state=\"success\"}"),
        3.0
    );
    assert_eq!(
        sample(&text, "conveyor_jobs{queue=\"media\",state=\"failure\"}"),
        1.0
    );
    assert_eq!(
        sample(&text, "conveyor_queue_size{queue=\"media\"}"),
        1.0,
        "the scheduled one"
    );
    assert_eq!(sample(&text, "conveyor_queue_size{queue=\"idle\"}"), 1.0);
    assert_eq!(sample(&text, "conveyor_queue_paused{queue=\"idle\"}"), 1.0);
    assert_eq!(sample(&text, "conveyor_queue_paused{queue=\"media\"}"), 0.0);
    assert!(sample(&text, "conveyor_queue_latency_seconds{queue=\"idle\"}") > 0.0);
    assert_eq!(
        sample(
            &text,
            "conveyor_processed_total{queue=\"media\",task=\"ok\"}"
        ),
        3.0
    );
    assert_eq!(
        sample(&text, "conveyor_failed_total{queue=\"media\",task=\"bad\"}"),
        1.0
    );
    assert_eq!(
        sample(&text, "conveyor_job_duration_seconds_count{task=\"ok\"}"),
        3.0
    );
}
