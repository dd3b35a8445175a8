//! The public client: enqueue jobs (on the pool, in the caller's transaction,
//! in bulk) and get handles to await their results.

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{Map, Value};
use sqlx::{PgConnection, PgPool};

use crate::db::{self, InsertRow, Queries};
use crate::error::{Error, Result};
use crate::handle::JobHandle;
use crate::job::{Job, JobId};
use crate::notify::WaiterHub;

/// Queue of a job that names none.
pub const DEFAULT_QUEUE: &str = "default";
/// Retries after the first attempt, unless the job or task says otherwise.
pub const DEFAULT_MAX_RETRIES: u32 = 25;
/// Fibonacci backoff unit, unless the job says otherwise.
pub const DEFAULT_RETRY_BACKOFF_BASE: Duration = Duration::from_secs(1);

/// A job to enqueue: task name, arguments and options. `O` is the task's
/// output type (`serde_json::Value` for untyped jobs).
///
/// Built by [`crate::Task::job`] for typed tasks or [`NewJob::new`] for a
/// task name with JSON arguments; every option has the same default as
/// `conveyor.enqueue(...)` in SQL.
///
/// ```
/// use std::time::Duration;
/// use conveyor::NewJob;
/// use serde_json::json;
///
/// let job = NewJob::new("send_email", json!({"to": "ada@example.com"}))
///     .queue("mail")
///     .priority(10)
///     .delay(Duration::from_secs(30))
///     .max_retries(5)
///     .retry_backoff_base(Duration::from_millis(500))
///     .timeout(Duration::from_secs(60))
///     .header("tenant", json!("acme"));
/// ```
#[derive(Debug)]
pub struct NewJob<O = Value> {
    pub(crate) id: Option<JobId>,
    pub(crate) task: String,
    pub(crate) args: std::result::Result<Value, serde_json::Error>,
    pub(crate) queue: String,
    pub(crate) priority: i32,
    pub(crate) run_at: Option<DateTime<Utc>>,
    pub(crate) delay: Option<Duration>,
    pub(crate) max_retries: u32,
    pub(crate) retry_backoff_base: Duration,
    pub(crate) timeout: Option<Duration>,
    pub(crate) headers: Map<String, Value>,
    /// In a workflow: take the previous step's result as args (not immutable).
    pub(crate) pass_result: bool,
    pub(crate) on_success: Vec<Value>,
    pub(crate) on_error: Vec<Value>,
    /// Why a callback added to this job cannot be enqueued, reported at enqueue.
    pub(crate) invalid: Option<String>,
    pub(crate) unique: Option<UniqueSpec>,
    output: PhantomData<fn() -> O>,
}

impl NewJob<Value> {
    /// A job of task `task` with JSON arguments (for handlers registered with
    /// [`crate::WorkerBuilder::register_fn`], or tasks served elsewhere).
    pub fn new(task: impl Into<String>, args: Value) -> Self {
        NewJob::with_args(task.into(), Ok(args))
    }
}

impl<O> NewJob<O> {
    pub(crate) fn typed(task: &str, args: &impl Serialize) -> Self {
        NewJob::with_args(task.to_string(), serde_json::to_value(args))
    }

    fn with_args(task: String, args: std::result::Result<Value, serde_json::Error>) -> Self {
        let mut headers = Map::new();
        crate::trace::inject(&mut headers);
        NewJob {
            id: None,
            task,
            args,
            queue: DEFAULT_QUEUE.to_string(),
            priority: 0,
            run_at: None,
            delay: None,
            max_retries: DEFAULT_MAX_RETRIES,
            retry_backoff_base: DEFAULT_RETRY_BACKOFF_BASE,
            timeout: None,
            headers,
            pass_result: false,
            on_success: Vec::new(),
            on_error: Vec::new(),
            invalid: None,
            unique: None,
            output: PhantomData,
        }
    }

