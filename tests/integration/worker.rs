//! Many workers, exactly-once processing, unknown tasks, graceful shutdown.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use conveyor::{JobId, JobState, NewJob, Task, TaskError, Worker};
use serde_json::{Value, json};
use tokio::sync::Semaphore;

use crate::common::{STEADY_LEASE, TestDb, WAIT, count_jobs, eventually};
use crate::enqueue::{Add, AddArgs};

#[tokio::test]
async fn five_workers_run_twenty_thousand_jobs_exactly_once() {
    let db = TestDb::new().await;
    const JOBS: usize = 20_000;
    let runs: Arc<Mutex<HashMap<JobId, u32>>> = Arc::default();
    let mut workers = Vec::new();
    for n in 0..5 {
        let runs = runs.clone();
        let worker = Worker::builder(&db.client)
            .id(format!("w{n}"))
            .concurrency(20)
            .register_fn("count", move |ctx, _| {
                let runs = runs.clone();
                async move {
                    *runs.lock().unwrap().entry(ctx.job_id()).or_default() += 1;
                    Ok(Value::Null)
                }
            })
            .start()
            .unwrap();
        workers.push(worker);
    }
    let jobs = (0..JOBS)
        .map(|i| NewJob::new("count", json!({ "i": i })))
        .collect();
    let handles = db.client.enqueue_many(jobs).await.unwrap();
    eventually(Duration::from_secs(120), "20,000 jobs succeed", || async {
        (count_jobs(&db.pool, "state = 'success'").await == JOBS as i64).then_some(())
    })
    .await;
    for worker in workers {
        worker.shutdown(WAIT).await.unwrap();
    }
    let runs = runs.lock().unwrap().clone();
    assert_eq!(runs.len(), JOBS, "every job ran");
    assert!(runs.values().all(|&n| n == 1), "no job ran twice");
    assert!(handles.iter().all(|h| runs.contains_key(&h.id())));
    assert_eq!(
        count_jobs(&db.pool, "attempt = 1 AND state = 'success'").await,
        JOBS as i64
    );
}

#[tokio::test]
async fn a_worker_never_claims_tasks_it_has_no_handler_for() {
    let db = TestDb::new().await;
    let worker = Worker::builder(&db.client).register(Add).start().unwrap();
    let unknown = db
        .client
        .enqueue(NewJob::new("nobody_handles_this", json!({})))
        .await
        .unwrap();
    let known = db
        .client
        .enqueue(Add::job(AddArgs { a: 1, b: 2 }))
        .await
        .unwrap();
    assert_eq!(known.wait(WAIT).await.unwrap(), 3);
    // Waiting on it times out; it was never touched.
    let err = unknown
        .wait_job(Duration::from_millis(300))
        .await
        .unwrap_err();
    assert!(matches!(
        err,
        conveyor::Error::WaitTimeout { ref state, .. } if state == "pending"
    ));
    let job = unknown.job().await.unwrap();
    assert_eq!((job.state, job.attempt), (JobState::Pending, 0));
    worker.shutdown(WAIT).await.unwrap();

    // A worker that has the handler picks it up.
    let worker = Worker::builder(&db.client)
        .register_fn(
            "nobody_handles_this",
            |_, _| async move { Ok(json!("finally")) },
        )
        .start()
        .unwrap();
    assert_eq!(unknown.wait(WAIT).await.unwrap(), json!("finally"));
    worker.shutdown(WAIT).await.unwrap();
}

