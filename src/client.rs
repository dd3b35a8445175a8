//! The public client: enqueue jobs (on the pool, in the caller's transaction,
//! in bulk) and get handles to await their results.

use std::sync::Arc;
use std::time::Duration;

use sqlx::{PgConnection, PgPool};

use crate::db::{self, Queries};
use crate::error::{Error, Result};
use crate::failover::{Connector, Primary};
use crate::job::{Job, JobId};
use crate::notify::WaiterHub;
use crate::pooler::Pooler;

/// The entry point: enqueues jobs and hands out [`crate::JobHandle`]s. Cheap to clone.
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
    /// The primary the pool follows, if the URL listed hosts.
    pub(crate) primary: Option<Primary>,
    /// The transaction-mode pooler the pool goes through, if any.
    pub(crate) pooler: Option<Pooler>,
    /// How long an enqueue keeps trying after its connection failed.
    pub(crate) confirm_for: Duration,
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
    primary: Option<Primary>,
    pooler: Option<Pooler>,
    confirm_for: Duration,
}

impl ClientBuilder {
    /// Schema holding Conveyor's tables (default `conveyor`). It must have been
    /// migrated with [`crate::migrate_schema`].
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = schema.into();
        self
    }

    /// The [`Primary`] the pool follows (a pool from [`Primary::pool`]):
    /// the connections Conveyor opens on its own (a worker's pool, `LISTEN`,
    /// the periodic leader's) then follow it too. [`Client::connect`] sets
    /// it for a URL with a host list or `target_session_attrs`.
    pub fn primary(mut self, primary: Primary) -> Self {
        self.primary = Some(primary);
        self
    }

    /// The pool goes through a pooler in transaction mode (PgBouncer
    /// `pool_mode = transaction`): see [`Pooler`] for what changes. Without
    /// it (the default) Conveyor assumes a direct connection and uses
    /// sessions and named statements freely.
    pub fn pooler(mut self, pooler: Pooler) -> Self {
        self.pooler = Some(pooler);
        self
    }

    /// How long an enqueue that owns its transaction keeps trying to reach
    /// the database after its connection failed (default 30 s). An insert
    /// skips job ids that exist, so trying again after a commit whose
    /// acknowledgement was lost finds the jobs instead of doubling them; the
    /// call returns `Ok` once the database answers, or
    /// [`Error::Unconfirmed`] after this long without an answer (the jobs
    /// may or may not exist). Enqueues in your transaction (`_tx`) are not
    /// retried: your transaction failed with the connection.
    pub fn confirm_for(mut self, confirm_for: Duration) -> Self {
        self.confirm_for = confirm_for;
        self
    }

    /// The schema, primary, pooler and `confirm_for` of `client` (for a
    /// client of Conveyor's own on another pool, such as a worker's).
    pub(crate) fn like(mut self, client: &Client) -> Self {
        self.schema = client.schema().to_string();
        self.primary = client.inner.primary.clone();
        self.pooler = client.inner.pooler.clone();
        self.confirm_for = client.inner.confirm_for;
        self
    }

    /// Checks the settings and builds the client.
    pub fn build(mut self) -> Result<Client> {
        db::validate_schema(&self.schema)?;
        if let Some(pooler) = &mut self.pooler
            && let Some(url) = pooler.session_url.take()
        {
            let options = url
                .parse()
                .map_err(|e| Error::Config(format!("bad session URL: {e}")))?;
            pooler.session = Some(options);
        }
        let queries = Queries::for_schema_pooled(&self.schema, self.pooler.is_some());
        let connector =
            Connector::new(self.pool.clone(), self.primary.clone(), self.pooler.clone());
        Ok(Client {
            inner: Arc::new(ClientInner {
                waiters: WaiterHub::new(connector, queries),
                notifier: crate::notify::Notifier::new(self.pool.clone(), queries),
                group_commit: crate::group_commit::GroupCommit::new(
                    self.pool.clone(),
                    queries,
                    self.confirm_for,
                ),
                inserting: std::sync::atomic::AtomicUsize::new(0),
                pool: self.pool,
                queries,
                primary: self.primary,
                pooler: self.pooler,
                confirm_for: self.confirm_for,
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
///   on 4 more connections that handlers cannot exhaust (see
///   [`crate::WorkerBuilder::bookkeeping_pool`]); size this pool for what
///   your handlers use.
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
    ///
    /// A libpq-style host list (`postgres://u@h1:5432,h2:5432/db?target_session_attrs=read-write`,
    /// as `pg_autoctl show uri` prints it) makes the client follow the
    /// server that qualifies across failovers (see [`Primary`]).
    pub async fn connect(url: &str) -> Result<Client> {
        let list = crate::failover::parse(url)?;
        if !list.needs_following() {
            return Ok(Client::new(pool_options().connect(url).await?));
        }
        let primary = Primary::with_hosts(list).await?;
        let pool = primary.pool(pool_options());
        Client::builder(pool).primary(primary).build()
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
            primary: None,
            pooler: None,
            confirm_for: crate::confirm::CONFIRM_FOR,
        }
    }

    /// The pool this client uses.
    pub fn pool(&self) -> &PgPool {
        &self.inner.pool
    }

    /// The primary this client follows, if it was given a host list.
    pub fn primary(&self) -> Option<&Primary> {
        self.inner.primary.as_ref()
    }

    /// Where Conveyor opens connections of its own for this client.
    pub(crate) fn connector(&self) -> Connector {
        Connector::new(
            self.inner.pool.clone(),
            self.inner.primary.clone(),
            self.inner.pooler.clone(),
        )
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
        let mut conn = self.inner.pool.acquire().await?;
        self.requeue_tx(&mut conn, ids).await
    }

    /// [`Client::requeue`] on `conn` (e.g. the caller's transaction: the
    /// jobs go back to `pending`, and workers are woken, at commit).
    pub async fn requeue_tx(&self, conn: &mut PgConnection, ids: &[JobId]) -> Result<u64> {
        let n = db::requeue(conn, self.inner.queries, ids).await?;
        Ok(u64::try_from(n).unwrap_or(0))
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

    /// Reads a job's row, or `None` if no job has this id.
    pub async fn job(&self, id: JobId) -> Result<Option<Job>> {
        db::fetch_job(&self.inner.pool, self.inner.queries, id).await
    }
}
