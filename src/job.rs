//! Job ids, states and the job row as stored in `conveyor.jobs`.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A job's id: a UUID, time-ordered (v7) unless the caller chose it.
pub type JobId = uuid::Uuid;

/// Namespace for [`job_id_from_key`] (a fixed random UUID).
const KEY_NAMESPACE: uuid::Uuid = uuid::Uuid::from_u128(0x6f1c_0a0e_3b59_4c8e_9a51_2f0e_8f43_a7d2);

/// A stable job id derived from an external key (a webhook message id, an
/// order number…), for idempotent enqueue: the same key always gives the same
/// id, so enqueueing it twice returns the first job.
///
/// ```
/// let a = conveyor::job_id_from_key("stripe-evt-123");
/// assert_eq!(a, conveyor::job_id_from_key("stripe-evt-123"));
/// assert_ne!(a, conveyor::job_id_from_key("stripe-evt-124"));
/// ```
pub fn job_id_from_key(key: &str) -> JobId {
    uuid::Uuid::new_v5(&KEY_NAMESPACE, key.as_bytes())
}

/// Where a job is in its life, as stored in `conveyor.jobs.state`.
///
/// `pending → started → success | failure`, with `scheduled` before `pending`
/// for a job whose `run_at` is in the future, `retry` between a failed attempt
/// and the next one, and `cancelled` for a job cancelled before it finished.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobState {
    /// Runnable now, waiting for a worker (machinery's PENDING).
    Pending,
    /// Waiting for its ETA (`run_at` in the future).
    Scheduled,
    /// Claimed by a worker, which is running it (machinery's RECEIVED and STARTED).
    Started,
    /// An attempt failed; waiting for `run_at` to try again (machinery's RETRY).
    Retry,
    /// Finished: the handler returned a result (machinery's SUCCESS).
    Success,
    /// Finished: the last attempt failed and no retry is left, or retrying was refused
    /// (machinery's FAILURE, asynq's archived).
    Failure,
    /// Finished: cancelled before it could complete.
    Cancelled,
}

impl JobState {
    /// Every state, in life-cycle order.
    pub const ALL: [JobState; 7] = [
        JobState::Scheduled,
        JobState::Pending,
        JobState::Started,
        JobState::Retry,
        JobState::Success,
        JobState::Failure,
        JobState::Cancelled,
    ];

    /// The value stored in the `state` column.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Pending => "pending",
            JobState::Scheduled => "scheduled",
            JobState::Started => "started",
            JobState::Retry => "retry",
            JobState::Success => "success",
            JobState::Failure => "failure",
            JobState::Cancelled => "cancelled",
        }
    }

    /// Whether the job is done for good (success, failure or cancelled).
    pub fn is_final(self) -> bool {
        matches!(
            self,
            JobState::Success | JobState::Failure | JobState::Cancelled
        )
    }
}

impl std::fmt::Display for JobState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for JobState {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        JobState::ALL
            .into_iter()
            .find(|state| state.as_str() == s)
            .ok_or_else(|| format!("unknown job state `{s}`"))
    }
}

/// One failed attempt, as kept in the `errors` column. Entries written by
/// hand with fields missing decode with defaults (attempt 0, the Unix epoch,
/// an empty message) rather than making the whole job unreadable.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct AttemptError {
    /// Which attempt failed (1 for the first).
    #[serde(default)]
    pub attempt: i32,
    /// When the failure was recorded.
    #[serde(default)]
    pub at: DateTime<Utc>,
    /// The error message.
    #[serde(default)]
    pub error: String,
    /// The worker that ran the attempt, if known.
    #[serde(default)]
    pub worker_id: Option<String>,
}

/// A row of `conveyor.jobs`: everything known about one job.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Job {
    /// Job id.
    pub id: JobId,
    /// Queue it was enqueued on.
    pub queue: String,
    /// Task name.
    pub task: String,
    /// JSON arguments.
    pub args: Value,
    /// JSON object of metadata.
    pub headers: Value,
    /// Current state.
    pub state: JobState,
    /// Higher runs first within a queue.
    pub priority: i32,
    /// Earliest start of the next attempt.
    pub run_at: DateTime<Utc>,
    /// Attempts started so far.
    pub attempt: i32,
    /// Retries allowed after the first attempt.
    pub max_retries: i32,
    /// Fibonacci backoff unit.
    pub retry_backoff_base: Duration,
    /// Delay used for the latest retry.
    pub retry_backoff: Option<Duration>,
    /// Per-attempt time limit, if set on the job.
    pub timeout: Option<Duration>,
    /// While started: when the lease lapses.
    pub lease_expires_at: Option<DateTime<Utc>>,
    /// While started: the worker holding the job.
    pub worker_id: Option<String>,
    /// Result of a successful job.
    pub result: Option<Value>,
    /// Error of the latest failed attempt.
    pub last_error: Option<String>,
    /// Every failed attempt, oldest first.
    pub errors: Vec<AttemptError>,
    /// When it was enqueued.
    pub created_at: DateTime<Utc>,
    /// When the latest attempt started.
    pub started_at: Option<DateTime<Utc>>,
    /// When it reached a final state.
    pub finished_at: Option<DateTime<Utc>>,
    /// The chain, group or chord it belongs to.
    pub workflow_id: Option<uuid::Uuid>,
    /// Its position there (member or step index; `None` for a chord callback).
    pub workflow_index: Option<i32>,
    /// Specs of what it enqueues when it succeeds (next step, callbacks).
    pub on_success: Option<Value>,
    /// Specs of what it enqueues when it fails for good (error callbacks).
    pub on_error: Option<Value>,
    /// Fencing token of its latest claim (see `conveyor.jobs.lease_token`).
    pub lease_token: Option<i64>,
}

