//! Defining tasks: the [`Task`] trait, the [`TaskContext`] a handler gets, and
//! the [`TaskError`] it returns to say what should happen next.

use std::future::Future;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

mod new_job;
mod stored;

use crate::job::JobId;
pub(crate) use new_job::{DEFAULT_MAX_RETRIES, DEFAULT_QUEUE};
pub use new_job::{NewJob, Unique};

/// A task type: its name, argument and output types, per-task defaults, and
/// the async handler that runs it.
///
/// ```
/// use conveyor::{Task, TaskContext, TaskError};
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Serialize, Deserialize)]
/// struct AddArgs { a: i64, b: i64 }
///
/// struct Add;
///
/// impl Task for Add {
///     const NAME: &'static str = "add";
///     type Args = AddArgs;
///     type Output = i64;
///
///     async fn run(&self, _ctx: TaskContext, args: AddArgs) -> Result<i64, TaskError> {
///         Ok(args.a + args.b)
///     }
/// }
///
/// // A job of this task, ready to enqueue:
/// let job = Add::job(AddArgs { a: 1, b: 2 }).priority(5);
/// ```
pub trait Task: Send + Sync + 'static {
    /// The registered name, stored in `conveyor.jobs.task`.
    const NAME: &'static str;
    /// Default queue for jobs of this task (default `"default"`).
    const QUEUE: &'static str = DEFAULT_QUEUE;
    /// Default number of retries after the first attempt (default 25).
    const MAX_RETRIES: u32 = DEFAULT_MAX_RETRIES;
    /// Default time limit of one attempt (`None`: the worker's default).
    const TIMEOUT: Option<Duration> = None;

    /// Arguments, stored as JSON in `args`.
    type Args: Serialize + DeserializeOwned + Send + 'static;
    /// Result, stored as JSON in `result`.
    type Output: Serialize + DeserializeOwned + Send + 'static;

    /// Runs one attempt.
    fn run(
        &self,
        ctx: TaskContext,
        args: Self::Args,
    ) -> impl Future<Output = Result<Self::Output, TaskError>> + Send;

    /// A job of this task with these arguments and the task's defaults,
    /// to refine with [`NewJob`]'s options and enqueue.
    fn job(args: Self::Args) -> NewJob<Self::Output>
    where
        Self: Sized,
    {
        let mut job = NewJob::typed(Self::NAME, &args)
            .queue(Self::QUEUE)
            .max_retries(Self::MAX_RETRIES);
        if let Some(timeout) = Self::TIMEOUT {
            job = job.timeout(timeout);
        }
        job
    }
}

/// What a handler knows about the job it is running.
#[derive(Clone, Debug)]
pub struct TaskContext {
    pub(crate) id: JobId,
    pub(crate) task: String,
    pub(crate) queue: String,
    pub(crate) attempt: u32,
    pub(crate) max_retries: u32,
    pub(crate) headers: Value,
    pub(crate) worker_id: String,
    pub(crate) lease_token: i64,
    pub(crate) cancel: tokio_util::sync::CancellationToken,
    pub(crate) lease_lost: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl TaskContext {
    /// The job's id.
    pub fn job_id(&self) -> JobId {
        self.id
    }
    /// The task name.
    pub fn task(&self) -> &str {
        &self.task
    }
    /// The queue the job came from.
    pub fn queue(&self) -> &str {
        &self.queue
    }
    /// This attempt's number: 1 for the first run, 2 for the first retry…
    pub fn attempt(&self) -> u32 {
        self.attempt
    }
    /// Retries allowed after the first attempt.
    pub fn max_retries(&self) -> u32 {
        self.max_retries
    }
    /// Whether a failure of this attempt would still be retried.
    pub fn has_retries_left(&self) -> bool {
        self.attempt <= self.max_retries
    }
    /// The job's headers (a JSON object).
    pub fn headers(&self) -> &Value {
        &self.headers
    }
    /// One header, if present.
    pub fn header(&self, key: &str) -> Option<&Value> {
        self.headers.get(key)
    }
    /// The id of the worker running the job.
    pub fn worker_id(&self) -> &str {
        &self.worker_id
    }
    /// The fencing token of this attempt's claim (`conveyor.jobs.lease_token`):
    /// a later claim of the job always has a greater one, also after a
    /// failover. Pass it to systems you write to, so they can refuse a write
    /// from an attempt older than one they have seen.
    pub fn lease_token(&self) -> i64 {
        self.lease_token
    }
    /// Whether the handler should stop: cancellation of this job was asked
    /// for (see [`crate::Client::cancel`]) or its lease was lost.
    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }
    /// Resolves when the handler should stop: cancellation was asked for
    /// (see [`crate::Client::cancel`]), or the worker lost the job's lease
    /// (see [`TaskContext::lease_lost`]). Select on it in long handlers to
    /// stop early. A handler that does not stop is aborted after the
    /// worker's cancel grace period. After a cancellation the job ends
    /// `cancelled` (unless the handler returns `Ok` within the grace
    /// period); after a lost lease nothing this attempt returns is recorded.
    pub async fn cancelled(&self) {
        self.cancel.cancelled().await
    }
    /// Whether the worker lost this job's lease: the database no longer
    /// holds the job for this attempt (its lease expired while the worker
    /// could not renew it, and it was rescued, re-queued or claimed again),
    /// so another attempt may be running elsewhere and whatever this one
    /// returns will not be recorded. [`TaskContext::cancelled`] resolves too.
    pub fn lease_lost(&self) -> bool {
        self.lease_lost.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// What should happen after a failed attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// Retry under the job's policy (Fibonacci backoff) while retries are left.
    Retry,
    /// Retry after exactly this delay (still counts an attempt).
    RetryAfter(Duration),
    /// Do not retry: the job fails now (asynq's `SkipRetry`).
    Fail,
}

/// A handler's error: a message and what to do next.
///
/// Any `std::error::Error` converts into a retryable `TaskError`, so `?`
/// works in handlers; use [`TaskError::fail`] for errors that no retry can
/// fix and [`TaskError::retry_after`] to choose the delay.
#[derive(Clone, Debug)]
pub struct TaskError {
    message: String,
    failure: Failure,
}

impl TaskError {
    /// Retry under the default policy.
    pub fn retry(message: impl std::fmt::Display) -> Self {
        TaskError {
            message: message.to_string(),
            failure: Failure::Retry,
        }
    }
    /// Retry after `delay` (takes precedence over the backoff policy; a
    /// delay longer than a week waits a week).
    pub fn retry_after(delay: Duration, message: impl std::fmt::Display) -> Self {
        TaskError {
            message: message.to_string(),
            failure: Failure::RetryAfter(delay),
        }
    }
    /// Fail now, without further retries.
    pub fn fail(message: impl std::fmt::Display) -> Self {
        TaskError {
            message: message.to_string(),
            failure: Failure::Fail,
        }
    }
    /// The message stored in `last_error`.
    pub fn message(&self) -> &str {
        &self.message
    }
    /// What happens next.
    pub fn failure(&self) -> Failure {
        self.failure
    }
}

impl std::fmt::Display for TaskError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl<E: std::error::Error + Send + Sync + 'static> From<E> for TaskError {
    fn from(error: E) -> Self {
        let mut message = error.to_string();
        let mut source = error.source();
        while let Some(cause) = source {
            message.push_str(": ");
            message.push_str(&cause.to_string());
            source = cause.source();
        }
        TaskError::retry(message)
    }
}
