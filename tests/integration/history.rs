//! Finished jobs in day tables (`conveyor.jobs_success_<day>`, …): where
//! each job lands, what retention drops, ids that finished jobs keep, and a
//! finished job set back to pending by hand.

use std::time::Duration;

use serde_json::{Value, json};
use sqlx::PgPool;

use conveyor::{NewJob, Retention, Worker, WorkerHandle};

use crate::common::{TestDb, WAIT, count_jobs, eventually};

fn start(db: &TestDb) -> WorkerHandle {
    Worker::builder(&db.client)
        .concurrency(10)
        .register_fn("ok", |_ctx, args| async move { Ok(args) })
        .register_fn("fail", |_ctx, _args| async move {
            Err::<Value, _>(conveyor::TaskError::fail("no"))
        })
        .start()
        .unwrap()
}

/// The table a job's row is in.
async fn table_of(pool: &PgPool, id: uuid::Uuid) -> String {
    sqlx::query_scalar("SELECT tableoid::regclass::text FROM conveyor.job_rows WHERE id = $1")
        .bind(id)
        .fetch_one(pool)
        .await
        .unwrap()
}

/// Today, as the day tables name it (UTC).
async fn day(pool: &PgPool, days_ago: i32) -> String {
    sqlx::query_scalar("SELECT to_char((now() AT TIME ZONE 'UTC')::date - $1, 'YYYYMMDD')")
        .bind(days_ago)
        .fetch_one(pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn each_job_is_in_the_table_of_its_state_and_day() {
    let db = TestDb::new().await;
    let c = &db.client;
    let ok = c.enqueue(NewJob::new("ok", json!(1))).await.unwrap();
    let failed = c
        .enqueue(NewJob::new("fail", json!(2)).max_retries(0))
        .await
        .unwrap();
    let waiting = c
        .enqueue(NewJob::new("ok", json!(3)).delay(Duration::from_secs(3600)))
        .await
        .unwrap();
    let cancelled = c
        .enqueue(NewJob::new("ok", json!(4)).delay(Duration::from_secs(3600)))
        .await
        .unwrap();
    c.cancel(cancelled.id()).await.unwrap();
    let worker = start(&db);
    ok.wait(WAIT).await.unwrap();
    failed.wait(WAIT).await.unwrap_err();
    worker.shutdown(WAIT).await.unwrap();
    let today = day(&db.pool, 0).await;
    assert_eq!(
        table_of(&db.pool, ok.id()).await,
        format!("conveyor.jobs_success_{today}")
    );
    assert_eq!(
        table_of(&db.pool, failed.id()).await,
        format!("conveyor.jobs_failure_{today}")
    );
    assert_eq!(
        table_of(&db.pool, cancelled.id()).await,
        format!("conveyor.jobs_cancelled_{today}")
    );
    assert_eq!(
        table_of(&db.pool, waiting.id()).await,
        "conveyor.jobs_unfinished"
    );
    // Every row reads back as before: the result, the error, the state.
    let job = ok.job().await.unwrap();
    assert_eq!(job.result, Some(json!(1)));
    let job = failed.job().await.unwrap();
    assert_eq!(job.last_error.as_deref(), Some("no"));
    assert_eq!(job.attempt, 1);
}

/// Retention drops a day's table once the whole day is past it; a job of
/// that day that belongs to a workflow still running is kept (moved to the
/// default partition); jobs outside the day tables are deleted one by one.
#[tokio::test]
async fn retention_drops_whole_days_and_keeps_members_of_running_workflows() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    // Day tables for ten days ago (an import of old history would do this).
    sqlx::query("SELECT conveyor_internal.create_history_partitions(0, 10)")
        .execute(pool)
        .await
        .unwrap();
    let workflow = uuid::Uuid::now_v7();
    sqlx::query("INSERT INTO conveyor.workflows (id, kind, total) VALUES ($1, 'group', 2)")
        .bind(workflow)
        .execute(pool)
        .await
        .unwrap();
    let old = |state: &'static str, days: f64, workflow: Option<uuid::Uuid>| async move {
        sqlx::query_scalar::<_, uuid::Uuid>(
            "INSERT INTO conveyor.jobs (task, state, attempt, finished_at, workflow_id, workflow_index)
             VALUES ('old', $1, 1, now() - make_interval(secs => $2 * 86400), $3,
                     CASE WHEN $3 IS NOT NULL THEN 0 END)
             RETURNING id",
        )
        .bind(state)
        .bind(days)
        .bind(workflow)
        .fetch_one(pool)
        .await
        .unwrap()
    };
    let ten_days = day(pool, 10).await;
    let mut gone = Vec::new();
    for _ in 0..3 {
        gone.push(old("success", 10.0, None).await);
    }
    let member = old("success", 10.0, Some(workflow)).await;
    let failures = [
        old("failure", 10.0, None).await,
        old("failure", 10.0, None).await,
    ];
    // Twelve days ago has no day table: the default partition, pruned by row.
    let stray = old("success", 12.0, None).await;
    assert_eq!(
        table_of(pool, gone[0]).await,
        format!("conveyor.jobs_success_{ten_days}")
    );
    assert_eq!(table_of(pool, stray).await, "conveyor.jobs_success_default");

    let pruned = db.client.prune(&Retention::default()).await.unwrap();
    // Success and cancelled (7 days) lose their tables of ten, nine and
    // eight days ago (the eighth ended more than 7 days ago); failure (30
    // days) keeps its.
    assert_eq!(pruned.dropped_days, 6, "{pruned:?}");
    assert_eq!(pruned.deleted, 1, "the stray row: {pruned:?}");
    for id in gone.iter().chain([&stray]) {
        assert_eq!(count_jobs(pool, &format!("id = '{id}'")).await, 0);
    }
    assert_eq!(
        table_of(pool, member).await,
        "conveyor.jobs_success_default"
    );
    for id in failures {
        assert_eq!(
            table_of(pool, id).await,
            format!("conveyor.jobs_failure_{ten_days}")
        );
    }
    let tables: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_class WHERE relnamespace = 'conveyor'::regnamespace
           AND relname IN ($1, $2)",
    )
    .bind(format!("jobs_success_{ten_days}"))
    .bind(format!("jobs_cancelled_{ten_days}"))
    .fetch_one(pool)
    .await
    .unwrap();
    assert_eq!(tables, 0, "both day tables are dropped");
    // Once the workflow is over, its member goes too (row by row).
    sqlx::query(
        "UPDATE conveyor.workflows SET state = 'success', finished_at = now() WHERE id = $1",
    )
    .bind(workflow)
    .execute(pool)
    .await
    .unwrap();
    let pruned = db.client.prune(&Retention::default()).await.unwrap();
    assert_eq!(pruned.deleted, 1, "{pruned:?}");
    assert_eq!(count_jobs(pool, &format!("id = '{member}'")).await, 0);
    // The coming days' tables exist.
    let ahead = day(pool, -2).await;
    assert_eq!(
        table_of_name(pool, &format!("jobs_failure_{ahead}")).await,
        Some(format!("jobs_failure_{ahead}"))
    );
}

