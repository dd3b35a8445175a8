//! Plain records read from the database or passed to it: what a job list
//! is filtered by, a queue's numbers, a workflow's progress, what an error
//! callback receives. The bottom layer: it imports only [`crate::job`].

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::job::{JobId, JobState};

/// Which jobs to list: every field narrows the list; newest first.
#[derive(Clone, Debug)]
pub struct JobFilter {
    /// Only this queue.
    pub queue: Option<String>,
    /// Only this state.
    pub state: Option<JobState>,
    /// Only this task.
    pub task: Option<String>,
    /// Only jobs enqueued at or after this time.
    pub created_after: Option<DateTime<Utc>>,
    /// Only jobs enqueued before this time.
    pub created_before: Option<DateTime<Utc>>,
    /// Paging: only jobs older than this one (pass the last id of a page).
    pub before_id: Option<JobId>,
    /// At most this many (default 50).
    pub limit: i64,
}

impl Default for JobFilter {
    fn default() -> Self {
        JobFilter {
            queue: None,
            state: None,
            task: None,
            created_after: None,
            created_before: None,
            before_id: None,
            limit: 50,
        }
    }
}

/// One queue's numbers (a row of [`crate::Client::queue_stats`]).
#[derive(Clone, Debug, Serialize, sqlx::FromRow)]
#[non_exhaustive]
pub struct QueueStats {
    /// Queue name.
    pub queue: String,
    /// Jobs waiting for their ETA.
    pub scheduled: i64,
    /// Jobs ready to run.
    pub pending: i64,
    /// Jobs running.
    pub started: i64,
    /// Jobs waiting to retry.
    pub retry: i64,
    /// Jobs that succeeded (still kept).
    pub success: i64,
    /// Jobs that failed for good (still kept).
    pub failure: i64,
    /// Jobs cancelled (still kept).
    pub cancelled: i64,
    /// Seconds the oldest runnable job has waited (queue latency).
    pub oldest_pending_secs: Option<f64>,
    /// Successes in the last minute.
    pub processed_1m: i64,
    /// Failures in the last minute.
    pub failed_1m: i64,
    /// Successes in the last hour.
    pub processed_1h: i64,
    /// Failures in the last hour.
    pub failed_1h: i64,
    /// Whether the queue is paused.
    pub paused: bool,
}

/// A worker process in the registry (a row of [`crate::Client::workers`]).
#[derive(Clone, Debug, Serialize, sqlx::FromRow)]
#[non_exhaustive]
pub struct WorkerInfo {
    /// The worker's id (`worker_id` of the jobs it holds).
    pub id: String,
    /// Host name of the process.
    pub host: String,
    /// Process id on that host.
    pub pid: i32,
    /// Conveyor version it runs.
    pub version: String,
    /// Queues it serves, in its claim order.
    pub queues: Vec<String>,
    /// Jobs it runs at once at most.
    pub concurrency: i32,
    /// Jobs it was running at its last beat.
    pub busy: i32,
    /// When it registered.
    pub started_at: chrono::DateTime<chrono::Utc>,
    /// Its latest beat.
    pub last_beat_at: chrono::DateTime<chrono::Utc>,
    /// How often it beats, in seconds.
    pub beat_interval_secs: f64,
    /// When it was found silent for three beats (killed, hung or cut off);
    /// `None` while it is alive.
    pub dead_at: Option<chrono::DateTime<chrono::Utc>>,
}

/// What an error callback receives: the error message first (machinery's
/// convention), then which job failed, then the callback's own arguments.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct JobFailure<A = Value> {
    /// The failed job's last error.
    pub error: String,
    /// The failed job.
    pub job_id: JobId,
    /// The failed job's task name.
    pub task: String,
    /// The callback's own arguments (`null` when it was given none).
    pub args: A,
}

/// Whether a workflow is still going.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WorkflowState {
    /// Members or steps are still to finish.
    Running,
    /// Done: every member (group), the callback (chord) or the last step (chain) succeeded.
    Success,
    /// A member or step failed for good.
    Failure,
}

/// A row of `conveyor.workflows`: a workflow's progress.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct WorkflowRun {
    /// Workflow id.
    pub id: uuid::Uuid,
    /// `chain`, `group` or `chord`.
    pub kind: String,
    /// Running, success or failure.
    pub state: WorkflowState,
    /// The enclosing workflow (a chord that is a chain step).
    pub parent_id: Option<uuid::Uuid>,
    /// Members (group, chord) or steps (chain).
    pub total: i32,
    /// Members or steps that succeeded.
    pub succeeded: i32,
    /// Members or steps that failed for good.
    pub failed: i32,
    /// The job whose result is the workflow's (chain: last step; chord: callback).
    pub result_job_id: Option<JobId>,
    /// The error that made it fail.
    pub error: Option<String>,
    /// The job that made it fail.
    pub failed_job_id: Option<JobId>,
    /// When it was enqueued.
    pub created_at: DateTime<Utc>,
    /// When it succeeded or failed.
    pub finished_at: Option<DateTime<Utc>>,
}

