//! Inserting jobs: one row, many rows (`unnest`), COPY, unique jobs; and the
//! notifications that wake workers.

use super::Target;
use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::{PgConnection, PgPool, Row};

use super::Queries;
use crate::error::{Error, Result};
use crate::job::JobId;

/// Jobs per insert statement in bulk enqueue (documented in
/// `Client::enqueue_many`: keep the two in step).
pub(crate) const BULK_CHUNK: usize = 5_000;

/// From this many jobs, `Client::enqueue_many` streams jobs that are due
/// now (no ETA, no delay, not unique) with COPY (documented there: keep
/// the two in step).
pub(crate) const COPY_MIN: usize = 1_000;

/// A job to insert, with every option resolved.
#[derive(Debug, Clone)]
pub(crate) struct InsertRow {
    pub id: JobId,
    /// The id was generated for this insert (not given by the caller).
    pub fresh_id: bool,
    pub queue: String,
    pub task: String,
    pub args: Value,
    pub headers: Value,
    pub priority: i32,
    pub run_at: Option<DateTime<Utc>>,
    pub delay_secs: Option<f64>,
    pub max_retries: i32,
    pub backoff_base_secs: f64,
    pub timeout_secs: Option<f64>,
    pub on_success: Option<Value>,
    pub on_error: Option<Value>,
}

/// What an insert did with each job, in input order.
#[derive(Debug, Clone)]
pub(crate) struct Inserted {
    pub id: JobId,
    /// False when a job with this id existed already (or came earlier in
    /// the same insert): nothing was written for it.
    pub inserted: bool,
}

async fn insert_jobs(
    conn: &mut PgConnection,
    q: &Queries,
    rows: &[InsertRow],
    may_exist: bool,
) -> Result<Vec<Inserted>> {
    if let [row] = rows {
        return Ok(vec![insert_job(conn, q, row, may_exist).await?]);
    }
    let mut ids = Vec::with_capacity(rows.len());
    let mut queues = Vec::with_capacity(rows.len());
    let mut tasks = Vec::with_capacity(rows.len());
    let mut args = Vec::with_capacity(rows.len());
    let mut headers = Vec::with_capacity(rows.len());
    let mut priorities = Vec::with_capacity(rows.len());
    let mut run_ats = Vec::with_capacity(rows.len());
    let mut delays = Vec::with_capacity(rows.len());
    let mut max_retries = Vec::with_capacity(rows.len());
    let mut bases = Vec::with_capacity(rows.len());
    let mut timeouts = Vec::with_capacity(rows.len());
    let mut on_success = Vec::with_capacity(rows.len());
    let mut on_error = Vec::with_capacity(rows.len());
    for row in rows {
        ids.push(row.id);
        queues.push(row.queue.as_str());
        tasks.push(row.task.as_str());
        args.push(&row.args);
        headers.push(&row.headers);
        priorities.push(row.priority);
        run_ats.push(row.run_at);
        delays.push(row.delay_secs);
        max_retries.push(row.max_retries);
        bases.push(row.backoff_base_secs);
        timeouts.push(row.timeout_secs);
        on_success.push(row.on_success.as_ref());
        on_error.push(row.on_error.as_ref());
    }
    let returned: Vec<JobId> = sqlx::query_scalar(q.insert_jobs)
        .bind(&ids)
        .bind(&queues)
        .bind(&tasks)
        .bind(&args)
        .bind(&headers)
        .bind(&priorities)
        .bind(&run_ats)
        .bind(&delays)
        .bind(&max_retries)
        .bind(&bases)
        .bind(&timeouts)
        .bind(&on_success)
        .bind(&on_error)
        .bind(may_exist)
        .fetch_all(q.on(&mut *conn))
        .await?;
    let mut fresh: std::collections::HashSet<JobId> = returned.into_iter().collect();
    // Only the first occurrence of a repeated id was inserted.
    Ok(rows
        .iter()
        .map(|row| Inserted {
            id: row.id,
            inserted: fresh.remove(&row.id),
        })
        .collect())
}

/// Inserts `rows` on `conn`, one statement per [`BULK_CHUNK`] rows, and
/// says of each, in input order, whether it was inserted. `may_exist`: an
/// earlier try may have inserted these jobs (and they may have finished
/// since). A row whose id is that, or was given by the caller, is looked for
/// among finished jobs too: only unfinished ones have an index that keeps
/// ids unique (`conveyor.jobs_unfinished`'s primary key). A job that was not
/// (its id existed, or came earlier in `rows`) is checked to exist with a
/// fresh snapshot, in one more statement: an id that the insert found taken
/// but that cannot be read (its job was deleted since) is
/// [`Error::NotFound`].
pub(crate) async fn insert_all(
    conn: &mut PgConnection,
    q: &Queries,
    rows: &[InsertRow],
    may_exist: bool,
) -> Result<Vec<Inserted>> {
    let mut out = Vec::with_capacity(rows.len());
    for chunk in rows.chunks(BULK_CHUNK) {
        let check = may_exist || chunk.iter().any(|row| !row.fresh_id);
        out.extend(insert_jobs(conn, q, chunk, check).await?);
    }
    let skipped: Vec<JobId> = out
        .iter()
        .filter(|found| !found.inserted)
        .map(|found| found.id)
        .collect();
    if skipped.is_empty() {
        return Ok(out);
    }
    let existing: std::collections::HashSet<JobId> = existing_ids(&mut *conn, q, &skipped)
        .await?
        .into_iter()
        .collect();
    match skipped.iter().find(|id| !existing.contains(id)) {
        Some(id) => Err(Error::NotFound(*id)),
        None => Ok(out),
    }
}

