//! The README's "Guarantees" against what broke them (issue 14): stale
//! workers, lost leases, rows a worker cannot represent, bad follow-ups,
//! starved pools, panicking background tasks, lost acknowledgements. One
//! test per defect, named after it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use conveyor::{Client, JobState, NewJob, Task, Worker, WorkerTask};
use serde_json::{Value, json};
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;
use tokio::sync::Semaphore;

use crate::common::{
    STEADY_LEASE, THROUGH_PGBOUNCER, TestDb, WAIT, claimed_by_hand, count_jobs, eventually,
    wait_for_listen,
};
use crate::proxy::Proxy;

/// A pool on `url` that connects lazily (so it can be made while cut off).
fn pool_on(url: &str, max: u32) -> PgPool {
    PgPoolOptions::new()
        .max_connections(max)
        .acquire_timeout(Duration::from_secs(10))
        .connect_lazy(url)
        .expect("pool URL")
}

/// Waits for a permit of `sem` (a handler saying it started).
async fn started(sem: &Semaphore) {
    tokio::time::timeout(WAIT, sem.acquire())
        .await
        .expect("handler started in time")
        .expect("semaphore open")
        .forget();
}

/// Defect 1: worker A is cut off past its lease, the rescuer fails the job,
/// an operator re-queues it and worker B runs it as attempt 1 again. A's
/// late result must not be stored, and B's must.
#[tokio::test]
async fn a_stale_worker_cannot_overwrite_a_requeued_run() {
    let db = TestDb::new().await;
    let proxy = Proxy::start(&db.queue_target()).await;
    let client_a = db.client_on(pool_on(&proxy.url(&db.url()), 4), true);
    let (a_started, a_go) = (Arc::new(Semaphore::new(0)), Arc::new(Semaphore::new(0)));
    let (s, g) = (a_started.clone(), a_go.clone());
    let worker_a = Worker::builder(&client_a)
        .lease(Duration::from_millis(600))
        // A long grace: A's handler is still there to return when we let it.
        .cancel_grace(Duration::from_secs(30))
        .register_fn("work", move |_, _| {
            let (started, go) = (s.clone(), g.clone());
            async move {
                started.add_permits(1);
                let _permit = go.acquire().await;
                Ok(json!("A"))
            }
        })
        .start()
        .unwrap();
    let job = db
        .client
        .enqueue(NewJob::new("work", json!({})).max_retries(0))
        .await
        .unwrap();
    started(&a_started).await;
    proxy.cut();

    // B (not cut off) rescues the job when A's lease expires: no retry left.
    let (b_started, b_go) = (Arc::new(Semaphore::new(0)), Arc::new(Semaphore::new(0)));
    let (s, g) = (b_started.clone(), b_go.clone());
    let worker_b = Worker::builder(&db.client)
        .rescue_interval(Duration::from_millis(50))
        .register_fn("work", move |_, _| {
            let (started, go) = (s.clone(), g.clone());
            async move {
                started.add_permits(1);
                let _permit = go.acquire().await;
                Ok(json!("B"))
            }
        })
        .start()
        .unwrap();
    let failed = job.wait_job(WAIT).await.unwrap();
    assert_eq!(failed.state, JobState::Failure);
    assert_eq!(failed.last_error.as_deref(), Some("lease expired"));
    // The operator re-queues it; B runs it, as attempt 1 again.
    assert_eq!(db.client.requeue(&[job.id()]).await.unwrap(), 1);
    started(&b_started).await;
    let running = job.job().await.unwrap();
    assert_eq!((running.state, running.attempt), (JobState::Started, 1));
    assert_eq!(running.worker_id.as_deref(), Some(worker_b.id()));

    // A comes back and its handler returns: nothing of it may be stored.
    proxy.heal();
    a_go.add_permits(1);
    eventually(WAIT, "A to count its lost lease", || async {
        (worker_a.health().leases_lost == 1).then_some(())
    })
    .await;
    let now = job.job().await.unwrap();
    assert_eq!((now.state, now.result), (JobState::Started, None));
    assert_eq!(now.lease_token, running.lease_token, "B still holds it");
    b_go.add_permits(1);
    assert_eq!(job.wait(WAIT).await.unwrap(), json!("B"));
    assert_eq!(job.job().await.unwrap().attempt, 1);
    worker_a.shutdown(WAIT).await.unwrap();
    worker_b.shutdown(WAIT).await.unwrap();
}