    /// A job of task `T` whose arguments will be the result it is given
    /// (the previous chain step's, a chord's members', a success callback's job's).
    pub(crate) fn piped<T: crate::Task>() -> NewJob<T::Output> {
        let mut job = NewJob::with_args(T::NAME.to_string(), Ok(Value::Null))
            .queue(T::QUEUE)
            .max_retries(T::MAX_RETRIES);
        if let Some(timeout) = T::TIMEOUT {
            job = job.timeout(timeout);
        }
        job.pass_result = true;
        job
    }

    /// Use this id instead of a new UUIDv7. If a job with this id exists,
    /// enqueue returns it (its handle and state) and inserts nothing.
    /// See [`crate::job_id_from_key`] to derive an id from any string.
    pub fn id(mut self, id: JobId) -> Self {
        self.id = Some(id);
        self
    }
    /// Queue to put the job on (default `"default"`).
    pub fn queue(mut self, queue: impl Into<String>) -> Self {
        self.queue = queue.into();
        self
    }
    /// Priority within the queue: higher runs first (default 0).
    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = priority;
        self
    }
    /// Earliest start (ETA). Replaces any [`NewJob::delay`].
    pub fn run_at(mut self, at: DateTime<Utc>) -> Self {
        self.run_at = Some(at);
        self.delay = None;
        self
    }
    /// Earliest start, relative to the database's clock when the insert
    /// statement runs (`statement_timestamp()`). Replaces any
    /// [`NewJob::run_at`].
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = Some(delay);
        self.run_at = None;
        self
    }
    /// Retries after the first attempt (default 25).
    pub fn max_retries(mut self, retries: u32) -> Self {
        self.max_retries = retries;
        self
    }
    /// Fibonacci backoff unit (default 1 s; sub-second values are fine).
    pub fn retry_backoff_base(mut self, base: Duration) -> Self {
        self.retry_backoff_base = base;
        self
    }
    /// Time limit of one attempt (default: the task's, else the worker's).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }
    /// Adds one header (free-form metadata, e.g. tracing context).
    pub fn header(mut self, key: impl Into<String>, value: Value) -> Self {
        self.headers.insert(key.into(), value);
        self
    }
    /// Makes the job unique (asynq's `Unique`): while another job with the
    /// same key is unfinished ([`Unique::UntilFinished`]) or was enqueued less
    /// than a TTL ago ([`Unique::For`]), enqueue returns that job's handle,
    /// marked [`JobHandle::is_duplicate`], and inserts nothing. The key is
    /// derived from queue, task and args unless given with [`NewJob::unique_key`].
    /// Enforced by the database, so it holds across processes and transactions.
    pub fn unique(mut self, scope: Unique) -> Self {
        let key = self.unique.take().and_then(|u| u.key);
        self.unique = Some(UniqueSpec { scope, key });
        self
    }

    /// Uses `key` as the uniqueness key (implies [`Unique::UntilFinished`]
    /// unless [`NewJob::unique`] chose a scope).
    pub fn unique_key(mut self, key: impl Into<String>) -> Self {
        let scope = self
            .unique
            .take()
            .map_or(Unique::UntilFinished, |u| u.scope);
        self.unique = Some(UniqueSpec {
            scope,
            key: Some(key.into()),
        });
        self
    }

    /// Forgets the output type, e.g. to enqueue jobs of several tasks in one batch.
    pub fn untyped(self) -> NewJob<Value> {
        NewJob {
            id: self.id,
            task: self.task,
            args: self.args,
            queue: self.queue,
            priority: self.priority,
            run_at: self.run_at,
            delay: self.delay,
            max_retries: self.max_retries,
            retry_backoff_base: self.retry_backoff_base,
            timeout: self.timeout,
            headers: self.headers,
            pass_result: self.pass_result,
            on_success: self.on_success,
            on_error: self.on_error,
            invalid: self.invalid,
            unique: self.unique,
            output: PhantomData,
        }
    }

    /// When this job succeeds, enqueue a job of task `S` with its result as
    /// arguments (machinery's OnSuccess), in the transaction that records the success.
    pub fn on_success<S: crate::Task<Args = O>>(self) -> Self {
        self.on_success_job(NewJob::<S::Output>::piped::<S>())
    }

    /// When this job succeeds, enqueue `job` with its own arguments (an
    /// immutable success callback).
    pub fn on_success_job<P>(mut self, job: NewJob<P>) -> Self {
        match job.callback_spec(false) {
            Ok(spec) => self.on_success.push(spec),
            Err(e) => self.invalid = Some(e.to_string()),
        }
        self
    }

    /// When this job fails for good, enqueue a job of task `E`, which gets a
    /// [`crate::JobFailure`]: the error message first, then the failed job's id
    /// and task (machinery's OnError).
    pub fn on_error<E: crate::Task<Args = crate::JobFailure>>(self) -> Self {
        self.on_error_job(NewJob::<E::Output>::piped::<E>())
    }

    /// When this job fails for good, enqueue `job`; its arguments become a
    /// [`crate::JobFailure`] whose `args` field holds the ones given here.
    pub fn on_error_job<P>(mut self, job: NewJob<P>) -> Self {
        match job.callback_spec(true) {
            Ok(spec) => self.on_error.push(spec),
            Err(e) => self.invalid = Some(e.to_string()),
        }
        self
    }

    /// The spec of this job as a callback; `pass_result` makes it receive
    /// the result (success callbacks) or a `JobFailure` (error callbacks).
    pub(crate) fn callback_spec(mut self, pass_result: bool) -> Result<Value> {
        self.check()?;
        self.pass_result |= pass_result;
        let id = self.id.unwrap_or_else(uuid::Uuid::now_v7);
        Ok(self.spec_with_id(id, None, None))
    }

    pub(crate) fn spec_with_id(
        &self,
        id: JobId,
        workflow_id: Option<uuid::Uuid>,
        index: Option<i32>,
    ) -> Value {
        serde_json::json!({
            "kind": "job",
            "id": id,
            "task": self.task,
            "args": self.args.as_ref().ok(),
            "pass_result": self.pass_result,
            "queue": self.queue,
            "priority": self.priority,
            "run_at": self.run_at,
            "delay_secs": self.delay.map(|d| d.as_secs_f64()),
            "max_retries": self.max_retries,
            "retry_backoff_base_secs": self.retry_backoff_base.as_secs_f64(),
            "timeout_secs": self.timeout.map(|d| d.as_secs_f64()),
            "headers": self.headers,
            "workflow_id": workflow_id,
            "workflow_index": index,
            "on_success": self.on_success,
            "on_error": self.on_error,
        })
    }

    /// Fails with [`Error::InvalidJob`] if the job cannot be stored as
    /// built: the checks of `conveyor.jobs`' constraints (task and queue
    /// names, time limits, times), made before anything is written, and the
    /// same for callbacks (checked when they were added), so a follow-up
    /// can never fail when its turn comes.
    pub(crate) fn check(&self) -> Result<()> {
        let invalid = |why: String| Err(Error::InvalidJob(format!("task `{}`: {why}", self.task)));
        if let Err(e) = &self.args {
            return invalid(format!("cannot serialise args: {e}"));
        }
        if let Some(why) = &self.invalid {
            return Err(Error::InvalidJob(why.clone()));
        }
        for (what, name, longest) in [("task", &self.task, 255), ("queue", &self.queue, 128)] {
            if name.is_empty() || name.chars().count() > longest || name.contains('\0') {
                return invalid(format!(
                    "the {what} name must be 1 to {longest} characters, without NUL (got {name:?})"
                ));
            }
        }
        if i32::try_from(self.max_retries).is_err() {
            return invalid(format!("max_retries {} is too large", self.max_retries));
        }
        let durations = [
            ("retry_backoff_base", Some(self.retry_backoff_base)),
            ("delay", self.delay),
            ("timeout", self.timeout),
        ];
        for (what, duration) in durations {
            if duration.is_some_and(|d| d > LONGEST) {
                return invalid(format!("{what} is over 100 years"));
            }
        }
        if self.timeout == Some(Duration::ZERO) {
            return invalid("a timeout must be longer than zero".into());
        }
        if let Some(Unique::For(ttl)) = self.unique.as_ref().map(|u| u.scope)
            && (ttl.is_zero() || ttl > LONGEST)
        {
            return invalid(
                "a uniqueness TTL must be longer than zero and at most 100 years".into(),
            );
        }
        if let Some(at) = self.run_at
            && !(earliest_time()..latest_time()).contains(&at)
        {
            return invalid(format!("run_at {at} is not between years 1 and 9999"));
        }
        Ok(())
    }

    pub(crate) fn into_row(self) -> Result<InsertRow> {
        if let Err(source) = self.args {
            return Err(Error::Json {
                task: self.task,
                source,
            });
        }
        self.check()?;
        let task = self.task;
        let args = self.args.unwrap_or_default();
        let max_retries = i32::try_from(self.max_retries).unwrap_or(i32::MAX);
        Ok(InsertRow {
            id: self.id.unwrap_or_else(uuid::Uuid::now_v7),
            fresh_id: self.id.is_none(),
            queue: self.queue,
            task,
            args,
            headers: Value::Object(self.headers),
            priority: self.priority,
            run_at: self.run_at,
            delay_secs: self.delay.map(|d| d.as_secs_f64()),
            max_retries,
            backoff_base_secs: self.retry_backoff_base.as_secs_f64(),
            timeout_secs: self.timeout.map(|d| d.as_secs_f64()),
            on_success: (!self.on_success.is_empty()).then_some(Value::Array(self.on_success)),
            on_error: (!self.on_error.is_empty()).then_some(Value::Array(self.on_error)),
        })
    }
}

