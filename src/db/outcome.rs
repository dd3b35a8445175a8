//! What the holder of a claim writes, fenced on `(id, lease_token)`: outcomes
//! and their follow-ups, lease renewals, releases.

use super::Target;
use serde_json::Value;
use sqlx::{PgConnection, PgPool, Row};

use super::Queries;
use crate::error::Result;
use crate::job::{Job, JobId, JobState};

/// The outcome of one attempt, as the completer writes it.
#[derive(Debug, Clone)]
pub(crate) struct OutcomeRow {
    pub id: JobId,
    /// The fencing token of the claim that ran it.
    pub lease_token: i64,
    /// The job's queue and task (for logs and metrics; not written).
    pub queue: String,
    pub task: String,
    pub state: JobState,
    pub result: Option<Value>,
    pub error: Option<String>,
    pub retry_in_secs: Option<f64>,
    /// How long the job waited to start this attempt (`started_at - run_at`
    /// as the claim read them), in ms, for the rollups in `conveyor.stats`.
    pub wait_ms: Option<f64>,
    /// The job belongs to a workflow or has callbacks: its final outcome
    /// needs `conveyor_internal.after_finish()`.
    pub follow_up: bool,
}

impl OutcomeRow {
    /// `job` ended `cancelled` under the claim `lease_token` (its handler
    /// stopped, or never ran).
    pub(crate) fn cancelled(job: &Job, lease_token: i64) -> OutcomeRow {
        OutcomeRow {
            id: job.id,
            lease_token,
            queue: job.queue.clone(),
            task: job.task.clone(),
            state: JobState::Cancelled,
            result: None,
            error: Some("cancelled".to_string()),
            retry_in_secs: None,
            wait_ms: wait_ms(job),
            follow_up: job.has_follow_up(),
        }
    }
}

/// How long `job` waited for the attempt it was claimed for, in ms.
pub(crate) fn wait_ms(job: &Job) -> Option<f64> {
    let started = job.started_at?;
    Some((started - job.run_at).num_microseconds()? as f64 / 1000.0)
}

/// Writes a batch of outcomes; returns which rows were still held by their
/// claim, and the finished ones that need [`after_finish`].
pub(crate) async fn complete<'e>(
    exec: impl Into<Target<'e>>,
    q: &Queries,
    outcomes: &[OutcomeRow],
) -> Result<Completed> {
    let ids: Vec<JobId> = outcomes.iter().map(|o| o.id).collect();
    let tokens: Vec<i64> = outcomes.iter().map(|o| o.lease_token).collect();
    let states: Vec<&str> = outcomes.iter().map(|o| o.state.as_str()).collect();
    let results: Vec<Option<&Value>> = outcomes.iter().map(|o| o.result.as_ref()).collect();
    let errors: Vec<Option<&str>> = outcomes.iter().map(|o| o.error.as_deref()).collect();
    let retry_in: Vec<Option<f64>> = outcomes.iter().map(|o| o.retry_in_secs).collect();
    let waits: Vec<Option<f64>> = outcomes.iter().map(|o| o.wait_ms).collect();
    // (A prepared call: the function keeps its own plan, see complete.sql.)
    let row = sqlx::query(q.complete)
        .bind(&ids)
        .bind(&tokens)
        .bind(&states)
        .bind(&results)
        .bind(&errors)
        .bind(&retry_in)
        .bind(&waits)
        .fetch_one(q.on(exec))
        .await?;
    let finished: Option<String> = row.try_get("finished_ids")?;
    let wake: Vec<String> = row.try_get("wake")?;
    // At most 200 ids per notification: payloads must stay under 8000 bytes.
    let ids: Vec<&str> = finished
        .as_deref()
        .map_or(Vec::new(), |f| f.split(',').collect());
    let notes = ids
        .chunks(200)
        .map(|chunk| (q.job_finished_channel, chunk.join(",")))
        .chain(wake.into_iter().map(|p| (q.job_ready_channel, p)))
        .collect();
    Ok(Completed {
        updated: row.try_get("updated")?,
        follow_ups: row.try_get("follow_ups")?,
        notes,
    })
}