/// A worker cut off from the database in the middle of one of its own
/// transactions (its TCP connection open, the server waiting for the next
/// statement) holds that transaction's locks for seconds, not until TCP
/// keepalive gives up: here the rescuer's advisory lock, which kept every
/// other worker from rescuing (this test's parent flaked on exactly that).
#[tokio::test]
async fn a_worker_cut_off_mid_transaction_releases_its_locks() {
    let db = TestDb::new().await;
    let proxy = Proxy::start(&db.queue_target()).await;
    // A's first rescue holds the lock when its statement goes out; freeze there.
    proxy.freeze_after(b"Recover jobs whose lease expired", 0);
    let client_a = db.client_on(pool_on(&proxy.url(&db.url()), 4), true);
    let worker_a = Worker::builder(&client_a)
        .rescue_interval(Duration::from_millis(50))
        .register_fn("work", |_, _| async { Ok(Value::Null) })
        .start()
        .unwrap();
    eventually(WAIT, "A's rescue to be cut off", || async {
        proxy.fired().then_some(())
    })
    .await;
    // What a worker that died leaves behind: started, its lease expired.
    let job = db
        .client
        .enqueue(NewJob::new("gone", json!({})))
        .await
        .unwrap();
    sqlx::query(
        "UPDATE conveyor.jobs SET state = 'started', attempt = 1, started_at = now(),
                lease_expires_at = now() - interval '1 second', lease_token = 1,
                worker_id = 'dead' WHERE id = $1",
    )
    .bind(job.id())
    .execute(&db.pool)
    .await
    .unwrap();
    let worker_b = Worker::builder(&db.client)
        .rescue_interval(Duration::from_millis(50))
        .register_fn("work", |_, _| async { Ok(Value::Null) })
        .start()
        .unwrap();
    // (A's transaction is ended by the server after 5 s idle: then B, which
    // tries every 50 ms, rescues. Allowed far longer on a loaded machine.)
    eventually(WAIT * 3, "B to rescue the job", || async {
        let job = job.job().await.ok()?;
        (job.state == JobState::Pending).then_some(())
    })
    .await;
    assert_eq!(
        job.job().await.unwrap().last_error.as_deref(),
        Some("lease expired")
    );
    worker_b.shutdown(WAIT).await.unwrap();
    drop(proxy); // closes A's frozen connection
    let _ = worker_a.shutdown(WAIT).await;
}

/// Defect 2: when a lease renewal matches no row (the job was taken away),
/// the handler is told at once (at that renewal, not when the lease would
/// have lapsed) and its outcome is not written.
#[tokio::test]
async fn a_worker_that_loses_a_lease_tells_its_handler_and_records_nothing() {
    let db = TestDb::new().await;
    // Renewals every 10 s: the one after the job is taken away comes at
    // least 20 s before the lease would lapse by the worker's clock.
    const LEASE: Duration = Duration::from_secs(30);
    let started_sem = Arc::new(Semaphore::new(0));
    // Whether the handler was told its lease was lost, and when.
    type Told = Option<(bool, chrono::DateTime<chrono::Utc>)>;
    let told: Arc<Mutex<Told>> = Arc::default();
    let (s, t) = (started_sem.clone(), told.clone());
    let worker = Worker::builder(&db.client)
        .lease(LEASE)
        .concurrency(1)
        .register_fn("long", move |ctx, _| {
            let (started, told) = (s.clone(), t.clone());
            async move {
                started.add_permits(1);
                ctx.cancelled().await;
                *told.lock().unwrap() = Some((ctx.lease_lost(), chrono::Utc::now()));
                Ok(json!("too late"))
            }
        })
        .start()
        .unwrap();
    let job = db
        .client
        .enqueue(NewJob::new("long", json!({})))
        .await
        .unwrap();
    started(&started_sem).await;
    // (Paused, so that the job is not simply claimed again here.)
    db.client.pause_queue("default").await.unwrap();
    // Where the lease ends by the database's clock, as last renewed: the
    // worker's own deadline for it is no later (it counts from before
    // the claim or renewal was sent).
    let lease_end = job.job().await.unwrap().lease_expires_at.unwrap();
    // What a rescuer elsewhere would do once the lease looked expired there.
    sqlx::query(
        "UPDATE conveyor.jobs SET state = 'pending', lease_expires_at = NULL,
                lease_token = NULL, worker_id = NULL WHERE id = $1",
    )
    .bind(job.id())
    .execute(&db.pool)
    .await
    .unwrap();
    // The next renewal (within a third of the lease, or two thirds if one
    // came between the read above and the update) finds it gone.
    let (lease_lost, told_at) =
        eventually(WAIT * 2, "the handler told of its lost lease", || async {
            *told.lock().unwrap()
        })
        .await;
    assert!(lease_lost, "lease_lost() says why");
    // Told by that renewal, not by the lease lapsing by the worker's clock:
    // that comes no sooner than the lease's end, give or take the time a
    // renewal takes to reach the database.
    assert!(
        told_at < lease_end - chrono::TimeDelta::seconds(1),
        "told at {told_at}, the lease ending at {lease_end}"
    );
    eventually(WAIT, "the loss counted", || async {
        (worker.health().leases_lost == 1).then_some(())
    })
    .await;
    let row = job.job().await.unwrap();
    assert_eq!((row.state, row.result), (JobState::Pending, None));
    worker.shutdown(WAIT).await.unwrap();
}

