//! Cancellation, re-queueing the dead letter, long jobs under leases,
//! timeouts, and hand-inserted bad rows.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use conveyor::{JobState, NewJob, Task, TaskContext, TaskError, Worker, WorkerHandle};
use serde_json::{Value, json};

use crate::common::{STEADY_LEASE, TestDb, WAIT, count_jobs, eventually};
use crate::enqueue::{Add, AddArgs};

#[tokio::test]
async fn a_cancelled_queued_job_never_runs() {
    let db = TestDb::new().await;
    let runs = Arc::new(AtomicUsize::new(0));
    let r = runs.clone();
    let doomed_now = db
        .client
        .enqueue(NewJob::new("count", json!({})))
        .await
        .unwrap();
    let doomed_later = db
        .client
        .enqueue(NewJob::new("count", json!({})).delay(Duration::from_millis(300)))
        .await
        .unwrap();
    assert_eq!(
        db.client.cancel(doomed_now.id()).await.unwrap(),
        JobState::Cancelled
    );
    let cancelled: String = sqlx::query_scalar("SELECT conveyor.cancel($1)")
        .bind(doomed_later.id())
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(cancelled, "cancelled");
    assert!(matches!(
        doomed_now.wait(WAIT).await,
        Err(conveyor::Error::JobCancelled(_))
    ));

    let worker = Worker::builder(&db.client)
        .register_fn("count", move |_, _| {
            let runs = r.clone();
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                Ok(Value::Null)
            }
        })
        .start()
        .unwrap();
    // A job due after the cancelled ones has run: they were passed over.
    let after = db
        .client
        .enqueue(NewJob::new("count", json!({})).delay(Duration::from_millis(600)))
        .await
        .unwrap();
    after.wait(WAIT).await.unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    for handle in [&doomed_now, &doomed_later] {
        let job = handle.job().await.unwrap();
        assert_eq!((job.state, job.attempt), (JobState::Cancelled, 0));
        assert!(job.finished_at.is_some());
    }
    // Cancelling a finished job changes nothing.
    assert_eq!(
        db.client.cancel(after.id()).await.unwrap(),
        JobState::Success
    );
    worker.shutdown(WAIT).await.unwrap();
}

/// A cancellation reaches a running handler by notification: its worker's
/// lease is an hour, so the heartbeat (which also passes cancellations on,
/// in case a notification was missed) does not beat within the test.
#[tokio::test]
async fn a_running_job_sees_cancellation_by_notification_and_ends_cancelled() {
    let db = TestDb::new().await;
    let observed = Arc::new(AtomicUsize::new(0));
    let started = Arc::new(tokio::sync::Semaphore::new(0));
    let (o, s) = (observed.clone(), started.clone());
    let worker = Worker::builder(&db.client)
        .lease(Duration::from_secs(3600))
        // Long: the handler returns when told, and is never aborted first.
        .cancel_grace(Duration::from_secs(3600))
        .register_fn("polite", move |ctx, _| {
            let (observed, started) = (o.clone(), s.clone());
            async move {
                started.add_permits(1);
                ctx.cancelled().await;
                observed.fetch_add(1, Ordering::SeqCst);
                Err::<Value, _>(TaskError::fail("stopped on request"))
            }
        })
        .start()
        .unwrap();

    let polite = db
        .client
        .enqueue(NewJob::new("polite", json!({})))
        .await
        .unwrap();
    tokio::time::timeout(WAIT, started.acquire())
        .await
        .unwrap()
        .unwrap()
        .forget();
    assert_eq!(
        db.client.cancel(polite.id()).await.unwrap(),
        JobState::Started
    );
    let job = polite.wait_job(WAIT).await.unwrap();
    assert_eq!(job.state, JobState::Cancelled);
    assert_eq!(observed.load(Ordering::SeqCst), 1, "the handler was told");
    assert_eq!(job.last_error.as_deref(), Some("cancelled"));
    worker.shutdown(WAIT).await.unwrap();

    // A handler that ignores the signal is aborted after the grace period.
    let worker = Worker::builder(&db.client)
        .cancel_grace(Duration::from_millis(300))
        .register_fn("stubborn", move |_, _| async move {
            std::future::pending::<()>().await;
            Ok(Value::Null)
        })
        .start()
        .unwrap();
    let stubborn = db
        .client
        .enqueue(NewJob::new("stubborn", json!({})))
        .await
        .unwrap();
    eventually(WAIT, "stubborn job started", || async {
        (stubborn.state().await.ok()? == JobState::Started).then_some(())
    })
    .await;
    let cancelled: String = sqlx::query_scalar("SELECT conveyor.cancel($1)")
        .bind(stubborn.id())
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(
        cancelled, "started",
        "running: asked, the worker finishes it"
    );
    let job = stubborn.wait_job(WAIT).await.unwrap();
    assert_eq!((job.state, job.attempt), (JobState::Cancelled, 1));
    worker.shutdown(WAIT).await.unwrap();
}

