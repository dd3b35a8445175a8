//! The worker: registers handlers, claims jobs for its free slots, runs them,
//! records outcomes, and shuts down gracefully.
//!
//! Inside, one task per role: the producer ([`producer`]) claims jobs and
//! starts them in its slots ([`slots`]), an executor ([`executor`]) runs
//! each job, the completer ([`completer`]) writes outcomes in batches, the
//! heartbeat ([`heartbeat`]) renews leases ([`lease`]), and a listener
//! ([`listener`]) wakes the producer on NOTIFY. Each background task is a
//! [`service`], defined in its module and supervised (restarts counted in
//! [`health`]); [`launch`] lists them and starts them all, on connections
//! of the worker's own.

mod ahead;
mod completer;
mod config;
mod executor;
mod handle;
mod handler;
mod health;
mod heartbeat;
mod launch;
mod lease;
mod listener;
mod lost;
mod plan;
mod producer;
mod registry;
mod service;
mod slots;
mod upkeep;

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use sqlx::PgPool;

use crate::client::Client;
use crate::error::Result;
use crate::maintenance::periodic::{Periodic, host_name};
use crate::maintenance::pruner::Retention;
use crate::task::{Task, TaskContext, TaskError};
pub use handle::{ShutdownReport, WorkerHandle};
use handler::{FnHandler, Handler, TypedHandler};
pub use health::{WorkerHealth, WorkerTask};

/// Default number of jobs a worker runs at once.
pub(crate) const DEFAULT_CONCURRENCY: usize = 10;
/// Default cap of [`WorkerBuilder::claim_ahead`].
pub(crate) const DEFAULT_CLAIM_AHEAD: usize = 1_000;
/// Default lease: how long a claimed job stays held without renewal.
pub(crate) const DEFAULT_LEASE: Duration = Duration::from_secs(60);
/// Default time between two pruning passes.
pub(crate) const DEFAULT_PRUNE_INTERVAL: Duration = Duration::from_secs(60);
/// Default time a cancelled handler gets to stop before it is aborted.
pub(crate) const DEFAULT_CANCEL_GRACE: Duration = Duration::from_secs(5);
/// Default longest sleep of an idle worker without any notification.
pub(crate) const DEFAULT_SAFETY_INTERVAL: Duration = Duration::from_secs(30);
/// Connections of a worker's own pool (claims, outcomes, leases,
/// maintenance), unless [`WorkerBuilder::bookkeeping_pool`] gives one.
pub(crate) const BOOKKEEPING_CONNECTIONS: u32 = 4;

/// Configures and starts a worker. See [`Worker::builder`].
pub struct WorkerBuilder {
    client: Client,
    queues: Vec<String>,
    weights: Option<Vec<u32>>,
    concurrency: usize,
    max_claim: usize,
    claim_ahead: usize,
    give_back_held_after: Duration,
    hold_ahead_at_least: usize,
    lease: Duration,
    safety_interval: Duration,
    default_timeout: Option<Duration>,
    cancel_grace: Duration,
    rescue_interval: Option<Duration>,
    retention: Retention,
    prune_interval: Duration,
    periodic: Vec<Periodic>,
    #[cfg(feature = "metrics")]
    metrics: Option<crate::Metrics>,
    worker_id: Option<String>,
    bookkeeping_pool: Option<PgPool>,
    handlers: HashMap<String, Arc<dyn Handler>>,
}