/// What [`complete`] recorded.
pub(crate) struct Completed {
    /// Jobs whose outcome was written (the rest were no longer held by
    /// their claim).
    pub updated: Vec<JobId>,
    /// Finished jobs with follow-up work, for [`after_finish`].
    pub follow_ups: Vec<JobId>,
    /// Notifications to send once the transaction has committed.
    pub notes: Vec<(&'static str, String)>,
}

/// Enqueues follow-ups and updates workflow counters for `finished` jobs
/// (in the transaction that recorded their outcomes).
pub(crate) async fn after_finish(
    conn: &mut PgConnection,
    q: &Queries,
    finished: &[JobId],
) -> Result<()> {
    if finished.is_empty() {
        return Ok(());
    }
    sqlx::query(q.after_finish)
        .bind(finished)
        .execute(q.on(&mut *conn))
        .await?;
    Ok(())
}

/// A claim a worker holds: the job and the fencing token of its claim.
pub(crate) type Lease = (JobId, i64);

/// A lease [`heartbeat`] answered for: renewed, or still held but busy, and
/// whether the job's cancellation was asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Renewed {
    pub lease: Lease,
    pub cancel: bool,
    /// Not renewed this time: another transaction held the job's row (an
    /// outcome batch, an operator's cancel), and the heartbeat never waits
    /// for a row lock. The lease is still held; the next beat renews it.
    pub busy: bool,
}

/// Extends the given leases; returns those it renewed and those it found
/// still held but locked by another transaction (`busy`). The others are
/// lost: the job was rescued, finished, re-queued or claimed again.
pub(crate) async fn heartbeat<'e>(
    exec: impl Into<Target<'e>>,
    q: &Queries,
    leases: &[Lease],
    lease_secs: f64,
) -> Result<Vec<Renewed>> {
    let ids: Vec<JobId> = leases.iter().map(|l| l.0).collect();
    let tokens: Vec<i64> = leases.iter().map(|l| l.1).collect();
    let rows = sqlx::query(q.heartbeat)
        // Planned with the actual arrays each time (see the note above `Queries`).
        .persistent(false)
        .bind(&ids)
        .bind(&tokens)
        .bind(lease_secs)
        .fetch_all(q.on(exec))
        .await?;
    rows.iter()
        .map(|row| {
            Ok(Renewed {
                lease: (row.try_get("id")?, row.try_get("lease_token")?),
                cancel: row.try_get("cancel")?,
                busy: row.try_get("busy")?,
            })
        })
        .collect()
}

/// Adds leases lost to the rollups (`count_leases_lost.sql`): one count per
/// `(queue, task)`, in the current minute, in one statement.
pub(crate) async fn count_leases_lost<'e>(
    exec: impl Into<Target<'e>>,
    q: &Queries,
    lost: &[((String, String), i64)],
) -> Result<()> {
    let queues: Vec<&str> = lost.iter().map(|((queue, _), _)| queue.as_str()).collect();
    let tasks: Vec<&str> = lost.iter().map(|((_, task), _)| task.as_str()).collect();
    let counts: Vec<i64> = lost.iter().map(|(_, n)| *n).collect();
    sqlx::query(q.count_leases_lost)
        .bind(&queues)
        .bind(&tasks)
        .bind(&counts)
        .execute(q.on(exec))
        .await?;
    Ok(())
}

/// Those of `leases` whose claim has ended with its outcome recorded (the
/// job is no longer started and still carries that token): after a write
/// whose acknowledgement was lost, which outcomes did commit.
pub(crate) async fn recorded<'e>(
    exec: impl Into<Target<'e>>,
    q: &Queries,
    leases: &[Lease],
) -> Result<Vec<JobId>> {
    let ids: Vec<JobId> = leases.iter().map(|l| l.0).collect();
    let tokens: Vec<i64> = leases.iter().map(|l| l.1).collect();
    Ok(sqlx::query_scalar(q.recorded)
        .persistent(false)
        .bind(&ids)
        .bind(&tokens)
        .fetch_all(q.on(exec))
        .await?)
}

/// Puts jobs held by `worker_id` under these leases back to pending;
/// returns how many. Jobs whose cancellation was asked for end cancelled, and their
/// follow-ups ([`after_finish`]) run in the same transaction.
pub(crate) async fn release(
    pool: &PgPool,
    q: &Queries,
    leases: &[Lease],
    worker_id: &str,
) -> Result<i64> {
    let ids: Vec<JobId> = leases.iter().map(|l| l.0).collect();
    let tokens: Vec<i64> = leases.iter().map(|l| l.1).collect();
    let mut tx = pool.begin_with(super::BEGIN).await?;
    // Jobs held in their claim's row get stored rows of their own first
    // (settle_claims), which the release statement reads.
    sqlx::query(q.settle_claims)
        .bind(&ids)
        .execute(q.on(&mut *tx))
        .await?;
    let row = sqlx::query(q.release)
        // Planned with the actual arrays each time (see the note above `Queries`).
        .persistent(false)
        .bind(&ids)
        .bind(&tokens)
        .bind(worker_id)
        .bind(q.job_ready_channel)
        .bind(q.job_finished_channel)
        .fetch_one(q.on(&mut *tx))
        .await?;
    let follow_ups: Vec<JobId> = row.try_get("follow_ups")?;
    after_finish(&mut tx, q, &follow_ups).await?;
    tx.commit().await?;
    Ok(row.try_get("released")?)
}