#[tokio::test]
async fn shutdown_lets_jobs_finish_or_gives_them_back_without_spending_an_attempt() {
    let db = TestDb::new().await;
    // "quick" jobs wait for a permit the test hands out during the grace
    // period; "stuck" jobs never finish.
    let permits = Arc::new(Semaphore::new(0));
    let started = Arc::new(Semaphore::new(0));
    let (p, s) = (permits.clone(), started.clone());
    let worker = Worker::builder(&db.client)
        .concurrency(4)
        .register_fn("job", move |_, args| {
            let (permits, started) = (p.clone(), s.clone());
            async move {
                started.add_permits(1);
                if args["stuck"] == json!(true) {
                    std::future::pending::<()>().await;
                }
                let _permit = permits.acquire().await.map_err(TaskError::fail)?;
                Ok(json!("finished"))
            }
        })
        .start()
        .unwrap();
    let mut quick = Vec::new();
    let mut stuck = Vec::new();
    for _ in 0..2 {
        quick.push(
            db.client
                .enqueue(NewJob::new("job", json!({"stuck": false})))
                .await
                .unwrap(),
        );
        stuck.push(
            db.client
                .enqueue(NewJob::new("job", json!({"stuck": true})))
                .await
                .unwrap(),
        );
    }
    // All four are running.
    let _all = tokio::time::timeout(WAIT, started.acquire_many(4))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(count_jobs(&db.pool, "state = 'started'").await, 4);

    // The quick ones finish inside the grace period (a generous one: the
    // stuck ones make the shutdown last all of it).
    let shutdown = tokio::spawn(worker.shutdown(WAIT));
    permits.add_permits(2);
    let report = shutdown.await.unwrap().unwrap();
    assert_eq!(report.released, 2);
    assert!(report.unreleased.is_empty());

    for handle in &quick {
        let job = handle.job().await.unwrap();
        assert_eq!((job.state, job.attempt), (JobState::Success, 1));
    }
    for handle in &stuck {
        let job = handle.job().await.unwrap();
        assert_eq!(
            (job.state, job.attempt),
            (JobState::Pending, 0),
            "given back, attempt not spent"
        );
        assert!(job.worker_id.is_none() && job.lease_expires_at.is_none());
    }
    assert_eq!(count_jobs(&db.pool, "state = 'started'").await, 0);
}

#[tokio::test]
async fn leases_are_renewed_while_a_job_runs() {
    let db = TestDb::new().await;
    let gate = Arc::new(Semaphore::new(0));
    let g = gate.clone();
    let worker = Worker::builder(&db.client)
        .lease(STEADY_LEASE)
        .register_fn("long", move |_, _| {
            let gate = g.clone();
            async move {
                let _p = gate.acquire().await.map_err(TaskError::fail)?;
                Ok(Value::Null)
            }
        })
        .start()
        .unwrap();
    let handle = db
        .client
        .enqueue(NewJob::new("long", json!({})))
        .await
        .unwrap();
    let first = eventually(WAIT, "job started", || async {
        let job = handle.job().await.ok()?;
        job.lease_expires_at
    })
    .await;
    // The heartbeat pushes the lease forward while the handler runs.
    eventually(WAIT, "lease renewed", || async {
        let lease = handle.job().await.ok()?.lease_expires_at?;
        (lease > first).then_some(())
    })
    .await;
    // The job is held in its claim's row (conveyor.claims): renewals update
    // that row, one update per claim, and leave the job's row alone. A
    // claim inserts its row; outcomes delete claims or count them down, once
    // per batch, and this one job's claim is deleted at its outcome: an
    // update of conveyor.claims while it runs is a renewal. (Not HOT:
    // claims_live_idx indexes lease_expires_at for limited queues. The
    // server's statistics reach the views within a second or so of the
    // worker's transactions.)
    eventually(WAIT, "lease renewals update the claim's row", || async {
        let (claims, jobs): (i64, i64) = sqlx::query_as(
            "SELECT (SELECT n_tup_upd FROM pg_stat_user_tables
                     WHERE schemaname = 'conveyor' AND relname = 'claims'),
                    (SELECT n_tup_upd FROM pg_stat_user_tables
                     WHERE schemaname = 'conveyor' AND relname = 'jobs_unfinished')",
        )
        .fetch_one(&db.pool)
        .await
        .ok()?;
        (claims >= 1 && jobs == 0).then_some(())
    })
    .await;
    gate.add_permits(1);
    handle.wait(WAIT).await.unwrap();
    assert_eq!(handle.job().await.unwrap().attempt, 1);
    worker.shutdown(WAIT).await.unwrap();
}

