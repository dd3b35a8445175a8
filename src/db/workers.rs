//! The worker registry (`conveyor.workers`): register, beat, deregister,
//! mark the silent dead, list.

use super::Target;
use sqlx::PgPool;

use super::Queries;
use crate::error::Result;
use crate::records::WorkerInfo;

/// What a worker registers.
pub(crate) struct Registration<'a> {
    pub id: &'a str,
    pub host: &'a str,
    pub pid: i32,
    pub queues: &'a [String],
    pub concurrency: i32,
    pub beat_secs: f64,
}

pub(crate) async fn register_worker(
    pool: &PgPool,
    q: &Queries,
    r: &Registration<'_>,
) -> Result<()> {
    sqlx::query(q.worker_register)
        .bind(r.id)
        .bind(r.host)
        .bind(r.pid)
        .bind(env!("CARGO_PKG_VERSION"))
        .bind(r.queues)
        .bind(r.concurrency)
        .bind(r.beat_secs)
        .execute(q.on(pool))
        .await?;
    Ok(())
}

/// A beat; false if the worker has no row (the caller registers again).
pub(crate) async fn beat_worker(pool: &PgPool, q: &Queries, id: &str, busy: i32) -> Result<bool> {
    let updated = sqlx::query(q.worker_beat)
        .bind(id)
        .bind(busy)
        .execute(q.on(pool))
        .await?
        .rows_affected();
    Ok(updated > 0)
}

pub(crate) async fn deregister_worker(pool: &PgPool, q: &Queries, id: &str) -> Result<()> {
    sqlx::query(q.worker_deregister)
        .bind(id)
        .execute(q.on(pool))
        .await?;
    Ok(())
}

/// Marks workers silent for three beats dead; returns how many.
pub(crate) async fn mark_dead_workers(pool: &PgPool, q: &Queries) -> Result<i64> {
    Ok(sqlx::query_scalar(q.workers_mark_dead)
        .fetch_one(q.on(pool))
        .await?)
}

pub(crate) async fn list_workers<'e>(
    exec: impl Into<Target<'e>>,
    q: &Queries,
) -> Result<Vec<WorkerInfo>> {
    Ok(sqlx::query_as(q.workers_list).fetch_all(q.on(exec)).await?)
}