/// The entry point: enqueues jobs and hands out [`JobHandle`]s. Cheap to clone.
///
/// Every enqueue comes in two forms, like sqlx's executors: on the client's
/// pool, or `_tx` on a connection you pass, typically your own transaction,
/// so the job commits (and wakes workers) with your business write or not at all.
///
/// ```no_run
/// # use conveyor::{Client, NewJob};
/// # async fn demo(pool: sqlx::PgPool) -> conveyor::Result<()> {
/// let client = Client::new(pool.clone());
/// let mut tx = pool.begin().await?;
/// sqlx::query("INSERT INTO orders (id) VALUES (42)").execute(&mut *tx).await?;
/// let handle = client
///     .enqueue_tx(&mut tx, NewJob::new("ship_order", serde_json::json!({"order": 42})))
///     .await?;
/// tx.commit().await?;
/// let result = handle.wait(std::time::Duration::from_secs(30)).await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Arc<ClientInner>,
}

pub(crate) struct ClientInner {
    pub(crate) pool: PgPool,
    pub(crate) queries: &'static Queries,
    pub(crate) waiters: WaiterHub,
    pub(crate) notifier: crate::notify::Notifier,
    /// Merges concurrent autocommit enqueues into shared transactions.
    pub(crate) group_commit: crate::group_commit::GroupCommit,
    /// Autocommit inserts in flight on this client (see `insert_autocommit`).
    pub(crate) inserting: std::sync::atomic::AtomicUsize,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("schema", &self.inner.queries.schema)
            .finish_non_exhaustive()
    }
}

