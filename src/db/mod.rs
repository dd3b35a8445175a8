//! The only place SQL lives.
//!
//! Every statement is a `.sql` file beside this module, written against the
//! schema `conveyor`; [`Queries::for_schema`] rewrites the schema name once per
//! schema and keeps the texts for the life of the process. Each function here
//! runs one statement on whatever connection it is given (a pool, a pooled
//! connection, or the caller's transaction).

#[cfg(feature = "dashboard")]
pub(crate) mod dashboard;
#[cfg(test)]
mod model_test;

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::{PgConnection, PgExecutor, PgPool, Row};

use crate::error::{Error, Result};
use crate::job::{Job, JobId, JobState};

/// The default schema.
pub(crate) const DEFAULT_SCHEMA: &str = "conveyor";

// Statements that join the jobs table to arrays of many rows (outcomes,
// leases) run unprepared, `.persistent(false)`, so PostgreSQL plans them with
// the actual arrays at every call. A cached generic plan guesses the arrays'
// sizes and can pick a nested loop comparing every row with every row: it
// took 500 ms to record a batch of 1,000 outcomes instead of 15.

/// Statement texts for one schema.
#[derive(Debug)]
pub(crate) struct Queries {
    pub schema: &'static str,
    /// Channel on which inserts and retries announce work: payload = queue name.
    pub job_ready_channel: &'static str,
    /// Channel on which outcomes announce finished jobs: payload = ids, comma-separated.
    pub job_finished_channel: &'static str,
    /// Channel telling workers to cancel a running job: payload = its id.
    pub job_cancel_channel: &'static str,
    /// Channel announcing changed queue settings: payload = queue name.
    pub queue_changed_channel: &'static str,
    insert_jobs: &'static str,
    insert_job: &'static str,
    notify: &'static str,
    copy_jobs: &'static str,
    defer_notify: &'static str,
    fetch_job: &'static str,
    fetch_state: &'static str,
    promote: &'static str,
    claim: &'static str,
    complete: &'static str,
    heartbeat: &'static str,
    recorded: &'static str,
    release: &'static str,
    rescue: &'static str,
    after_finish: &'static str,
    spawn: &'static str,
    existing_ids: &'static str,
    fetch_workflow: &'static str,
    workflow_results: &'static str,
    cancel: &'static str,
    requeue: &'static str,
    enqueue_unique: &'static str,
    lock_queue: &'static str,
    queue_limits: &'static str,
    count_starts: &'static str,
    queue_settings: &'static str,
    list_jobs: &'static str,
    queue_stats: &'static str,
    delete_jobs: &'static str,
    enqueued_jobs: &'static str,
    prune: &'static str,
    prune_leftovers: &'static str,
    periodic_last_slots: &'static str,
    periodic_record_slot: &'static str,
    create_schema: &'static str,
    migrations_table: &'static str,
}

fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

/// Checks a schema name: lower-case letters, digits and `_`, not starting with a digit.
pub(crate) fn validate_schema(schema: &str) -> Result<()> {
    let ok = !schema.is_empty()
        && schema.len() <= 48
        && schema
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && !schema.starts_with(|c: char| c.is_ascii_digit());
    if ok {
        Ok(())
    } else {
        Err(Error::Config(format!(
            "schema name `{schema}` must be 1-48 characters of a-z, 0-9 and _, not starting with a digit"
        )))
    }
}

/// Rewrites `conveyor.` to `<schema>.` in a statement written for the default schema.
pub(crate) fn in_schema(sql: &str, schema: &str) -> String {
    if schema == DEFAULT_SCHEMA {
        sql.to_string()
    } else {
        sql.replace("conveyor.", &format!("{schema}."))
    }
}

