//! The dashboard's statements: cheap overview numbers and keyset-paged job
//! lists (see the comments in each `dashboard_*.sql` file for the indexes
//! they rely on).
//!
//! They run as one-off (unnamed) statements, planned with the actual
//! parameter values each time: a cached generic plan cannot know which
//! state's partial index applies, and would walk the whole table for a rare
//! state. Planning costs well under a millisecond; a dashboard polls a few
//! times a minute.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgPool;

use super::{Queries, in_schema};
use crate::error::Result;
use crate::job::{JobId, JobState};

/// Dashboard statement texts for one schema.
struct Statements {
    overview: &'static str,
    totals: &'static str,
    jobs_active: &'static str,
    jobs_pending: &'static str,
    jobs_finished: &'static str,
    workflow_jobs: &'static str,
}

fn statements(q: &Queries) -> &'static Statements {
    static CACHE: OnceLock<Mutex<HashMap<&'static str, &'static Statements>>> = OnceLock::new();
    let mut cache = CACHE
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    cache.entry(q.schema).or_insert_with(|| {
        let load =
            |sql: &str| -> &'static str { Box::leak(in_schema(sql, q.schema).into_boxed_str()) };
        Box::leak(Box::new(Statements {
            overview: load(include_str!("dashboard_overview.sql")),
            totals: load(include_str!("dashboard_totals.sql")),
            jobs_active: load(include_str!("dashboard_jobs_active.sql")),
            jobs_pending: load(include_str!("dashboard_jobs_pending.sql")),
            jobs_finished: load(include_str!("dashboard_jobs_finished.sql")),
            workflow_jobs: load(include_str!("dashboard_workflow_jobs.sql")),
        }))
    })
}

/// One queue's row in the overview.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub(crate) struct QueueRow {
    pub queue: String,
    pub scheduled: i64,
    pub pending: i64,
    pub started: i64,
    pub retry: i64,
    pub oldest_pending_secs: Option<f64>,
    pub succeeded_1m: i64,
    pub failed_1m: i64,
    pub succeeded_1h: i64,
    pub failed_1h: i64,
    pub failed_24h: i64,
    pub cancelled_24h: i64,
    pub paused: bool,
    /// Live workers in the registry serving this queue (set by the API).
    #[sqlx(default)]
    pub live_workers: i64,
}

/// Whole-table numbers: an estimate, and capped counts of kept finished jobs.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub(crate) struct Totals {
    pub estimated_jobs: i64,
    pub success: i64,
    pub failure: i64,
    pub cancelled: i64,
}

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

/// Which jobs a list shows.
#[derive(Debug, Clone)]
pub(crate) struct JobPage<'a> {
    pub state: JobState,
    pub queue: Option<&'a str>,
    pub task: Option<&'a str>,
    pub cursor: Option<Cursor>,
    pub limit: i64,
}

pub(crate) async fn overview(pool: &PgPool, q: &Queries) -> Result<Vec<QueueRow>> {
    let sql = statements(q).overview;
    Ok(sqlx::query_as(sql)
        .persistent(false)
        .fetch_all(pool)
        .await?)
}

pub(crate) async fn totals(pool: &PgPool, q: &Queries, cap: i64) -> Result<Totals> {
    let sql = statements(q).totals;
    Ok(sqlx::query_as(sql)
        .persistent(false)
        .bind(cap)
        .fetch_one(pool)
        .await?)
}

pub(crate) async fn list_jobs(
    pool: &PgPool,
    q: &Queries,
    page: &JobPage<'_>,
) -> Result<Vec<JobSummary>> {
    let s = statements(q);
    let rows = if page.state.is_final() {
        let (at, id) = match page.cursor {
            Some(Cursor::FinishedBefore(at, id)) => (Some(at), Some(id)),
            _ => (None, None),
        };
        sqlx::query_as(s.jobs_finished)
            .persistent(false)
            .bind(page.state.as_str())
            .bind(page.queue)
            .bind(page.task)
            .bind(at)
            .bind(id)
            .bind(page.limit)
            .fetch_all(pool)
            .await?
    } else {
        let before = match page.cursor {
            Some(Cursor::Before(id)) => Some(id),
            _ => None,
        };
        if page.state == JobState::Pending {
            sqlx::query_as(s.jobs_pending)
                .persistent(false)
                .bind(page.queue)
                .bind(page.task)
                .bind(before)
                .bind(page.limit)
                .fetch_all(pool)
                .await?
        } else {
            sqlx::query_as(s.jobs_active)
                .persistent(false)
                .bind(page.state.as_str())
                .bind(page.queue)
                .bind(page.task)
                .bind(before)
                .bind(page.limit)
                .fetch_all(pool)
                .await?
        }
    };
    Ok(rows)
}

pub(crate) async fn workflow_jobs(
    pool: &PgPool,
    q: &Queries,
    workflow: uuid::Uuid,
    limit: i64,
) -> Result<Vec<WorkflowJob>> {
    let sql = statements(q).workflow_jobs;
    Ok(sqlx::query_as(sql)
        .persistent(false)
        .bind(workflow)
        .bind(limit)
        .fetch_all(pool)
        .await?)
}