/// A lease renewal that meets a job row another transaction holds (its own
/// outcome batch, an operator's cancel; here a `SELECT ... FOR UPDATE` left
/// open) neither waits for it nor counts that lease lost: the other leases
/// are renewed at that beat, the held job's handler runs on, and its lease
/// is renewed once the row is free (docs/decisions/2026-11-25-lock-order.md).
#[tokio::test]
async fn a_lease_renewal_meeting_a_locked_job_renews_the_others_and_cancels_nothing() {
    let db = TestDb::new().await;
    let started_sem = Arc::new(Semaphore::new(0));
    let finish = Arc::new(Semaphore::new(0));
    let cancelled = Arc::new(AtomicUsize::new(0));
    let (s, f, c) = (started_sem.clone(), finish.clone(), cancelled.clone());
    // Beats every 10 s: the held job's lease, not renewed at the beat while
    // its row is locked, lasts 10 s past the beat after that.
    let worker = Worker::builder(&db.client)
        .lease(Duration::from_secs(30))
        .concurrency(2)
        .register_fn("long", move |ctx, _| {
            let (started, finish, cancelled) = (s.clone(), f.clone(), c.clone());
            async move {
                started.add_permits(1);
                tokio::select! {
                    permit = finish.acquire() => permit.expect("semaphore open").forget(),
                    () = ctx.cancelled() => {
                        cancelled.fetch_add(1, Ordering::SeqCst);
                    }
                }
                Ok(json!("done"))
            }
        })
        .start()
        .unwrap();
    // One job at a time, so each is its own claim (conveyor.claims): a claim's
    // row renews all its jobs at once, and a transaction holding it (as
    // settling one of its jobs does, until it commits) makes them all busy.
    let mut jobs = Vec::new();
    for _ in 0..2 {
        let job = db.client.enqueue(NewJob::new("long", json!({}))).await;
        jobs.push(job.unwrap());
        started(&started_sem).await;
    }
    let expiry = |id| {
        let pool = db.pool.clone();
        async move {
            sqlx::query_scalar::<_, chrono::DateTime<chrono::Utc>>(
                "SELECT lease_expires_at FROM conveyor.jobs WHERE id = $1",
            )
            .bind(id)
            .fetch_one(&pool)
            .await
            .unwrap()
        }
    };
    let (locked, free) = (jobs[0].id(), jobs[1].id());

    // Beats come every 10 s (a third of the lease). Right after one, the
    // row is locked for the next beat: a renewal that waited for it would
    // not commit the other lease before the lock goes, which is held until
    // the free job's renewal is seen (waited for long past the next beat).
    // (The held job's lease is not extended meanwhile: 20 s of its 30 pass
    // before the beat after the lock.)
    let beat = |last| async move {
        eventually(WAIT * 2, "the free job renewed", || async {
            (expiry(free).await > last).then_some(())
        })
        .await;
    };
    beat(expiry(free).await).await;
    // As conveyor.cancel() does: the job's claim settled (its row now says
    // started), then its row locked.
    let mut tx = db.pool.begin().await.unwrap();
    sqlx::query("SELECT conveyor_internal.settle_claims(ARRAY[$1])")
        .bind(locked)
        .execute(&mut *tx)
        .await
        .unwrap();
    sqlx::query("SELECT 1 FROM conveyor.job_rows WHERE id = $1 FOR UPDATE")
        .bind(locked)
        .execute(&mut *tx)
        .await
        .unwrap();
    let locked_before = expiry(locked).await;
    beat(expiry(free).await).await;
    assert_eq!(expiry(locked).await, locked_before, "busy: not renewed");
    assert_eq!(cancelled.load(Ordering::SeqCst), 0, "no handler cancelled");
    assert_eq!(worker.health().leases_lost, 0, "no lease counted lost");
    tx.rollback().await.unwrap();

    eventually(WAIT * 2, "the held job renewed once free", || async {
        (expiry(locked).await > locked_before).then_some(())
    })
    .await;
    finish.add_permits(2);
    for job in &jobs {
        let done = job.wait_job(WAIT).await.unwrap();
        assert_eq!(done.state, JobState::Success, "{}", job.id());
    }
    assert_eq!(cancelled.load(Ordering::SeqCst), 0, "no handler cancelled");
    assert_eq!(worker.health().leases_lost, 0);
    worker.shutdown(WAIT).await.unwrap();
}

