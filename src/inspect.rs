//! Looking at the queue: filtered job lists, per-queue statistics, and
//! deleting jobs. Used by the `conveyor` CLI; plain SQL works as well.

use crate::client::Client;
use crate::db;
use crate::error::Result;
use crate::job::{Job, JobId};
use crate::records::{JobFilter, QueueStats};

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