impl Queries {
    /// The statements for `schema` (validated by the caller), built once per process.
    pub(crate) fn for_schema(schema: &str) -> &'static Queries {
        static CACHE: OnceLock<Mutex<HashMap<String, &'static Queries>>> = OnceLock::new();
        let cache = CACHE.get_or_init(Default::default);
        let mut cache = cache
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(queries) = cache.get(schema) {
            return queries;
        }
        let columns = include_str!("job_columns.sql").trim();
        let load = |sql: &str| leak(in_schema(&sql.replace("{job_columns}", columns), schema));
        let queries: &'static Queries = Box::leak(Box::new(Queries {
            schema: leak(schema.to_string()),
            job_ready_channel: leak(format!("{schema}.job_ready")),
            job_finished_channel: leak(format!("{schema}.job_finished")),
            job_cancel_channel: leak(format!("{schema}.job_cancel")),
            queue_changed_channel: leak(format!("{schema}.queue_changed")),
            insert_jobs: load(include_str!("insert_jobs.sql")),
            insert_job: load(include_str!("insert_job.sql")),
            notify: load(include_str!("notify.sql")),
            copy_jobs: load(include_str!("copy_jobs.sql")),
            defer_notify: load(include_str!("defer_notify.sql")),
            fetch_job: load(include_str!("fetch_job.sql")),
            fetch_state: load(include_str!("fetch_state.sql")),
            promote: load(include_str!("promote.sql")),
            claim: load(include_str!("claim.sql")),
            complete: load(include_str!("complete.sql")),
            heartbeat: load(include_str!("heartbeat.sql")),
            recorded: load(include_str!("recorded.sql")),
            release: load(include_str!("release.sql")),
            rescue: load(include_str!("rescue.sql")),
            after_finish: load(include_str!("after_finish.sql")),
            spawn: load(include_str!("spawn.sql")),
            existing_ids: load(include_str!("existing_ids.sql")),
            fetch_workflow: load(include_str!("fetch_workflow.sql")),
            workflow_results: load(include_str!("workflow_results.sql")),
            cancel: load(include_str!("cancel.sql")),
            requeue: load(include_str!("requeue.sql")),
            enqueue_unique: load(include_str!("enqueue_unique.sql")),
            lock_queue: load(include_str!("lock_queue.sql")),
            queue_limits: load(include_str!("queue_limits.sql")),
            count_starts: load(include_str!("count_starts.sql")),
            queue_settings: load(include_str!("queue_settings.sql")),
            list_jobs: load(include_str!("list_jobs.sql")),
            queue_stats: load(include_str!("queue_stats.sql")),
            delete_jobs: load(include_str!("delete_jobs.sql")),
            enqueued_jobs: load(include_str!("enqueued_jobs.sql")),
            prune: load(include_str!("prune.sql")),
            prune_leftovers: load(include_str!("prune_leftovers.sql")),
            periodic_last_slots: load(include_str!("periodic_last_slots.sql")),
            periodic_record_slot: load(include_str!("periodic_record_slot.sql")),
            create_schema: leak(format!("CREATE SCHEMA IF NOT EXISTS {schema}")),
            migrations_table: leak(format!("{schema}.schema_history")),
        }));
        cache.insert(schema.to_string(), queries);
        queries
    }

    /// Name of refinery's history table (schema-qualified).
    pub(crate) fn migrations_table(&self) -> &'static str {
        self.migrations_table
    }
}

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

fn parse_state(s: &str) -> Result<JobState> {
    s.parse().map_err(|e: String| {
        Error::Database(sqlx::Error::ColumnDecode {
            index: "state".into(),
            source: e.into(),
        })
    })
}