#[tokio::test]
async fn failed_jobs_stay_queryable_and_can_be_requeued_by_id_or_sql_filter() {
    let db = TestDb::new().await;
    let (worker, healthy) = toggled_worker(&db, "charge", || TaskError::retry("gateway down"));
    let base = Duration::from_millis(5);
    let mut handles = Vec::new();
    for _ in 0..3 {
        let job = NewJob::new("charge", json!({}))
            .max_retries(2)
            .retry_backoff_base(base);
        handles.push(db.client.enqueue(job).await.unwrap());
    }
    for handle in &handles {
        let job = handle.wait_job(WAIT).await.unwrap();
        assert_eq!(
            (job.state, job.attempt, job.errors.len()),
            (JobState::Failure, 3, 3)
        );
    }
    healthy.store(true, Ordering::SeqCst);

    // By id, from Rust.
    assert_eq!(db.client.requeue(&[handles[0].id()]).await.unwrap(), 1);
    assert_eq!(
        handles[0].wait(WAIT).await.unwrap(),
        json!(1),
        "attempts were reset"
    );
    let job = handles[0].job().await.unwrap();
    assert_eq!(job.errors.len(), 3, "error history kept");
    // By a SQL filter.
    let n: i32 = sqlx::query_scalar(
        "SELECT conveyor.requeue(ARRAY(SELECT id FROM conveyor.jobs
                                      WHERE state = 'failure' AND last_error = 'gateway down'))",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(n, 2);
    for handle in &handles[1..] {
        assert_eq!(handle.wait(WAIT).await.unwrap(), json!(1));
    }
    // Jobs in other states are left alone.
    assert_eq!(db.client.requeue(&[handles[0].id()]).await.unwrap(), 0);
    worker.shutdown(WAIT).await.unwrap();
}

/// A worker whose `task` handler answers `error()` until `healthy` (the
/// flag returned) is set, then its attempt number.
fn toggled_worker(
    db: &TestDb,
    task: &str,
    error: fn() -> TaskError,
) -> (WorkerHandle, Arc<std::sync::atomic::AtomicBool>) {
    let healthy = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let h = healthy.clone();
    let worker = Worker::builder(&db.client)
        .register_fn(task, move |ctx, _| {
            let healthy = h.clone();
            async move {
                if healthy.load(Ordering::SeqCst) {
                    Ok(json!(ctx.attempt()))
                } else {
                    Err(error())
                }
            }
        })
        .start()
        .unwrap();
    (worker, healthy)
}

/// A worker whose `flaky` handler fails for good until `healthy` is set,
/// and a `flaky` job it failed (one attempt, no retries).
async fn failed_job(
    db: &TestDb,
) -> (
    WorkerHandle,
    conveyor::JobHandle<Value>,
    Arc<std::sync::atomic::AtomicBool>,
) {
    let (worker, healthy) = toggled_worker(db, "flaky", || TaskError::fail("down"));
    let job = NewJob::new("flaky", json!({})).max_retries(0);
    let handle = db.client.enqueue(job).await.unwrap();
    let failed = handle.wait_job(WAIT).await.unwrap();
    assert_eq!((failed.state, failed.attempt), (JobState::Failure, 1));
    (worker, handle, healthy)
}

