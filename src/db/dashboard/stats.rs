//! A dashboard chart's rollups: its window by the database's clock, the
//! queues and tasks seen in it, and its buckets (`stats.sql`, the statement
//! behind `Client::stats`). Everything comes from `conveyor.stats`, never
//! from `conveyor.jobs`, so a chart outlives the jobs it counts.

use chrono::{DateTime, Utc};
use sqlx::PgPool;

use super::{Queries, bounded, statement};
use crate::error::Result;
use crate::records::{StatsPoint, StatsQuery};

/// Where a chart's buckets lie, and what the page may narrow them to.
#[derive(Debug, Clone, sqlx::FromRow)]
pub(crate) struct ChartWindow {
    /// The database's clock.
    pub now: DateTime<Utc>,
    /// Start of the first bucket.
    pub since: DateTime<Utc>,
    /// End of the last bucket (the one holding `now`).
    pub until: DateTime<Utc>,
    /// Queues with rollups in the window, sorted.
    pub queues: Vec<String>,
    /// Tasks with rollups in the window, sorted.
    pub tasks: Vec<String>,
}

/// What a chart asks for: `buckets` buckets of `step_minutes`, the last one
/// holding the database's now, narrowed to a queue and/or a task.
#[derive(Debug, Clone)]
pub(crate) struct ChartQuery<'a> {
    pub step_minutes: i32,
    pub buckets: i32,
    pub queue: Option<&'a str>,
    pub task: Option<&'a str>,
}

/// The window and its non-empty buckets, oldest first; both statements
/// under the dashboard's statement timeout.
pub(crate) async fn chart(
    pool: &PgPool,
    q: &Queries,
    chart: &ChartQuery<'_>,
) -> Result<(ChartWindow, Vec<StatsPoint>)> {
    bounded(pool, async |conn| {
        let window: ChartWindow =
            sqlx::query_as(statement(q, sql!("dashboard/dashboard_stats_window.sql")))
                .persistent(false)
                .bind(chart.step_minutes)
                .bind(chart.buckets)
                .fetch_one(q.on(&mut *conn))
                .await?;
        let query = StatsQuery {
            since: window.since,
            until: window.until,
            step: std::time::Duration::from_secs(60 * chart.step_minutes.max(1) as u64),
            queue: chart.queue.map(str::to_string),
            task: chart.task.map(str::to_string),
        };
        let points = crate::db::stats(&mut *conn, q, &query).await?;
        Ok((window, points))
    })
    .await
}