/// Defect 3: `run_at = 'infinity'` (and any time a reader cannot represent)
/// is refused however it is written, so no such row can stop a worker.
#[tokio::test]
async fn times_a_reader_cannot_represent_are_refused_and_workers_keep_serving() {
    let db = TestDb::new().await;
    for sql in [
        "INSERT INTO conveyor.jobs (task, run_at) VALUES ('add', 'infinity')",
        "INSERT INTO conveyor.jobs (task, run_at, state) VALUES ('add', '-infinity', 'pending')",
        "INSERT INTO conveyor.jobs (task, run_at, state) VALUES ('add', '294276-01-01', 'scheduled')",
        "INSERT INTO conveyor.jobs (task, created_at) VALUES ('add', 'infinity')",
        "SELECT conveyor.enqueue('add', run_at => 'infinity')",
        "UPDATE conveyor.jobs SET created_at = 'infinity'",
        "UPDATE conveyor.jobs SET state = 'started', lease_token = 1, lease_expires_at = 'infinity'",
        // (A time no day table takes lands in the default partition.)
        "UPDATE conveyor.jobs SET state = 'success', finished_at = 'infinity'",
        "SELECT conveyor.set_queue_rate_limit('q', 1, interval '200000 years')",
    ] {
        // (The UPDATE needs a row to refuse.)
        db.client
            .enqueue(NewJob::new("add", json!({"a": 1, "b": 1})).queue("elsewhere"))
            .await
            .unwrap();
        let err = sqlx::query(sql).execute(&db.pool).await.unwrap_err();
        let msg = err.into_database_error().unwrap().message().to_string();
        // The jobs' times are of the domain conveyor.finite_timestamptz
        // (a domain); finished_at is the day tables' partition key.
        let named = [
            "finite_timestamptz_check",
            "_default_finished_check",
            "_timestamps_check",
        ];
        assert!(named.iter().any(|n| msg.contains(n)), "{sql}: {msg}");
    }
    // From Rust, the same is refused before anything is sent.
    let year_10000 = chrono::DateTime::from_timestamp(253_402_300_800, 0).unwrap();
    let err = db
        .client
        .enqueue(NewJob::new("add", json!({})).run_at(year_10000))
        .await
        .unwrap_err();
    assert!(matches!(err, conveyor::Error::InvalidJob(_)), "{err}");

    // Year 9999 is the latest accepted; such a job waits, the worker serves.
    let late = db
        .client
        .enqueue(
            NewJob::new("add", json!({"a": 0, "b": 0}))
                .run_at("9999-12-31T23:59:59Z".parse().unwrap()),
        )
        .await
        .unwrap();
    let worker = Worker::builder(&db.client)
        .register(crate::enqueue::Add)
        .start()
        .unwrap();
    let ok = db
        .client
        .enqueue(crate::enqueue::Add::job(crate::enqueue::AddArgs {
            a: 1,
            b: 2,
        }))
        .await
        .unwrap();
    assert_eq!(ok.wait(WAIT).await.unwrap(), 3);
    let listed = db
        .client
        .list_jobs(&conveyor::JobFilter {
            state: Some(JobState::Scheduled),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(listed.iter().map(|j| j.id).collect::<Vec<_>>(), [late.id()]);
    assert!(worker.health().restarts.is_empty());
    worker.shutdown(WAIT).await.unwrap();
}

/// Nested `depth` levels deep: `[[[…]]]`.
fn nested(depth: usize) -> String {
    format!("{}{}", "[".repeat(depth), "]".repeat(depth))
}

/// Defect 4: a claimed row that cannot be decoded (args nested deeper than
/// serde_json's limit) fails alone, at once, with the reason; the jobs
/// claimed with it run, on a plain queue and on one with a concurrency limit.
#[tokio::test]
async fn a_row_that_cannot_be_decoded_fails_alone_and_its_claim_batch_runs() {
    let db = TestDb::new().await;
    db.client.set_queue_limit("limited", Some(5)).await.unwrap();
    let runs: Arc<Mutex<HashMap<i64, usize>>> = Arc::default();
    let r = runs.clone();
    let mut poison = Vec::new();
    let mut normal = Vec::new();
    for queue in ["default", "limited"] {
        let sql = format!(
            "INSERT INTO conveyor.jobs (task, queue, args) VALUES ('count', '{queue}', '{}') RETURNING id",
            nested(200)
        );
        let id: uuid::Uuid = sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
            .fetch_one(&db.pool)
            .await
            .unwrap();
        poison.push(db.client.handle::<Value>(id));
        for n in 0..4 {
            let job = NewJob::new("count", json!({ "n": normal.len() as i64 })).queue(queue);
            normal.push(db.client.enqueue(job).await.unwrap());
            let _ = n;
        }
    }
    let worker = Worker::builder(&db.client)
        .queues(["default", "limited"])
        .concurrency(10)
        .register_fn("count", move |_, args| {
            let runs = r.clone();
            async move {
                let n = args["n"].as_i64().unwrap_or(-1);
                *runs.lock().unwrap().entry(n).or_default() += 1;
                Ok(json!(n))
            }
        })
        .start()
        .unwrap();
    for (n, handle) in normal.iter().enumerate() {
        assert_eq!(handle.wait(WAIT).await.unwrap(), json!(n));
    }
    for handle in &poison {
        // The row still cannot be decoded whole: read what matters by SQL.
        let (attempt, error): (i32, String) = eventually(WAIT, "the poison row failed", || async {
            sqlx::query_as(
                "SELECT attempt, last_error FROM conveyor.jobs WHERE id = $1 AND state = 'failure'",
            )
            .bind(handle.id())
            .fetch_optional(&db.pool)
            .await
            .unwrap()
        })
        .await;
        assert_eq!(attempt, 1);
        assert!(error.contains("recursion limit"), "{error}");
        let read = handle.job().await.unwrap_err();
        assert!(read.to_string().contains("recursion limit"), "{read}");
    }
    assert!(
        runs.lock().unwrap().values().all(|n| *n == 1),
        "each ran once"
    );
    assert_eq!(runs.lock().unwrap().len(), normal.len());
    assert_eq!(worker.health().undecodable_jobs, 2);
    worker.shutdown(WAIT).await.unwrap();
}

/// Defect 5: callbacks are checked like jobs when enqueued, and a
/// hand-written follow-up that cannot be enqueued fails only its own job;
/// the others' outcomes and follow-ups in the same batch are stored.
#[tokio::test]
async fn a_bad_follow_up_fails_only_its_own_job() {
    let db = TestDb::new().await;
    for bad in [
        NewJob::new("", json!({})),
        NewJob::new("x", json!({})).queue("q".repeat(129)),
        NewJob::new("x", json!({})).timeout(Duration::ZERO),
        NewJob::new("x", json!({})).delay(Duration::from_secs(200 * 365 * 24 * 3600)),
    ] {
        let err = db
            .client
            .enqueue(NewJob::new("parent", json!({})).on_success_job(bad))
            .await
            .unwrap_err();
        assert!(matches!(err, conveyor::Error::InvalidJob(_)), "{err}");
    }
    assert_eq!(count_jobs(&db.pool, "true").await, 0);

    // One job with a follow-up spec written by hand that cannot be enqueued,
    // among twenty with good callbacks.
    let bad: uuid::Uuid = sqlx::query_scalar(
        r#"INSERT INTO conveyor.jobs (task, on_success)
           VALUES ('step', '[{"kind": "job", "id": "00000000-0000-0000-0000-000000000001", "task": ""}]')
           RETURNING id"#,
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let mut good = Vec::new();
    for i in 0..20 {
        let job = NewJob::new("step", json!(i)).on_success_job(NewJob::new("after", json!(i)));
        good.push(db.client.enqueue(job).await.unwrap());
    }
    let runs = Arc::new(AtomicUsize::new(0));
    let r = runs.clone();
    let worker = Worker::builder(&db.client)
        .concurrency(50)
        .register_fn("step", move |_, args| {
            let runs = r.clone();
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                Ok(args)
            }
        })
        .register_fn("after", |_, args| async move { Ok(args) })
        .start()
        .unwrap();
    let job = db.client.handle::<Value>(bad).wait_job(WAIT).await.unwrap();
    assert_eq!(job.state, JobState::Failure);
    let error = job.last_error.unwrap();
    assert!(
        error.starts_with("follow-up work could not be enqueued"),
        "{error}"
    );
    for handle in &good {
        handle.wait(WAIT).await.unwrap();
    }
    eventually(WAIT, "all 20 callbacks ran", || async {
        (count_jobs(&db.pool, "task = 'after' AND state = 'success'").await == 20).then_some(())
    })
    .await;
    assert_eq!(runs.load(Ordering::SeqCst), 21, "nothing ran twice");
    worker.shutdown(WAIT).await.unwrap();
}

/// Defect 6: handlers that hold every connection of the client's pool do
/// not delay lease renewals: with a second worker ready to rescue, each
/// long job still runs once.
#[tokio::test]
async fn handlers_holding_every_connection_do_not_starve_lease_renewals() {
    let db = TestDb::new().await;
    let small = pool_on(&db.url(), 3);
    let client = Client::new(small.clone());
    let runs = Arc::new(AtomicUsize::new(0));
    let (holding, go) = (Arc::new(Semaphore::new(0)), Arc::new(Semaphore::new(0)));
    let (r, pool, h, g) = (runs.clone(), small.clone(), holding.clone(), go.clone());
    let hog = Worker::builder(&client)
        .lease(STEADY_LEASE)
        .concurrency(3)
        .register_fn("hog", move |_, _| {
            let (runs, pool, holding, go) = (r.clone(), pool.clone(), h.clone(), g.clone());
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                // Holds a connection of the client's pool (three handlers:
                // all of them) until the test has seen the leases renewed.
                let _conn = pool.acquire().await?;
                holding.add_permits(1);
                let _go = go.acquire().await;
                Ok(Value::Null)
            }
        })
        .start()
        .unwrap();
    let mut jobs = Vec::new();
    for _ in 0..3 {
        jobs.push(
            db.client
                .enqueue(NewJob::new("hog", json!({})))
                .await
                .unwrap(),
        );
    }
    tokio::time::timeout(WAIT, holding.acquire_many(3))
        .await
        .expect("the hog's handlers hold every connection")
        .unwrap()
        .forget();
    // A second worker that would take any job whose lease lapsed.
    let r = runs.clone();
    let thief = Worker::builder(&db.client)
        .rescue_interval(Duration::from_millis(50))
        .register_fn("hog", move |_, _| {
            let runs = r.clone();
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                Ok(Value::Null)
            }
        })
        .start()
        .unwrap();
    // Every lease renewed while the client's pool has nothing left (a
    // renewal through that pool would wait until the handlers end).
    let ids: Vec<conveyor::JobId> = jobs.iter().map(|j| j.id()).collect();
    let expiries = || async {
        sqlx::query_scalar::<_, chrono::DateTime<chrono::Utc>>(
            "SELECT lease_expires_at FROM conveyor.jobs WHERE id = ANY($1) ORDER BY id",
        )
        .bind(&ids)
        .fetch_all(&db.pool)
        .await
        .unwrap()
    };
    let before = expiries().await;
    assert_eq!(before.len(), 3);
    eventually(WAIT * 2, "every lease renewed", || async {
        let now = expiries().await;
        (now.len() == 3 && now.iter().zip(&before).all(|(n, b)| n > b)).then_some(())
    })
    .await;
    go.add_permits(3);
    for job in &jobs {
        let job = job.wait_job(WAIT).await.unwrap();
        assert_eq!((job.state, job.attempt), (JobState::Success, 1));
        assert!(job.errors.is_empty(), "{:?}", job.errors);
    }
    assert_eq!(runs.load(Ordering::SeqCst), 3, "each job ran once");
    hog.shutdown(WAIT).await.unwrap();
    thief.shutdown(WAIT).await.unwrap();
}