async fn insert_jobs(
    conn: &mut PgConnection,
    q: &Queries,
    rows: &[InsertRow],
) -> Result<Vec<Inserted>> {
    if let [row] = rows {
        return Ok(vec![insert_job(conn, q, row).await?]);
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
        .fetch_all(&mut *conn)
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

/// Inserts `rows` on `conn`, one statement per [`crate::BULK_CHUNK`] rows, and
/// says of each, in input order, whether it was inserted. A job that was not
/// (its id existed, or came earlier in `rows`) is checked to exist with a
/// fresh snapshot, in one more statement: an id that the insert found taken
/// but that cannot be read (its job was deleted since) is
/// [`Error::NotFound`].
pub(crate) async fn insert_all(
    conn: &mut PgConnection,
    q: &Queries,
    rows: &[InsertRow],
) -> Result<Vec<Inserted>> {
    let mut out = Vec::with_capacity(rows.len());
    for chunk in rows.chunks(crate::BULK_CHUNK) {
        out.extend(insert_jobs(conn, q, chunk).await?);
    }
    let skipped: Vec<JobId> = out
        .iter()
        .filter(|found| !found.inserted)
        .map(|found| found.id)
        .collect();
    if skipped.is_empty() {
        return Ok(out);
    }
    let existing: std::collections::HashSet<JobId> =
        existing_ids(conn, q, &skipped).await?.into_iter().collect();
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
    sqlx::query(q.defer_notify).execute(&mut *conn).await?;
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

/// Sends `(channel, payload)` notifications in one statement of their own.
pub(crate) async fn notify(pool: &PgPool, q: &Queries, notes: &[(&str, String)]) -> Result<()> {
    let channels: Vec<&str> = notes.iter().map(|(c, _)| *c).collect();
    let payloads: Vec<&str> = notes.iter().map(|(_, p)| p.as_str()).collect();
    sqlx::query(q.notify)
        .bind(&channels)
        .bind(&payloads)
        .execute(pool)
        .await?;
    Ok(())
}

/// [`insert_jobs`] for one row, with a statement that is cheap to plan.
async fn insert_job(conn: &mut PgConnection, q: &Queries, row: &InsertRow) -> Result<Inserted> {
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
        .fetch_optional(&mut *conn)
        .await?;
    // No row: the id exists; `insert_all` checks that it still does.
    Ok(Inserted {
        id: row.id,
        inserted: inserted.is_some(),
    })
}

/// Enqueues one job spec under a uniqueness key (`None`: the default key
/// from queue, task and args); `ttl` `None` means "until finished".
pub(crate) async fn enqueue_unique(
    conn: &mut PgConnection,
    q: &Queries,
    spec: &Value,
    key: Option<&str>,
    ttl_secs: Option<f64>,
) -> Result<Inserted> {
    let row = sqlx::query(q.enqueue_unique)
        .bind(spec)
        .bind(key)
        .bind(ttl_secs)
        .fetch_one(&mut *conn)
        .await?;
    Ok(Inserted {
        id: row.try_get("id")?,
        inserted: row.try_get("inserted")?,
    })
}

pub(crate) async fn fetch_job<'e>(
    exec: impl PgExecutor<'e>,
    q: &Queries,
    id: JobId,
) -> Result<Option<Job>> {
    Ok(sqlx::query_as::<_, Job>(q.fetch_job)
        .bind(id)
        .fetch_optional(exec)
        .await?)
}

pub(crate) async fn fetch_state<'e>(
    exec: impl PgExecutor<'e>,
    q: &Queries,
    id: JobId,
) -> Result<Option<JobState>> {
    let state: Option<String> = sqlx::query_scalar(q.fetch_state)
        .bind(id)
        .fetch_optional(exec)
        .await?;
    state.as_deref().map(parse_state).transpose()
}

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
    exec: impl PgExecutor<'e>,
    q: &Queries,
    queues: &[String],
    limit: i64,
) -> Result<Promoted> {
    let row = sqlx::query(q.promote)
        .bind(queues)
        .bind(limit)
        .fetch_one(exec)
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
    let claim = |concurrency: Option<i32>, rate_room: Option<i32>| {
        // Rows, not `Job`s: see `decode_claimed`.
        sqlx::query(q.claim)
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
        let mut tx = pool.begin().await?;
        // (concurrency limit, room left in the rate window, window end)
        type Limits = (Option<i32>, Option<i32>, Option<DateTime<Utc>>);
        let limits: Option<Limits> = sqlx::query_as(q.lock_queue)
            .bind(c.queue)
            .fetch_optional(&mut *tx)
            .await?;
        let (concurrency, rate_room, window_end) = limits.unwrap_or_default();
        let rows = claim(concurrency, rate_room).fetch_all(&mut *tx).await?;
        if let Some(room) = rate_room {
            let started = rows.len() as i32;
            sqlx::query(q.count_starts)
                .bind(c.queue)
                .bind(started)
                .execute(&mut *tx)
                .await?;
            if started >= room {
                claimed.rate_limited_until = window_end;
            }
        }
        tx.commit().await?;
        decode_claimed(rows, &mut claimed);
    } else {
        let rows = claim(None, None).fetch_all(pool).await?;
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

/// A change of queue settings, as `conveyor.*_queue*` functions make it.
pub(crate) enum QueueSetting {
    Pause,
    Resume,
    Limit(Option<i32>),
    Rate(Option<(i32, f64)>),
}

pub(crate) async fn set_queue<'e>(
    exec: impl PgExecutor<'e>,
    q: &Queries,
    queue: &str,
    setting: QueueSetting,
) -> Result<()> {
    let (verb, n, secs) = match setting {
        QueueSetting::Pause => ("pause", None, None),
        QueueSetting::Resume => ("resume", None, None),
        QueueSetting::Limit(n) => ("limit", n, None),
        QueueSetting::Rate(rate) => ("rate", rate.map(|r| r.0), rate.map(|r| r.1)),
    };
    sqlx::query(q.queue_settings)
        .bind(verb)
        .bind(queue)
        .bind(n)
        .bind(secs)
        .execute(exec)
        .await?;
    Ok(())
}

pub(crate) async fn list_jobs<'e>(
    exec: impl PgExecutor<'e>,
    q: &Queries,
    f: &crate::inspect::JobFilter,
) -> Result<Vec<Job>> {
    Ok(sqlx::query_as::<_, Job>(q.list_jobs)
        .bind(f.queue.as_deref())
        .bind(f.state.map(JobState::as_str))
        .bind(f.task.as_deref())
        .bind(f.created_after)
        .bind(f.created_before)
        .bind(f.before_id)
        .bind(f.limit)
        .fetch_all(exec)
        .await?)
}

