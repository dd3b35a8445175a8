//! Helpers for your own tests (like River's `rivertest` and `Oban.Testing`):
//! a fresh database per test ([`TestDatabase`]), assert that a job was
//! enqueued (also inside a transaction you have not committed), and run a
//! task's handler inline, without a worker.
//!
//! ```no_run
//! # use conveyor::{Client, Task, TaskContext, TaskError};
//! # struct Welcome; impl Task for Welcome { const NAME: &'static str = "welcome"; type Args = serde_json::Value; type Output = ();
//! #   async fn run(&self, _: TaskContext, _: serde_json::Value) -> Result<(), TaskError> { Ok(()) } }
//! # async fn demo(client: Client) -> conveyor::Result<()> {
//! let mut tx = client.pool().begin().await?;
//! // ... code under test enqueues in `tx` ...
//! conveyor::testing::assert_enqueued(&client, &mut tx, "welcome", serde_json::json!({"user": 7})).await;
//! // And the handler itself, without a worker:
//! conveyor::testing::perform(&Welcome, serde_json::json!({"user": 7})).await.expect("handler");
//! # Ok(()) }
//! ```

mod database;

use serde_json::Value;
use sqlx::PgConnection;

pub use database::{TestDatabase, server_url};

use crate::client::Client;
use crate::db;
use crate::job::Job;
use crate::task::{Task, TaskContext, TaskError};

/// Unfinished jobs of `task` whose args contain `args` (JSON containment:
/// `{"user": 7}` matches `{"user": 7, "lang": "fr"}`), seen from `conn`, so
/// jobs enqueued in an uncommitted transaction count when `conn` is it.
pub async fn enqueued(
    client: &Client,
    conn: &mut PgConnection,
    task: &str,
    args: Value,
) -> crate::Result<Vec<Job>> {
    db::enqueued_jobs(conn, client.inner.queries, task, &args).await
}

/// Panics unless a job of `task` with (at least) `args` is waiting or running.
pub async fn assert_enqueued(
    client: &Client,
    conn: &mut PgConnection,
    task: &str,
    args: Value,
) -> Job {
    match enqueued(client, conn, task, args.clone()).await {
        Ok(mut jobs) if !jobs.is_empty() => jobs.remove(0),
        Ok(_) => {
            let others = enqueued(client, conn, task, Value::Object(Default::default()))
                .await
                .unwrap_or_default();
            let seen: Vec<String> = others.iter().map(|j| j.args.to_string()).collect();
            panic!(
                "expected a `{task}` job with args containing {args}; {} `{task}` job(s) enqueued: {seen:?}",
                others.len()
            )
        }
        Err(error) => panic!("cannot look for enqueued `{task}` jobs: {error}"),
    }
}

/// Panics if a job of `task` with (at least) `args` is waiting or running.
pub async fn assert_not_enqueued(
    client: &Client,
    conn: &mut PgConnection,
    task: &str,
    args: Value,
) {
    match enqueued(client, conn, task, args.clone()).await {
        Ok(jobs) if jobs.is_empty() => {}
        Ok(jobs) => panic!(
            "expected no `{task}` job with args containing {args}, found {}",
            jobs.len()
        ),
        Err(error) => panic!("cannot look for enqueued `{task}` jobs: {error}"),
    }
}

/// A context for running a handler by hand: a new job id, attempt 1 of 26,
/// no headers.
pub fn context(task: &str) -> TaskContext {
    TaskContext {
        id: uuid::Uuid::now_v7(),
        task: task.to_string(),
        queue: crate::task::DEFAULT_QUEUE.to_string(),
        attempt: 1,
        max_retries: crate::task::DEFAULT_MAX_RETRIES,
        headers: Value::Object(Default::default()),
        worker_id: "inline".to_string(),
        lease_token: 0,
        cancel: tokio_util::sync::CancellationToken::new(),
        lease_lost: Default::default(),
    }
}

/// Runs `task`'s handler inline with `args`, as a worker would (the args go
/// through JSON, so what does not round-trip fails here as it would there).
pub async fn perform<T: Task>(task: &T, args: T::Args) -> Result<T::Output, TaskError> {
    let json = serde_json::to_value(&args)
        .map_err(|e| TaskError::fail(format!("cannot encode args: {e}")))?;
    let args: T::Args = serde_json::from_value(json)
        .map_err(|e| TaskError::fail(format!("task `{}`: cannot decode args: {e}", T::NAME)))?;
    task.run(context(T::NAME), args).await
}
