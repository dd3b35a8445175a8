//! S: the held-snapshot scenario (issue 16). A steady offered rate, then
//! another session holds a transaction id (`BEGIN; SELECT txid_current();`,
//! as a forgotten psql session or a long report does) so that vacuum may
//! remove nothing, then it lets go. Every sample prints completions/s,
//! pickup p50/p99 (claim time minus due time, over jobs finished in the
//! sample), waiting jobs, dead tuples and size.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sqlx::{Connection, PgConnection};

use crate::scenarios::{Config, Line, spawn_producers};
use crate::support::{BenchDb, FinishedCounter, QUEUE, Result, WorkerChild, median, secs};

/// What the session that holds the snapshot does before it sits idle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Holder {
    /// `BEGIN; SELECT txid_current();`: a forgotten psql session.
    Bare,
    /// Also reads `conveyor.jobs` in the same transaction (a long report):
    /// it then holds a lock on the table too.
    Jobs,
    /// Reads every table of the schema in a REPEATABLE READ transaction, as
    /// `pg_dump` does: it holds a lock on every slot of the ready ring, so
    /// none can be emptied while it runs.
    Dump,
}

impl Holder {
    /// The statements that open the holding transaction.
    fn sql(self) -> &'static str {
        match self {
            Holder::Bare => "BEGIN; SELECT txid_current();",
            Holder::Jobs => {
                "BEGIN; SELECT txid_current(); SELECT count(*) FROM conveyor.jobs WHERE queue = 'x';"
            }
            Holder::Dump => {
                "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT txid_current();
                 SELECT count(*) FROM conveyor.jobs WHERE queue = 'x';
                 SELECT count(*) FROM conveyor.ready;"
            }
        }
    }
}

/// One sample of the run.
struct Sample {
    t: f64,
    phase: &'static str,
    completed_per_sec: f64,
    pickup_p50_ms: f64,
    pickup_p99_ms: f64,
    waiting: i64,
    dead_tuples: i64,
    size_mib: f64,
}

impl Sample {
    fn json(&self) -> Value {
        json!({
            "t": self.t.round(), "phase": self.phase,
            "completed_per_sec": self.completed_per_sec.round(),
            "pickup_p50_ms": self.pickup_p50_ms, "pickup_p99_ms": self.pickup_p99_ms,
            "waiting": self.waiting, "dead_tuples": self.dead_tuples,
            "size_mib": (self.size_mib * 10.0).round() / 10.0,
        })
    }
}

/// Pickup percentiles (ms) of the jobs that finished since `since`.
async fn pickup(db: &BenchDb, since: chrono::DateTime<chrono::Utc>) -> Result<(f64, f64)> {
    let row: (Option<f64>, Option<f64>) = sqlx::query_as(
        "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY ms),
                percentile_cont(0.99) WITHIN GROUP (ORDER BY ms)
         FROM (SELECT extract(epoch FROM started_at - run_at) * 1000 AS ms
               FROM conveyor.jobs
               WHERE state = 'success' AND finished_at >= $1 AND queue = $2) AS t",
    )
    .bind(since)
    .bind(QUEUE)
    .fetch_one(&db.pool)
    .await?;
    Ok((row.0.unwrap_or(f64::NAN), row.1.unwrap_or(f64::NAN)))
}