/// Defect 7: a background task that panics is restarted at once, with a
/// count in the worker's health, and the worker keeps serving.
#[tokio::test]
async fn panicking_background_tasks_are_restarted_and_reported() {
    let db = TestDb::new().await;
    let worker = Worker::builder(&db.client)
        .lease(Duration::from_millis(900))
        .rescue_interval(Duration::from_millis(50))
        .prune_interval(Duration::from_millis(50))
        // Only a notification can wake it in time: the listener must be back.
        .safety_interval(Duration::from_secs(120))
        .register_fn("echo", |_, args| async move {
            tokio::time::sleep(Duration::from_millis(400)).await;
            Ok(args)
        })
        .start()
        .unwrap();
    wait_for_listen(&db.pool, 1).await;
    let tasks = [
        WorkerTask::Listener,
        WorkerTask::Producer,
        WorkerTask::Completer,
        WorkerTask::Heartbeat,
        WorkerTask::Rescuer,
        WorkerTask::Pruner,
        WorkerTask::Registry,
    ];
    for task in tasks {
        worker.inject_panic(task);
    }
    // Jobs make the listener, producer, completer and heartbeat go round.
    for round in 0..3 {
        let handle = db
            .client
            .enqueue(NewJob::new("echo", json!(round)))
            .await
            .unwrap();
        assert_eq!(handle.wait(WAIT).await.unwrap(), json!(round));
    }
    eventually(WAIT, "every task restarted once", || async {
        let health = worker.health();
        tasks
            .iter()
            .all(|t| health.restarts.get(t) == Some(&1))
            .then_some(())
    })
    .await;
    let health = worker.health();
    assert!(health.running);
    let (_, message) = health.last_panic.unwrap();
    assert!(message.contains("test hook"), "{message}");
    // Still serving, through a restarted listener.
    let handle = db
        .client
        .enqueue(NewJob::new("echo", json!("after")))
        .await
        .unwrap();
    assert_eq!(handle.wait(WAIT).await.unwrap(), json!("after"));
    worker.shutdown(WAIT).await.unwrap();
}

