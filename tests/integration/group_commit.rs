//! Group commit: concurrent `enqueue()` calls on one client share
//! transactions, each still atomic and durable on return, and one call's bad
//! job fails only that call.

use std::time::Duration;

use conveyor::{NewJob, Worker};
use serde_json::json;

use crate::common::{TestDb, WAIT, count_jobs, eventually, futures_join_all, wait_for_listen};

/// Transactions that inserted the `echo` jobs: rows written by one
/// transaction share its xmin.
async fn inserting_transactions(db: &TestDb) -> i64 {
    sqlx::query_scalar(
        "SELECT count(DISTINCT xmin::text) FROM conveyor.job_rows WHERE task = 'echo'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap()
}

/// Starts `calls` concurrent enqueues (`job(i)` for call `i`) while inserts
/// into the jobs table are blocked, waits until two inserts wait on the lock (the first
/// call's, alone, and the shared one of the calls queued meanwhile), then
/// lets them go.
async fn enqueue_while_blocked(
    db: &TestDb,
    calls: usize,
    job: impl Fn(usize) -> NewJob,
) -> Vec<conveyor::Result<conveyor::JobHandle<serde_json::Value>>> {
    // SHARE mode conflicts with the ROW EXCLUSIVE lock an insert takes.
    let mut blocker = db.pool.begin().await.unwrap();
    sqlx::query("LOCK TABLE conveyor.jobs IN SHARE MODE")
        .execute(&mut *blocker)
        .await
        .unwrap();
    let enqueues: Vec<_> = (0..calls)
        .map(|i| {
            let (client, job) = (db.client.clone(), job(i));
            async move { client.enqueue(job).await }
        })
        .collect();
    let all = tokio::spawn(futures_join_all(enqueues));
    eventually(WAIT, "the lone insert and a shared one waiting", || async {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity
             WHERE datname = current_database() AND wait_event_type = 'Lock'
               AND query LIKE '-- Insert %'",
        )
        .fetch_one(&db.pool)
        .await
        .ok()?;
        (waiting >= 2).then_some(())
    })
    .await;
    blocker.rollback().await.unwrap();
    all.await.unwrap()
}

fn echo(args: serde_json::Value) -> NewJob {
    NewJob::new("echo", args)
}

#[tokio::test]
async fn concurrent_enqueues_share_commits_and_a_bad_job_fails_only_its_call() {
    let db = TestDb::new().await;

    // 40 calls at once: the first runs alone, the other 39 were queued while
    // it waited and commit together.
    let results = enqueue_while_blocked(&db, 40, |i| echo(json!({ "i": i }))).await;
    let handles: Vec<_> = results.into_iter().map(Result::unwrap).collect();
    assert_eq!(count_jobs(&db.pool, "task = 'echo'").await, 40);
    let transactions = inserting_transactions(&db).await;
    assert!(
        transactions <= 3,
        "40 concurrent enqueues took {transactions} transactions"
    );
    // Each handle names its own job, with its own arguments.
    for (i, handle) in handles.iter().enumerate() {
        assert!(!handle.is_duplicate());
        let args: serde_json::Value =
            sqlx::query_scalar("SELECT args FROM conveyor.jobs WHERE id = $1")
                .bind(handle.id())
                .fetch_one(&db.pool)
                .await
                .unwrap();
        assert_eq!(args, json!({ "i": i }));
    }

    // Again, with one job PostgreSQL refuses (a NUL character in jsonb, which
    // fails the shared statement before it even waits for the lock): its call
    // fails with PostgreSQL's error, and every other call's job is in, each
    // retried on its own.
    sqlx::query("DELETE FROM conveyor.jobs")
        .execute(&db.pool)
        .await
        .unwrap();
    let bad = 17;
    let results = enqueue_while_blocked(&db, 40, |i| {
        if i == bad {
            echo(json!({ "text": "nul \u{0} byte" }))
        } else {
            echo(json!({ "i": i }))
        }
    })
    .await;
    for (i, result) in results.iter().enumerate() {
        match result {
            Ok(_) => assert_ne!(i, bad, "the bad job was accepted"),
            Err(error) => {
                assert_eq!(i, bad, "call {i} failed: {error}");
                assert!(
                    matches!(error, conveyor::Error::Database(_))
                        && error.to_string().contains("Unicode"),
                    "unexpected error: {error}"
                );
            }
        }
    }
    assert_eq!(count_jobs(&db.pool, "task = 'echo'").await, 39);
}

#[tokio::test]
async fn a_shared_transaction_wakes_idle_workers_at_commit() {
    let db = TestDb::new().await;
    // Only a notification can wake this worker: its safety interval is an hour.
    let worker = Worker::builder(&db.client)
        .register_fn("echo", |_ctx, args| async move { Ok(args) })
        .safety_interval(Duration::from_secs(3600))
        .start()
        .unwrap();
    wait_for_listen(&db.pool, 1).await;
    let warmup = db.client.enqueue(echo(json!("warm-up"))).await.unwrap();
    warmup.wait(WAIT).await.unwrap();

    // The first call, alone, goes to a queue the worker does not serve, so
    // its notification wakes nobody: the jobs of the shared transaction run
    // only if that transaction notified at its commit.
    let results = enqueue_while_blocked(&db, 20, |i| {
        let job = echo(json!({ "i": i }));
        if i == 0 { job.queue("elsewhere") } else { job }
    })
    .await;
    for (i, result) in results.into_iter().enumerate().skip(1) {
        let output = result.unwrap().wait(WAIT).await.unwrap();
        assert_eq!(output, json!({ "i": i }));
    }
    worker.shutdown(WAIT).await.unwrap();
}