pub async fn held_snapshot(db: &BenchDb, cfg: &Config) -> Result<Vec<Line>> {
    let autovacuum: String = sqlx::query_scalar("SELECT current_setting('autovacuum')")
        .fetch_one(&db.pool)
        .await?;
    let vacuum = autovacuum != "on";
    if let Some(limit) = cfg.snapshot_queue_limit {
        db.client.set_queue_limit(QUEUE, Some(limit)).await?;
    }
    let child = WorkerChild::start(&db.url, cfg.snapshot_concurrency, None)?;
    db.wait_listeners(1).await?;
    let counter = FinishedCounter::listen(&db.url).await?;
    let phases = [
        ("steady", cfg.snapshot_steady_secs),
        ("held", cfg.snapshot_hold_secs),
        ("after", cfg.snapshot_after_secs),
    ];
    let total: u64 = phases.iter().map(|(_, s)| s).sum();
    let start = Instant::now();
    let until = start + Duration::from_secs(total);
    let rate = cfg.snapshot_rate;
    let mut producers = spawn_producers(db, 2, rate, until, Arc::new(AtomicU64::new(0)));
    let mut holder: Option<PgConnection> = None;
    let mut samples: Vec<Sample> = Vec::new();
    let mut last_seen = 0;
    let mut last_at = chrono::Utc::now();
    let mut next = start;
    let period = Duration::from_secs(cfg.snapshot_sample_secs);
    eprintln!("S: t(s) phase completed/s pickup-p50(ms) p99(ms) waiting dead-tuples size(MiB)");
    while Instant::now() + period / 2 < until {
        next += period;
        tokio::time::sleep_until(next.into()).await;
        let elapsed = next.duration_since(start).as_secs();
        let phase = if elapsed <= phases[0].1 {
            "steady"
        } else if elapsed <= phases[0].1 + phases[1].1 {
            "held"
        } else {
            "after"
        };
        // Take the snapshot at the end of the steady phase, release it at
        // the end of the held one.
        if phase == "held" && holder.is_none() {
            let mut conn = PgConnection::connect(&db.url).await?;
            sqlx::raw_sql(cfg.snapshot_holder.sql())
                .execute(&mut conn)
                .await?;
            holder = Some(conn);
        } else if phase == "after"
            && let Some(mut conn) = holder.take()
        {
            sqlx::raw_sql("ROLLBACK").execute(&mut conn).await?;
            conn.close().await?;
        }
        if vacuum {
            // Stand-in for autovacuum, which this server has turned off.
            sqlx::query("VACUUM conveyor.job_rows, conveyor.claims")
                .execute(&db.pool)
                .await?;
        }
        let now = chrono::Utc::now();
        let (p50, p99) = pickup(db, last_at).await?;
        let seen = counter.seen();
        let (table, indexes) = db.sizes().await?;
        let dead: i64 =
            // Summed over the leaves: since V8 the stored jobs are partitioned
            // (conveyor.job_rows since V12), and a partitioned table's own
            // counter stays 0; the claims' rows (V12) count too.
            sqlx::query_scalar(
                "SELECT coalesce(sum(pg_stat_get_dead_tuples(relid)), 0)::bigint FROM (
                     SELECT relid FROM pg_partition_tree('conveyor.job_rows') WHERE isleaf
                     UNION ALL
                     SELECT relid FROM pg_partition_tree('conveyor.ready') WHERE isleaf
                     UNION ALL
                     SELECT 'conveyor.claims'::regclass) AS t",
            )
                .fetch_one(&db.pool)
                .await?;
        let sample = Sample {
            t: secs(start),
            phase,
            completed_per_sec: (seen - last_seen) as f64 / period.as_secs_f64(),
            pickup_p50_ms: (p50 * 10.0).round() / 10.0,
            pickup_p99_ms: (p99 * 10.0).round() / 10.0,
            waiting: db.count_state("pending").await?,
            dead_tuples: dead,
            size_mib: (table + indexes) as f64 / 1_048_576.0,
        };
        eprintln!(
            "S: {:>5.0} {:<6} {:>8.0} {:>9.1} {:>8.1} {:>7} {:>9} {:>7.1}",
            sample.t,
            sample.phase,
            sample.completed_per_sec,
            sample.pickup_p50_ms,
            sample.pickup_p99_ms,
            sample.waiting,
            sample.dead_tuples,
            sample.size_mib
        );
        samples.push(sample);
        (last_seen, last_at) = (seen, now);
    }
    if let Some(mut conn) = holder.take() {
        sqlx::raw_sql("ROLLBACK").execute(&mut conn).await?;
    }
    while let Some(r) = producers.join_next().await {
        r??;
    }
    child.stop()?;
    db.clear_queue().await?;
    let mut lines = Vec::new();
    for (phase, _) in phases {
        let of: Vec<&Sample> = samples.iter().filter(|s| s.phase == phase).collect();
        if of.is_empty() {
            continue;
        }
        let rates: Vec<f64> = of.iter().map(|s| s.completed_per_sec).collect();
        let percent_of_offered = 100.0 * median(&rates) / rate as f64;
        let worst_p99 = of.iter().map(|s| s.pickup_p99_ms).fold(0.0, f64::max);
        let worst_p50 = of.iter().map(|s| s.pickup_p50_ms).fold(0.0, f64::max);
        let line = Line::new(
            "S",
            format!(
                "held snapshot ({:?} holder{}), offered {rate}/s: {phase}",
                cfg.snapshot_holder,
                cfg.snapshot_queue_limit
                    .map(|l| format!(", queue limited to {l}"))
                    .unwrap_or_default()
            ),
            "completed/s",
            rates,
        );
        let last = of[of.len() - 1];
        lines.push(line.with(json!({
            "percent_of_offered": percent_of_offered,
            "worst_pickup_p50_ms": worst_p50,
            "worst_pickup_p99_ms": worst_p99,
            "waiting_at_end": last.waiting,
            "dead_tuples_at_end": last.dead_tuples,
            "size_mib_at_end": last.size_mib,
            "vacuum_by_bench_each_sample": vacuum,
        })));
    }
    if let Some(line) = lines.last_mut()
        && let Some(extra) = line.extra.as_object_mut()
    {
        extra.insert(
            "samples".into(),
            samples.iter().map(Sample::json).collect::<Vec<_>>().into(),
        );
    }
    Ok(lines)
}