pub(crate) async fn queue_stats<'e>(
    exec: impl PgExecutor<'e>,
    q: &Queries,
) -> Result<Vec<crate::inspect::QueueStats>> {
    Ok(sqlx::query_as(q.queue_stats).fetch_all(exec).await?)
}

pub(crate) async fn enqueued_jobs<'e>(
    exec: impl PgExecutor<'e>,
    q: &Queries,
    task: &str,
    args: &Value,
) -> Result<Vec<Job>> {
    Ok(sqlx::query_as::<_, Job>(q.enqueued_jobs)
        .bind(task)
        .bind(args)
        .fetch_all(exec)
        .await?)
}

/// Deletes jobs that are not running; returns how many.
pub(crate) async fn delete_jobs<'e>(
    exec: impl PgExecutor<'e>,
    q: &Queries,
    ids: &[JobId],
) -> Result<u64> {
    Ok(sqlx::query(q.delete_jobs)
        .bind(ids)
        .execute(exec)
        .await?
        .rows_affected())
}

/// Which of `queues` have a concurrency or rate limit.
pub(crate) async fn queue_limits<'e>(
    exec: impl PgExecutor<'e>,
    q: &Queries,
    queues: &[String],
) -> Result<Vec<String>> {
    Ok(sqlx::query_scalar(q.queue_limits)
        .bind(queues)
        .fetch_all(exec)
        .await?)
}

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
    /// The job belongs to a workflow or has callbacks: its final outcome
    /// needs `conveyor.after_finish()`.
    pub follow_up: bool,
}

