//! S: the held-snapshot scenario (issue 16). A steady offered rate, then
//! another session holds a transaction id (`BEGIN; SELECT txid_current();`,
//! as a forgotten psql session or a long report does) so that vacuum may
//! remove nothing, then it lets go. Every sample prints completions/s,
//! pickup p50/p99 (claim time minus due time, over jobs finished in the
//! sample), waiting jobs, dead tuples and size.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sqlx::{Connection, PgConnection};

use crate::scenarios::{Config, Deadline, Line, spawn_producers};
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
    /// A real `pg_dump` of the whole database (the server's own binary),
    /// its output read slowly (`DUMP_READ_BYTES_PER_SEC`), as a nightly
    /// backup streaming to slow storage: it holds its snapshot and an
    /// ACCESS SHARE lock on every table it dumps for its whole run. It is
    /// stopped at the end of the hold (scenario "dump").
    PgDump,
}

/// How fast the `pg_dump` holder's output is read: slow enough that the
/// dump of a few hundred MB outlasts any hold the benchmark asks for.
const DUMP_READ_BYTES_PER_SEC: usize = 16 * 1024;

/// The server binaries' directory (`/usr/lib/postgresql/<newest>/bin`).
fn pg_bin() -> Result<std::path::PathBuf> {
    let mut versions: Vec<std::path::PathBuf> = std::fs::read_dir("/usr/lib/postgresql")?
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|bin| bin.join("pg_dump").exists())
        .collect();
    versions.sort();
    versions
        .pop()
        .ok_or_else(|| "no pg_dump under /usr/lib/postgresql/*/bin".into())
}

/// The session holding the snapshot.
enum Holding {
    Conn(PgConnection),
    /// The `pg_dump` process and the thread reading its output (it returns
    /// the bytes read).
    Dump(std::process::Child, std::thread::JoinHandle<u64>),
}

