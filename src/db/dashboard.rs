//! The dashboard's statements: cheap overview numbers, keyset-paged job
//! lists and searches, bulk-action counts, workflows, periodic schedules
//! and the charts' rollups (see the comments in each `dashboard_*.sql` file
//! for the indexes they rely on).
//!
//! They run as one-off (unnamed) statements, planned with the actual
//! parameter values each time: a cached generic plan cannot know which
//! state's partial index applies, and would walk the whole table for a rare
//! state. Planning costs well under a millisecond; a dashboard polls a few
//! times a minute. What may read many rows (a search in args or error text,
//! the count before a bulk action) runs under a statement timeout
//! ([`bounded`]).

mod jobs;
mod periodic;
mod stats;
mod workflows;

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use serde::Serialize;
use sqlx::{PgConnection, PgPool};

use super::{Queries, in_schema};
use crate::error::Result;

pub(crate) use jobs::{
    Cursor, JobPage, JobSummary, Search, cancel_jobs, count_jobs, jobs_by_id_range, list_jobs,
    workflow_jobs,
};
pub(crate) use periodic::{periodic_leader, periodic_schedules};
pub(crate) use stats::{ChartQuery, ChartWindow, chart};
pub(crate) use workflows::{GraphJob, WorkflowNode, graph_jobs, list_workflows, workflow_tree};

/// `sql`, a statement written for the schema `conveyor`, in `q`'s schema:
/// rewritten once per schema and statement, and kept.
fn statement(q: &Queries, sql: &'static str) -> &'static str {
    type Cache = Mutex<HashMap<(&'static str, usize), &'static str>>;
    static CACHE: OnceLock<Cache> = OnceLock::new();
    if q.schema == super::DEFAULT_SCHEMA {
        return sql;
    }
    let mut cache = CACHE
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    // Keyed by the text's address: each is one `include_str!` static.
    cache
        .entry((q.schema, sql.as_ptr() as usize))
        .or_insert_with(|| Box::leak(in_schema(sql, q.schema).into_boxed_str()))
}

/// How long a statement that may read many rows may run.
pub(crate) const STATEMENT_TIMEOUT_SECS: u32 = 5;

/// Runs `f` in a transaction of its own whose statements are cancelled
/// after [`STATEMENT_TIMEOUT_SECS`] (`Error::Database` with SQLSTATE
/// 57014, see [`timed_out`]).
async fn bounded<T>(
    pool: &PgPool,
    f: impl for<'c> AsyncFnOnce(&'c mut PgConnection) -> Result<T>,
) -> Result<T> {
    let mut tx = pool.begin_with(super::BEGIN).await?;
    let limit = format!("SET LOCAL statement_timeout = '{STATEMENT_TIMEOUT_SECS}s'");
    sqlx::raw_sql(sqlx::AssertSqlSafe(limit))
        .execute(&mut *tx)
        .await?;
    let value = f(&mut tx).await?;
    tx.commit().await?;
    Ok(value)
}

/// Whether `error` is PostgreSQL cancelling a statement that ran past its
/// `statement_timeout`.
pub(crate) fn timed_out(error: &crate::error::Error) -> bool {
    matches!(error, crate::error::Error::Database(sqlx::Error::Database(e))
        if e.code().as_deref() == Some("57014"))
}

/// One queue's row in the overview, with its settings.
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
    pub concurrency_limit: Option<i32>,
    pub rate_limit: Option<i32>,
    pub rate_period_secs: Option<f64>,
    pub rate_window_count: Option<i32>,
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

pub(crate) async fn overview(pool: &PgPool, q: &Queries) -> Result<Vec<QueueRow>> {
    let sql = statement(q, sql!("dashboard/dashboard_overview.sql"));
    Ok(sqlx::query_as(sql)
        .persistent(false)
        .fetch_all(q.on(pool))
        .await?)
}

pub(crate) async fn totals(pool: &PgPool, q: &Queries, cap: i64) -> Result<Totals> {
    let sql = statement(q, sql!("dashboard/dashboard_totals.sql"));
    Ok(sqlx::query_as(sql)
        .persistent(false)
        .bind(cap)
        .fetch_one(q.on(pool))
        .await?)
}