/// Defect 8: an enqueue whose commit went through but whose
/// acknowledgement was lost returns `Ok` (its jobs exist, once), on every
/// path that owns its transaction.
#[tokio::test]
async fn an_enqueue_whose_acknowledgement_is_lost_returns_ok_and_inserts_once() {
    let db = TestDb::new().await;
    let proxy = Proxy::start(&db.queue_target()).await;
    let client = db.client_on(pool_on(&proxy.url(&db.url()), 4), true);

    // 128 jobs in one autocommit statement: the reply to its parameters is lost.
    let task = format!("lost-ack-{}", uuid::Uuid::new_v4().simple());
    proxy.lose_next_reply_to(task.as_bytes());
    let jobs: Vec<_> = (0..128)
        .map(|i| NewJob::new(task.clone(), json!(i)))
        .collect();
    let handles = client.enqueue_many(jobs).await.unwrap();
    assert!(proxy.fired());
    assert!(handles.iter().all(|h| !h.is_duplicate()));
    assert_eq!(count_jobs(&db.pool, &format!("task = '{task}'")).await, 128);

    // Each path whose own transaction ends in COMMIT: its reply is lost.
    let paths: [(&str, i64); 4] = [
        ("copy", 1_500),
        ("unique", 1),
        ("many unique", 3),
        ("workflow", 2),
    ];
    for (path, n) in paths {
        let task = format!(
            "{}-{}",
            path.replace(' ', "-"),
            uuid::Uuid::new_v4().simple()
        );
        proxy.lose_next_reply_to(b"COMMIT");
        let job = |i: i64| NewJob::new(task.clone(), json!(i));
        match path {
            "copy" => {
                client
                    .enqueue_many((0..n).map(job).collect())
                    .await
                    .unwrap();
            }
            "unique" => {
                let handle = client
                    .enqueue(job(0).unique(conveyor::Unique::UntilFinished))
                    .await
                    .unwrap();
                assert!(!handle.is_duplicate());
            }
            "many unique" => {
                let jobs = (0..n)
                    .map(|i| job(i).unique(conveyor::Unique::UntilFinished))
                    .collect();
                client.enqueue_many(jobs).await.unwrap();
            }
            _ => {
                client
                    .enqueue_workflow(conveyor::Group::new((0..n).map(job)))
                    .await
                    .unwrap();
            }
        }
        assert!(proxy.fired(), "{path}: the reply was lost");
        assert_eq!(
            count_jobs(&db.pool, &format!("task = '{task}'")).await,
            n,
            "{path}"
        );
    }
}