/// Writes a batch of outcomes; returns which rows were still held by their
/// claim, and the finished ones that need [`after_finish`].
pub(crate) async fn complete<'e>(
    exec: impl PgExecutor<'e>,
    q: &Queries,
    outcomes: &[OutcomeRow],
) -> Result<Completed> {
    let ids: Vec<JobId> = outcomes.iter().map(|o| o.id).collect();
    let tokens: Vec<i64> = outcomes.iter().map(|o| o.lease_token).collect();
    let states: Vec<&str> = outcomes.iter().map(|o| o.state.as_str()).collect();
    let results: Vec<Option<&Value>> = outcomes.iter().map(|o| o.result.as_ref()).collect();
    let errors: Vec<Option<&str>> = outcomes.iter().map(|o| o.error.as_deref()).collect();
    let retry_in: Vec<Option<f64>> = outcomes.iter().map(|o| o.retry_in_secs).collect();
    let row = sqlx::query(q.complete)
        // Planned with the actual arrays each time (see the note above `Queries`).
        .persistent(false)
        .bind(&ids)
        .bind(&tokens)
        .bind(&states)
        .bind(&results)
        .bind(&errors)
        .bind(&retry_in)
        .fetch_one(exec)
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
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// Materialises a workflow spec.
pub(crate) async fn spawn(conn: &mut PgConnection, q: &Queries, spec: &Value) -> Result<()> {
    sqlx::query(q.spawn).bind(spec).execute(&mut *conn).await?;
    Ok(())
}

/// Those of `ids` that a job has already.
pub(crate) async fn existing_ids(
    conn: &mut PgConnection,
    q: &Queries,
    ids: &[JobId],
) -> Result<Vec<JobId>> {
    Ok(sqlx::query_scalar(q.existing_ids)
        .bind(ids)
        .fetch_all(&mut *conn)
        .await?)
}

pub(crate) async fn fetch_workflow<'e>(
    exec: impl PgExecutor<'e>,
    q: &Queries,
    id: uuid::Uuid,
) -> Result<Option<crate::workflow::WorkflowRun>> {
    Ok(sqlx::query_as(q.fetch_workflow)
        .bind(id)
        .fetch_optional(exec)
        .await?)
}

/// Member results of a group or chord, in member order.
pub(crate) async fn workflow_results<'e>(
    exec: impl PgExecutor<'e>,
    q: &Queries,
    id: uuid::Uuid,
) -> Result<Vec<Value>> {
    Ok(sqlx::query_scalar(q.workflow_results)
        .bind(id)
        .fetch_all(exec)
        .await?)
}

/// A claim a worker holds: the job and the fencing token of its claim.
pub(crate) type Lease = (JobId, i64);

/// A lease [`heartbeat`] renewed, and whether the job's cancellation was
/// asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Renewed {
    pub lease: Lease,
    pub cancel: bool,
}

/// Extends the given leases; returns those it renewed (the others are lost:
/// the job was rescued, finished, re-queued or claimed again).
pub(crate) async fn heartbeat<'e>(
    exec: impl PgExecutor<'e>,
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
        .fetch_all(exec)
        .await?;
    rows.iter()
        .map(|row| {
            Ok(Renewed {
                lease: (row.try_get("id")?, row.try_get("lease_token")?),
                cancel: row.try_get("cancel")?,
            })
        })
        .collect()
}

/// Those of `leases` whose claim has ended with its outcome recorded (the
/// job is no longer started and still carries that token): after a write
/// whose acknowledgement was lost, which outcomes did commit.
pub(crate) async fn recorded<'e>(
    exec: impl PgExecutor<'e>,
    q: &Queries,
    leases: &[Lease],
) -> Result<Vec<JobId>> {
    let ids: Vec<JobId> = leases.iter().map(|l| l.0).collect();
    let tokens: Vec<i64> = leases.iter().map(|l| l.1).collect();
    Ok(sqlx::query_scalar(q.recorded)
        .persistent(false)
        .bind(&ids)
        .bind(&tokens)
        .fetch_all(exec)
        .await?)
}

