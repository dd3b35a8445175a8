//! Claiming: promoting due jobs, and claiming pending ones under a fresh
//! fencing token (`claim.sql`).

use super::Target;
use chrono::{DateTime, Utc};
use sqlx::{PgPool, Row};

use super::Queries;
use crate::error::Result;
use crate::job::{Job, JobId};

/// What [`promote`] found.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Promoted {
    /// Jobs moved to pending.
    pub promoted: i64,
    /// Earliest `run_at` still in the future, if any.
    pub next_run_at: Option<DateTime<Utc>>,
    /// The database's clock, to turn `next_run_at` into a local wait.
    pub db_now: DateTime<Utc>,
}

/// Promotes due jobs of `queues` to pending.
pub(crate) async fn promote<'e>(
    exec: impl Into<Target<'e>>,
    q: &Queries,
    queues: &[String],
    limit: i64,
) -> Result<Promoted> {
    let row = sqlx::query(q.promote)
        .bind(queues)
        .bind(limit)
        .fetch_one(q.on(exec))
        .await?;
    Ok(Promoted {
        promoted: row.try_get("promoted")?,
        next_run_at: row.try_get("next_run_at")?,
        db_now: row.try_get("db_now")?,
    })
}

/// What to claim, for whom.
pub(crate) struct Claim<'a> {
    pub queue: &'a str,
    /// Task names the worker has handlers for.
    pub tasks: &'a [String],
    pub limit: i64,
    pub lease_secs: f64,
    pub worker_id: &'a str,
    /// The queue has a global concurrency limit.
    pub limited: bool,
}

/// What a claim found.
#[derive(Debug, Default)]
pub(crate) struct Claimed {
    /// Jobs claimed, in claim order (priority, then run_at, then id).
    pub jobs: Vec<ClaimedJob>,
    /// Jobs claimed whose row cannot be decoded (JSON nested too deep, say):
    /// the caller must fail them, each with its reason.
    pub undecodable: Vec<Undecodable>,
    /// The rate window is used up until then.
    pub rate_limited_until: Option<DateTime<Utc>>,
}

/// A claimed job and the fencing token of its claim.
#[derive(Debug)]
pub(crate) struct ClaimedJob {
    pub job: Job,
    pub lease_token: i64,
}

/// A claimed row that [`Job`] cannot represent.
#[derive(Debug)]
pub(crate) struct Undecodable {
    pub id: JobId,
    pub lease_token: i64,
    pub queue: String,
    pub task: String,
    /// Why, as the job's error will say.
    pub error: String,
}

/// The turn a claim answered to wait for: one row, `id` NULL and `state`
/// `'turn'`, whose `priority` is the number of the turn's table
/// (`conveyor_internal.claim_turn_<n>`).
fn turn_to_wait_for(rows: &[sqlx::postgres::PgRow]) -> Result<Option<u8>> {
    let [row] = rows else {
        return Ok(None);
    };
    if row.try_get::<Option<JobId>, _>("id")?.is_some()
        || row.try_get::<Option<String>, _>("state")?.as_deref() != Some("turn")
    {
        return Ok(None);
    }
    let turn: Option<i32> = row.try_get("priority")?;
    match turn.and_then(|n| u8::try_from(n).ok()).filter(|n| *n < 32) {
        Some(n) => Ok(Some(n)),
        None => Err(sqlx::Error::Protocol(format!(
            "the claim named turn {turn:?}; turns are 0 to 31"
        ))
        .into()),
    }
}