/// Builds a [`Client`] with non-default settings.
#[derive(Debug)]
pub struct ClientBuilder {
    pool: PgPool,
    schema: String,
}

impl ClientBuilder {
    /// Schema holding Conveyor's tables (default `conveyor`). It must have been
    /// migrated with [`crate::migrate_schema`].
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = schema.into();
        self
    }

    /// Checks the settings and builds the client.
    pub fn build(self) -> Result<Client> {
        db::validate_schema(&self.schema)?;
        let queries = Queries::for_schema(&self.schema);
        Ok(Client {
            inner: Arc::new(ClientInner {
                waiters: WaiterHub::new(self.pool.clone(), queries),
                notifier: crate::notify::Notifier::new(self.pool.clone(), queries),
                group_commit: crate::group_commit::GroupCommit::new(self.pool.clone(), queries),
                inserting: std::sync::atomic::AtomicUsize::new(0),
                pool: self.pool,
                queries,
            }),
        })
    }
}

/// Pool settings Conveyor is measured with; use them for a pool you build
/// yourself and hand to [`Client::new`].
///
/// - `test_before_acquire(false)`: sqlx's default pings every connection it
///   hands out, one more round trip per statement (16 % fewer enqueues per
///   second in scenario A of the benchmark). Conveyor retries what a broken
///   connection fails, so the ping buys nothing.
/// - `max_connections(10)`, sqlx's default: enough for enqueues and handles.
///   A [`crate::Worker`] takes its own claims, lease renewals and outcomes
///   on [`crate::BOOKKEEPING_CONNECTIONS`] more connections that handlers
///   cannot exhaust; size this pool for what your handlers use.
/// - `acquire_timeout` of 30 s, sqlx's default.
pub fn pool_options() -> sqlx::postgres::PgPoolOptions {
    sqlx::postgres::PgPoolOptions::new()
        .max_connections(10)
        .test_before_acquire(false)
        .acquire_timeout(std::time::Duration::from_secs(30))
}