impl Holding {
    async fn start(holder: Holder, url: &str) -> Result<Holding> {
        if holder != Holder::PgDump {
            let mut conn = PgConnection::connect(url).await?;
            sqlx::raw_sql(holder.sql()).execute(&mut conn).await?;
            return Ok(Holding::Conn(conn));
        }
        let mut child = std::process::Command::new(pg_bin()?.join("pg_dump"))
            .arg("--dbname")
            .arg(url)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()?;
        let mut out = child.stdout.take().ok_or("pg_dump has no stdout")?;
        let reader = std::thread::spawn(move || {
            use std::io::Read;
            let mut buf = vec![0u8; DUMP_READ_BYTES_PER_SEC / 10];
            let mut total = 0u64;
            loop {
                match out.read(&mut buf) {
                    Ok(0) | Err(_) => return total,
                    Ok(n) => total += n as u64,
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        // Wait until the dump holds its locks: its transaction shows in
        // pg_stat_activity.
        let mut conn = PgConnection::connect(url).await?;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let locked: bool = sqlx::query_scalar(
                "SELECT EXISTS (SELECT 1 FROM pg_locks l JOIN pg_stat_activity a USING (pid)
                                WHERE a.application_name = 'pg_dump' AND l.granted
                                  AND l.relation = 'conveyor.claims'::regclass)",
            )
            .fetch_one(&mut conn)
            .await?;
            if locked {
                break;
            }
            if Instant::now() > deadline {
                return Err("pg_dump took no lock within 30 s".into());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        conn.close().await?;
        Ok(Holding::Dump(child, reader))
    }

    /// Ends the hold; for a dump, says whether it was still running.
    async fn release(self) -> Result<()> {
        match self {
            Holding::Conn(mut conn) => {
                sqlx::raw_sql("ROLLBACK").execute(&mut conn).await?;
                conn.close().await?;
            }
            Holding::Dump(mut child, reader) => {
                let finished = child.try_wait()?;
                let _ = child.kill();
                let _ = child.wait();
                let read = reader.join().unwrap_or(0);
                eprintln!(
                    "S: pg_dump {} after {:.1} MiB of output read",
                    match finished {
                        Some(status) =>
                            format!("had ended by itself ({status}) before the end of the hold"),
                        None => "was still running at the end of the hold: stopped".to_string(),
                    },
                    read as f64 / 1_048_576.0
                );
            }
        }
        Ok(())
    }
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
            Holder::PgDump => "",
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
    /// Index entries read in the ready ring per claim statement since the
    /// last sample: what a claim walks (dead entries included).
    ring_reads_per_claim: f64,
    /// Tuples read in `conveyor.claims` (index and sequential) per claim.
    claims_reads_per_claim: f64,
    /// Jobs enqueued, and jobs finished (announced), since the last sample.
    enqueued: u64,
    finished: u64,
}

/// Cumulative counters behind the per-claim figures of a [`Sample`].
#[derive(Clone, Copy, Default)]
struct Reads {
    ring: i64,
    claims: i64,
    claim_statements: i64,
}

impl Reads {
    async fn now(db: &BenchDb) -> Result<Reads> {
        // Leaves of each tree (a partition's own counters; the parent's stay 0).
        let (ring, claims, claim_statements): (i64, i64, i64) = sqlx::query_as(
            "WITH ring AS (SELECT relid FROM pg_partition_tree('conveyor.ready') WHERE isleaf),
                  -- (pg_partition_tree gives nothing for a plain table.)
                  claims AS (SELECT relid FROM pg_partition_tree('conveyor.claims') WHERE isleaf
                             UNION SELECT 'conveyor.claims'::regclass)
             SELECT (SELECT coalesce(sum(idx_tup_read), 0) FROM pg_stat_user_indexes
                     WHERE relid IN (SELECT relid FROM ring))::bigint,
                    ((SELECT coalesce(sum(idx_tup_read), 0) FROM pg_stat_user_indexes
                      WHERE relid IN (SELECT relid FROM claims))
                     + (SELECT coalesce(sum(seq_tup_read), 0) FROM pg_stat_user_tables
                        WHERE relid IN (SELECT relid FROM claims)))::bigint,
                    (SELECT coalesce(sum(n_tup_ins), 0) FROM pg_stat_user_tables
                     WHERE relid IN (SELECT relid FROM claims))::bigint",
        )
        .fetch_one(&db.pool)
        .await?;
        Ok(Reads {
            ring,
            claims,
            claim_statements,
        })
    }

    /// (ring, claims) reads per claim statement between two readings.
    fn per_claim(self, before: Reads) -> (f64, f64) {
        let claims = (self.claim_statements - before.claim_statements).max(1) as f64;
        let per = |now: i64, then: i64| ((now - then).max(0) as f64 / claims * 10.0).round() / 10.0;
        (per(self.ring, before.ring), per(self.claims, before.claims))
    }
}

impl Sample {
    fn json(&self) -> Value {
        json!({
            "t": self.t.round(), "phase": self.phase,
            "completed_per_sec": self.completed_per_sec.round(),
            "pickup_p50_ms": self.pickup_p50_ms, "pickup_p99_ms": self.pickup_p99_ms,
            "waiting": self.waiting, "dead_tuples": self.dead_tuples,
            "size_mib": (self.size_mib * 10.0).round() / 10.0,
            "ring_reads_per_claim": self.ring_reads_per_claim,
            "claims_reads_per_claim": self.claims_reads_per_claim,
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
    let mut until = start + Duration::from_secs(total);
    // How far the samples fell behind their schedule, by more than a
    // period at a time (a pg_dump waiting for its locks, or the server
    // stalled when it lets go: seconds): the phases after it, and the end,
    // are pushed back by as much, so that each phase still gets its
    // samples with jobs offered. (A quick run's phases are shorter than
    // such a wait; it used to end without an "after" phase.) A stall still
    // shows: a sample's rate is over the time since the last one. The
    // producers run until the last sample.
    let mut behind = Duration::ZERO;
    let rate = cfg.snapshot_rate;
    let enqueued = Arc::new(AtomicU64::new(0));
    let stop = Deadline::when_told();
    let mut producers = spawn_producers(db, 2, rate, stop.clone(), enqueued.clone());
    let mut holder: Option<Holding> = None;
    let mut samples: Vec<Sample> = Vec::new();
    let mut last_seen = 0;
    let mut last_enqueued = 0;
    let mut last_at = chrono::Utc::now();
    let mut next = start;
    let period = Duration::from_secs(cfg.snapshot_sample_secs);
    eprintln!(
        "S: t(s) phase completed/s pickup-p50(ms) p99(ms) waiting dead-tuples size(MiB) \
         ring-reads/claim claims-reads/claim"
    );
    let mut last_reads = Reads::now(db).await?;
    while Instant::now() + period / 2 < until {
        next += period;
        tokio::time::sleep_until(next.into()).await;
        let elapsed = next.duration_since(start + behind).as_secs();
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
            holder = Some(Holding::start(cfg.snapshot_holder, &db.url).await?);
        } else if phase == "after"
            && let Some(held) = holder.take()
        {
            held.release().await?;
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
        let sent = enqueued.load(Ordering::Relaxed);
        let (table, indexes) = db.sizes().await?;
        let dead: i64 =
            // Summed over the leaves: the stored jobs are partitioned
            // (conveyor.job_rows), and a partitioned table's own counter
            // stays 0; the claims' rows (conveyor.claims) count too.
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
        let reads = Reads::now(db).await?;
        let (ring_reads_per_claim, claims_reads_per_claim) = reads.per_claim(last_reads);
        last_reads = reads;
        let sample = Sample {
            t: secs(start),
            phase,
            // Over the time since the last sample, which starting a holder
            // (a pg_dump taking its locks) can stretch past the period.
            completed_per_sec: (seen - last_seen) as f64
                / ((now - last_at).num_milliseconds().max(1) as f64 / 1000.0),
            pickup_p50_ms: (p50 * 10.0).round() / 10.0,
            pickup_p99_ms: (p99 * 10.0).round() / 10.0,
            waiting: db.count_state("pending").await?,
            dead_tuples: dead,
            size_mib: (table + indexes) as f64 / 1_048_576.0,
            ring_reads_per_claim,
            claims_reads_per_claim,
            enqueued: sent - last_enqueued,
            finished: seen - last_seen,
        };
        eprintln!(
            "S: {:>5.0} {:<6} {:>8.0} {:>9.1} {:>8.1} {:>7} {:>9} {:>7.1} {:>8.1} {:>8.1}",
            sample.t,
            sample.phase,
            sample.completed_per_sec,
            sample.pickup_p50_ms,
            sample.pickup_p99_ms,
            sample.waiting,
            sample.dead_tuples,
            sample.size_mib,
            sample.ring_reads_per_claim,
            sample.claims_reads_per_claim
        );
        samples.push(sample);
        (last_seen, last_enqueued, last_at) = (seen, sent, now);
        let late = Instant::now().saturating_duration_since(next);
        if late > period {
            behind += late;
            next += late;
            until += late;
        }
    }
    if let Some(held) = holder.take() {
        held.release().await?;
    }
    stop.stop();
    while let Some(r) = producers.join_next().await {
        r??;
    }
    let sent = enqueued.load(Ordering::Relaxed);
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
            if cfg.snapshot_holder == Holder::PgDump {
                "dump"
            } else {
                "S"
            },
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
            "worst_ring_reads_per_claim": of.iter().map(|s| s.ring_reads_per_claim).fold(0.0, f64::max),
            "worst_claims_reads_per_claim": of.iter().map(|s| s.claims_reads_per_claim).fold(0.0, f64::max),
            "waiting_at_end": last.waiting,
            "dead_tuples_at_end": last.dead_tuples,
            "size_mib_at_end": last.size_mib,
            "vacuum_by_bench_each_sample": vacuum,
            // Over the phase's samples.
            "jobs_enqueued": of.iter().map(|s| s.enqueued).sum::<u64>(),
            "jobs_finished": of.iter().map(|s| s.finished).sum::<u64>(),
        })));
    }
    if let Some(line) = lines.last_mut()
        && let Some(extra) = line.extra.as_object_mut()
    {
        extra.insert(
            "samples".into(),
            samples.iter().map(Sample::json).collect::<Vec<_>>().into(),
        );
        // The whole run: every job enqueued, and those finished by the
        // last sample.
        extra.insert("run_jobs_enqueued".into(), sent.into());
        extra.insert("run_jobs_finished".into(), last_seen.into());
    }
    Ok(lines)
}
