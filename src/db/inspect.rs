//! Reading and acting on jobs by id or filter: fetch, list, statistics, cancel,
//! re-queue, delete.

use super::Target;
use chrono::{DateTime, TimeDelta, Utc};
use serde_json::Value;
use sqlx::postgres::PgArguments;
use sqlx::query::QueryScalar;
use sqlx::{PgConnection, PgPool, Postgres};

use super::{Queries, parse_state};
use crate::error::Result;
use crate::job::{Job, JobId, JobState};
use crate::records::{StatsPoint, StatsQuery};

/// The earliest time a job with this id can have finished, when the id
/// carries its creation time (a UUIDv7, as every id the library makes): a
/// day before that time, a margin for a client clock ahead of the server's.
/// `None` for other ids. A wrong guess (an id chosen with a later time, a
/// row written by hand) costs only a second lookup: see [`fetch_job`].
fn finished_since(id: JobId) -> Option<DateTime<Utc>> {
    if id.get_version_num() != 7 {
        return None;
    }
    let (secs, nanos) = id.get_timestamp()?.to_unix();
    let created = DateTime::from_timestamp(i64::try_from(secs).ok()?, nanos)?;
    created.checked_sub_signed(TimeDelta::days(1))
}

/// A job by id. Finished jobs live in day tables; with a time-ordered id
/// the first lookup reads only the days since its creation, and only a
/// miss reads every partition's id index.
pub(crate) async fn fetch_job(pool: &PgPool, q: &Queries, id: JobId) -> Result<Option<Job>> {
    if let Some(since) = finished_since(id) {
        let found = sqlx::query_as::<_, Job>(q.fetch_job)
            .bind(id)
            .bind(since)
            .fetch_optional(q.on(pool))
            .await?;
        if found.is_some() {
            return Ok(found);
        }
    }
    Ok(sqlx::query_as::<_, Job>(q.fetch_job_anywhere)
        .bind(id)
        .fetch_optional(q.on(pool))
        .await?)
}

/// A job's state by id, looked up as [`fetch_job`] does.
pub(crate) async fn fetch_state(pool: &PgPool, q: &Queries, id: JobId) -> Result<Option<JobState>> {
    let mut state: Option<String> = None;
    if let Some(since) = finished_since(id) {
        state = sqlx::query_scalar(q.fetch_state)
            .bind(id)
            .bind(since)
            .fetch_optional(q.on(pool))
            .await?;
    }
    if state.is_none() {
        state = sqlx::query_scalar(q.fetch_state_anywhere)
            .bind(id)
            .fetch_optional(q.on(pool))
            .await?;
    }
    state.as_deref().map(parse_state).transpose()
}

pub(crate) async fn list_jobs<'e>(
    exec: impl Into<Target<'e>>,
    q: &Queries,
    f: &crate::records::JobFilter,
) -> Result<Vec<Job>> {
    Ok(sqlx::query_as::<_, Job>(q.list_jobs)
        .bind(f.queue.as_deref())
        .bind(f.state.map(JobState::as_str))
        .bind(f.task.as_deref())
        .bind(f.created_after)
        .bind(f.created_before)
        .bind(f.before_id)
        .bind(f.limit)
        .fetch_all(q.on(exec))
        .await?)
}

/// The ids `list_jobs` would return, without the rows. Unprepared: each
/// page is planned with its filter's values (a generic plan cannot drop the
/// filters left out).
pub(crate) async fn list_job_ids<'e>(
    exec: impl Into<Target<'e>>,
    q: &Queries,
    f: &crate::records::JobFilter,
) -> Result<Vec<JobId>> {
    Ok(bind_filter(sqlx::query_scalar(q.list_job_ids), f)
        .bind(f.limit)
        .fetch_all(q.on(exec))
        .await?)
}

/// How many jobs the filter matches (its `limit` aside).
pub(crate) async fn count_jobs<'e>(
    exec: impl Into<Target<'e>>,
    q: &Queries,
    f: &crate::records::JobFilter,
) -> Result<i64> {
    Ok(bind_filter(sqlx::query_scalar(q.count_jobs), f)
        .fetch_one(q.on(exec))
        .await?)
}

