//! A known workload with every outcome the rollups count, in two queues and
//! four tasks, and what `conveyor.jobs` says of it in the rollups' terms
//! (computed with SQL, so a test compares the charts with the table, not
//! with numbers written down). Used by the dashboard's chart tests (API and
//! browser).

use std::time::Duration;

use conveyor::{Client, NewJob, Retention, TaskError, Worker};
use serde_json::{Value, json};
use sqlx::PgPool;

use crate::common::{WAIT, count_jobs, eventually};

/// Jobs the workload leaves final.
pub const JOBS: i64 = 20;

/// Counts in the terms of `conveyor.stats`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, sqlx::FromRow)]
pub struct Outcomes {
    pub succeeded: i64,
    pub failed: i64,
    pub retried: i64,
    pub rescued: i64,
    pub cancelled: i64,
}

/// media: 6 `thumbnail` succeed, 3 `render` fail once then succeed, 2
/// `render` fail for good; mail: 4 `send` succeed, 2 fail for good, 2
/// `digest` are cancelled while waiting, and a `send` whose worker vanished
/// (a row written as started with an expired lease) is rescued, then runs.
/// Returns once all [`JOBS`] are final and the worker has stopped.
pub async fn run(client: &Client, pool: &PgPool) {
    let quick = Duration::from_millis(10);
    let fail = json!({ "fail": true });
    let mut jobs: Vec<NewJob> = Vec::new();
    jobs.extend((0..6).map(|i| NewJob::new("thumbnail", json!({ "i": i })).queue("media")));
    jobs.extend((0..3).map(|i| {
        NewJob::new("render", json!({ "flaky": i }))
            .queue("media")
            .retry_backoff_base(quick)
    }));
    jobs.extend((0..2).map(|_| {
        NewJob::new("render", fail.clone())
            .queue("media")
            .max_retries(0)
    }));
    jobs.extend((0..4).map(|i| NewJob::new("send", json!({ "i": i })).queue("mail")));
    jobs.extend((0..2).map(|_| {
        NewJob::new("send", fail.clone())
            .queue("mail")
            .max_retries(0)
    }));
    client.enqueue_many(jobs).await.unwrap();
    for _ in 0..2 {
        let later = NewJob::new("digest", json!({}))
            .queue("mail")
            .delay(Duration::from_secs(3600));
        let handle = client.enqueue(later).await.unwrap();
        client.cancel(handle.id()).await.unwrap();
    }
    sqlx::query(
        "INSERT INTO conveyor.jobs (queue, task, state, attempt, started_at, lease_expires_at, worker_id, lease_token)
         VALUES ('mail', 'send', 'started', 1, now(), now() - interval '1 second', 'gone', nextval('conveyor.lease_tokens'))",
    )
    .execute(pool)
    .await
    .unwrap();

    let handler = |_ctx: conveyor::TaskContext, args: Value| async move {
        if args["fail"] == true {
            return Err(TaskError::fail("declined"));
        }
        Ok(Value::Null)
    };
    let worker = Worker::builder(client)
        .queues(["media", "mail"])
        .rescue_interval(Duration::from_millis(200))
        .register_fn("thumbnail", handler)
        .register_fn("send", handler)
        .register_fn("render", move |ctx, args: Value| async move {
            if args.get("flaky").is_some() && ctx.attempt() == 1 {
                return Err(TaskError::retry("not yet"));
            }
            handler(ctx, args).await
        })
        .start()
        .unwrap();
    eventually(WAIT, "every job of the workload final", || async {
        (count_jobs(pool, "state IN ('success', 'failure', 'cancelled')").await == JOBS)
            .then_some(())
    })
    .await;
    worker.shutdown(WAIT).await.unwrap();
}

/// What `conveyor.jobs` shows of the jobs `filter` (SQL over its columns)
/// selects: final states counted; every error in a job's history is a
/// retry, except the rescuer's ("lease expired", a rescue) and a failed
/// job's last (its failure).
pub async fn in_jobs_table(pool: &PgPool, filter: &str) -> Outcomes {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT count(*) FILTER (WHERE state = 'success') AS succeeded,
                count(*) FILTER (WHERE state = 'failure') AS failed,
                coalesce(sum((SELECT count(*) FROM jsonb_array_elements(j.errors) WITH ORDINALITY AS e(error, n)
                              WHERE e.error->>'error' <> 'lease expired'
                                AND NOT (j.state = 'failure' AND e.n = jsonb_array_length(j.errors)))), 0)::bigint AS retried,
                coalesce(sum((SELECT count(*) FROM jsonb_array_elements(j.errors) AS e(error)
                              WHERE e.error->>'error' = 'lease expired')), 0)::bigint AS rescued,
                count(*) FILTER (WHERE state = 'cancelled') AS cancelled
         FROM conveyor.jobs j WHERE {filter}"
    )))
    .fetch_one(pool)
    .await
    .unwrap()
}

/// Deletes every finished job (all there are) through the library's
/// pruning, keeping the rollups (their own retention is left off).
pub async fn prune_jobs(client: &Client, pool: &PgPool) {
    let jobs_only = Retention {
        success: Some(Duration::ZERO),
        failure: Some(Duration::ZERO),
        cancelled: Some(Duration::ZERO),
        stats: None,
    };
    let kept = count_jobs(pool, "true").await;
    assert_eq!(client.prune(&jobs_only).await.unwrap().deleted as i64, kept);
    assert_eq!(count_jobs(pool, "true").await, 0);
}