/// `requeue_tx` in a transaction that rolls back re-queues nothing: the job
/// stays failed and does not run again.
#[tokio::test]
async fn a_requeue_in_a_transaction_rolled_back_leaves_the_job_failed() {
    let db = TestDb::new().await;
    let (worker, handle, healthy) = failed_job(&db).await;
    healthy.store(true, Ordering::SeqCst);

    let mut tx = db.pool.begin().await.unwrap();
    assert_eq!(
        db.client.requeue_tx(&mut tx, &[handle.id()]).await.unwrap(),
        1
    );
    tx.rollback().await.unwrap();

    // Had the requeue survived the rollback, the job would be pending (or
    // running, or done) by now, never failed with its one attempt.
    let job = handle.job().await.unwrap();
    assert_eq!((job.state, job.attempt), (JobState::Failure, 1));
    assert_eq!(count_jobs(&db.pool, "state = 'failure'").await, 1);
    worker.shutdown(WAIT).await.unwrap();
}

/// `requeue_tx` in a transaction that commits re-queues the job at commit
/// (not before): it runs again, its attempts reset.
#[tokio::test]
async fn a_requeue_in_a_transaction_committed_runs_the_job_again() {
    let db = TestDb::new().await;
    let (worker, handle, healthy) = failed_job(&db).await;
    healthy.store(true, Ordering::SeqCst);

    let mut tx = db.pool.begin().await.unwrap();
    assert_eq!(
        db.client.requeue_tx(&mut tx, &[handle.id()]).await.unwrap(),
        1
    );
    // Outside the transaction, the job is still failed.
    assert_eq!(count_jobs(&db.pool, "state = 'failure'").await, 1);
    tx.commit().await.unwrap();

    assert_eq!(handle.wait(WAIT).await.unwrap(), json!(1), "attempts reset");
    worker.shutdown(WAIT).await.unwrap();
}