impl Client {
    /// Connects to `url` with [`pool_options`] and builds a client on the
    /// default schema. It does not migrate: call [`crate::migrate`] on
    /// [`Client::pool`] first if the schema may be missing or old.
    pub async fn connect(url: &str) -> Result<Client> {
        let pool = pool_options().connect(url).await?;
        Ok(Client::new(pool))
    }

    /// A client on `pool`, using the default schema `conveyor`. See
    /// [`pool_options`] for the settings such a pool should have.
    pub fn new(pool: PgPool) -> Client {
        Client::builder(pool)
            .build()
            .expect("the default schema name is valid")
    }

    /// A builder for a client with other settings.
    pub fn builder(pool: PgPool) -> ClientBuilder {
        ClientBuilder {
            pool,
            schema: db::DEFAULT_SCHEMA.to_string(),
        }
    }

    /// The pool this client uses.
    pub fn pool(&self) -> &PgPool {
        &self.inner.pool
    }

    /// The schema this client uses.
    pub fn schema(&self) -> &str {
        self.inner.queries.schema
    }

    /// Cancels a job and returns its state afterwards. A job that has not
    /// started becomes `cancelled` at once and never runs. A running job is
    /// marked and its worker is told (NOTIFY, or its next heartbeat): the
    /// handler sees [`crate::TaskContext::cancelled`], gets the worker's
    /// cancel grace period, and the job ends `cancelled`; this returns
    /// `started` meanwhile. A finished job is left as it is.
    pub async fn cancel(&self, id: JobId) -> Result<crate::JobState> {
        let mut conn = self.inner.pool.acquire().await?;
        self.cancel_tx(&mut conn, id).await
    }

    /// [`Client::cancel`] on `conn` (e.g. the caller's transaction: the
    /// cancellation then takes effect at commit).
    pub async fn cancel_tx(&self, conn: &mut PgConnection, id: JobId) -> Result<crate::JobState> {
        db::cancel(conn, self.inner.queries, id)
            .await?
            .ok_or(Error::NotFound(id))
    }