/// Decodes claimed rows one by one, so one bad row fails only its own job
/// (the claim has committed by then: every row must come out as one or
/// the other).
fn decode_claimed(rows: Vec<sqlx::postgres::PgRow>, claimed: &mut Claimed) {
    use sqlx::FromRow;
    for row in rows {
        let (id, token) = match (
            row.try_get::<JobId, _>("id"),
            row.try_get::<Option<i64>, _>("lease_token"),
        ) {
            (Ok(id), Ok(Some(token))) => (id, token),
            (id, token) => {
                // Cannot happen (both columns are typed and set by the claim);
                // the row's lease expires and the rescuer takes it.
                tracing::error!(?id, ?token, "conveyor: a claimed row has no id or token");
                continue;
            }
        };
        match Job::from_row(&row) {
            Ok(job) => claimed.jobs.push(ClaimedJob {
                job,
                lease_token: token,
            }),
            Err(error) => claimed.undecodable.push(Undecodable {
                id,
                lease_token: token,
                queue: row.try_get("queue").unwrap_or_default(),
                task: row.try_get("task").unwrap_or_default(),
                error: format!("conveyor cannot decode this job's row: {error}"),
            }),
        }
    }
}

/// Claims up to `limit` jobs of `queue`. With a concurrency or rate limit
/// the claim runs in a transaction after locking the queue's row.
pub(crate) async fn claim(pool: &PgPool, q: &Queries, c: &Claim<'_>) -> Result<Claimed> {
    let statement = q.claim;
    let claim = |concurrency: Option<i32>, rate_room: Option<i32>| {
        // Rows, not `Job`s: see `decode_claimed`.
        sqlx::query(statement)
            .bind(c.queue)
            .bind(c.tasks)
            .bind(c.limit)
            .bind(c.lease_secs)
            .bind(c.worker_id)
            .bind(concurrency)
            .bind(rate_room)
    };
    let mut claimed = Claimed::default();
    if c.limited {
        let mut tx = pool.begin_with(super::BEGIN).await?;
        // (concurrency limit, room left in the rate window, window end)
        type Limits = (Option<i32>, Option<i32>, Option<DateTime<Utc>>);
        let limits: Option<Limits> = sqlx::query_as(q.lock_queue)
            .bind(c.queue)
            .fetch_optional(q.on(&mut *tx))
            .await?;
        let (concurrency, rate_room, window_end) = limits.unwrap_or_default();
        let rows = claim(concurrency, rate_room)
            .fetch_all(q.on(&mut *tx))
            .await?;
        if let Some(room) = rate_room {
            let started = rows.len() as i32;
            sqlx::query(q.count_starts)
                .bind(c.queue)
                .bind(started)
                .execute(q.on(&mut *tx))
                .await?;
            if started >= room {
                claimed.rate_limited_until = window_end;
            }
        }
        tx.commit().await?;
        decode_claimed(rows, &mut claimed);
    } else {
        let mut rows = claim(None, None).fetch_all(q.on(pool)).await?;
        if let Some(turn) = turn_to_wait_for(&rows)? {
            // Both turns of the queue are taken: wait for one with `LOCK
            // TABLE`, then claim in the same transaction
            // (define_ready_slot.sql). `LOCK TABLE` takes no snapshot, but
            // looking up a name this session has not resolved before does,
            // and keeps it until the message ends: so the table's name is
            // resolved in the message before the one that waits.
            let table = super::in_schema(&format!("conveyor_internal.claim_turn_{turn}"), q.schema);
            let begin = format!("{}; SELECT '{table}'::regclass", super::BEGIN);
            let mut tx = pool.begin_with(sqlx::AssertSqlSafe(begin)).await?;
            let wait = super::in_schema(
                &format!(
                    "LOCK TABLE {table} IN SHARE UPDATE EXCLUSIVE MODE; \
                     SET LOCAL conveyor.claim_turn = '{turn}'"
                ),
                q.schema,
            );
            sqlx::raw_sql(sqlx::AssertSqlSafe(wait))
                .execute(&mut *tx)
                .await?;
            rows = claim(None, None).fetch_all(q.on(&mut *tx)).await?;
            tx.commit().await?;
        }
        decode_claimed(rows, &mut claimed);
    }
    claimed.jobs.sort_by(|a, b| {
        let (a, b) = (&a.job, &b.job);
        b.priority
            .cmp(&a.priority)
            .then(a.run_at.cmp(&b.run_at))
            .then(a.id.cmp(&b.id))
    });
    Ok(claimed)
}
