//! What a metrics scrape reads (`crate::Metrics`): all-time totals from the
//! rollups, and the unfinished jobs by queue. Neither reads the history.

use super::{Queries, Target};
use crate::error::Result;

/// All-time totals of one queue and task (a row of `metrics_totals.sql`).
#[derive(Debug, Clone, sqlx::FromRow)]
pub(crate) struct MetricsTotals {
    pub queue: String,
    pub task: String,
    pub enqueued: i64,
    pub succeeded: i64,
    pub failed: i64,
    pub retried: i64,
    pub rescued: i64,
    pub cancelled: i64,
    /// Counts per bucket of `conveyor.stats_buckets_ms()` (19).
    pub wait_ms: Vec<i64>,
    pub run_ms: Vec<i64>,
    pub wait_ms_sum: f64,
    pub run_ms_sum: f64,
}

/// One queue's unfinished jobs (a row of `metrics_queues.sql`).
#[derive(Debug, Clone, sqlx::FromRow)]
pub(crate) struct MetricsQueue {
    pub queue: String,
    pub scheduled: i64,
    pub pending: i64,
    pub started: i64,
    pub retry: i64,
    pub oldest_pending_secs: f64,
    pub paused: bool,
}

pub(crate) async fn metrics_totals<'e>(
    exec: impl Into<Target<'e>>,
    q: &Queries,
) -> Result<Vec<MetricsTotals>> {
    Ok(sqlx::query_as(q.metrics_totals)
        .fetch_all(q.on(exec))
        .await?)
}

pub(crate) async fn metrics_queues<'e>(
    exec: impl Into<Target<'e>>,
    q: &Queries,
) -> Result<Vec<MetricsQueue>> {
    Ok(sqlx::query_as(q.metrics_queues)
        .fetch_all(q.on(exec))
        .await?)
}
