//! Maintenance services: rescue of expired leases, rotation of the ready
//! ring, retention, the periodic scheduler's leadership and slots.

use super::Target;
use std::collections::HashMap;

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgPool, Row};

use super::Queries;
use super::outcome::after_finish;
use crate::error::Result;
use crate::job::{JobId, JobState};

/// Takes the transaction-scoped advisory lock that lets one process at a
/// time run maintenance `service` on this schema; false if another holds it.
async fn try_service_lock(conn: &mut PgConnection, q: &Queries, service: &str) -> Result<bool> {
    Ok(sqlx::query_scalar(
        "SELECT pg_try_advisory_xact_lock(hashtextextended('conveyor.' || $1 || ':' || $2, 0))",
    )
    .bind(service)
    .bind(q.schema)
    .fetch_one(q.on(&mut *conn))
    .await?)
}

/// Recovers up to `limit` jobs whose lease expired, if no other process is
/// doing it right now (advisory lock); `None` when another one is.
pub(crate) async fn rescue(pool: &PgPool, q: &Queries, limit: i64) -> Result<Option<i64>> {
    let mut tx = pool.begin_with(super::BEGIN).await?;
    if !try_service_lock(&mut tx, q, "rescuer").await? {
        return Ok(None);
    }
    // Claims whose lease expired become started rows with that lease
    // (settle_expired_claims), which the rescue statement then reads.
    sqlx::query(q.settle_expired_claims)
        .bind(i32::try_from(limit).unwrap_or(i32::MAX))
        .execute(q.on(&mut *tx))
        .await?;
    let row = sqlx::query(q.rescue)
        .bind(limit)
        .bind(q.job_ready_channel)
        .bind(q.job_finished_channel)
        .fetch_one(q.on(&mut *tx))
        .await?;
    let follow_ups: Vec<JobId> = row.try_get("follow_ups")?;
    after_finish(&mut tx, q, &follow_ups).await?;
    tx.commit().await?;
    Ok(Some(row.try_get("rescued")?))
}

/// What one pass of the ready ring's upkeep found (see
/// `sql/ring/rotate_ring.sql`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RingPass {
    /// The bank of slots taking inserts, which claims read.
    pub bank: usize,
    /// Slots emptied.
    pub emptied: i32,
    /// A long transaction holds a slot of the ring (`None`: another
    /// process did this pass's work, so it is not known).
    pub held: Option<bool>,
    /// It holds a slot of the current bank: no other bank was free, and
    /// claims slow down until it ends.
    pub stuck: Option<bool>,
}

/// One pass of the ready ring's upkeep: empties sealed slots, switches
/// banks while a long transaction holds the current one, drops banks left
/// long ago.
pub(crate) async fn rotate_ring(pool: &PgPool, q: &Queries) -> Result<RingPass> {
    let (bank, emptied, held, stuck): (i16, i32, Option<bool>, Option<bool>) =
        sqlx::query_as(q.rotate_ring).fetch_one(q.on(pool)).await?;
    Ok(RingPass {
        // A bank the statements were not prepared for (written by hand):
        // bank 0's (claims find nothing until the ring is back there).
        bank: usize::try_from(bank)
            .ok()
            .filter(|b| *b < super::ring::READY_BANKS)
            .unwrap_or(0),
        emptied,
        held,
        stuck,
    })
}

/// A transaction that has held a lock on the ready ring for longer than
/// `secs`: (pid, application name or user, seconds open).
pub(crate) async fn ring_blocker(
    pool: &PgPool,
    q: &Queries,
    secs: f64,
) -> Result<Option<(i32, String, f64)>> {
    Ok(sqlx::query_as(q.ring_blocker)
        .bind(secs)
        .fetch_optional(q.on(pool))
        .await?)
}

/// Deletes the outcome rollups older than `age_secs`; returns how many rows.
pub(crate) async fn prune_stats(pool: &PgPool, q: &Queries, age_secs: f64) -> Result<u64> {
    Ok(sqlx::query(q.prune_stats)
        .bind(age_secs)
        .execute(q.on(pool))
        .await?
        .rows_affected())
}

/// Drops the day tables of finished jobs in `state` whose whole day ended
/// more than `age_secs` ago; returns how many (0 while another process is
/// at it, or while a long transaction holds the state's table).
pub(crate) async fn drop_history(
    pool: &PgPool,
    q: &Queries,
    state: JobState,
    age_secs: f64,
) -> Result<i32> {
    Ok(sqlx::query_scalar(q.drop_history)
        .bind(state.as_str())
        .bind(age_secs)
        .fetch_one(q.on(pool))
        .await?)
}