/// Cancels a job (see `conveyor.cancel`); returns its state afterwards.
pub(crate) async fn cancel(
    conn: &mut PgConnection,
    q: &Queries,
    id: JobId,
) -> Result<Option<JobState>> {
    let state: Option<String> = sqlx::query_scalar(q.cancel)
        .bind(id)
        .fetch_one(&mut *conn)
        .await?;
    state.as_deref().map(parse_state).transpose()
}

/// Re-queues failed or cancelled jobs; returns how many.
pub(crate) async fn requeue<'e>(
    exec: impl PgExecutor<'e>,
    q: &Queries,
    ids: &[JobId],
) -> Result<i32> {
    Ok(sqlx::query_scalar(q.requeue)
        .bind(ids)
        .fetch_one(exec)
        .await?)
}

/// Takes the transaction-scoped advisory lock that lets one process at a
/// time run maintenance `service` on this schema; false if another holds it.
async fn try_service_lock(conn: &mut PgConnection, q: &Queries, service: &str) -> Result<bool> {
    Ok(sqlx::query_scalar(
        "SELECT pg_try_advisory_xact_lock(hashtextextended('conveyor.' || $1 || ':' || $2, 0))",
    )
    .bind(service)
    .bind(q.schema)
    .fetch_one(&mut *conn)
    .await?)
}

/// Recovers up to `limit` jobs whose lease expired, if no other process is
/// doing it right now (advisory lock); `None` when another one is.
pub(crate) async fn rescue(pool: &PgPool, q: &Queries, limit: i64) -> Result<Option<i64>> {
    let mut tx = pool.begin().await?;
    if !try_service_lock(&mut tx, q, "rescuer").await? {
        return Ok(None);
    }
    let row = sqlx::query(q.rescue)
        .bind(limit)
        .bind(q.job_ready_channel)
        .bind(q.job_finished_channel)
        .fetch_one(&mut *tx)
        .await?;
    let follow_ups: Vec<JobId> = row.try_get("follow_ups")?;
    after_finish(&mut tx, q, &follow_ups).await?;
    tx.commit().await?;
    Ok(Some(row.try_get("rescued")?))
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
    let mut tx = pool.begin().await?;
    let row = sqlx::query(q.release)
        // Planned with the actual arrays each time (see the note above `Queries`).
        .persistent(false)
        .bind(&ids)
        .bind(&tokens)
        .bind(worker_id)
        .bind(q.job_ready_channel)
        .bind(q.job_finished_channel)
        .fetch_one(&mut *tx)
        .await?;
    let follow_ups: Vec<JobId> = row.try_get("follow_ups")?;
    after_finish(&mut tx, q, &follow_ups).await?;
    tx.commit().await?;
    Ok(row.try_get("released")?)
}

/// Deletes up to `limit` jobs in `state` finished more than `age` ago, if no
/// other process is pruning right now; `None` when one is.
pub(crate) async fn prune(
    pool: &PgPool,
    q: &Queries,
    state: JobState,
    age_secs: f64,
    limit: i64,
) -> Result<Option<u64>> {
    let mut tx = pool.begin().await?;
    if !try_service_lock(&mut tx, q, "pruner").await? {
        return Ok(None);
    }
    let deleted = sqlx::query(q.prune)
        .bind(state.as_str())
        .bind(age_secs)
        .bind(limit)
        .execute(&mut *tx)
        .await?
        .rows_affected();
    tx.commit().await?;
    Ok(Some(deleted))
}