#[tokio::test]
async fn jobs_whose_lease_expired_are_rescued_and_retried_or_failed() {
    let db = TestDb::new().await;
    // Two jobs a dead worker was running: one with retries left, one without.
    let (retry_id, dead_id) = (uuid::Uuid::now_v7(), uuid::Uuid::now_v7());
    sqlx::query(
        "INSERT INTO conveyor.jobs (id, task, state, attempt, max_retries, lease_expires_at, worker_id, started_at, lease_token)
         VALUES ($1, 'echo', 'started', 1, 3, now() - interval '1 second', 'dead-worker', now() - interval '1 minute', nextval('conveyor.lease_tokens')),
                ($2, 'echo', 'started', 2, 1, now() - interval '1 second', 'dead-worker', now() - interval '1 minute', nextval('conveyor.lease_tokens'))",
    )
    .bind(retry_id)
    .bind(dead_id)
    .execute(&db.pool)
    .await
    .unwrap();
    let worker = Worker::builder(&db.client)
        .rescue_interval(Duration::from_millis(100))
        .register_fn("echo", |ctx, _| async move { Ok(json!(ctx.attempt())) })
        .start()
        .unwrap();
    let retried = db.client.handle::<Value>(retry_id);
    assert_eq!(retried.wait(WAIT).await.unwrap(), json!(2));
    let job = retried.job().await.unwrap();
    assert_eq!(job.errors.len(), 1);
    assert_eq!(job.errors[0].error, "lease expired");
    assert_eq!(job.errors[0].worker_id.as_deref(), Some("dead-worker"));

    let dead = db
        .client
        .handle::<Value>(dead_id)
        .wait_job(WAIT)
        .await
        .unwrap();
    assert_eq!((dead.state, dead.attempt), (JobState::Failure, 2));
    assert_eq!(dead.last_error.as_deref(), Some("lease expired"));
    worker.shutdown(WAIT).await.unwrap();
}

#[tokio::test]
async fn dropping_a_worker_stops_its_background_tasks() {
    let db = TestDb::new().await;
    let worker = Worker::builder(&db.client)
        // Renewed every second while the worker lives.
        .lease(Duration::from_secs(3))
        // Its own rescuer never takes the job back (it would clear the
        // lease this test watches).
        .rescue_interval(Duration::from_secs(3600))
        .register_fn("forever", |_, _| async move {
            std::future::pending::<()>().await;
            Ok(Value::Null)
        })
        .start()
        .unwrap();
    let handle = db
        .client
        .enqueue(NewJob::new("forever", json!({})))
        .await
        .unwrap();
    eventually(WAIT, "job started", || async {
        (handle.state().await.ok()? == JobState::Started).then_some(())
    })
    .await;
    drop(worker);
    // Nothing renews the lease any more: it lapses and stays lapsed, three
    // renewals' worth of time past its end (a heartbeat still running would
    // have had to miss every one of them).
    eventually(WAIT, "lease lapsed 3 s ago", || async {
        let lease = handle.job().await.ok()?.lease_expires_at?;
        (lease + chrono::TimeDelta::seconds(3) < chrono::Utc::now()).then_some(())
    })
    .await;
    eventually(WAIT, "LISTEN session closed", || async {
        let n: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity
             WHERE datname = current_database() AND query LIKE 'LISTEN%'",
        )
        .fetch_one(&db.pool)
        .await
        .ok()?;
        (n == 0).then_some(())
    })
    .await;
}