/// Creates the missing day tables of finished jobs for today and the next
/// two days; returns how many.
pub(crate) async fn create_history(pool: &PgPool, q: &Queries) -> Result<i32> {
    Ok(sqlx::query_scalar(q.create_history)
        .fetch_one(q.on(pool))
        .await?)
}

/// What one statement of [`fold_stats`] did.
#[derive(Debug, Clone, Copy, sqlx::FromRow)]
pub(crate) struct Folded {
    /// Where it stopped: the next statement starts there.
    pub until: DateTime<Utc>,
    /// Rows of shard 0 it added to.
    pub folded: i64,
    /// Whether it reached 10 minutes ago (nothing older is left to fold).
    pub caught_up: bool,
}

/// Folds the rollups' shards of an hour of minutes from `since` (at most up
/// to 10 minutes ago) into shard 0 (see `fold_stats.sql`).
pub(crate) async fn fold_stats(pool: &PgPool, q: &Queries, since: DateTime<Utc>) -> Result<Folded> {
    Ok(sqlx::query_as(q.fold_stats)
        .bind(since)
        .fetch_one(q.on(pool))
        .await?)
}

/// The oldest minute with rollups left in a shard other than 0 (or 10
/// minutes ago).
pub(crate) async fn stats_unfolded(pool: &PgPool, q: &Queries) -> Result<DateTime<Utc>> {
    Ok(sqlx::query_scalar(q.stats_unfolded)
        .fetch_one(q.on(pool))
        .await?)
}

/// Deletes up to `limit` jobs in `state` finished more than `age` ago, if no
/// other process is pruning right now; `None` when one is. Without
/// `by_row`, only those below the day tables (which
/// [`drop_history`] drops whole).
pub(crate) async fn prune(
    pool: &PgPool,
    q: &Queries,
    state: JobState,
    age_secs: f64,
    limit: i64,
    by_row: bool,
) -> Result<Option<u64>> {
    let mut tx = pool.begin_with(super::BEGIN).await?;
    if !try_service_lock(&mut tx, q, "pruner").await? {
        return Ok(None);
    }
    let deleted = sqlx::query(q.prune)
        .bind(state.as_str())
        .bind(age_secs)
        .bind(limit)
        .bind(by_row)
        .execute(q.on(&mut *tx))
        .await?
        .rows_affected();
    tx.commit().await?;
    Ok(Some(deleted))
}

/// Deletes finished workflows older than `age` with no jobs left, and
/// expired unique keys.
pub(crate) async fn prune_leftovers<'e>(
    exec: impl Into<Target<'e>>,
    q: &Queries,
    age_secs: f64,
) -> Result<i64> {
    Ok(sqlx::query_scalar(q.prune_leftovers)
        .bind(age_secs)
        .fetch_one(q.on(exec))
        .await?)
}

/// How long the server keeps a leader's session that says nothing. The
/// leader pings at least every 2 s; one cut off from the database (its TCP
/// connection open, so the server cannot tell) loses the lock after this
/// instead of when TCP keepalive gives up, hours later, and another process
/// takes over.
const LEADER_IDLE_LIMIT: &str = "SET idle_session_timeout = '8s'";

/// Takes the periodic scheduler's leadership on `conn` (a session lock, held
/// until released or the connection ends); false if another process has it.
/// (The dashboard finds the holder by the same name: [`periodic_lock_name`].)
///
/// With `in_transaction` (`conn` goes through a transaction-mode pooler,
/// where a session lock would stay on whichever server connection took it)
/// the lock is transaction-scoped instead, in a transaction `conn` keeps
/// open while it leads: the pooler keeps the server connection for it, the
/// server ends it after 8 s of silence, and closing `conn` releases it.
/// Nothing is written in that transaction (it would hold back vacuum):
/// see [`announce_periodic`]'s `backend_pid`.
pub(crate) async fn try_lead_periodic(
    conn: &mut PgConnection,
    q: &Queries,
    in_transaction: bool,
) -> Result<bool> {
    let lock = if in_transaction {
        sqlx::raw_sql(LEADER_TRANSACTION)
            .execute(&mut *conn)
            .await?;
        "SELECT pg_try_advisory_xact_lock(hashtextextended('conveyor.periodic:' || $1, 0))"
    } else {
        // PostgreSQL 14 and later; on older servers the limit is just not set.
        if let Err(error) = sqlx::raw_sql(LEADER_IDLE_LIMIT).execute(&mut *conn).await {
            tracing::debug!(%error, "conveyor: cannot bound the periodic leader's idle session");
        }
        "SELECT pg_try_advisory_lock(hashtextextended('conveyor.periodic:' || $1, 0))"
    };
    Ok(sqlx::query_scalar(lock)
        .bind(q.schema)
        .persistent(!in_transaction)
        .fetch_one(&mut *conn)
        .await?)
}