/// Deletes finished workflows older than `age` with no jobs left, and
/// expired unique keys.
pub(crate) async fn prune_leftovers<'e>(
    exec: impl PgExecutor<'e>,
    q: &Queries,
    age_secs: f64,
) -> Result<i64> {
    Ok(sqlx::query_scalar(q.prune_leftovers)
        .bind(age_secs)
        .fetch_one(exec)
        .await?)
}

/// Takes the periodic scheduler's leadership on `conn` (a session lock, held
/// until released or the connection ends); false if another process has it.
pub(crate) async fn try_lead_periodic(conn: &mut PgConnection, q: &Queries) -> Result<bool> {
    Ok(sqlx::query_scalar(
        "SELECT pg_try_advisory_lock(hashtextextended('conveyor.periodic:' || $1, 0))",
    )
    .bind(q.schema)
    .fetch_one(&mut *conn)
    .await?)
}

/// Whether the leader's connection is still alive.
pub(crate) async fn ping(conn: &mut PgConnection) -> Result<()> {
    sqlx::query("SELECT 1").execute(&mut *conn).await?;
    Ok(())
}

/// The latest slot enqueued for each of `names`.
pub(crate) async fn periodic_last_slots<'e>(
    exec: impl PgExecutor<'e>,
    q: &Queries,
    names: &[String],
) -> Result<HashMap<String, DateTime<Utc>>> {
    let rows: Vec<(String, DateTime<Utc>)> = sqlx::query_as(q.periodic_last_slots)
        .bind(names)
        .fetch_all(exec)
        .await?;
    Ok(rows.into_iter().collect())
}

pub(crate) async fn periodic_record_slot<'e>(
    exec: impl PgExecutor<'e>,
    q: &Queries,
    name: &str,
    slot: DateTime<Utc>,
) -> Result<()> {
    sqlx::query(q.periodic_record_slot)
        .bind(name)
        .bind(slot)
        .execute(exec)
        .await?;
    Ok(())
}

// --- migrations -----------------------------------------------------------

/// Key of the advisory lock that serialises migrations of one schema.
pub(crate) async fn lock_migrations(conn: &mut PgConnection, q: &Queries) -> Result<()> {
    sqlx::query("SELECT pg_advisory_lock(hashtextextended('conveyor.migrate:' || $1, 0))")
        .bind(q.schema)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

pub(crate) async fn unlock_migrations(conn: &mut PgConnection, q: &Queries) -> Result<()> {
    sqlx::query("SELECT pg_advisory_unlock(hashtextextended('conveyor.migrate:' || $1, 0))")
        .bind(q.schema)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

pub(crate) async fn create_schema(conn: &mut PgConnection, q: &Queries) -> Result<()> {
    sqlx::raw_sql(q.create_schema).execute(&mut *conn).await?;
    Ok(())
}

/// Runs a batch of statements (a migration) in one transaction.
pub(crate) async fn execute_in_transaction<'a>(
    conn: &mut PgConnection,
    statements: impl Iterator<Item = &'a str>,
) -> std::result::Result<usize, sqlx::Error> {
    use sqlx::Connection;
    let mut tx = conn.begin().await?;
    let mut count = 0;
    for statement in statements {
        sqlx::raw_sql(sqlx::AssertSqlSafe(statement))
            .execute(&mut *tx)
            .await?;
        count += 1;
    }
    tx.commit().await?;
    Ok(count)
}

/// Reads refinery's history table: (version, name, applied_on, checksum).
pub(crate) async fn applied_migrations(
    conn: &mut PgConnection,
    query: &str,
) -> std::result::Result<Vec<(i32, String, String, String)>, sqlx::Error> {
    let rows = sqlx::query(sqlx::AssertSqlSafe(query))
        .fetch_all(&mut *conn)
        .await?;
    rows.iter()
        .map(|row| {
            Ok((
                row.try_get(0)?,
                row.try_get(1)?,
                row.try_get(2)?,
                row.try_get(3)?,
            ))
        })
        .collect()
}