async fn table_of_name(pool: &PgPool, name: &str) -> Option<String> {
    sqlx::query_scalar("SELECT relname::text FROM pg_class WHERE relnamespace = 'conveyor'::regnamespace AND relname = $1")
        .bind(name)
        .fetch_optional(pool)
        .await
        .unwrap()
}

/// Only unfinished jobs share an index on id; an id a finished job holds is
/// still taken for every way in.
#[tokio::test]
async fn an_id_a_finished_job_holds_is_not_enqueued_again() {
    let db = TestDb::new().await;
    let c = &db.client;
    let id = uuid::Uuid::now_v7();
    let first = c.enqueue(NewJob::new("ok", json!(1)).id(id)).await.unwrap();
    let worker = start(&db);
    first.wait(WAIT).await.unwrap();
    worker.shutdown(WAIT).await.unwrap();
    assert!(
        table_of(&db.pool, id)
            .await
            .starts_with("conveyor.jobs_success_")
    );

    let again = c.enqueue(NewJob::new("ok", json!(2)).id(id)).await.unwrap();
    assert!(again.is_duplicate());
    let many = c
        .enqueue_many(vec![
            NewJob::new("ok", json!(3)),
            NewJob::new("ok", json!(4)).id(id),
        ])
        .await
        .unwrap();
    assert!(!many[0].is_duplicate());
    assert!(many[1].is_duplicate());
    let mut tx = db.pool.begin().await.unwrap();
    let in_tx = c
        .enqueue_tx(&mut tx, NewJob::new("ok", json!(5)).id(id))
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert!(in_tx.is_duplicate());
    let from_sql: uuid::Uuid = sqlx::query_scalar("SELECT conveyor.enqueue('ok', '{}', id => $1)")
        .bind(id)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(from_sql, id);
    assert_eq!(count_jobs(&db.pool, &format!("id = '{id}'")).await, 1);
    let job = c.job(id).await.unwrap().unwrap();
    assert_eq!(job.args, json!(1), "the first job, untouched");
}

