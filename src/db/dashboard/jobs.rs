//! Job lists and searches, counts before a bulk action, a page of a bulk
//! cancel, jobs by id prefix, a workflow's jobs.

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use sqlx::{PgConnection, PgPool};

use super::{Queries, bounded, statement};
use crate::error::Result;
use crate::job::{JobId, JobState};

/// A job as listed: no args, result or headers.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub(crate) struct JobSummary {
    pub id: JobId,
    pub queue: String,
    pub task: String,
    pub state: String,
    pub priority: i32,
    pub attempt: i32,
    pub max_retries: i32,
    pub run_at: DateTime<Utc>,
    pub created_at: DateTime<Utc>,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    pub worker_id: Option<String>,
    pub last_error: Option<String>,
}

/// A member or step of a workflow.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub(crate) struct WorkflowJob {
    #[sqlx(flatten)]
    #[serde(flatten)]
    pub job: JobSummary,
    pub workflow_index: Option<i32>,
}

/// Where a page of a job list starts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Cursor {
    /// Unfinished states: ids below this one.
    Before(JobId),
    /// Final states: rows before this (finished_at, id).
    FinishedBefore(DateTime<Utc>, JobId),
}

/// What narrows a list beyond state, queue and task. Any of it reads each
/// candidate row: see [`Search::reads_rows`].
#[derive(Debug, Clone, Default)]
pub(crate) struct Search {
    /// The job's args contain this JSON (`args @> …`).
    pub args: Option<Value>,
    /// The job's last error contains this text, in any case.
    pub error: Option<String>,
    /// Final states only: finished within this many seconds.
    pub finished_within_secs: Option<f64>,
}

impl Search {
    /// Whether the statement reads rows beyond an index's range (args or
    /// error text given): then it runs under a statement timeout.
    pub(crate) fn reads_rows(&self) -> bool {
        self.args.is_some() || self.error.is_some()
    }
}

/// Which jobs a list shows.
#[derive(Debug, Clone)]
pub(crate) struct JobPage<'a> {
    pub state: JobState,
    pub queue: Option<&'a str>,
    pub task: Option<&'a str>,
    pub search: &'a Search,
    pub cursor: Option<Cursor>,
    pub limit: i64,
}

/// A page of jobs; under a statement timeout when it searches.
pub(crate) async fn list_jobs(
    pool: &PgPool,
    q: &Queries,
    page: &JobPage<'_>,
) -> Result<Vec<JobSummary>> {
    if page.search.reads_rows() {
        bounded(pool, async |conn| list_on(conn, q, page).await).await
    } else {
        let mut conn = pool.acquire().await?;
        list_on(&mut conn, q, page).await
    }
}

async fn list_on(
    conn: &mut PgConnection,
    q: &Queries,
    page: &JobPage<'_>,
) -> Result<Vec<JobSummary>> {
    let search = page.search;
    let (args, error) = (search.args.as_ref(), search.error.as_deref());
    let rows = if page.state.is_final() {
        let (at, id) = match page.cursor {
            Some(Cursor::FinishedBefore(at, id)) => (Some(at), Some(id)),
            _ => (None, None),
        };
        sqlx::query_as(statement(q, sql!("dashboard/dashboard_jobs_finished.sql")))
            .persistent(false)
            .bind(page.state.as_str())
            .bind(page.queue)
            .bind(page.task)
            .bind(at)
            .bind(id)
            .bind(page.limit)
            .bind(args)
            .bind(error)
            .bind(search.finished_within_secs)
            .fetch_all(q.on(&mut *conn))
            .await?
    } else {
        let before = match page.cursor {
            Some(Cursor::Before(id)) => Some(id),
            _ => None,
        };
        if page.state == JobState::Pending {
            sqlx::query_as(statement(q, sql!("dashboard/dashboard_jobs_pending.sql")))
                .persistent(false)
                .bind(page.queue)
                .bind(page.task)
                .bind(before)
                .bind(page.limit)
                .bind(args)
                .bind(error)
                .fetch_all(q.on(&mut *conn))
                .await?
        } else {
            sqlx::query_as(statement(q, sql!("dashboard/dashboard_jobs_active.sql")))
                .persistent(false)
                .bind(page.state.as_str())
                .bind(page.queue)
                .bind(page.task)
                .bind(before)
                .bind(page.limit)
                .bind(args)
                .bind(error)
                .fetch_all(q.on(&mut *conn))
                .await?
        }
    };
    Ok(rows)
}

