//! M: a metrics scrape (`Metrics::render`, what `GET /metrics` serves) with
//! 0 … N finished jobs kept. Beside the history: 30 days of folded rollups
//! for 10 queue-task pairs (a row per minute each, as the fold leaves them),
//! their last 11 minutes still in shards (8 outcome shards and 16 enqueuing
//! backends per pair and minute), a small backlog of unfinished jobs, and
//! at the end the same with `future` unfinished jobs, half scheduled and
//! half pending (with their ready-ring rows). The gauges count those up to a
//! cap and estimate the rest, so the scrape should not grow with them; the
//! statement they replaced (a GROUP BY of every unfinished job,
//! `metrics_queues_before.sql`) is timed alone on the same data.

use std::time::Instant;

use conveyor::Metrics;
use serde_json::json;

use crate::history::{DAYS, load_history};
use crate::scenarios::{Config, Line};
use crate::support::{BenchDb, Result, median, percentile};

/// Scrapes per run.
const SCRAPES: usize = 50;
/// Unfinished jobs present at every history level.
const BACKLOG: u64 = 10_000;

/// M: scrape times (ms) at each history level, then with a large backlog.
pub async fn scrapes(db: &BenchDb, cfg: &Config) -> Result<Vec<Line>> {
    sqlx::query("SELECT conveyor_internal.create_history_partitions(2, $1::int)")
        .bind(DAYS as i32)
        .execute(&db.pool)
        .await?;
    let began = Instant::now();
    let rollup_rows = load_rollups(db, cfg.rollup_days).await?;
    let rollup_secs = began.elapsed().as_secs_f64();
    let backlog = BACKLOG.min(cfg.future);
    db.load_rows("scheduled", 0, backlog).await?;
    let metrics = Metrics::new()?;
    let mut lines = Vec::new();
    let mut loaded = 0;
    for level in cfg.history.clone() {
        load_history(db, loaded, level - loaded).await?;
        loaded = level;
        let at = format!("scrape, {level} finished + {backlog} unfinished jobs kept");
        lines.push(measure(db, cfg, &metrics, at, rollup_rows, rollup_secs).await?);
    }
    let more = cfg.future.saturating_sub(backlog);
    db.load_rows("scheduled", backlog, more / 2).await?;
    db.load_rows("pending", backlog + more / 2, more - more / 2)
        .await?;
    let at = format!(
        "scrape, {loaded} finished + {} unfinished jobs kept",
        cfg.future
    );
    lines.push(measure(db, cfg, &metrics, at, rollup_rows, rollup_secs).await?);
    lines.push(measure_before(db, cfg).await?);
    Ok(lines)
}

/// The gauges' statement before they were bounded, alone, on the same data.
async fn measure_before(db: &BenchDb, cfg: &Config) -> Result<Line> {
    let mut medians = Vec::new();
    let mut all = Vec::new();
    let mut rows = 0;
    for _ in 0..cfg.runs {
        let mut times = Vec::with_capacity(SCRAPES);
        for _ in 0..SCRAPES {
            let began = Instant::now();
            rows = sqlx::raw_sql(include_str!("metrics_queues_before.sql"))
                .fetch_all(&db.pool)
                .await?
                .len();
            times.push(began.elapsed().as_secs_f64() * 1000.0);
        }
        medians.push(median(&times));
        all.extend(times);
    }
    all.sort_by(|a, b| a.total_cmp(b));
    let at = format!(
        "before: the gauges' GROUP BY alone, {} unfinished jobs",
        cfg.future
    );
    Ok(Line::new("M", at, "ms", medians).with(json!({
        "p99_ms": percentile(&all, 99.0),
        "scrapes": all.len(),
        "rows": rows,
    })))
}

async fn measure(
    db: &BenchDb,
    cfg: &Config,
    metrics: &Metrics,
    at: String,
    rollup_rows: i64,
    rollup_secs: f64,
) -> Result<Line> {
    sqlx::query("VACUUM (ANALYZE) conveyor.job_rows, conveyor.stats, conveyor.stats_totals")
        .execute(&db.pool)
        .await?;
    let mut medians = Vec::new();
    let mut all = Vec::new();
    let mut bytes = 0;
    for _ in 0..cfg.runs {
        let mut times = Vec::with_capacity(SCRAPES);
        for _ in 0..SCRAPES {
            let began = Instant::now();
            bytes = metrics.render(&db.client).await?.len();
            times.push(began.elapsed().as_secs_f64() * 1000.0);
        }
        medians.push(median(&times));
        all.extend(times);
    }
    all.sort_by(|a, b| a.total_cmp(b));
    Ok(Line::new("M", at, "ms", medians).with(json!({
        "p99_ms": percentile(&all, 99.0),
        "scrapes": all.len(),
        "response_bytes": bytes,
        "rollup_rows": rollup_rows,
        "rollup_load_secs": rollup_secs,
    })))
}

/// Rollups of 10 queue-task pairs: one folded row (shard 0) per minute of
/// the last `days` days, and the last 11 minutes in 8 outcome shards and 16
/// enqueuing backends' rows; their all-time totals. Returns the rows.
async fn load_rollups(db: &BenchDb, days: i64) -> Result<i64> {
    let statements = [
        // Folded minutes, 11 minutes ago and older ($1 days).
        "INSERT INTO conveyor.stats
             (minute, queue, task, shard, succeeded, failed, retried, wait_ms, run_ms,
              wait_ms_sum, run_ms_sum)
         SELECT date_trunc('minute', now()) - make_interval(mins => m), 'q' || p % 5, 't' || p,
                0, 900, 5, 20, h, h, 9000, 45000
         FROM generate_series(11, $1::int * 1440) AS m, generate_series(0, 9) AS p,
              (SELECT array_fill(50::bigint, ARRAY[19]) AS h) AS x
         WHERE $1::int >= 0",
        // The last 11 minutes: outcome shards and enqueuing backends.
        "INSERT INTO conveyor.stats
             (minute, queue, task, shard, succeeded, failed, retried, wait_ms, run_ms,
              wait_ms_sum, run_ms_sum)
         SELECT date_trunc('minute', now()) - make_interval(mins => m), 'q' || p % 5, 't' || p,
                s, 110, 1, 3, h, h, 1100, 5500
         FROM generate_series(0, 10) AS m, generate_series(0, 9) AS p, generate_series(1, 8) AS s,
              (SELECT array_fill(6::bigint, ARRAY[19]) AS h) AS x
         WHERE $1::int >= 0",
        "INSERT INTO conveyor.stats (minute, queue, task, shard, enqueued)
         SELECT date_trunc('minute', now()) - make_interval(mins => m), 'q' || p % 5, 't' || p,
                -1000 - b, 60
         FROM generate_series(0, 10) AS m, generate_series(0, 9) AS p, generate_series(1, 16) AS b
         WHERE $1::int >= 0",
        "INSERT INTO conveyor.stats_totals (queue, task, enqueued, succeeded, wait_ms, run_ms)
         SELECT 'q' || p % 5, 't' || p, 10000000, 9000000, h, h
         FROM generate_series(0, 9) AS p, (SELECT array_fill(1000::bigint, ARRAY[19]) AS h) AS x
         WHERE $1::int >= 0",
    ];
    for sql in statements {
        sqlx::query(sql)
            .bind(i32::try_from(days)?)
            .execute(&db.pool)
            .await?;
    }
    Ok(sqlx::query_scalar("SELECT count(*) FROM conveyor.stats")
        .fetch_one(&db.pool)
        .await?)
}