impl Job {
    /// Every column as a JSON object, durations in seconds (`*_secs`), as
    /// the CLI's `--json` output and the dashboard's API show a job.
    pub fn to_json(&self) -> Value {
        let secs = |d: Option<Duration>| d.map(|d| d.as_secs_f64());
        serde_json::json!({
            "id": self.id,
            "queue": self.queue,
            "task": self.task,
            "args": self.args,
            "headers": self.headers,
            "state": self.state,
            "priority": self.priority,
            "run_at": self.run_at,
            "attempt": self.attempt,
            "max_retries": self.max_retries,
            "retry_backoff_base_secs": self.retry_backoff_base.as_secs_f64(),
            "retry_backoff_secs": secs(self.retry_backoff),
            "timeout_secs": secs(self.timeout),
            "lease_expires_at": self.lease_expires_at,
            "worker_id": self.worker_id,
            "result": self.result,
            "last_error": self.last_error,
            "errors": self.errors,
            "created_at": self.created_at,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "workflow_id": self.workflow_id,
            "workflow_index": self.workflow_index,
            "on_success": self.on_success,
            "on_error": self.on_error,
            "lease_token": self.lease_token,
        })
    }

    /// Whether its final outcome has follow-up work (workflow or callbacks).
    pub(crate) fn has_follow_up(&self) -> bool {
        self.workflow_id.is_some() || self.on_success.is_some() || self.on_error.is_some()
    }
}

fn secs(value: Option<f64>) -> Option<Duration> {
    value.and_then(|s| Duration::try_from_secs_f64(s.max(0.0)).ok())
}

impl<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow> for Job {
    fn from_row(row: &'r sqlx::postgres::PgRow) -> Result<Self, sqlx::Error> {
        use sqlx::Row;
        let state: String = row.try_get("state")?;
        let state = state
            .parse()
            .map_err(|e: String| sqlx::Error::ColumnDecode {
                index: "state".into(),
                source: e.into(),
            })?;
        let errors: Value = row.try_get("errors")?;
        // Lenient: an entry that is not an object of the expected shape (a
        // hand-written row) is kept as its text, never failing the claim.
        let errors = match errors {
            Value::Array(items) => items
                .into_iter()
                .map(|item| {
                    serde_json::from_value(item.clone()).unwrap_or_else(|_| AttemptError {
                        attempt: 0,
                        at: DateTime::<Utc>::default(),
                        error: item.to_string(),
                        worker_id: None,
                    })
                })
                .collect(),
            _ => Vec::new(),
        };
        Ok(Job {
            id: row.try_get("id")?,
            queue: row.try_get("queue")?,
            task: row.try_get("task")?,
            args: row.try_get("args")?,
            headers: row.try_get("headers")?,
            state,
            priority: row.try_get("priority")?,
            run_at: row.try_get("run_at")?,
            attempt: row.try_get("attempt")?,
            max_retries: row.try_get("max_retries")?,
            retry_backoff_base: secs(row.try_get("retry_backoff_base_secs")?).unwrap_or_default(),
            retry_backoff: secs(row.try_get("retry_backoff_secs")?),
            timeout: secs(row.try_get("timeout_secs")?),
            lease_expires_at: row.try_get("lease_expires_at")?,
            worker_id: row.try_get("worker_id")?,
            result: row.try_get("result")?,
            last_error: row.try_get("last_error")?,
            errors,
            created_at: row.try_get("created_at")?,
            started_at: row.try_get("started_at")?,
            finished_at: row.try_get("finished_at")?,
            workflow_id: row.try_get("workflow_id")?,
            workflow_index: row.try_get("workflow_index")?,
            on_success: row.try_get("on_success")?,
            on_error: row.try_get("on_error")?,
            lease_token: row.try_get("lease_token")?,
        })
    }
}