/// Defect 8 again, with finished jobs kept apart (in day tables): an enqueue
/// whose acknowledgement was lost, retried only after its job already ran
/// and finished. The retry must find the finished job, not insert it again
/// (only unfinished jobs share an index on id).
#[tokio::test]
async fn an_enqueue_retried_after_its_job_finished_inserts_it_once() {
    let db = TestDb::new().await;
    let proxy = Proxy::start(&db.queue_target()).await;
    let client = db.client_on(pool_on(&proxy.url(&db.url()), 4), true);
    let task = format!("lost-then-done-{}", uuid::Uuid::new_v4().simple());
    // Through PgBouncer the insert runs in a transaction of its own: only
    // the reply to its COMMIT can be lost after the job is committed.
    let needle = if THROUGH_PGBOUNCER {
        &b"COMMIT"[..]
    } else {
        task.as_bytes()
    };
    proxy.lose_next_reply_to_then_cut(needle);
    let enqueue = tokio::spawn({
        let (client, task) = (client.clone(), task.clone());
        async move { client.enqueue(NewJob::new(task, json!(1))).await }
    });
    eventually(WAIT, "the reply is lost", || async {
        proxy.fired().then_some(())
    })
    .await;
    // The job committed; a worker on a direct connection runs it while the
    // enqueue waits for the network.
    let worker = Worker::builder(&db.client)
        .register_fn(task.clone(), |_ctx, args| async move { Ok(args) })
        .start()
        .unwrap();
    let done = format!("task = '{task}' AND state = 'success'");
    eventually(WAIT, "the job ran and finished", || async {
        (count_jobs(&db.pool, &done).await == 1).then_some(())
    })
    .await;
    proxy.heal();
    let handle = enqueue.await.unwrap().unwrap();
    assert!(!handle.is_duplicate(), "the job is the call's own");
    assert_eq!(count_jobs(&db.pool, &format!("task = '{task}'")).await, 1);
    worker.shutdown(WAIT).await.unwrap();
}

/// Defect 5, second half: an outcome PostgreSQL refuses (here a trigger of
/// the user's) is split out of its batch: the other outcomes are stored,
/// and the refused job is stored as a failure that says why.
#[tokio::test]
async fn an_outcome_postgres_refuses_fails_alone_and_its_batch_is_stored() {
    let db = TestDb::new().await;
    sqlx::raw_sql(
        r#"CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$
           BEGIN RAISE EXCEPTION 'no success for %', NEW.args; END $$;
           CREATE TRIGGER refuse BEFORE INSERT OR UPDATE ON conveyor.job_rows FOR EACH ROW
           WHEN (NEW.state = 'success' AND NEW.args = '"refuse me"') EXECUTE FUNCTION refuse();"#,
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let mut jobs: Vec<_> = (0..20).map(|i| NewJob::new("echo", json!(i))).collect();
    jobs.insert(7, NewJob::new("echo", json!("refuse me")));
    let handles = db.client.enqueue_many(jobs).await.unwrap();
    let worker = Worker::builder(&db.client)
        .concurrency(50)
        .register_fn("echo", |_, args| async move { Ok(args) })
        .start()
        .unwrap();
    for (i, handle) in handles.iter().enumerate() {
        let job = handle.wait_job(WAIT).await.unwrap();
        if i == 7 {
            assert_eq!(job.state, JobState::Failure);
            let error = job.last_error.unwrap();
            assert!(
                error.starts_with("conveyor could not record this job's outcome"),
                "{error}"
            );
            assert!(error.contains("no success for"), "{error}");
        } else {
            assert_eq!((job.state, job.attempt), (JobState::Success, 1));
        }
    }
    assert_eq!(worker.health().leases_lost, 0);
    worker.shutdown(WAIT).await.unwrap();
}

/// A claim does not write the job's row (conveyor.claims), so a cancel cannot
/// meet the claim there; it settles the job's claim first, waiting on
/// the ring row a claim in flight holds. Cancels chase the claims' front
/// through a backlog: every job whose cancel answered `cancelled` (it was
/// still pending) must never have run.
#[tokio::test]
async fn a_job_cancelled_while_pending_never_runs_even_as_it_is_claimed() {
    let db = TestDb::new().await;
    let ran: Arc<Mutex<std::collections::HashSet<conveyor::JobId>>> = Arc::default();
    let seen = ran.clone();
    let jobs: Vec<NewJob> = (0..5_000)
        .map(|_| NewJob::new("quick", json!({})))
        .collect();
    let ids: Vec<conveyor::JobId> = db
        .client
        .enqueue_many(jobs)
        .await
        .unwrap()
        .iter()
        .map(|h| h.id())
        .collect();
    let worker = Worker::builder(&db.client)
        .concurrency(20)
        .register_fn("quick", move |ctx, _| {
            seen.lock().unwrap().insert(ctx.job_id());
            // (A little work, so the cancels keep pace with the claims.)
            async {
                tokio::time::sleep(Duration::from_millis(5)).await;
                Ok(Value::Null)
            }
        })
        .start()
        .unwrap();
    // The claims' front is moving (so the race is run, however slowly the
    // worker starts on a loaded machine)...
    eventually(WAIT, "the first job run", || async {
        (!ran.lock().unwrap().is_empty()).then_some(())
    })
    .await;
    // ...when four cancellers start over the backlog from its end, each
    // every fourth job: they meet the claims' front somewhere in the middle.
    let mut cancellers = Vec::new();
    for k in 0..4 {
        let client = db.client.clone();
        let mine: Vec<conveyor::JobId> = ids.iter().rev().skip(k).step_by(4).copied().collect();
        cancellers.push(tokio::spawn(async move {
            let mut at_once = Vec::new();
            for id in mine {
                if client.cancel(id).await.unwrap() == JobState::Cancelled {
                    at_once.push(id);
                }
            }
            at_once
        }));
    }
    let mut cancelled = Vec::new();
    for c in cancellers {
        cancelled.extend(c.await.unwrap());
    }
    eventually(WAIT * 3, "every job finished", || async {
        (count_jobs(&db.pool, "state NOT IN ('success', 'failure', 'cancelled')").await == 0)
            .then_some(())
    })
    .await;
    worker.shutdown(WAIT).await.unwrap();
    let ran = ran.lock().unwrap();
    let both: Vec<_> = cancelled.iter().filter(|id| ran.contains(id)).collect();
    assert!(
        both.is_empty(),
        "{} of {} jobs cancelled while pending ran anyway: {both:?}",
        both.len(),
        cancelled.len()
    );
    assert!(
        !cancelled.is_empty() && !ran.is_empty(),
        "the race was not run: {} cancelled at once, {} ran",
        cancelled.len(),
        ran.len()
    );
    eprintln!(
        "cancels racing claims: {} cancelled at once, {} ran, none both",
        cancelled.len(),
        ran.len()
    );
}

/// A claim (conveyor.claims) counts the jobs it still holds and is deleted at
/// 0. An outcome batch that names one job twice must count it once: counted
/// twice, the claim went while it still held the other job, stored as
/// pending with no ring row, which nothing would then run or rescue.
#[tokio::test]
async fn an_outcome_batch_naming_a_job_twice_counts_its_claim_down_once() {
    let db = TestDb::new().await;
    let (ids, token) = claimed_by_hand(&db, 2).await;
    // The first job's retry, twice in one batch.
    sqlx::query(
        "SELECT * FROM conveyor_internal.record_outcomes($1, $2, '{retry,retry}',
             '{NULL,NULL}', '{boom,boom}', '{60,60}', '{1,1}')",
    )
    .bind(vec![ids[0], ids[0]])
    .bind(vec![token, token])
    .execute(&db.pool)
    .await
    .unwrap();
    let states: Vec<(conveyor::JobId, String)> =
        sqlx::query_as("SELECT id, state FROM conveyor.jobs WHERE id = ANY($1) ORDER BY id")
            .bind(&ids)
            .fetch_all(&db.pool)
            .await
            .unwrap();
    let mut expected = vec![
        (ids[0], "retry".to_string()),
        (ids[1], "started".to_string()),
    ];
    expected.sort();
    assert_eq!(
        states, expected,
        "the second job is still held by its claim"
    );
    let left: Option<i32> =
        sqlx::query_scalar("SELECT jobs_left FROM conveyor.claims WHERE lease_token = $1")
            .bind(token)
            .fetch_optional(&db.pool)
            .await
            .unwrap();
    assert_eq!(left, Some(1));
}