    /// Puts failed or cancelled jobs (the dead letter) back to `pending` with
    /// their attempt count reset; their error history is kept. Ids of jobs in
    /// other states are ignored. Returns how many were re-queued. To re-queue
    /// by a SQL filter: `SELECT conveyor.requeue(ARRAY(SELECT id FROM
    /// conveyor.jobs WHERE …))`.
    pub async fn requeue(&self, ids: &[JobId]) -> Result<u64> {
        let n = db::requeue(&self.inner.pool, self.inner.queries, ids).await?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    /// Deletes finished jobs older than `retention` allows, now (workers do
    /// this periodically, see [`crate::WorkerBuilder::retention`]). Returns
    /// how many jobs were deleted.
    pub async fn prune(&self, retention: &crate::Retention) -> Result<u64> {
        crate::maintenance::pruner::prune(self, retention).await
    }

    /// Pauses `queue` for every worker: nothing more is claimed from it;
    /// running jobs finish (`conveyor.pause_queue`).
    pub async fn pause_queue(&self, queue: &str) -> Result<()> {
        db::set_queue(
            &self.inner.pool,
            self.inner.queries,
            queue,
            db::QueueSetting::Pause,
        )
        .await
    }

    /// Resumes `queue` and wakes idle workers at once (`conveyor.resume_queue`).
    pub async fn resume_queue(&self, queue: &str) -> Result<()> {
        db::set_queue(
            &self.inner.pool,
            self.inner.queries,
            queue,
            db::QueueSetting::Resume,
        )
        .await
    }

    /// At most `limit` jobs of `queue` started at once across all workers
    /// (`None` removes the limit).
    pub async fn set_queue_limit(&self, queue: &str, limit: Option<u32>) -> Result<()> {
        let limit = limit.map(|n| i32::try_from(n).unwrap_or(i32::MAX));
        let setting = db::QueueSetting::Limit(limit);
        db::set_queue(&self.inner.pool, self.inner.queries, queue, setting).await
    }

    /// At most `starts` jobs of `queue` started per `period` across all
    /// workers, counted in fixed windows (so up to twice that in any sliding
    /// window straddling two); `None` removes it.
    pub async fn set_queue_rate_limit(
        &self,
        queue: &str,
        rate: Option<(u32, Duration)>,
    ) -> Result<()> {
        let rate =
            rate.map(|(n, period)| (i32::try_from(n).unwrap_or(i32::MAX), period.as_secs_f64()));
        let setting = db::QueueSetting::Rate(rate);
        db::set_queue(&self.inner.pool, self.inner.queries, queue, setting).await
    }

    /// A handle to an existing job, e.g. from an id kept elsewhere. `O` is the
    /// expected output type.
    pub fn handle<O>(&self, id: JobId) -> JobHandle<O> {
        JobHandle::new(self.clone(), id, false)
    }

    /// Reads a job's row, or `None` if no job has this id.
    pub async fn job(&self, id: JobId) -> Result<Option<Job>> {
        db::fetch_job(&self.inner.pool, self.inner.queries, id).await
    }
}

/// The longest delay, timeout, backoff unit or uniqueness TTL a job takes.
const LONGEST: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// The range of times `conveyor.jobs` holds (`jobs_timestamps_check`).
fn earliest_time() -> DateTime<Utc> {
    DateTime::from_timestamp(-62_135_596_800, 0).unwrap_or_default() // 0001-01-01
}
fn latest_time() -> DateTime<Utc> {
    DateTime::from_timestamp(253_402_300_800, 0).unwrap_or_default() // 10000-01-01
}

/// Jobs per insert statement in bulk enqueue.
pub const BULK_CHUNK: usize = 5_000;

/// From this many jobs, [`Client::enqueue_many`] streams jobs that are due
/// now (no ETA, no delay, not unique) with COPY.
pub const COPY_MIN: usize = 1_000;

/// How long a unique job keeps its key (see [`NewJob::unique`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unique {
    /// While the job is not finished (scheduled, pending, started, retry).
    UntilFinished,
    /// For this long after enqueue, whatever the job's state.
    For(Duration),
}

/// A unique job's scope and explicit key.
#[derive(Clone, Debug)]
pub(crate) struct UniqueSpec {
    pub scope: Unique,
    pub key: Option<String>,
}