/// Its lease renewed all along, a job that runs for three of its leases is
/// never taken from its worker, though another worker rescues every 100 ms.
/// (A lease of 15 s: a renewal would have to come 10 s late to lose it.)
#[tokio::test]
async fn a_job_three_times_longer_than_its_lease_runs_once() {
    let db = TestDb::new().await;
    let runs = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for _ in 0..2 {
        let (r, pool) = (runs.clone(), db.pool.clone());
        workers.push(
            Worker::builder(&db.client)
                .lease(STEADY_LEASE)
                .rescue_interval(Duration::from_millis(100))
                .register_fn("long", move |ctx, _| {
                    let (runs, pool) = (r.clone(), pool.clone());
                    async move {
                        runs.fetch_add(1, Ordering::SeqCst);
                        // Runs until the database's clock is three leases
                        // past its start.
                        let sql = "SELECT now() > started_at + $2 * interval '1 second'
                                   FROM conveyor.jobs WHERE id = $1";
                        let three = 3.0 * STEADY_LEASE.as_secs_f64();
                        loop {
                            let past: bool = sqlx::query_scalar(sql)
                                .bind(ctx.job_id())
                                .bind(three)
                                .fetch_one(&pool)
                                .await?;
                            if past {
                                return Ok(Value::Null);
                            }
                            tokio::time::sleep(Duration::from_millis(200)).await;
                        }
                    }
                })
                .start()
                .unwrap(),
        );
    }
    let handle = db
        .client
        .enqueue(NewJob::new("long", json!({})))
        .await
        .unwrap();
    let job = handle.wait_job(STEADY_LEASE * 3 + WAIT).await.unwrap();
    assert_eq!((job.state, job.attempt), (JobState::Success, 1));
    assert!(job.errors.is_empty());
    assert!(
        job.finished_at.unwrap() - job.started_at.unwrap()
            > chrono::TimeDelta::from_std(STEADY_LEASE * 3).unwrap()
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    for worker in workers {
        worker.shutdown(WAIT).await.unwrap();
    }
}

struct Slow;
impl Task for Slow {
    const NAME: &'static str = "slow";
    const TIMEOUT: Option<Duration> = Some(Duration::from_millis(150));
    type Args = u64;
    type Output = u64;
    async fn run(&self, ctx: TaskContext, millis: u64) -> Result<u64, TaskError> {
        if ctx.attempt() == 1 {
            tokio::time::sleep(Duration::from_millis(millis)).await;
        }
        Ok(u64::from(ctx.attempt()))
    }
}

#[tokio::test]
async fn the_task_types_timeout_applies_and_the_attempt_is_retried() {
    let db = TestDb::new().await;
    let worker = Worker::builder(&db.client).register(Slow).start().unwrap();
    let handle = db
        .client
        .enqueue(Slow::job(60_000).retry_backoff_base(Duration::from_millis(10)))
        .await
        .unwrap();
    // The first attempt sleeps for a minute and times out; a later one
    // returns at once, its attempt number. (Each attempt has 150 ms: on a
    // loaded machine even a quick one may run out, and be retried again.)
    let attempt = handle.wait(WAIT).await.unwrap();
    assert!(attempt >= 2, "attempt {attempt}");
    let job = handle.job().await.unwrap();
    assert_eq!(job.attempt as u64, attempt);
    assert_eq!(job.errors.len() as u64, attempt - 1);
    assert!(
        job.errors
            .iter()
            .all(|e| e.error == "timed out after 0.150s"),
        "{:?}",
        job.errors
    );
    assert_eq!(job.retry_backoff, Some(Duration::from_millis(10)));
    worker.shutdown(WAIT).await.unwrap();
}

/// Each kind of hand-written bad row, with the outcome we promise.
#[tokio::test]
async fn bad_rows_get_a_clear_outcome_and_the_worker_keeps_serving() {
    let db = TestDb::new().await;
    let rejected = |sql: &'static str| {
        let pool = db.pool.clone();
        async move {
            let err = sqlx::query(sql).execute(&pool).await.unwrap_err();
            err.into_database_error().unwrap().message().to_string()
        }
    };
    // Rejected at insert by constraints (one-column rules are domains).
    let msg = rejected("INSERT INTO conveyor.jobs (task, args) VALUES ('add', NULL)").await;
    assert!(msg.contains("null value in column \"args\""), "{msg}");
    let msg = rejected("INSERT INTO conveyor.jobs (task) VALUES ('')").await;
    assert!(msg.contains("task_name_check"), "{msg}");
    let msg = rejected("INSERT INTO conveyor.jobs (task, queue) VALUES ('add', '')").await;
    assert!(msg.contains("queue_name_check"), "{msg}");
    // (The state is the partition key: a value no partition takes is refused
    // as such, before the CHECK constraint is reached.)
    let msg = rejected("INSERT INTO conveyor.jobs (task, state) VALUES ('add', 'running')").await;
    assert!(
        msg.contains("no partition of relation \"job_rows\""),
        "{msg}"
    );
    // A finished job without finished_at (NULL goes to the default partition).
    let msg = rejected("INSERT INTO conveyor.jobs (task, state) VALUES ('add', 'success')").await;
    assert!(msg.contains("jobs_success_default_finished_check"), "{msg}");
    let msg = rejected("INSERT INTO conveyor.jobs (task, state) VALUES ('add', 'started')").await;
    assert!(msg.contains("jobs_unfinished_lease_check"), "{msg}");
    let msg = rejected(
        "INSERT INTO conveyor.jobs (task, state, finished_at, lease_expires_at)
         VALUES ('add', 'failure', now(), now())",
    )
    .await;
    assert!(msg.contains("jobs_failure_lease_check"), "{msg}");
    let msg = rejected("INSERT INTO conveyor.jobs (task, max_retries) VALUES ('add', -1)").await;
    assert!(msg.contains("non_negative_int_check"), "{msg}");
    let msg = rejected("INSERT INTO conveyor.jobs (task, headers) VALUES ('add', '[1]')").await;
    assert!(msg.contains("json_object_check"), "{msg}");

    // Accepted rows, each with its outcome.
    let insert = |task: &'static str, extra: &'static str, values: &'static str| {
        let (pool, client) = (db.pool.clone(), db.client.clone());
        async move {
            let sql = format!(
                "INSERT INTO conveyor.jobs (task{extra}) VALUES ('{task}'{values}) RETURNING id"
            );
            let id: uuid::Uuid = sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
                .fetch_one(&pool)
                .await
                .unwrap();
            client.handle::<Value>(id)
        }
    };
    let wrong_type = insert("add", ", args", ", '\"forty-two\"'").await;
    let wrong_field = insert("add", ", args", ", '{\"a\": [1], \"b\": 2}'").await;
    let unknown_queue = insert(
        "add",
        ", queue, args",
        ", 'nobody-serves-this', '{\"a\": 1, \"b\": 1}'",
    )
    .await;
    let negative = insert("add", ", priority, args", ", -5, '{\"a\": 1, \"b\": 2}'").await;
    let past = insert(
        "add",
        ", run_at, args",
        ", '1970-01-01', '{\"a\": 2, \"b\": 2}'",
    )
    .await;
    let future = insert(
        "add",
        ", state, run_at, args",
        ", 'scheduled', '9999-12-31', '{\"a\": 0, \"b\": 0}'",
    )
    .await;
    let big_payload = {
        let blob = "x".repeat(10 * 1024 * 1024);
        let id: uuid::Uuid = sqlx::query_scalar(
            "INSERT INTO conveyor.jobs (task, args) VALUES ('size', jsonb_build_object('blob', $1::text)) RETURNING id",
        )
        .bind(blob)
        .fetch_one(&db.pool)
        .await
        .unwrap();
        db.client.handle::<Value>(id)
    };

    let worker = Worker::builder(&db.client)
        .concurrency(1)
        .register(Add)
        .register_fn("size", |_, args| async move {
            Ok(json!(args["blob"].as_str().map(str::len)))
        })
        .start()
        .unwrap();

    for bad in [&wrong_type, &wrong_field] {
        let job = bad.wait_job(WAIT).await.unwrap();
        assert_eq!(
            (job.state, job.attempt),
            (JobState::Failure, 1),
            "decode errors are not retried"
        );
        assert!(
            job.last_error
                .unwrap()
                .contains("task `add`: cannot decode args")
        );
    }
    assert_eq!(
        big_payload.wait(WAIT).await.unwrap(),
        json!(10 * 1024 * 1024),
        "10 MB args are processed"
    );
    assert_eq!(
        negative.wait(WAIT).await.unwrap(),
        json!(3),
        "negative priority: runs, after priority 0"
    );
    assert_eq!(
        past.wait(WAIT).await.unwrap(),
        json!(4),
        "run_at in 1970: runs at once"
    );
    // Jobs claimed in one statement share its `started_at` (a worker whose
    // claims are slow takes all of a small backlog at once, in priority
    // order): no job may have been claimed after the lowest priority one.
    let later: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM conveyor.jobs WHERE state = 'success' AND id <> $1
           AND started_at > (SELECT started_at FROM conveyor.jobs WHERE id = $1)",
    )
    .bind(negative.id())
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(later, 0, "lowest priority claimed last");

    // The worker still serves, and the rest wait as documented.
    let ok = db
        .client
        .enqueue(Add::job(AddArgs { a: 20, b: 22 }))
        .await
        .unwrap();
    assert_eq!(ok.wait(WAIT).await.unwrap(), 42);
    let job = unknown_queue.job().await.unwrap();
    assert_eq!(
        (job.state, job.attempt),
        (JobState::Pending, 0),
        "waits for a worker of its queue"
    );
    let job = future.job().await.unwrap();
    assert_eq!(
        (job.state, job.attempt),
        (JobState::Scheduled, 0),
        "waits for year 9999"
    );
    worker.shutdown(WAIT).await.unwrap();
    assert_eq!(count_jobs(&db.pool, "state = 'started'").await, 0);
}

