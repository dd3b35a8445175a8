//! [`NewJob`]: a job to enqueue, its options and their defaults. What it
//! becomes when stored (checks, spec, insert row) is in `stored.rs`.

use std::marker::PhantomData;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{Map, Value};

use crate::job::JobId;

/// Queue of a job that names none.
pub(crate) const DEFAULT_QUEUE: &str = "default";
/// Retries after the first attempt, unless the job or task says otherwise.
pub(crate) const DEFAULT_MAX_RETRIES: u32 = 25;
/// Fibonacci backoff unit, unless the job says otherwise.
pub(crate) const DEFAULT_RETRY_BACKOFF_BASE: Duration = Duration::from_secs(1);

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
    /// marked [`crate::JobHandle::is_duplicate`], and inserts nothing. The key is
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
}

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