/// The leader's transaction behind a transaction-mode pooler (see
/// [`try_lead_periodic`]), ended by the server after 8 s idle.
const LEADER_TRANSACTION: &str = "BEGIN; SET LOCAL idle_in_transaction_session_timeout = '8s'";

/// The server process of `conn` (the lock holder, for [`announce_periodic`]).
pub(crate) async fn backend_pid(conn: &mut PgConnection) -> Result<i32> {
    Ok(sqlx::query_scalar("SELECT pg_backend_pid()")
        .persistent(false)
        .fetch_one(&mut *conn)
        .await?)
}

/// Whether the leader's connection is still alive.
pub(crate) async fn ping(conn: &mut PgConnection) -> Result<()> {
    sqlx::raw_sql("SELECT 1").execute(&mut *conn).await?;
    Ok(())
}

/// The latest slot enqueued for each of `names`.
pub(crate) async fn periodic_last_slots<'e>(
    exec: impl Into<Target<'e>>,
    q: &Queries,
    names: &[String],
) -> Result<HashMap<String, DateTime<Utc>>> {
    let rows: Vec<(String, DateTime<Utc>)> = sqlx::query_as(q.periodic_last_slots)
        .bind(names)
        .fetch_all(q.on(exec))
        .await?;
    Ok(rows.into_iter().collect())
}

/// Records that `slot` of schedule `name` was enqueued as `job`, and the
/// schedule's next slot.
pub(crate) async fn periodic_record_slot<'e>(
    exec: impl Into<Target<'e>>,
    q: &Queries,
    name: &str,
    slot: DateTime<Utc>,
    job: JobId,
    next: Option<DateTime<Utc>>,
) -> Result<()> {
    sqlx::query(q.periodic_record_slot)
        .bind(name)
        .bind(slot)
        .bind(job)
        .bind(next)
        .execute(q.on(exec))
        .await?;
    Ok(())
}

/// A schedule as the periodic leader announces it.
pub(crate) struct AnnouncedSchedule {
    pub name: String,
    pub schedule: String,
    pub task: String,
    pub queue: String,
    /// `skip` or `enqueue_once`.
    pub missed: &'static str,
    pub next_slot: Option<DateTime<Utc>>,
}

/// On the leadership connection of a process that just took the lead: who
/// leads (this session's backend is the lock holder, unless `backend_pid`
/// names it: the leader's lock is then held in a transaction that must not
/// write, and this runs elsewhere) and the schedules it runs; every other
/// schedule is marked as not on the leader.
pub(crate) async fn announce_periodic<'e>(
    exec: impl Into<Target<'e>>,
    q: &Queries,
    (host, pid, backend_pid): (&str, i32, Option<i32>),
    schedules: &[AnnouncedSchedule],
) -> Result<()> {
    let column = |f: fn(&AnnouncedSchedule) -> String| schedules.iter().map(f).collect::<Vec<_>>();
    let next: Vec<Option<DateTime<Utc>>> = schedules.iter().map(|s| s.next_slot).collect();
    sqlx::query(q.periodic_announce)
        .bind(host)
        .bind(pid)
        .bind(env!("CARGO_PKG_VERSION"))
        .bind(column(|s| s.name.clone()))
        .bind(column(|s| s.schedule.clone()))
        .bind(column(|s| s.task.clone()))
        .bind(column(|s| s.queue.clone()))
        .bind(column(|s| s.missed.to_string()))
        .bind(next)
        .bind(backend_pid)
        .execute(q.on(exec))
        .await?;
    Ok(())
}

/// The name of the periodic scheduler's advisory lock for a schema (what
/// [`try_lead_periodic`] hashes), to find its holder in `pg_locks`.
#[cfg(feature = "dashboard")]
pub(crate) fn periodic_lock_name(q: &Queries) -> String {
    format!("conveyor.periodic:{}", q.schema)
}