#[tokio::test]
async fn nul_bytes_in_results_and_errors_do_not_block_outcomes() {
    let db = TestDb::new().await;
    let worker = Worker::builder(&db.client)
        .register_fn("nul_ok", |_, _| async move {
            Ok(json!({ "text": "a\0b", "k\0": [ "\0" ] }))
        })
        .register_fn("nul_err", |_, _| async move {
            Err::<Value, _>(TaskError::fail("bad\0byte"))
        })
        .start()
        .unwrap();
    let ok = db
        .client
        .enqueue(NewJob::new("nul_ok", json!({})))
        .await
        .unwrap();
    let err = db
        .client
        .enqueue(NewJob::new("nul_err", json!({})))
        .await
        .unwrap();
    assert_eq!(
        ok.wait(WAIT).await.unwrap(),
        json!({ "text": "a\u{FFFD}b", "k\u{FFFD}": [ "\u{FFFD}" ] })
    );
    let job = err.wait_job(WAIT).await.unwrap();
    assert_eq!(job.last_error.as_deref(), Some("bad\u{FFFD}byte"));
    worker.shutdown(WAIT).await.unwrap();
}

#[tokio::test]
async fn a_cancel_during_a_failing_attempt_ends_cancelled_not_retried() {
    let db = TestDb::new().await;
    let started = Arc::new(tokio::sync::Semaphore::new(0));
    let go = Arc::new(tokio::sync::Semaphore::new(0));
    let (s, g) = (started.clone(), go.clone());
    let worker = Worker::builder(&db.client)
        .register_fn("flaky", move |_, _| {
            let (started, go) = (s.clone(), g.clone());
            async move {
                started.add_permits(1);
                // Ignores the cancellation signal, then fails (retryable).
                let _p = go.acquire().await.map_err(TaskError::fail)?;
                Err::<Value, _>(TaskError::retry("boom"))
            }
        })
        .cancel_grace(Duration::from_secs(30))
        .start()
        .unwrap();
    let handle = db
        .client
        .enqueue(NewJob::new("flaky", json!({})))
        .await
        .unwrap();
    tokio::time::timeout(WAIT, started.acquire())
        .await
        .unwrap()
        .unwrap()
        .forget();
    assert_eq!(
        db.client.cancel(handle.id()).await.unwrap(),
        JobState::Started
    );
    go.add_permits(1);
    let job = handle.wait_job(WAIT).await.unwrap();
    assert_eq!((job.state, job.attempt), (JobState::Cancelled, 1));
    worker.shutdown(WAIT).await.unwrap();
}

