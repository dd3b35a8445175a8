//! Periodic schedules for the dashboard: what the leader recorded, and
//! whether it still leads.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgPool;

use super::{Queries, statement};
use crate::error::Result;
use crate::job::JobId;

/// A row of `conveyor.periodic`, with the state of its last slot's job.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub(crate) struct Schedule {
    pub name: String,
    pub schedule: Option<String>,
    pub task: Option<String>,
    pub queue: Option<String>,
    pub missed: Option<String>,
    pub last_slot: Option<DateTime<Utc>>,
    pub last_job_id: Option<JobId>,
    pub last_job_state: Option<String>,
    pub next_slot: Option<DateTime<Utc>>,
    pub on_leader: bool,
    pub updated_at: DateTime<Utc>,
}

/// Who holds the scheduler's lock, and who last said it leads.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub(crate) struct Leader {
    /// The backend holding the lock now, if any.
    pub lock_holder: Option<i32>,
    pub host: Option<String>,
    pub pid: Option<i32>,
    pub version: Option<String>,
    pub backend_pid: Option<i32>,
    pub since: Option<DateTime<Utc>>,
    /// The recorded leader is the lock holder.
    pub leading: bool,
    /// Its workers' ids in the registry.
    pub workers: Vec<String>,
}

pub(crate) async fn periodic_schedules(pool: &PgPool, q: &Queries) -> Result<Vec<Schedule>> {
    Ok(
        sqlx::query_as(statement(q, sql!("dashboard/dashboard_periodic.sql")))
            .fetch_all(q.on(pool))
            .await?,
    )
}

pub(crate) async fn periodic_leader(pool: &PgPool, q: &Queries) -> Result<Leader> {
    let sql = statement(q, sql!("dashboard/dashboard_periodic_leader.sql"));
    Ok(sqlx::query_as(sql)
        .bind(crate::db::periodic_lock_name(q))
        .fetch_one(q.on(pool))
        .await?)
}