/// How many jobs a list's filter matches (cursor and limit aside), up to
/// `cap`, under a statement timeout.
pub(crate) async fn count_jobs(
    pool: &PgPool,
    q: &Queries,
    page: &JobPage<'_>,
    cap: i64,
) -> Result<i64> {
    let search = page.search;
    let (args, error) = (search.args.as_ref(), search.error.as_deref());
    bounded(pool, async |conn| {
        let count = if page.state.is_final() {
            sqlx::query_scalar(statement(q, sql!("dashboard/dashboard_count_finished.sql")))
                .persistent(false)
                .bind(page.state.as_str())
                .bind(page.queue)
                .bind(page.task)
                .bind(args)
                .bind(error)
                .bind(search.finished_within_secs)
                .bind(cap)
                .fetch_one(q.on(&mut *conn))
                .await?
        } else if page.state == JobState::Pending {
            sqlx::query_scalar(statement(q, sql!("dashboard/dashboard_count_pending.sql")))
                .persistent(false)
                .bind(page.queue)
                .bind(page.task)
                .bind(args)
                .bind(error)
                .bind(cap)
                .fetch_one(q.on(&mut *conn))
                .await?
        } else {
            sqlx::query_scalar(statement(q, sql!("dashboard/dashboard_count_active.sql")))
                .persistent(false)
                .bind(page.state.as_str())
                .bind(page.queue)
                .bind(page.task)
                .bind(args)
                .bind(error)
                .bind(cap)
                .fetch_one(q.on(&mut *conn))
                .await?
        };
        Ok(count)
    })
    .await
}

/// Jobs whose id lies in `low..=high` (an id prefix padded), in id order.
pub(crate) async fn jobs_by_id_range(
    pool: &PgPool,
    q: &Queries,
    low: JobId,
    high: JobId,
    limit: i64,
) -> Result<Vec<JobSummary>> {
    Ok(
        sqlx::query_as(statement(q, sql!("dashboard/dashboard_jobs_by_id.sql")))
            .bind(low)
            .bind(high)
            .bind(limit)
            .fetch_all(q.on(pool))
            .await?,
    )
}

/// `conveyor.cancel()` on each id: each job's state afterwards (`None`: no
/// such job). One statement cancels every job whose row it can lock without
/// waiting; those another transaction held (a claim, an outcome batch) are
/// cancelled one at a time after it, each statement waiting for that row
/// alone (see `dashboard_cancel_jobs.sql`).
pub(crate) async fn cancel_jobs(
    pool: &PgPool,
    q: &Queries,
    ids: &[JobId],
) -> Result<Vec<(JobId, Option<String>)>> {
    let rows: Vec<(JobId, Option<String>, bool)> =
        sqlx::query_as(statement(q, sql!("dashboard/dashboard_cancel_jobs.sql")))
            .persistent(false)
            .bind(ids)
            .fetch_all(q.on(pool))
            .await?;
    let mut states = Vec::with_capacity(rows.len());
    for (id, state, busy) in rows {
        let state = if busy {
            sqlx::query_scalar(q.cancel)
                .bind(id)
                .fetch_one(q.on(pool))
                .await?
        } else {
            state
        };
        states.push((id, state));
    }
    Ok(states)
}

/// The jobs of one workflow, in member or step order, then a chord's callback.
pub(crate) async fn workflow_jobs(
    pool: &PgPool,
    q: &Queries,
    workflow: uuid::Uuid,
    limit: i64,
) -> Result<Vec<WorkflowJob>> {
    let sql = statement(q, sql!("dashboard/dashboard_workflow_jobs.sql"));
    Ok(sqlx::query_as(sql)
        .persistent(false)
        .bind(workflow)
        .bind(limit)
        .fetch_all(q.on(pool))
        .await?)
}
