//! The Prometheus endpoint, scraped through its router: gauges match the
//! unfinished jobs and the registry, and the all-time counters and
//! histograms (from the rollups) match what `conveyor.jobs` shows for a
//! known workload, and still do after every job and every rollup row is
//! pruned; leases a worker lost are served by a metrics process of its own.

use std::time::Duration;

use conveyor::{Metrics, NewJob, Retention, TaskError, Worker, WorkerTask};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

use crate::common::{STEADY_LEASE, THROUGH_PGBOUNCER, TestDb, WAIT, count_jobs, eventually};

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
async fn the_gauges_report_the_unfinished_jobs_and_the_registry() {
    let db = TestDb::new().await;
    let metrics = Metrics::new().unwrap();
    let c = &db.client;
    for i in 0..3 {
        c.enqueue(NewJob::new("ok", json!(i)).queue("media"))
            .await
            .unwrap();
    }
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
        .concurrency(4)
        .metrics(metrics.clone())
        .register_fn("ok", |_, args| async move { Ok(args) })
        .start()
        .unwrap();
    eventually(WAIT, "ok jobs done", || async {
        (count_jobs(&db.pool, "task = 'ok' AND state = 'success'").await == 3).then_some(())
    })
    .await;
    // The registry: one live worker, serving media and not idle.
    let text = eventually(WAIT, "the worker registered", || async {
        let text = scrape(&metrics, c).await;
        text.contains("conveyor_workers{state=\"live\"} 1")
            .then_some(text)
    })
    .await;
    let live = |q: &str| {
        sample(
            &text,
            &format!("conveyor_queue_live_workers{{queue=\"{q}\"}}"),
        )
    };
    assert_eq!((live("media"), live("idle")), (1.0, 0.0));
    let slots = sample(&text, "conveyor_worker_slots{state=\"busy\"}")
        + sample(&text, "conveyor_worker_slots{state=\"idle\"}");
    assert_eq!(slots, 4.0, "the worker's concurrency");
    worker.shutdown(WAIT).await.unwrap();

    let text = scrape(&metrics, c).await;
    assert_eq!(sample(&text, "conveyor_workers{state=\"live\"}"), 0.0);
    let table: Vec<(String, String, i64)> = sqlx::query_as(
        "SELECT queue, state, count(*) FROM conveyor.jobs
         WHERE state IN ('scheduled', 'pending', 'started', 'retry') GROUP BY 1, 2",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(table.len(), 2, "{table:?}");
    for (queue, state, n) in &table {
        let got = sample(
            &text,
            &format!("conveyor_jobs{{queue=\"{queue}\",state=\"{state}\"}}"),
        );
        assert_eq!(got, *n as f64, "{queue}/{state}");
    }
    assert_eq!(
        sample(&text, "conveyor_jobs{queue=\"media\",state=\"started\"}"),
        0.0,
        "nothing in flight"
    );
    assert!(
        !text.contains("state=\"success\""),
        "finished jobs are counters now"
    );
    let size = |q: &str| sample(&text, &format!("conveyor_queue_size{{queue=\"{q}\"}}"));
    assert_eq!(
        (size("media"), size("idle")),
        (1.0, 1.0),
        "the scheduled one"
    );
    let paused = |q: &str| sample(&text, &format!("conveyor_queue_paused{{queue=\"{q}\"}}"));
    assert_eq!((paused("idle"), paused("media")), (1.0, 0.0));
    assert!(sample(&text, "conveyor_queue_latency_seconds{queue=\"idle\"}") > 0.0);
    assert_eq!(
        sample(&text, "conveyor_queue_latency_seconds{queue=\"media\"}"),
        0.0,
        "nothing pending"
    );
}

/// Jobs running show in flight: `conveyor_jobs{state="started"}` and the
/// registry's busy slots, from a scrape by another process's `Metrics`;
/// both go back to 0 when the jobs end.
#[tokio::test]
async fn running_jobs_show_in_flight_and_as_busy_slots() {
    let db = TestDb::new().await;
    let (open, gate) = tokio::sync::watch::channel(false);
    let worker = Worker::builder(&db.client)
        .queues(["media"])
        .concurrency(5)
        .register_fn("hold", move |_, args| {
            let mut gate = gate.clone();
            async move {
                gate.wait_for(|open| *open)
                    .await
                    .map_err(|e| TaskError::fail(e.to_string()))?;
                Ok(args)
            }
        })
        .start()
        .unwrap();
    for i in 0..2 {
        db.client
            .enqueue(NewJob::new("hold", json!(i)).queue("media"))
            .await
            .unwrap();
    }
    // A scrape as `conveyor metrics` makes it: its own Metrics, no worker.
    let metrics = Metrics::new().unwrap();
    // (A queue with no unfinished job has no conveyor_jobs series: 0.)
    let in_flight = |text: &str| {
        let started = "conveyor_jobs{queue=\"media\",state=\"started\"}";
        (
            if text.contains(started) {
                sample(text, started)
            } else {
                0.0
            },
            sample(text, "conveyor_worker_slots{state=\"busy\"}"),
        )
    };
    eventually(WAIT, "two jobs in flight in two busy slots", || async {
        let text = scrape(&metrics, &db.client).await;
        (in_flight(&text) == (2.0, 2.0)).then_some(())
    })
    .await;
    open.send(true).unwrap();
    eventually(WAIT, "nothing in flight once they end", || async {
        let text = scrape(&metrics, &db.client).await;
        let done = count_jobs(&db.pool, "task = 'hold' AND state = 'success'").await == 2;
        (done && in_flight(&text) == (0.0, 0.0)).then_some(())
    })
    .await;
    worker.shutdown(WAIT).await.unwrap();
}

/// Counters and histograms of one (queue, task) in a scrape.
#[derive(Debug, PartialEq)]
struct Totals {
    enqueued: f64,
    succeeded: f64,
    failed: f64,
    retried: f64,
    rescued: f64,
    cancelled: f64,
    waits: f64,
    runs: f64,
}

fn totals(text: &str, task: &str) -> Totals {
    let get = |name: &str| {
        sample(
            text,
            &format!("{name}{{queue=\"default\",task=\"{task}\"}}"),
        )
    };
    Totals {
        enqueued: get("conveyor_jobs_enqueued_total"),
        succeeded: get("conveyor_jobs_succeeded_total"),
        failed: get("conveyor_jobs_failed_total"),
        retried: get("conveyor_jobs_retried_total"),
        rescued: get("conveyor_jobs_rescued_total"),
        cancelled: get("conveyor_jobs_cancelled_total"),
        waits: get("conveyor_job_queue_wait_seconds_count"),
        runs: get("conveyor_job_run_seconds_count"),
    }
}

/// What `conveyor.jobs` shows of one task, in the counters' terms.
async fn table(db: &TestDb, task: &str) -> Totals {
    let row: (i64, i64, i64, i64, i64, i64) = sqlx::query_as(
        "SELECT count(*),
                count(*) FILTER (WHERE state = 'success'),
                count(*) FILTER (WHERE state = 'failure'),
                count(*) FILTER (WHERE state = 'cancelled'),
                -- every error but a final failure's is an attempt retried
                (coalesce(sum(jsonb_array_length(errors)), 0)
                    - count(*) FILTER (WHERE state = 'failure'))::bigint,
                -- attempts a worker ended (none of the cancelled ones ran)
                coalesce(sum(attempt) FILTER (WHERE state <> 'cancelled'), 0)::bigint
         FROM conveyor.jobs WHERE task = $1",
    )
    .bind(task)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let f = |n: i64| n as f64;
    Totals {
        enqueued: f(row.0),
        succeeded: f(row.1),
        failed: f(row.2),
        retried: f(row.4),
        rescued: 0.0,
        cancelled: f(row.3),
        waits: f(row.5),
        runs: f(row.5),
    }
}

#[tokio::test]
async fn the_counters_match_the_jobs_table_and_outlive_every_pruning() {
    let db = TestDb::new().await;
    let metrics = Metrics::new().unwrap();
    let c = &db.client;
    let fast = Duration::from_millis(10);
    let mut jobs: Vec<NewJob> = (0..12).map(|i| NewJob::new("ok", json!(i))).collect();
    jobs.extend((0..4).map(|_| NewJob::new("flaky", json!({})).retry_backoff_base(fast)));
    jobs.extend((0..3).map(|_| {
        NewJob::new("bad", json!({}))
            .max_retries(1)
            .retry_backoff_base(fast)
    }));
    c.enqueue_many(jobs).await.unwrap();
    for _ in 0..2 {
        let h = c
            .enqueue(NewJob::new("ok", json!({})).delay(Duration::from_secs(3600)))
            .await
            .unwrap();
        c.cancel(h.id()).await.unwrap();
    }
    // Through SQL too (conveyor.enqueue(), a trigger counts it).
    sqlx::query("SELECT conveyor.enqueue('ok', '{}')")
        .execute(&db.pool)
        .await
        .unwrap();
    let worker = Worker::builder(c)
        .register_fn("ok", |_, _| async { Ok(Value::Null) })
        .register_fn("flaky", |ctx, _| async move {
            if ctx.attempt() == 1 {
                return Err(TaskError::retry("not yet"));
            }
            Ok(Value::Null)
        })
        .register_fn("bad", |_, _| async { Err(TaskError::retry("no")) })
        .start()
        .unwrap();
    eventually(WAIT, "every job final", || async {
        (count_jobs(&db.pool, "state IN ('success', 'failure', 'cancelled')").await == 22)
            .then_some(())
    })
    .await;
    worker.shutdown(WAIT).await.unwrap();

    let mut expected = Vec::new();
    for task in ["ok", "flaky", "bad"] {
        expected.push(table(&db, task).await);
    }
    assert_eq!(
        (
            expected[0].enqueued,
            expected[0].succeeded,
            expected[0].cancelled
        ),
        (15.0, 13.0, 2.0)
    );
    assert_eq!((expected[1].retried, expected[1].runs), (4.0, 8.0));
    assert_eq!((expected[2].failed, expected[2].retried), (3.0, 3.0));
    let text = scrape(&metrics, c).await;
    let seen = |text: &str| {
        ["ok", "flaky", "bad"]
            .iter()
            .map(|t| totals(text, t))
            .collect::<Vec<_>>()
    };
    assert_eq!(seen(&text), expected, "{text}");
    assert!(
        sample(
            &text,
            "conveyor_job_run_seconds_sum{queue=\"default\",task=\"ok\"}"
        ) >= 0.0
    );
    assert_eq!(
        sample(
            &text,
            "conveyor_job_run_seconds_bucket{queue=\"default\",task=\"ok\",le=\"+Inf\"}"
        ),
        13.0
    );

    // Every job pruned, then every rollup row (their own retention): the
    // totals stay, so a counter never goes down.
    let jobs_only = Retention {
        success: Some(Duration::ZERO),
        failure: Some(Duration::ZERO),
        cancelled: Some(Duration::ZERO),
        stats: None,
    };
    assert_eq!(c.prune(&jobs_only).await.unwrap().deleted, 22);
    assert_eq!(seen(&scrape(&metrics, c).await), expected, "after the jobs");
    let everything = Retention {
        stats: Some(Duration::ZERO),
        ..jobs_only
    };
    c.prune(&everything).await.unwrap();
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM conveyor.stats")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(rows, 0, "the rollups are gone");
    assert_eq!(
        seen(&scrape(&metrics, c).await),
        expected,
        "after the rollups"
    );
}

/// Folding the shards into shard 0 moves counts into the totals without
/// counting them twice, and a rescue counts as a lost lease.
#[tokio::test]
async fn folding_and_rescues_keep_the_totals_exact() {
    let db = TestDb::new().await;
    let metrics = Metrics::new().unwrap();
    let c = &db.client;
    sqlx::query(
        "INSERT INTO conveyor.jobs (task, state, attempt, started_at, lease_expires_at, worker_id, lease_token)
         VALUES ('lost', 'started', 1, now(), now() - interval '1 second', 'gone', nextval('conveyor.lease_tokens'))",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let worker = Worker::builder(c)
        .rescue_interval(Duration::from_millis(200))
        .register_fn("lost", |_, _| async { Ok(Value::Null) })
        .start()
        .unwrap();
    eventually(WAIT, "the job rescued and run", || async {
        (count_jobs(&db.pool, "task = 'lost' AND state = 'success'").await == 1).then_some(())
    })
    .await;
    worker.shutdown(WAIT).await.unwrap();
    let before = totals(&scrape(&metrics, c).await, "lost");
    assert_eq!(
        (before.enqueued, before.rescued, before.succeeded),
        (1.0, 1.0, 1.0)
    );
    // The maintenance's fold statement, once the rows are an hour old.
    sqlx::query("UPDATE conveyor.stats SET minute = minute - interval '1 hour'")
        .execute(&db.pool)
        .await
        .unwrap();
    sqlx::query(include_str!("../../sql/stats/fold_stats.sql"))
        .bind(chrono::Utc::now() - chrono::Duration::hours(2))
        .execute(&db.pool)
        .await
        .unwrap();
    let shards: Vec<i32> = sqlx::query_scalar("SELECT DISTINCT shard FROM conveyor.stats")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(shards, [0], "folded");
    assert_eq!(totals(&scrape(&metrics, c).await, "lost"), before);
}

/// A lease a worker loses is counted in the rollups, so a `Metrics` of
/// another process (here: on a client and pool of its own, as the
/// standalone `conveyor metrics` runs) serves it as
/// `conveyor_leases_lost_total`, and still does once the rollup rows are
/// folded and then deleted by retention. The worker is given no `Metrics`.
#[tokio::test]
async fn a_lease_lost_is_served_by_any_metrics_process_and_outlives_the_rollups() {
    let db = TestDb::new().await;
    let started = std::sync::Arc::new(tokio::sync::Semaphore::new(0));
    let s = started.clone();
    // (Renewed every 5 s, so kept until the job is taken away below, however
    // loaded the machine: a lease that lapsed first would be rescued, and
    // `rescued` would not stay 0.)
    let worker = Worker::builder(&db.client)
        .lease(STEADY_LEASE)
        .concurrency(1)
        .register_fn("long", move |ctx, _| {
            let started = s.clone();
            async move {
                started.add_permits(1);
                ctx.cancelled().await;
                Ok(json!("too late"))
            }
        })
        .start()
        .unwrap();
    // The task that writes losses panics when this one wakes it: it is
    // restarted, and the loss still reaches the rollups.
    worker.inject_panic(WorkerTask::LostLeases);
    let job = db
        .client
        .enqueue(NewJob::new("long", json!({})))
        .await
        .unwrap();
    tokio::time::timeout(WAIT, started.acquire())
        .await
        .expect("handler started in time")
        .expect("semaphore open")
        .forget();
    // (Paused, so that the job is not simply claimed again here.)
    db.client.pause_queue("default").await.unwrap();
    // What a rescuer elsewhere would do once the lease looked expired there
    // (so `rescued` stays 0: only the worker's own count is seen).
    sqlx::query(
        "UPDATE conveyor.jobs SET state = 'pending', lease_expires_at = NULL,
                lease_token = NULL, worker_id = NULL WHERE id = $1",
    )
    .bind(job.id())
    .execute(&db.pool)
    .await
    .unwrap();
    eventually(WAIT, "the loss counted by the worker", || async {
        (worker.health().leases_lost == 1).then_some(())
    })
    .await;
    eventually(
        WAIT,
        "the loss recorder restarted after its panic",
        || async {
            (worker.health().restarts.get(&WorkerTask::LostLeases) == Some(&1)).then_some(())
        },
    )
    .await;

    // Another process: its own pool and client, no worker.
    let url = if THROUGH_PGBOUNCER {
        db.bouncer_url()
    } else {
        db.url()
    };
    let pool = conveyor::pool_options()
        .max_connections(2)
        .connect_lazy(&url)
        .unwrap();
    let other = db.client_on(pool, false);
    let metrics = Metrics::new().unwrap();
    let lost = "conveyor_leases_lost_total{queue=\"default\",task=\"long\"}";
    eventually(WAIT, "the loss in the rollups", || async {
        (sample(&scrape(&metrics, &other).await, lost) == 1.0).then_some(())
    })
    .await;
    let text = scrape(&metrics, &other).await;
    assert_eq!(
        sample(
            &text,
            "conveyor_jobs_rescued_total{queue=\"default\",task=\"long\"}"
        ),
        0.0,
        "{text}"
    );
    let hour = conveyor::StatsQuery {
        since: chrono::Utc::now() - chrono::Duration::hours(1),
        until: chrono::Utc::now() + chrono::Duration::minutes(5),
        step: Duration::from_secs(3 * 3600),
        queue: None,
        task: Some("long".into()),
    };
    let points = db.client.stats(&hour).await.unwrap();
    let in_chart: i64 = points.iter().map(|p| p.leases_lost).sum();
    assert_eq!(in_chart, 1, "the rollups' points count it too");
    assert_eq!(worker.health().leases_lost_unrecorded, 0);
    worker.shutdown(WAIT).await.unwrap();

    // Folded into shard 0 (and so into the totals) once an hour old...
    sqlx::query("UPDATE conveyor.stats SET minute = minute - interval '1 hour'")
        .execute(&db.pool)
        .await
        .unwrap();
    sqlx::query(include_str!("../../sql/stats/fold_stats.sql"))
        .bind(chrono::Utc::now() - chrono::Duration::hours(2))
        .execute(&db.pool)
        .await
        .unwrap();
    // Summed by shard: the job's enqueue and its lease's loss fall in two
    // minutes (two rows of shard 0) when the test crosses a minute.
    let shards: Vec<(i32, i64)> = sqlx::query_as(
        "SELECT shard, sum(leases_lost)::bigint FROM conveyor.stats WHERE task = 'long'
         GROUP BY shard ORDER BY shard",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(shards, [(0, 1)], "folded");
    assert_eq!(sample(&scrape(&metrics, &other).await, lost), 1.0, "folded");
    // ...then every rollup row deleted by retention: the total stays.
    db.client
        .prune(&Retention {
            success: None,
            failure: None,
            cancelled: None,
            stats: Some(Duration::ZERO),
        })
        .await
        .unwrap();
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM conveyor.stats")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(rows, 0, "the rollups are gone");
    let text = scrape(&metrics, &other).await;
    assert_eq!(sample(&text, lost), 1.0, "after the rollups: {text}");
}

/// Inserts `n` unfinished jobs of `queue` in `state` in one statement (the
/// triggers give pending ones their ring rows).
async fn bulk(db: &TestDb, queue: &str, state: &str, n: i64) {
    sqlx::query(
        "INSERT INTO conveyor.jobs
             (queue, task, state, run_at, attempt, started_at, lease_expires_at, worker_id, lease_token)
         SELECT $1, 'bulk', $2,
                CASE WHEN $2 = 'pending' THEN now() - interval '1 minute' * g
                     ELSE now() + interval '1 hour' END,
                CASE WHEN $2 = 'started' THEN 1 ELSE 0 END,
                CASE WHEN $2 = 'started' THEN now() END,
                CASE WHEN $2 = 'started' THEN now() + interval '1 hour' END,
                CASE WHEN $2 = 'started' THEN 'w' END,
                CASE WHEN $2 = 'started' THEN nextval('conveyor.lease_tokens') END
         FROM generate_series(1, $3::bigint) AS g",
    )
    .bind(queue)
    .bind(state)
    .bind(n)
    .execute(&db.pool)
    .await
    .unwrap();
}

/// What `conveyor.jobs` holds, by queue and state (unfinished states).
async fn unfinished(db: &TestDb) -> Vec<(String, String, i64)> {
    sqlx::query_as(
        "SELECT queue, state, count(*) FROM conveyor.jobs
         WHERE state IN ('scheduled', 'pending', 'started', 'retry') GROUP BY 1, 2 ORDER BY 1, 2",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap()
}

fn jobs_gauge(text: &str, queue: &str, state: &str) -> (f64, f64) {
    let labels = format!("{{queue=\"{queue}\",state=\"{state}\"}}");
    (
        sample(text, &format!("conveyor_jobs{labels}")),
        sample(text, &format!("conveyor_jobs_estimated{labels}")),
    )
}

/// Over the cap a count is an estimate, flagged, within 10 % of the truth
/// for a state spread over many pages (a seeded sample: the same pages at
/// every run); under it, exact.
#[tokio::test]
async fn counts_over_the_cap_are_flagged_estimates_near_the_truth() {
    let db = TestDb::new().await;
    let c = &db.client;
    bulk(&db, "big", "pending", 6_000).await;
    bulk(&db, "big", "scheduled", 3_000).await;
    bulk(&db, "big", "started", 150).await;
    bulk(&db, "mid", "pending", 90).await;
    bulk(&db, "mid", "retry", 40).await;
    bulk(&db, "few", "scheduled", 2).await;
    bulk(&db, "few", "pending", 1).await;
    let pages: i64 = sqlx::query_scalar(
        "SELECT pg_relation_size('conveyor.jobs_unfinished') / current_setting('block_size')::bigint",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    // A quarter of the table sampled: a real sample, not a full count.
    let sampled = u32::try_from(pages / 4).unwrap();
    assert!(sampled >= 20, "{pages} pages");
    let metrics = Metrics::new()
        .unwrap()
        .exact_count_cap(100)
        .sample_pages(sampled);
    let text = scrape(&metrics, c).await;
    let table = unfinished(&db).await;
    assert_eq!(table.len(), 7, "{table:?}");
    for (queue, state, n) in &table {
        let (got, estimated) = jobs_gauge(&text, queue, state);
        let n = *n as f64;
        if n >= 100.0 {
            assert_eq!(estimated, 1.0, "{queue}/{state} flagged");
            assert!(got >= 100.0, "{queue}/{state}: {got} under the count");
            // Whole pages are sampled: a state spread over many pages is
            // estimated closely, one packed in a few pages (big's 150
            // started jobs: 3 pages) coarsely.
            let tolerance = if n >= 1_000.0 { 0.10 } else { 1.0 };
            assert!(
                (got - n).abs() <= tolerance * n,
                "{queue}/{state}: {got} for {n}"
            );
        } else {
            assert_eq!((got, estimated), (n, 0.0), "{queue}/{state} exact");
        }
    }
    assert_eq!(jobs_gauge(&text, "big", "retry").0, 0.0);
    assert_eq!(jobs_gauge(&text, "few", "started"), (0.0, 0.0));
    // The oldest pending job stays exact: big's is 6,000 minutes old.
    let latency = sample(&text, "conveyor_queue_latency_seconds{queue=\"big\"}");
    assert!((latency - 360_000.0).abs() < 60.0, "{latency}");

    // A budget of 6 rows over 3 queues: one row per queue and group. Every
    // count but the empty ones is then an estimate, and a queue with a few
    // jobs still never shows none.
    let starved = Metrics::new()
        .unwrap()
        .exact_count_cap(100)
        .count_budget(6)
        .sample_pages(sampled);
    let text = scrape(&starved, c).await;
    for state in ["scheduled", "pending"] {
        let (got, estimated) = jobs_gauge(&text, "few", state);
        assert!(got >= 1.0, "few/{state}: {got}");
        assert_eq!(estimated, 1.0, "few/{state}");
    }
    assert_eq!(jobs_gauge(&text, "few", "started"), (0.0, 0.0));
}

/// Rows of `conveyor.jobs_unfinished` and of the ring read by a scrape's
/// statements, with its planner settings, in one transaction
/// (`pg_stat_xact_user_tables`: this transaction's own counts).
async fn rows_read(db: &TestDb, cap: i64, budget: i64, pages: i64) -> (i64, i64) {
    let mut tx = db.pool.begin().await.unwrap();
    sqlx::raw_sql(include_str!("../../sql/metrics/metrics_settings.sql"))
        .execute(&mut *tx)
        .await
        .unwrap();
    let rows = sqlx::query(include_str!("../../sql/metrics/metrics_queues.sql"))
        .bind(cap)
        .bind(budget)
        .fetch_all(&mut *tx)
        .await
        .unwrap();
    assert_eq!(rows.len(), 1);
    sqlx::query(include_str!("../../sql/metrics/metrics_sample.sql"))
        .bind(pages)
        .bind(17.0_f64)
        .fetch_all(&mut *tx)
        .await
        .unwrap();
    let read = sqlx::query_as(
        "SELECT coalesce(sum(seq_tup_read + coalesce(idx_tup_fetch, 0))
                    FILTER (WHERE relid = 'conveyor.jobs_unfinished'::regclass), 0)::bigint,
                coalesce(sum(seq_tup_read + coalesce(idx_tup_fetch, 0))
                    FILTER (WHERE relname LIKE 'ready\\_%'), 0)::bigint
         FROM pg_stat_xact_user_tables WHERE schemaname = 'conveyor'",
    )
    .fetch_one(&mut *tx)
    .await
    .unwrap();
    tx.rollback().await.unwrap();
    read
}

/// A scrape reads a bounded number of rows whatever the backlog: with
/// 50,000 unfinished jobs in one queue, the counts read at most the cap per
/// group and the sample at most its pages (the old statement, a GROUP BY
/// over the table, read all 50,000).
#[tokio::test]
async fn a_scrape_reads_a_bounded_number_of_rows() {
    let db = TestDb::new().await;
    bulk(&db, "big", "pending", 30_000).await;
    bulk(&db, "big", "scheduled", 15_000).await;
    bulk(&db, "big", "started", 5_000).await;
    let (count, pages): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM conveyor.jobs_unfinished),
                pg_relation_size('conveyor.jobs_unfinished') / current_setting('block_size')::bigint",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(count, 50_000);
    let (cap, sample_pages) = (1_000, 100);
    // The sample reads whole pages: about sample_pages of them (a seeded
    // binomial draw), each holding count / pages rows.
    let sampled_rows = 3 * sample_pages * count / pages / 2;
    // Counts: cap rows per group (3 groups), the pending ones probing their
    // job too; queue discovery and the oldest pending job: a few probes.
    let bound = 3 * cap + cap + 50 + sampled_rows;
    assert!(bound < count / 2, "a bound of {bound} would prove nothing");
    let (jobs, ring) = rows_read(&db, cap, 50_000, sample_pages).await;
    assert!(
        jobs + ring <= bound,
        "read {jobs} job rows and {ring} ring rows, bound {bound}"
    );
    assert!(jobs >= 2 * cap, "the statement ran: {jobs}");
}
