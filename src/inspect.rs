//! Looking at the queue: filtered job lists, per-queue statistics, and
//! deleting jobs. Used by the `conveyor` CLI; plain SQL works as well.

use crate::client::Client;
use crate::db;
use crate::error::Result;
use crate::job::{Job, JobId};
use crate::records::{JobFilter, QueueStats, StatsPoint, StatsQuery, WorkerInfo};

impl Client {
    /// Jobs matching `filter`, newest first.
    pub async fn list_jobs(&self, filter: &JobFilter) -> Result<Vec<Job>> {
        db::list_jobs(&self.inner.pool, self.inner.queries, filter).await
    }

    /// The ids of the jobs matching `filter`, newest first: a page of
    /// [`Client::list_jobs`] without reading the rows. Pass the last id as
    /// `before_id` for the next page.
    pub async fn list_job_ids(&self, filter: &JobFilter) -> Result<Vec<JobId>> {
        db::list_job_ids(&self.inner.pool, self.inner.queries, filter).await
    }

    /// How many jobs match `filter` (`before_id` included, `limit` ignored).
    pub async fn count_jobs(&self, filter: &JobFilter) -> Result<u64> {
        let n = db::count_jobs(&self.inner.pool, self.inner.queries, filter).await?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    /// The worker registry: every worker process, live ones first (a
    /// worker silent for three beats shows `dead_at` even before
    /// maintenance marks it).
    pub async fn workers(&self) -> Result<Vec<WorkerInfo>> {
        db::list_workers(&self.inner.pool, self.inner.queries).await
    }

    /// Per-queue statistics: every queue with jobs or settings.
    pub async fn queue_stats(&self) -> Result<Vec<QueueStats>> {
        db::queue_stats(&self.inner.pool, self.inner.queries).await
    }

    /// The per-minute rollups of outcomes (`conveyor.stats`) over a time
    /// range, summed into buckets: counts by outcome and histograms of queue
    /// wait and run time. They outlive the jobs they count (the pruner
    /// deletes rollups after `Retention::stats`, 30 days by default).
    pub async fn stats(&self, query: &StatsQuery) -> Result<Vec<StatsPoint>> {
        db::stats(&self.inner.pool, self.inner.queries, query).await
    }

    /// Deletes jobs by id (running ones are skipped: cancel them first);
    /// returns how many were deleted.
    pub async fn delete_jobs(&self, ids: &[JobId]) -> Result<u64> {
        db::delete_jobs(&self.inner.pool, self.inner.queries, ids).await
    }
}
