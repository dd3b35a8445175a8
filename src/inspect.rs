//! Looking at the queue: filtered job lists, per-queue statistics, and
//! deleting jobs. Used by the `conveyor` CLI; plain SQL works as well.

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::client::Client;
use crate::db;
use crate::error::Result;
use crate::job::{Job, JobId, JobState};

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

/// One queue's numbers (a row of [`Client::queue_stats`]).
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

impl Client {
    /// Jobs matching `filter`, newest first.
    pub async fn list_jobs(&self, filter: &JobFilter) -> Result<Vec<Job>> {
        db::list_jobs(&self.inner.pool, self.inner.queries, filter).await
    }

    /// Per-queue statistics: every queue with jobs or settings.
    pub async fn queue_stats(&self) -> Result<Vec<QueueStats>> {
        db::queue_stats(&self.inner.pool, self.inner.queries).await
    }

    /// Deletes jobs by id (running ones are skipped: cancel them first);
    /// returns how many were deleted.
    pub async fn delete_jobs(&self, ids: &[JobId]) -> Result<u64> {
        db::delete_jobs(&self.inner.pool, self.inner.queries, ids).await
    }
}