/// A claims row deleted by hand (`DELETE FROM
/// conveyor.claims` in psql) gives the jobs it still held back: runnable
/// again with a fresh token, so the claim's worker can no longer record an
/// outcome for them. Without it they stayed stored as pending with no ring
/// row, and nothing ever ran them.
#[tokio::test]
async fn a_claim_deleted_by_hand_gives_its_jobs_back_and_fences_its_worker() {
    let db = TestDb::new().await;
    let (ids, token) = claimed_by_hand(&db, 3).await;
    let outcome = |id: conveyor::JobId| {
        sqlx::query_scalar::<_, Vec<conveyor::JobId>>(
            "SELECT updated FROM conveyor_internal.record_outcomes(ARRAY[$1::uuid], ARRAY[$2::bigint],
                 '{success}', '{null}', '{NULL}', '{NULL}', '{1}')",
        )
        .bind(id)
        .bind(token)
    };
    // The first job finishes under the claim; then an operator deletes it.
    assert_eq!(
        outcome(ids[0]).fetch_one(&db.pool).await.unwrap(),
        vec![ids[0]]
    );
    sqlx::query("DELETE FROM conveyor.claims")
        .execute(&db.pool)
        .await
        .unwrap();

    let (pending, ring, fenced): (i64, i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM conveyor.jobs WHERE id = ANY($1) AND state = 'pending'),
                (SELECT count(*) FROM conveyor.ready WHERE job_id = ANY($1)),
                (SELECT count(*) FROM conveyor.job_rows WHERE id = ANY($1) AND lease_token > $2)",
    )
    .bind(&ids[1..])
    .bind(token)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        (pending, ring, fenced),
        (2, 2, 2),
        "the two jobs the claim held are runnable again, with tokens above the claim's"
    );
    // The claim's worker, finishing one of them late, records nothing.
    assert!(
        outcome(ids[1])
            .fetch_one(&db.pool)
            .await
            .unwrap()
            .is_empty()
    );
    let first: String = sqlx::query_scalar("SELECT state FROM conveyor.jobs WHERE id = $1")
        .bind(ids[0])
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(first, "success", "the finished job is left alone");

    let worker = Worker::builder(&db.client)
        .register_fn("t", |_ctx, _args| async { Ok(Value::Null) })
        .start()
        .unwrap();
    eventually(WAIT, "the given-back jobs run", || async {
        (count_jobs(&db.pool, "state = 'success'").await == 3).then_some(())
    })
    .await;
    worker.shutdown(WAIT).await.unwrap();
}
