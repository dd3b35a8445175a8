//! The pruner: removes finished jobs once they are older than the retention
//! set for their final state (and outcome rollups past theirs). Finished
//! jobs live in a table per UTC day (`conveyor.jobs_success_<day>`, …): a
//! day's table is dropped whole once all of it is past the retention, so
//! with a retention of a day or more a job is kept at least that long and
//! at most a day longer. Jobs outside the day tables (in the state's
//! default partition: written by hand with an odd `finished_at`, or
//! finished before the day's table existed), and every job under a
//! retention shorter than a day, are deleted one by one in small batches
//! (one process at a time, by advisory lock; `SKIP LOCKED` keeps it out of
//! the workers' way). Each pass also creates the day tables of the next
//! days, and folds the rollups' shards of past minutes into one row (see
//! [`fold_stats`]).

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::client::Client;
use crate::db;
use crate::error::Result;
use crate::job::JobState;
use crate::supervise::Checkpoint;

/// Jobs deleted per statement.
const BATCH: i64 = 1_000;

/// How long finished jobs are kept, per final state (`None`: forever).
///
/// The default keeps successes and cancellations for 7 days and failures
/// (the dead letter) for 30 days: long enough to debug and to re-queue.
/// A retention of a day or more is applied by dropping whole days (a job
/// may stay up to a day longer); a shorter one deletes jobs one by one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Retention {
    /// Jobs that succeeded.
    pub success: Option<Duration>,
    /// Jobs that failed for good.
    pub failure: Option<Duration>,
    /// Jobs that were cancelled.
    pub cancelled: Option<Duration>,
    /// Rows of the per-minute outcome rollups (`conveyor.stats`), whatever
    /// happened to the jobs they count.
    pub stats: Option<Duration>,
}

impl Default for Retention {
    fn default() -> Self {
        const DAY: u64 = 24 * 3600;
        Retention {
            success: Some(Duration::from_secs(7 * DAY)),
            failure: Some(Duration::from_secs(30 * DAY)),
            cancelled: Some(Duration::from_secs(7 * DAY)),
            stats: Some(Duration::from_secs(30 * DAY)),
        }
    }
}

impl Retention {
    /// Keep everything forever (no pruning).
    pub fn forever() -> Self {
        Retention {
            success: None,
            failure: None,
            cancelled: None,
            stats: None,
        }
    }

    fn rules(&self) -> [(JobState, Option<Duration>); 3] {
        [
            (JobState::Success, self.success),
            (JobState::Failure, self.failure),
            (JobState::Cancelled, self.cancelled),
        ]
    }
}

/// What a pruning pass removed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Pruned {
    /// Jobs deleted one by one.
    pub deleted: u64,
    /// Day tables of finished jobs dropped whole (see [`Retention`]).
    pub dropped_days: u64,
}

/// A day: retentions from this long on drop whole day tables.
const DAY: Duration = Duration::from_secs(24 * 3600);

/// One full pass: creates the coming days' tables, drops the days past their
/// retention, deletes every other job past it (batch by batch), then
/// workflows and unique keys left behind. Nothing is deleted one by one
/// while another process is pruning.
pub(crate) async fn prune(client: &Client, retention: &Retention) -> Result<Pruned> {
    let inner = &client.inner;
    let mut pruned = Pruned::default();
    db::create_history(&inner.pool, inner.queries).await?;
    for (state, keep) in retention.rules() {
        let Some(keep) = keep else { continue };
        let by_row = keep < DAY;
        if !by_row {
            let dropped =
                db::drop_history(&inner.pool, inner.queries, state, keep.as_secs_f64()).await?;
            pruned.dropped_days += u64::try_from(dropped).unwrap_or(0);
        }
        loop {
            let secs = keep.as_secs_f64();
            match db::prune(&inner.pool, inner.queries, state, secs, BATCH, by_row).await? {
                Some(n) => {
                    pruned.deleted += n;
                    if n < BATCH as u64 {
                        break;
                    }
                }
                None => return Ok(pruned),
            }
        }
    }
    if let Some(longest) = retention.rules().iter().filter_map(|r| r.1).max() {
        db::prune_leftovers(&inner.pool, inner.queries, longest.as_secs_f64()).await?;
    }
    if let Some(keep) = retention.stats {
        db::prune_stats(&inner.pool, inner.queries, keep.as_secs_f64()).await?;
    }
    Ok(pruned)
}

/// Folds the shards of the rollups (`conveyor.stats`) of minutes more than
/// 10 minutes old into shard 0, an hour of minutes per statement, from
/// `cursor` (where the last pass stopped; at first, the oldest minute with
/// shards) until caught up. The shards spread the current minute's writers
/// over rows; past it they only multiply what a chart reads, by up to 8.
/// An hour whose statement fails (sums past a bigint, written by hand) is
/// skipped with a warning, so one bad row cannot stop folding.
async fn fold_stats(client: &Client, cursor: &mut Option<DateTime<Utc>>) -> Result<i64> {
    let inner = &client.inner;
    let mut since = match *cursor {
        Some(since) => since,
        None => db::stats_unfolded(&inner.pool, inner.queries).await?,
    };
    let mut folded = 0;
    loop {
        match db::fold_stats(&inner.pool, inner.queries, since).await {
            Ok(step) => {
                folded += step.folded;
                since = step.until;
                *cursor = Some(since);
                if step.caught_up {
                    return Ok(folded);
                }
            }
            Err(crate::error::Error::Database(sqlx::Error::Database(error))) => {
                tracing::warn!(%error, %since, "conveyor: cannot fold an hour of rollups: skipped");
                *cursor = Some(since + chrono::Duration::hours(1));
                return Ok(folded);
            }
            Err(other) => return Err(other),
        }
    }
}

pub(crate) async fn run(
    client: Client,
    retention: Retention,
    every: Duration,
    checkpoint: Checkpoint,
) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut folded_until = None;
    loop {
        tick.tick().await;
        checkpoint();
        match prune(&client, &retention).await {
            Ok(Pruned {
                deleted: 0,
                dropped_days: 0,
            }) => {}
            Ok(Pruned {
                deleted,
                dropped_days,
            }) => tracing::info!(deleted, dropped_days, "conveyor: pruned finished jobs"),
            Err(error) => tracing::warn!(%error, "conveyor: pruning failed"),
        }
        match fold_stats(&client, &mut folded_until).await {
            Ok(0) => {}
            Ok(rows) => tracing::debug!(rows, "conveyor: folded rollup shards"),
            Err(error) => tracing::warn!(%error, "conveyor: folding rollups failed"),
        }
    }
}

impl Client {
    /// Removes finished jobs older than `retention` allows, now (workers do
    /// this periodically, see [`crate::WorkerBuilder::retention`]): drops
    /// the day tables wholly past it, deletes the other jobs past it one by
    /// one. Returns what it removed.
    pub async fn prune(&self, retention: &Retention) -> Result<Pruned> {
        prune(self, retention).await
    }
}