/// Binds `f`'s conditions as $1-$6 (queue, state, task, created after,
/// created before, before id) of `list_job_ids.sql` and `count_jobs.sql`,
/// unprepared: the plan depends on which are given.
fn bind_filter<'q, O>(
    query: QueryScalar<'q, Postgres, O, PgArguments>,
    f: &'q crate::records::JobFilter,
) -> QueryScalar<'q, Postgres, O, PgArguments> {
    query
        .persistent(false)
        .bind(f.queue.as_deref())
        .bind(f.state.map(JobState::as_str))
        .bind(f.task.as_deref())
        .bind(f.created_after)
        .bind(f.created_before)
        .bind(f.before_id)
}

pub(crate) async fn queue_stats<'e>(
    exec: impl Into<Target<'e>>,
    q: &Queries,
) -> Result<Vec<crate::records::QueueStats>> {
    Ok(sqlx::query_as(q.queue_stats).fetch_all(q.on(exec)).await?)
}

pub(crate) async fn enqueued_jobs<'e>(
    exec: impl Into<Target<'e>>,
    q: &Queries,
    task: &str,
    args: &Value,
) -> Result<Vec<Job>> {
    Ok(sqlx::query_as::<_, Job>(q.enqueued_jobs)
        .bind(task)
        .bind(args)
        .fetch_all(q.on(exec))
        .await?)
}

/// Deletes jobs that are not running; returns how many. One statement
/// deletes every job whose row it can lock without waiting; those another
/// transaction held (a claim, an outcome batch) are deleted one at a time
/// after it, each statement waiting for that row alone (see
/// `delete_jobs.sql`).
pub(crate) async fn delete_jobs(pool: &PgPool, q: &Queries, ids: &[JobId]) -> Result<u64> {
    let mut tx = pool.begin_with(super::BEGIN).await?;
    // Claimed jobs get stored rows of their own first (settle_claims), so
    // the statement below sees which jobs run.
    sqlx::query(q.settle_claims)
        .bind(ids)
        .execute(q.on(&mut *tx))
        .await?;
    let (deleted, busy): (i64, Vec<JobId>) = sqlx::query_as(q.delete_jobs)
        // Planned with the actual array each time (see the note above `Queries`).
        .persistent(false)
        .bind(ids)
        .fetch_one(q.on(&mut *tx))
        .await?;
    tx.commit().await?;
    let mut deleted = u64::try_from(deleted).unwrap_or_default();
    for id in busy {
        deleted += sqlx::query(q.delete_job)
            .bind(id)
            .execute(q.on(pool))
            .await?
            .rows_affected();
    }
    Ok(deleted)
}

/// Cancels a job (see `conveyor.cancel`); returns its state afterwards.
pub(crate) async fn cancel(
    conn: &mut PgConnection,
    q: &Queries,
    id: JobId,
) -> Result<Option<JobState>> {
    let state: Option<String> = sqlx::query_scalar(q.cancel)
        .bind(id)
        .fetch_one(q.on(&mut *conn))
        .await?;
    state.as_deref().map(parse_state).transpose()
}

/// Re-queues failed or cancelled jobs; returns how many.
pub(crate) async fn requeue<'e>(
    exec: impl Into<Target<'e>>,
    q: &Queries,
    ids: &[JobId],
) -> Result<i32> {
    Ok(sqlx::query_scalar(q.requeue)
        .bind(ids)
        .fetch_one(q.on(exec))
        .await?)
}

/// The rollups of `conveyor.stats` for `query` (see `stats.sql`).
pub(crate) async fn stats<'e>(
    exec: impl Into<Target<'e>>,
    q: &Queries,
    query: &StatsQuery,
) -> Result<Vec<StatsPoint>> {
    let minutes = (query.step.as_secs() / 60).max(1);
    let step = sqlx::postgres::types::PgInterval {
        months: 0,
        days: 0,
        microseconds: i64::try_from(minutes)
            .unwrap_or(i64::MAX / 60_000_000)
            .saturating_mul(60_000_000),
    };
    Ok(sqlx::query_as(q.stats)
        .bind(query.since)
        .bind(query.until)
        .bind(step)
        .bind(query.queue.as_deref())
        .bind(query.task.as_deref())
        .fetch_all(q.on(exec))
        .await?)
}