impl<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow> for WorkflowRun {
    fn from_row(row: &'r sqlx::postgres::PgRow) -> std::result::Result<Self, sqlx::Error> {
        use sqlx::Row;
        let state: String = row.try_get("state")?;
        let state = match state.as_str() {
            "running" => WorkflowState::Running,
            "success" => WorkflowState::Success,
            "failure" => WorkflowState::Failure,
            other => {
                return Err(sqlx::Error::ColumnDecode {
                    index: "state".into(),
                    source: format!("unknown workflow state `{other}`").into(),
                });
            }
        };
        Ok(WorkflowRun {
            id: row.try_get("id")?,
            kind: row.try_get("kind")?,
            state,
            parent_id: row.try_get("parent_id")?,
            total: row.try_get("total")?,
            succeeded: row.try_get("succeeded")?,
            failed: row.try_get("failed")?,
            result_job_id: row.try_get("result_job_id")?,
            error: row.try_get("error")?,
            failed_job_id: row.try_get("failed_job_id")?,
            created_at: row.try_get("created_at")?,
            finished_at: row.try_get("finished_at")?,
        })
    }
}

/// What [`crate::Client::stats`] reads: the per-minute rollups of
/// `conveyor.stats` between two times, summed into buckets of `step`.
#[derive(Clone, Debug)]
pub struct StatsQuery {
    /// From this time (rounded down to a step).
    pub since: DateTime<Utc>,
    /// Up to this time (exclusive).
    pub until: DateTime<Utc>,
    /// Bucket width: a whole number of minutes (rounded down, at least one).
    pub step: std::time::Duration,
    /// Only this queue.
    pub queue: Option<String>,
    /// Only this task.
    pub task: Option<String>,
}

/// The outcomes of one bucket of time (see [`StatsQuery`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, sqlx::FromRow)]
#[non_exhaustive]
pub struct StatsPoint {
    /// Start of the bucket.
    pub at: DateTime<Utc>,
    /// Attempts that succeeded.
    pub succeeded: i64,
    /// Jobs that failed for good.
    pub failed: i64,
    /// Attempts that failed and were retried.
    pub retried: i64,
    /// Attempts whose lease expired, recovered by the rescuer.
    pub rescued: i64,
    /// Jobs that ended cancelled.
    pub cancelled: i64,
    /// Attempts whose worker lost the lease before writing the outcome, as
    /// workers counted them (many of them are also `rescued`).
    pub leases_lost: i64,
    /// Queue wait of the attempts workers ended (see [`Histogram`]).
    #[sqlx(try_from = "Vec<i64>")]
    pub wait_ms: Histogram,
    /// Run time of the attempts workers ended.
    #[sqlx(try_from = "Vec<i64>")]
    pub run_ms: Histogram,
}

/// Counts of durations per bucket; bucket `i` starts at
/// [`Histogram::BOUNDS_MS`]`[i - 1]` ms (bucket 0 at 0), as
/// `conveyor.stats_buckets_ms()` defines them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Histogram {
    /// One count per bucket (19).
    pub counts: Vec<i64>,
}

impl Histogram {
    /// Lower bounds of buckets 1 to 18, in ms (bucket 0 is below 1 ms).
    pub const BOUNDS_MS: [f64; 18] = [
        1.0,
        2.0,
        5.0,
        10.0,
        20.0,
        50.0,
        100.0,
        200.0,
        500.0,
        1_000.0,
        2_000.0,
        5_000.0,
        10_000.0,
        30_000.0,
        60_000.0,
        300_000.0,
        900_000.0,
        3_600_000.0,
    ];

    /// How many durations it counts.
    pub fn total(&self) -> i64 {
        // Saturating: a row written by hand may hold any bigint.
        self.counts.iter().fold(0, |a, n| a.saturating_add(*n))
    }

    /// An estimate of the `q` quantile (0 to 1) in ms: the upper bound of
    /// the bucket it falls in (its lower bound for the last, open bucket).
    /// `None` when it counts nothing.
    pub fn quantile_ms(&self, q: f64) -> Option<f64> {
        let total = self.total();
        if total <= 0 {
            return None;
        }
        let rank = (q.clamp(0.0, 1.0) * total as f64).ceil().max(1.0) as i64;
        let mut seen = 0;
        for (i, n) in self.counts.iter().enumerate() {
            seen = n.saturating_add(seen);
            if seen >= rank {
                let upper = Self::BOUNDS_MS.get(i).copied();
                return upper.or(Self::BOUNDS_MS.last().copied());
            }
        }
        Self::BOUNDS_MS.last().copied()
    }
}

impl TryFrom<Vec<i64>> for Histogram {
    type Error = String;

    fn try_from(counts: Vec<i64>) -> std::result::Result<Self, String> {
        if counts.len() == Self::BOUNDS_MS.len() + 1 {
            Ok(Histogram { counts })
        } else {
            Err(format!("a histogram has 19 buckets, not {}", counts.len()))
        }
    }
}