/// Streams `rows` (due now: no `run_at`, no delay) into the jobs table with
/// COPY; returns how many were written. Fails as a whole on a repeated id.
pub(crate) async fn copy_jobs(
    conn: &mut PgConnection,
    q: &Queries,
    rows: &[InsertRow],
) -> Result<u64> {
    let mut data = String::with_capacity(rows.len() * 96);
    for row in rows {
        let interval = |secs: f64| format!("{secs} seconds");
        let json = |v: Option<&Value>| v.map(Value::to_string);
        let fields = [
            Some(row.id.to_string()),
            Some(row.queue.clone()),
            Some(row.task.clone()),
            Some(row.args.to_string()),
            Some(row.headers.to_string()),
            Some(row.priority.to_string()),
            Some(row.max_retries.to_string()),
            Some(interval(row.backoff_base_secs)),
            row.timeout_secs.map(interval),
            json(row.on_success.as_ref()),
            json(row.on_error.as_ref()),
        ];
        for (i, field) in fields.iter().enumerate() {
            if i > 0 {
                data.push('\t');
            }
            match field {
                None => data.push_str("\\N"),
                Some(text) => copy_escape(&mut data, text),
            }
        }
        data.push('\n');
    }
    let mut copy = conn.copy_in_raw(q.copy_jobs).await?;
    copy.send(data.as_bytes()).await?;
    Ok(copy.finish().await?)
}

/// Makes the insert trigger leave job_ready to the caller for the rest of
/// the transaction.
pub(crate) async fn defer_notify(conn: &mut PgConnection, q: &Queries) -> Result<()> {
    sqlx::query(q.defer_notify)
        .execute(q.on(&mut *conn))
        .await?;
    Ok(())
}

/// Appends `text` escaped for COPY's text format.
fn copy_escape(out: &mut String, text: &str) {
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c => out.push(c),
        }
    }
}

/// Sends `(channel, payload)` notifications in one statement of their own;
/// those on `job_finished` only while someone listens for them (notify.sql).
pub(crate) async fn notify(pool: &PgPool, q: &Queries, notes: &[(&str, String)]) -> Result<()> {
    let channels: Vec<&str> = notes.iter().map(|(c, _)| *c).collect();
    let payloads: Vec<&str> = notes.iter().map(|(_, p)| p.as_str()).collect();
    sqlx::query(q.notify)
        .bind(&channels)
        .bind(&payloads)
        .bind(q.job_finished_channel)
        .execute(q.on(pool))
        .await?;
    Ok(())
}

/// [`insert_jobs`] for one row, with a statement that is cheap to plan.
async fn insert_job(
    conn: &mut PgConnection,
    q: &Queries,
    row: &InsertRow,
    may_exist: bool,
) -> Result<Inserted> {
    let inserted: Option<JobId> = sqlx::query_scalar(q.insert_job)
        .bind(row.id)
        .bind(&row.queue)
        .bind(&row.task)
        .bind(&row.args)
        .bind(&row.headers)
        .bind(row.priority)
        .bind(row.run_at)
        .bind(row.delay_secs)
        .bind(row.max_retries)
        .bind(row.backoff_base_secs)
        .bind(row.timeout_secs)
        .bind(&row.on_success)
        .bind(&row.on_error)
        .bind(may_exist)
        .fetch_optional(q.on(&mut *conn))
        .await?;
    // No row: the id exists; `insert_all` checks that it still does.
    Ok(Inserted {
        id: row.id,
        inserted: inserted.is_some(),
    })
}

/// Enqueues one job spec under a uniqueness key (`None`: the default key
/// from queue, task and args); `ttl` `None` means "until finished".
/// `id_may_exist`: the caller chose the spec's id, or an earlier try may
/// have inserted it (see [`insert_all`]).
pub(crate) async fn enqueue_unique(
    conn: &mut PgConnection,
    q: &Queries,
    spec: &Value,
    key: Option<&str>,
    ttl_secs: Option<f64>,
    id_may_exist: bool,
) -> Result<Inserted> {
    let row = sqlx::query(q.enqueue_unique)
        .bind(spec)
        .bind(key)
        .bind(ttl_secs)
        .bind(id_may_exist)
        .fetch_one(q.on(&mut *conn))
        .await?;
    Ok(Inserted {
        id: row.try_get("id")?,
        inserted: row.try_get("inserted")?,
    })
}

/// Those of `ids` that a job has already.
pub(crate) async fn existing_ids<'e>(
    exec: impl Into<Target<'e>>,
    q: &Queries,
    ids: &[JobId],
) -> Result<Vec<JobId>> {
    Ok(sqlx::query_scalar(q.existing_ids)
        .bind(ids)
        .fetch_all(q.on(exec))
        .await?)
}