impl std::fmt::Debug for WorkerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerBuilder")
            .field("queues", &self.queues)
            .field("concurrency", &self.concurrency)
            .field("tasks", &self.handlers.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// A worker process's job runner. Build one with [`Worker::builder`].
///
/// ```no_run
/// # use conveyor::{Client, Worker, Task, TaskContext, TaskError};
/// # struct Add;
/// # impl Task for Add { const NAME: &'static str = "add"; type Args = (i64, i64); type Output = i64;
/// #   async fn run(&self, _: TaskContext, (a, b): (i64, i64)) -> Result<i64, TaskError> { Ok(a + b) } }
/// # async fn demo(client: Client) -> conveyor::Result<()> {
/// let worker = Worker::builder(&client)
///     .queues(["default", "mail"])
///     .concurrency(20)
///     .register(Add)
///     .register_fn("echo", |_ctx, args| async move { Ok(args) })
///     .start()?;
/// // ... later, or on SIGTERM:
/// worker.shutdown(std::time::Duration::from_secs(30)).await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Worker;

impl Worker {
    /// A builder for a worker using `client`'s pool and schema.
    pub fn builder(client: &Client) -> WorkerBuilder {
        WorkerBuilder {
            client: client.clone(),
            queues: vec![crate::task::DEFAULT_QUEUE.to_string()],
            weights: None,
            concurrency: DEFAULT_CONCURRENCY,
            max_claim: 1_000,
            claim_ahead: DEFAULT_CLAIM_AHEAD,
            give_back_held_after: ahead::MAX_WAIT,
            hold_ahead_at_least: 0,
            lease: DEFAULT_LEASE,
            safety_interval: DEFAULT_SAFETY_INTERVAL,
            default_timeout: None,
            cancel_grace: DEFAULT_CANCEL_GRACE,
            rescue_interval: None,
            retention: Retention::default(),
            prune_interval: DEFAULT_PRUNE_INTERVAL,
            periodic: Vec::new(),
            #[cfg(feature = "metrics")]
            metrics: None,
            worker_id: None,
            bookkeeping_pool: None,
            handlers: HashMap::new(),
        }
    }
}

impl WorkerBuilder {
    /// Queues to serve, in strict priority order (default `["default"]`):
    /// a queue is claimed from only while the ones before it have nothing
    /// runnable.
    pub fn queues<I, S>(mut self, queues: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.queues = queues.into_iter().map(Into::into).collect();
        self.weights = None;
        self
    }
    /// Queues to serve with weights (asynq's weighted priority): with
    /// `[("critical", 6), ("default", 3), ("low", 1)]` and all three full,
    /// claims go 60/30/10; a queue without work leaves its share to the others.
    pub fn weighted_queues<I, S>(mut self, queues: I) -> Self
    where
        I: IntoIterator<Item = (S, u32)>,
        S: Into<String>,
    {
        let (queues, weights) = queues.into_iter().map(|(q, w)| (q.into(), w)).unzip();
        self.queues = queues;
        self.weights = Some(weights);
        self
    }
    /// Jobs run at once (default 10).
    pub fn concurrency(mut self, concurrency: usize) -> Self {
        self.concurrency = concurrency;
        self
    }
    /// Most jobs claimed by one statement (default 1,000; a claim never asks
    /// for more than the free slots and the claim-ahead room).
    pub fn max_claim_batch(mut self, max: usize) -> Self {
        self.max_claim = max;
        self
    }
    /// Most jobs held claimed ahead of free slots (default 1,000; 0 turns
    /// claiming ahead off).
    ///
    /// When jobs are short, a worker claims more than its free slots into a
    /// local buffer, so that a freed slot starts the next job without a
    /// round trip: at the default concurrency a backlog of short jobs then
    /// drains several times faster. The buffer holds what the worker is
    /// expected to start within the next 50 ms at the pace it has been
    /// starting jobs, up to this cap: a worker whose jobs are slow holds
    /// nothing ahead, and never sits on a small backlog that idle workers
    /// could run. Held jobs are `started` in `conveyor.jobs` (with this
    /// worker's id and a lease the heartbeat renews); one that waits
    /// 500 ms without a slot, and every held job at shutdown, is given
    /// back (`pending`, its attempt not spent). Nothing is held ahead from
    /// a queue with a concurrency or rate limit, whose counts would include
    /// it.
    pub fn claim_ahead(mut self, max: usize) -> Self {
        self.claim_ahead = max;
        self
    }
    /// Test hook: how long a job held ahead waits for a slot before it is
    /// given back (500 ms), so that a test can see jobs held however slowly
    /// it looks. Not for production use.
    #[doc(hidden)]
    pub fn give_back_held_after(mut self, wait: Duration) -> Self {
        self.give_back_held_after = wait;
        self
    }
    /// Test hook: how many jobs are held ahead whatever the pace at which
    /// the worker starts jobs (0; at most [`WorkerBuilder::claim_ahead`]), so
    /// that a test sees jobs held on a machine too loaded to reach the pace
    /// that holds them. Not for production use.
    #[doc(hidden)]
    pub fn hold_ahead_at_least(mut self, jobs: usize) -> Self {
        self.hold_ahead_at_least = jobs;
        self
    }
    /// Lease on claimed jobs, renewed every third of it while they run (default 60 s).
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }
    /// Longest an idle worker sleeps without a notification (default 30 s).
    /// Only a safety net: enqueues, retries and scheduled times wake it sooner.
    pub fn safety_interval(mut self, interval: Duration) -> Self {
        self.safety_interval = interval;
        self
    }
    /// Time limit of one attempt for jobs and tasks that set none (default: none).
    pub fn default_timeout(mut self, timeout: Duration) -> Self {
        self.default_timeout = Some(timeout);
        self
    }
    /// How long a cancelled handler may take to stop after it is told to,
    /// before it is aborted (default 5 s). A timed-out handler is aborted at once.
    pub fn cancel_grace(mut self, grace: Duration) -> Self {
        self.cancel_grace = grace;
        self
    }
    /// How long finished jobs are kept (default [`Retention::default`]: 7
    /// days, failures 30). Workers take turns pruning, by advisory lock.
    pub fn retention(mut self, retention: Retention) -> Self {
        self.retention = retention;
        self
    }
    /// Adds a periodic job. Every worker process may register the same
    /// schedules: one at a time leads (advisory lock) and enqueues each slot
    /// exactly once; the job runs on any worker serving its queue.
    pub fn periodic(mut self, periodic: Periodic) -> Self {
        self.periodic.push(periodic);
        self
    }
    /// Records attempts (processed, failed, durations per task) in `metrics`.
    #[cfg(feature = "metrics")]
    pub fn metrics(mut self, metrics: crate::Metrics) -> Self {
        self.metrics = Some(metrics);
        self
    }
    /// How often the pruner runs (default 60 s).
    pub fn prune_interval(mut self, every: Duration) -> Self {
        self.prune_interval = every;
        self
    }
    /// How often this worker looks for jobs whose lease expired (default:
    /// half the lease). Workers take turns through an advisory lock.
    pub fn rescue_interval(mut self, every: Duration) -> Self {
        self.rescue_interval = Some(every);
        self
    }
    /// This worker's id, stored in `worker_id` of the jobs it runs (default
    /// `host-pid-random`).
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.worker_id = Some(id.into());
        self
    }
    /// The pool for the worker's own statements: claims, lease renewals,
    /// outcomes and maintenance. By default the worker opens a pool of its
    /// own of 4 connections, with the client
    /// pool's connect options, so that handlers holding every connection of
    /// the client's pool cannot delay a lease renewal. Give one to choose
    /// its size and settings (at least 2 connections; it is not closed at
    /// shutdown).
    pub fn bookkeeping_pool(mut self, pool: PgPool) -> Self {
        self.bookkeeping_pool = Some(pool);
        self
    }
    /// Overrides settings from environment variables:
    /// `CONVEYOR_QUEUES=critical=6,default=3,low=1`, `CONVEYOR_CONCURRENCY=50`,
    /// `CONVEYOR_LEASE_SECS=30`, `CONVEYOR_RETAIN_SUCCESS_SECS=86400`…
    /// Fails with [`crate::Error::Config`] naming the variable on a bad value.
    /// Each variable set overrides what the builder had; durations are in
    /// seconds (fractions allowed).
    ///
    /// | variable | sets |
    /// | --- | --- |
    /// | `CONVEYOR_QUEUES` | queues: `a,b,c` (strict order, [`WorkerBuilder::queues`]) or `a=6,b=3,c=1` ([`WorkerBuilder::weighted_queues`]) |
    /// | `CONVEYOR_CONCURRENCY` | jobs run at once ([`WorkerBuilder::concurrency`]) |
    /// | `CONVEYOR_MAX_CLAIM_BATCH` | most jobs claimed per statement ([`WorkerBuilder::max_claim_batch`]) |
    /// | `CONVEYOR_CLAIM_AHEAD` | most jobs held claimed ahead of free slots, 0: off ([`WorkerBuilder::claim_ahead`]) |
    /// | `CONVEYOR_LEASE_SECS` | lease on claimed jobs ([`WorkerBuilder::lease`]) |
    /// | `CONVEYOR_SAFETY_INTERVAL_SECS` | longest idle sleep without a notification ([`WorkerBuilder::safety_interval`]) |
    /// | `CONVEYOR_DEFAULT_TIMEOUT_SECS` | attempt time limit for jobs and tasks that set none ([`WorkerBuilder::default_timeout`]) |
    /// | `CONVEYOR_CANCEL_GRACE_SECS` | time a cancelled handler gets to stop ([`WorkerBuilder::cancel_grace`]) |
    /// | `CONVEYOR_RESCUE_INTERVAL_SECS` | how often expired leases are looked for ([`WorkerBuilder::rescue_interval`]) |
    /// | `CONVEYOR_PRUNE_INTERVAL_SECS` | how often finished jobs are pruned ([`WorkerBuilder::prune_interval`]) |
    /// | `CONVEYOR_RETAIN_SUCCESS_SECS` | retention of succeeded jobs, `forever` to keep ([`WorkerBuilder::retention`]) |
    /// | `CONVEYOR_RETAIN_FAILURE_SECS` | retention of failed jobs, `forever` to keep |
    /// | `CONVEYOR_RETAIN_CANCELLED_SECS` | retention of cancelled jobs, `forever` to keep |
    /// | `CONVEYOR_RETAIN_STATS_SECS` | retention of the per-minute outcome rollups (`conveyor.stats`), `forever` to keep |
    /// | `CONVEYOR_WORKER_ID` | the worker's id ([`WorkerBuilder::id`]) |
    pub fn from_env(self) -> Result<Self> {
        config::apply(self, |name| std::env::var(name).ok())
    }
    /// Like [`WorkerBuilder::from_env`], reading variables from `lookup`.
    pub fn from_vars(self, lookup: impl Fn(&str) -> Option<String>) -> Result<Self> {
        config::apply(self, lookup)
    }
    /// Registers a typed task; the worker claims jobs named `T::NAME`.
    pub fn register<T: Task>(mut self, task: T) -> Self {
        self.handlers
            .insert(T::NAME.to_string(), Arc::new(TypedHandler(Arc::new(task))));
        self
    }
    /// Registers a handler taking and returning JSON for task `name`, e.g. for
    /// jobs enqueued from SQL or another language.
    pub fn register_fn<F, Fut>(mut self, name: impl Into<String>, handler: F) -> Self
    where
        F: Fn(TaskContext, Value) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<Value, TaskError>> + Send + 'static,
    {
        self.handlers
            .insert(name.into(), Arc::new(FnHandler(handler)));
        self
    }
    /// Like [`WorkerBuilder::register_fn`], for a handler that needs shared
    /// state (a pool, an HTTP client, a cache): each call gets a clone of
    /// `state`, as an axum handler gets `State`. Wrap what is expensive to
    /// clone in an `Arc`.
    ///
    /// ```no_run
    /// # async fn demo(client: conveyor::Client, reports: conveyor::sqlx::PgPool) {
    /// conveyor::Worker::builder(&client).register_fn_with(
    ///     "count_tables",
    ///     reports,
    ///     |db, _ctx, _args| async move {
    ///         let (n,): (i64,) = conveyor::sqlx::query_as("SELECT count(*) FROM pg_class")
    ///             .fetch_one(&db)
    ///             .await
    ///             .map_err(conveyor::TaskError::retry)?;
    ///         Ok(serde_json::json!(n))
    ///     },
    /// );
    /// # }
    /// ```
    pub fn register_fn_with<S, F, Fut>(self, name: impl Into<String>, state: S, handler: F) -> Self
    where
        S: Clone + Send + Sync + 'static,
        F: Fn(S, TaskContext, Value) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<Value, TaskError>> + Send + 'static,
    {
        self.register_fn(name, move |ctx, args| handler(state.clone(), ctx, args))
    }
}

fn default_worker_id() -> String {
    let host = host_name();
    let random = uuid::Uuid::new_v4().simple().to_string();
    format!("{host}-{}-{}", std::process::id(), &random[..8])
}
