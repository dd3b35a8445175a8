//! What a metrics scrape reads (`crate::Metrics`): all-time totals from the
//! rollups, and the unfinished jobs by queue. Neither reads the history.

use std::sync::LazyLock;

use sqlx::PgPool;

use super::{Queries, Target};
use crate::error::Result;

/// All-time totals of one queue and task (a row of `metrics_totals.sql`).
#[derive(Debug, Clone, sqlx::FromRow)]
pub(crate) struct MetricsTotals {
    pub queue: String,
    pub task: String,
    pub enqueued: i64,
    pub succeeded: i64,
    pub failed: i64,
    pub retried: i64,
    pub rescued: i64,
    pub cancelled: i64,
    /// Counts per bucket of `conveyor.stats_buckets_ms()` (19).
    pub wait_ms: Vec<i64>,
    pub run_ms: Vec<i64>,
    pub wait_ms_sum: f64,
    pub run_ms_sum: f64,
    /// Leases workers lost (`conveyor.stats.leases_lost`).
    pub leases_lost: i64,
}

/// How much a scrape may read to count unfinished jobs
/// (docs/decisions/2026-11-25-bounded-gauges.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GaugeLimits {
    /// Rows counted exactly at most per queue and group (scheduled and
    /// retry together, pending, started).
    pub cap: u32,
    /// Rows counted exactly at most over all queues.
    pub budget: u32,
    /// Pages of `jobs_unfinished` sampled (about) for the counts over the cap.
    pub sample_pages: u32,
}

impl Default for GaugeLimits {
    fn default() -> Self {
        GaugeLimits {
            cap: 1_000,
            budget: 50_000,
            sample_pages: 1_000,
        }
    }
}

/// The sample's seed (`REPEATABLE`): fixed, so that scrapes of an unchanged
/// table sample the same pages and the estimates do not jitter.
const SAMPLE_SEED: f64 = 17.0;

/// The scrape's transaction: begun with its planner settings in the same
/// round trip (`metrics_settings.sql` says why).
static SCRAPE_BEGIN: LazyLock<String> =
    LazyLock::new(|| format!("{}; {}", super::BEGIN, sql!("metrics/metrics_settings.sql")));

/// One queue's unfinished jobs as counted (a row of `metrics_queues.sql`):
/// exact unless the group's flag says the cap was reached.
#[derive(Debug, Clone, sqlx::FromRow)]
struct CountedQueue {
    queue: String,
    scheduled: i64,
    pending: i64,
    started: i64,
    retry: i64,
    waiting_capped: bool,
    pending_capped: bool,
    started_capped: bool,
    oldest_pending_secs: f64,
    paused: bool,
}

/// A row of `metrics_sample.sql`: an estimate of one queue's jobs in one state.
#[derive(Debug, Clone, sqlx::FromRow)]
struct Sampled {
    queue: String,
    state: String,
    estimate: i64,
}

/// One count of a gauge: the value, and whether it is an estimate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Count {
    pub n: i64,
    pub estimated: bool,
}

/// One queue's unfinished jobs for the gauges.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct QueueCounts {
    pub queue: String,
    pub scheduled: Count,
    pub pending: Count,
    pub started: Count,
    pub retry: Count,
    pub oldest_pending_secs: f64,
    pub paused: bool,
}

pub(crate) async fn metrics_totals<'e>(
    exec: impl Into<Target<'e>>,
    q: &Queries,
) -> Result<Vec<MetricsTotals>> {
    Ok(sqlx::query_as(q.metrics_totals)
        .fetch_all(q.on(exec))
        .await?)
}

/// Unfinished jobs by queue and state, bounded whatever the backlog: counted
/// exactly up to `limits.cap` per queue and group (`metrics_queues.sql`),
/// and, only if some group reached its cap, estimated from a sample of about
/// `limits.sample_pages` pages (`metrics_sample.sql`). An estimated count is
/// never below what was counted.
pub(crate) async fn metrics_queues(
    pool: &PgPool,
    q: &Queries,
    limits: GaugeLimits,
) -> Result<Vec<QueueCounts>> {
    let mut tx = pool
        .begin_with(sqlx::AssertSqlSafe(SCRAPE_BEGIN.as_str()))
        .await?;
    let counted: Vec<CountedQueue> = sqlx::query_as(q.metrics_queues)
        .bind(i64::from(limits.cap))
        .bind(i64::from(limits.budget))
        .fetch_all(q.on(&mut *tx))
        .await?;
    let capped = counted
        .iter()
        .any(|c| c.waiting_capped || c.pending_capped || c.started_capped);
    let sampled: Vec<Sampled> = if capped {
        sqlx::query_as(q.metrics_sample)
            .bind(i64::from(limits.sample_pages))
            .bind(SAMPLE_SEED)
            .fetch_all(q.on(&mut *tx))
            .await?
    } else {
        Vec::new()
    };
    tx.commit().await?;
    Ok(merge(counted, &sampled))
}

/// The counts, with each capped one replaced by the sample's estimate if
/// that is higher.
fn merge(counted: Vec<CountedQueue>, sampled: &[Sampled]) -> Vec<QueueCounts> {
    let estimate = |queue: &str, state: &str| {
        sampled
            .iter()
            .find(|s| s.queue == queue && s.state == state)
            .map_or(0, |s| s.estimate)
    };
    counted
        .into_iter()
        .map(|c| {
            let count = |n: i64, capped: bool, state: &str| Count {
                n: if capped {
                    n.max(estimate(&c.queue, state))
                } else {
                    n
                },
                estimated: capped,
            };
            QueueCounts {
                scheduled: count(c.scheduled, c.waiting_capped, "scheduled"),
                pending: count(c.pending, c.pending_capped, "pending"),
                started: count(c.started, c.started_capped, "started"),
                retry: count(c.retry, c.waiting_capped, "retry"),
                oldest_pending_secs: c.oldest_pending_secs,
                paused: c.paused,
                queue: c.queue,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counted(queue: &str, pending: i64, pending_capped: bool) -> CountedQueue {
        CountedQueue {
            queue: queue.to_string(),
            scheduled: 2,
            pending,
            started: 0,
            retry: 1,
            waiting_capped: false,
            pending_capped,
            started_capped: false,
            oldest_pending_secs: 1.5,
            paused: false,
        }
    }

    #[test]
    fn capped_counts_take_the_higher_of_count_and_estimate() {
        let sampled = [
            Sampled {
                queue: "big".into(),
                state: "pending".into(),
                estimate: 52_000,
            },
            // A sample finding fewer than were counted never lowers a count.
            Sampled {
                queue: "mid".into(),
                state: "pending".into(),
                estimate: 10,
            },
            // Nor does it change an exact one.
            Sampled {
                queue: "small".into(),
                state: "scheduled".into(),
                estimate: 900,
            },
        ];
        let out = merge(
            vec![
                counted("big", 1_000, true),
                counted("mid", 1_000, true),
                counted("small", 3, false),
                counted("gone", 1_000, true),
            ],
            &sampled,
        );
        let pending: Vec<_> = out
            .iter()
            .map(|q| (q.pending.n, q.pending.estimated))
            .collect();
        assert_eq!(
            pending,
            [(52_000, true), (1_000, true), (3, false), (1_000, true)]
        );
        assert_eq!(
            out[2].scheduled,
            Count {
                n: 2,
                estimated: false
            }
        );
    }
}
