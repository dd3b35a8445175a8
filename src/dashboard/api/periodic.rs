//! `GET api/periodic`: the periodic schedules the database knows and who
//! leads them.
//!
//! What a schedule is (its interval or cron expression, task, queue, next
//! slot) is written by the process that takes the lead, when it does;
//! followers write nothing, so a schedule only they register shows up once
//! one of them leads. Whether the recorded leader still leads is read from
//! `pg_locks` at every request (see `db/dashboard_periodic_leader.sql`).

use axum::Json;
use axum::extract::State;
use chrono::Utc;
use serde_json::json;

use super::{ApiResult, sql};
use crate::dashboard::AppState;

pub(crate) async fn periodic(State(s): State<AppState>) -> ApiResult {
    let (pool, q) = (&s.client.inner.pool, s.client.inner.queries);
    let (schedules, leader) = tokio::try_join!(
        sql::periodic_schedules(pool, q),
        sql::periodic_leader(pool, q),
    )?;
    // Someone holds the lock but never said who: a process of a Conveyor
    // version that does not record it.
    let unknown_leader = leader.lock_holder.is_some() && !leader.leading;
    Ok(Json(json!({
        "leader": leader,
        "leading": leader.leading,
        "unknown_leader": unknown_leader,
        "schedules": schedules,
        "now": Utc::now(),
    })))
}