#[tokio::test]
async fn intervals_of_zero_are_refused() {
    let db = TestDb::new().await;
    let err = Worker::builder(&db.client)
        .safety_interval(Duration::ZERO)
        .register_fn("x", |_, a| async move { Ok(a) })
        .start()
        .unwrap_err();
    assert!(err.to_string().contains("at least 10 ms"), "{err}");
    let err = Worker::builder(&db.client)
        .rescue_interval(Duration::ZERO)
        .register_fn("x", |_, a| async move { Ok(a) })
        .start()
        .unwrap_err();
    assert!(err.to_string().contains("at least 10 ms"), "{err}");
    // "No time limit" spelled as Duration::MAX works.
    let worker = Worker::builder(&db.client)
        .default_timeout(Duration::MAX)
        .register_fn("x", |_, a| async move { Ok(a) })
        .start()
        .unwrap();
    let h = db.client.enqueue(NewJob::new("x", json!(1))).await.unwrap();
    assert_eq!(h.wait(WAIT).await.unwrap(), json!(1));
    worker.shutdown(WAIT).await.unwrap();
}

#[tokio::test]
async fn a_hand_written_errors_history_of_any_shape_does_not_strand_the_job() {
    let db = TestDb::new().await;
    let id: uuid::Uuid = sqlx::query_scalar(
        "INSERT INTO conveyor.jobs (task, errors) VALUES ('x', '[42, {\"error\": \"old\"}]') RETURNING id",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let worker = Worker::builder(&db.client)
        .register_fn("x", |_, _| async move { Ok(json!("ran")) })
        .start()
        .unwrap();
    let job = db.client.handle::<Value>(id).wait_job(WAIT).await.unwrap();
    assert_eq!(job.result, Some(json!("ran")));
    assert_eq!(job.errors.len(), 2);
    assert_eq!(job.errors[0].error, "42");
    assert_eq!(job.errors[1].error, "old");
    worker.shutdown(WAIT).await.unwrap();
}