/// `Client::connect` builds a working client from a URL, and a handler
/// registered with `register_fn_with` gets the state it was given.
#[tokio::test]
async fn a_client_from_a_url_and_a_handler_with_shared_state() {
    let db = TestDb::new().await;
    let client = conveyor::Client::connect(&db.url()).await.unwrap();
    assert!(
        conveyor::Client::connect("postgres://nobody@127.0.0.1:1/none")
            .await
            .is_err()
    );
    let worker = Worker::builder(&client)
        .register_fn_with(
            "lookup",
            client.pool().clone(),
            |pool, _ctx, args: Value| async move {
                let n: i32 = conveyor::sqlx::query_scalar("SELECT $1::int * 2")
                    .bind(args["n"].as_i64().unwrap_or_default() as i32)
                    .fetch_one(&pool)
                    .await?;
                Ok(json!(n))
            },
        )
        .start()
        .unwrap();
    let handle = client
        .enqueue(NewJob::new("lookup", json!({ "n": 21 })))
        .await
        .unwrap();
    assert_eq!(handle.wait(WAIT).await.unwrap(), json!(42));
    worker.shutdown(WAIT).await.unwrap();
}

/// Outcomes are announced on `job_finished` only while some session holds
/// the shared lock that says it listens (as a `Client` awaiting a handle
/// does): a listener without it hears nothing of a finished job, one with
/// it hears the job's id, and a handle's wait is woken.
#[tokio::test]
async fn finished_jobs_are_announced_only_to_sessions_that_listen_for_them() {
    let db = TestDb::new().await;
    let mut bare = sqlx::postgres::PgListener::connect(&db.url())
        .await
        .unwrap();
    bare.listen("conveyor.job_finished").await.unwrap();
    let start = || {
        Worker::builder(&db.client)
            .concurrency(2)
            .register_fn("echo", |_ctx, args| async move { Ok(args) })
            .start()
            .unwrap()
    };

    // Nobody holds the lock: the outcome is recorded, not announced.
    let worker = start();
    let unheard = db
        .client
        .enqueue(NewJob::new("echo", json!(1)))
        .await
        .unwrap()
        .id();
    eventually(WAIT, "the job succeeds", || async {
        (count_jobs(&db.pool, &format!("id = '{unheard}' AND state = 'success'")).await == 1)
            .then_some(())
    })
    .await;
    // Shutdown waits for the last outcomes' announcements to be sent.
    worker.shutdown(WAIT).await.unwrap();
    sqlx::query("SELECT pg_notify('conveyor.job_finished', 'sentinel')")
        .execute(&db.pool)
        .await
        .unwrap();
    let first = tokio::time::timeout(WAIT, bare.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        first.payload(),
        "sentinel",
        "nothing came before the sentinel"
    );

    // With the lock held, the same listener hears the next job finish.
    sqlx::query("SELECT pg_advisory_lock_shared(hashtextextended('conveyor.job_finished', 0))")
        .execute(&mut bare)
        .await
        .unwrap();
    let worker = start();
    let heard = db
        .client
        .enqueue(NewJob::new("echo", json!(2)))
        .await
        .unwrap();
    let note = tokio::time::timeout(WAIT, bare.recv())
        .await
        .unwrap()
        .unwrap();
    assert!(
        note.payload()
            .split(',')
            .any(|id| id == heard.id().to_string())
    );

    // A handle's waiter holds the lock itself while it waits.
    drop(bare);
    let waiting = db
        .client
        .enqueue(NewJob::new("nobody_runs_this", json!(3)))
        .await
        .unwrap();
    let waiter = tokio::spawn(async move { waiting.wait_job(WAIT).await });
    eventually(WAIT, "the waiter holds the listeners' lock", || async {
        let held: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_locks
             WHERE locktype = 'advisory' AND mode = 'ShareLock' AND granted
               AND ((classid::bigint << 32) | objid::bigint)
                   = hashtextextended('conveyor.job_finished', 0)",
        )
        .fetch_one(&db.pool)
        .await
        .unwrap();
        (held == 1).then_some(())
    })
    .await;
    waiter.abort();
    worker.shutdown(WAIT).await.unwrap();
}