/// An UPDATE by hand that sets a failed job back to pending moves its row
/// back among unfinished jobs: it gets its ready-ring row and runs.
#[tokio::test]
async fn a_failed_job_set_back_to_pending_by_hand_runs_again() {
    let db = TestDb::new().await;
    let failed = db
        .client
        .enqueue(NewJob::new("fail", json!(1)).max_retries(0))
        .await
        .unwrap();
    let worker = start(&db);
    failed.wait(WAIT).await.unwrap_err();
    sqlx::query(
        "UPDATE conveyor.jobs SET state = 'pending', task = 'ok', finished_at = NULL
         WHERE id = $1",
    )
    .bind(failed.id())
    .execute(&db.pool)
    .await
    .unwrap();
    eventually(WAIT, "the job runs again and succeeds", || async {
        (count_jobs(
            &db.pool,
            &format!("id = '{}' AND state = 'success'", failed.id()),
        )
        .await
            == 1)
            .then_some(())
    })
    .await;
    worker.shutdown(WAIT).await.unwrap();
}

/// A lookup by id reads only the day tables since the id's time when the id
/// carries one; every other job must still be found: an id chosen without a
/// time (v4), one whose time is later than the job's end (chosen by the
/// caller, or a row written by hand), and a waiting job.
#[tokio::test]
async fn a_job_is_found_by_id_whatever_time_its_id_carries() {
    let db = TestDb::new().await;
    let c = &db.client;
    let w = start(&db);
    let made = c.enqueue(NewJob::new("ok", json!(1))).await.unwrap();
    let v4 = c
        .enqueue(NewJob::new("ok", json!(2)).id(uuid::Uuid::new_v4()))
        .await
        .unwrap();
    // An id whose time is a year from now: the job ends long before it.
    let year = std::time::SystemTime::now() + Duration::from_secs(366 * 86_400);
    let secs = year
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let ts = uuid::Timestamp::from_unix(uuid::NoContext, secs, 0);
    let later = c
        .enqueue(NewJob::new("ok", json!(3)).id(uuid::Uuid::new_v7(ts)))
        .await
        .unwrap();
    for h in [&made, &v4, &later] {
        h.wait(WAIT).await.unwrap();
    }
    w.shutdown(WAIT).await.unwrap();
    // A row written by hand into last week's history with a fresh v7 id.
    let by_hand = uuid::Uuid::now_v7();
    sqlx::query(
        "INSERT INTO conveyor.jobs (id, task, args, state, finished_at) \
         VALUES ($1, 'ok', '4', 'success', now() - interval '7 days')",
    )
    .bind(by_hand)
    .execute(&db.pool)
    .await
    .unwrap();
    let waiting = c
        .enqueue(NewJob::new("ok", json!(5)).delay(Duration::from_secs(3600)))
        .await
        .unwrap();
    for (id, want) in [
        (made.id(), conveyor::JobState::Success),
        (v4.id(), conveyor::JobState::Success),
        (later.id(), conveyor::JobState::Success),
        (by_hand, conveyor::JobState::Success),
        (waiting.id(), conveyor::JobState::Scheduled),
    ] {
        let job = c.job(id).await.unwrap().expect("found by id");
        assert_eq!((job.id, job.state), (id, want));
        let state = c.handle::<Value>(id).state().await.unwrap();
        assert_eq!(state, want, "state of {id}");
    }
    assert!(c.job(uuid::Uuid::now_v7()).await.unwrap().is_none());
    let unknown = c.handle::<Value>(uuid::Uuid::now_v7()).state().await;
    assert!(matches!(unknown, Err(conveyor::Error::NotFound(_))));
}
