//! The scenarios A–H of docs/benchmarks.md. Each returns result lines; the
//! caller prints them as JSON and as a table.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use conveyor::NewJob;
use serde_json::{Value, json};

use crate::cpu::CpuMark;
use crate::probe::Probe;
use crate::support::{
    BenchDb, FinishedCounter, NO_CHECKPOINT_ENV, PgbenchScript, QUEUE, Result, TASK, WorkerChild,
    median, percentile, pgbench, secs,
};

/// Sizes and durations of one benchmark run.
#[derive(Clone, Debug)]
pub struct Config {
    pub runs: usize,
    /// A: seconds per measurement.
    pub enqueue_secs: u64,
    /// B, C, F: jobs per run.
    pub jobs: usize,
    /// B: jobs per enqueue statement.
    pub batch: usize,
    /// C: concurrency levels of one worker process.
    pub concurrency: Vec<usize>,
    /// F: claim/complete batch sizes.
    pub raw_batches: Vec<usize>,
    /// D: jobs enqueued one at a time.
    pub latency_jobs: usize,
    /// E: seconds.
    pub mixed_secs: u64,
    /// G: finished jobs retained, per level; and future jobs present.
    pub history: Vec<u64>,
    pub future: u64,
    /// M: days of folded rollups present.
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    pub rollup_days: i64,
    /// H: seconds, enqueue rate (jobs/s), sample period, retention.
    pub soak_secs: u64,
    pub soak_rate: u64,
    pub soak_sample_secs: u64,
    /// Idle CPU: seconds watched.
    pub idle_secs: u64,
    /// S: offered rate (jobs/s), worker concurrency, phase lengths and
    /// sample period (seconds).
    pub snapshot_rate: u64,
    pub snapshot_concurrency: usize,
    pub snapshot_steady_secs: u64,
    pub snapshot_hold_secs: u64,
    pub snapshot_after_secs: u64,
    pub snapshot_sample_secs: u64,
    /// S: what the session holding the snapshot read first (see `snapshot::Holder`).
    pub snapshot_holder: crate::snapshot::Holder,
    /// S: the queue's global concurrency limit, if any.
    pub snapshot_queue_limit: Option<u32>,
    /// N: host counts, worker processes per host, and their concurrency.
    pub hosts: Vec<usize>,
    pub host_processes: usize,
    pub host_concurrency: usize,
    /// N: worker processes of the fleet run through PgBouncer.
    pub fleet_processes: usize,
    /// fleet: the fleets, each run against one process of the same slots.
    pub fleets: Vec<crate::fleet::Shape>,
    /// sqlbulk: jobs per statement for the set-based ways in
    /// (`conveyor.enqueue_many`), and for the per-row ones (`conveyor.enqueue()`).
    pub sqlbulk_sizes: Vec<usize>,
    pub sqlbulk_row_sizes: Vec<usize>,
    /// view: finished, waiting and running jobs; tries per read.
    pub view: (u64, u64, usize),
    pub view_tries: usize,
}

impl Config {
    pub fn full() -> Config {
        Config {
            runs: 3,
            enqueue_secs: 10,
            jobs: 100_000,
            batch: 5_000,
            concurrency: vec![10, 100, 500],
            raw_batches: vec![100, 500],
            latency_jobs: 1_000,
            mixed_secs: 60,
            history: vec![0, 1_000_000, 10_000_000],
            future: 1_000_000,
            rollup_days: 30,
            soak_secs: 1_800,
            soak_rate: 5_000,
            soak_sample_secs: 60,
            idle_secs: 60,
            snapshot_rate: 1_500,
            snapshot_concurrency: 32,
            snapshot_steady_secs: 30,
            snapshot_hold_secs: 150,
            snapshot_after_secs: 60,
            snapshot_sample_secs: 10,
            snapshot_holder: crate::snapshot::Holder::Bare,
            snapshot_queue_limit: None,
            hosts: vec![1, 2, 3],
            host_processes: 1,
            host_concurrency: 100,
            fleet_processes: crate::hosts::FLEET,
            fleets: vec![shape("50x4"), shape("100x10/pgbouncer")],
            sqlbulk_sizes: vec![10_000, 50_000, 100_000, 200_000],
            sqlbulk_row_sizes: vec![5_000, 10_000, 20_000],
            view: (10_000_000, 1_000_000, 1_000),
            view_tries: 5,
        }
    }

    /// Small and quick: for CI, so the benchmark never rots.
    pub fn quick() -> Config {
        Config {
            runs: 1,
            enqueue_secs: 1,
            jobs: 2_000,
            batch: 500,
            concurrency: vec![10, 100],
            raw_batches: vec![100],
            latency_jobs: 20,
            mixed_secs: 2,
            history: vec![0, 5_000],
            future: 1_000,
            rollup_days: 1,
            soak_secs: 4,
            soak_rate: 500,
            soak_sample_secs: 1,
            idle_secs: 1,
            snapshot_rate: 300,
            snapshot_concurrency: 8,
            snapshot_steady_secs: 2,
            snapshot_hold_secs: 2,
            snapshot_after_secs: 2,
            snapshot_sample_secs: 1,
            snapshot_holder: crate::snapshot::Holder::Bare,
            snapshot_queue_limit: None,
            hosts: vec![1],
            host_processes: 1,
            host_concurrency: 100,
            fleet_processes: 10,
            fleets: vec![shape("4x2"), shape("4x5/pgbouncer")],
            sqlbulk_sizes: vec![500, 2_000],
            sqlbulk_row_sizes: vec![200],
            view: (20_000, 2_000, 20),
            view_tries: 1,
        }
    }
}

fn shape(s: &str) -> crate::fleet::Shape {
    s.parse().expect("a fleet shape")
}

/// One result: a scenario, a variant, the median of its runs, and details.
#[derive(Clone, Debug)]
pub struct Line {
    pub scenario: &'static str,
    pub variant: String,
    pub unit: &'static str,
    pub median: f64,
    pub runs: Vec<f64>,
    pub extra: Value,
}

impl Line {
    pub fn new(
        scenario: &'static str,
        variant: impl Into<String>,
        unit: &'static str,
        runs: Vec<f64>,
    ) -> Line {
        Line {
            scenario,
            variant: variant.into(),
            unit,
            median: median(&runs),
            runs,
            extra: json!({}),
        }
    }

    pub fn with(mut self, extra: Value) -> Line {
        self.extra = extra;
        self
    }

    /// Adds the work behind the figures, per run: `jobs_offered` (jobs the
    /// run was given: enqueued by its clients, preloaded for its workers)
    /// and `jobs_done` (of those, the jobs stored, or run to success,
    /// counted where they ended up). The quick run's test checks that they
    /// are equal.
    pub fn with_work(mut self, offered: Vec<u64>, done: Vec<u64>) -> Line {
        if !self.extra.is_object() {
            self.extra = json!({});
        }
        self.extra["jobs_offered"] = offered.into();
        self.extra["jobs_done"] = done.into();
        self
    }

    pub fn json(&self) -> Value {
        json!({
            "scenario": self.scenario,
            "variant": self.variant,
            "unit": self.unit,
            "median": self.median,
            "runs": self.runs,
            "extra": self.extra,
        })
    }
}

const TIMEOUT: Duration = Duration::from_secs(600);

/// A: one job per `enqueue()` call (autocommit), 1 and 8 clients, against
/// pgbench inserting one row per transaction with the same client count.
/// The 8 clients are 8 tasks sharing one `Client` (as a web server's
/// handlers would), whose concurrent calls share commits (group commit);
/// a third variant gives each task a `Client` and a pool of its own, so no
/// two calls ever share a transaction.
pub async fn enqueue_single(db: &BenchDb, cfg: &Config) -> Result<Vec<Line>> {
    let mut lines = Vec::new();
    for (clients, shared) in [(1usize, true), (8, true), (8, false)] {
        let mut ours = Vec::new();
        let mut per_transaction = Vec::new();
        let (mut offered, mut done) = (Vec::new(), Vec::new());
        let mut theirs = Vec::new();
        let mut sql_enqueue = Vec::new();
        let mut raw_row = Vec::new();
        let handles = if shared {
            vec![db.client.clone(); clients]
        } else {
            let mut own = Vec::with_capacity(clients);
            for _ in 0..clients {
                let pool = sqlx::postgres::PgPoolOptions::new()
                    .max_connections(1)
                    .test_before_acquire(false)
                    .connect(&db.url)
                    .await?;
                own.push(conveyor::Client::new(pool));
            }
            own
        };
        for _ in 0..cfg.runs {
            let run = enqueue_loop(db, &handles, cfg.enqueue_secs).await?;
            ours.push(run.rate);
            per_transaction.push(run.jobs_per_transaction);
            offered.push(run.acknowledged);
            done.push(run.stored);
            if !shared {
                continue;
            }
            let secs = cfg.enqueue_secs;
            if let Some(tps) = pgbench(db, PgbenchScript::PlainInsert, clients, secs).await? {
                theirs.push(tps);
            }
            if let Some(tps) = pgbench(db, PgbenchScript::SqlEnqueue, clients, secs).await? {
                sql_enqueue.push(tps);
            }
            if let Some(tps) = pgbench(db, PgbenchScript::RawJobRow, clients, secs).await? {
                raw_row.push(tps);
            }
        }
        let med = |v: &[f64]| (!v.is_empty()).then(|| median(v));
        let (pg, sql, raw) = (med(&theirs), med(&sql_enqueue), med(&raw_row));
        let variant = match (clients, shared) {
            (1, _) => "enqueue, 1 job/call, 1 client".to_string(),
            (n, true) => format!("enqueue, 1 job/call, {n} clients sharing a Client"),
            (n, false) => format!("enqueue, 1 job/call, {n} clients, a Client each"),
        };
        let line = Line::new("A", variant, "jobs/s", ours);
        let pct = |of: Option<f64>| of.map(|of| 100.0 * line.median / of);
        let extra = json!({
            "jobs_per_transaction": median(&per_transaction),
            "pgbench_insert_tps": pg, "pgbench_insert_runs": theirs,
            "percent_of_pgbench_insert": pct(pg),
            "pgbench_sql_enqueue_tps": sql, "pgbench_sql_enqueue_runs": sql_enqueue,
            "percent_of_pgbench_sql_enqueue": pct(sql),
            "pgbench_raw_job_row_tps": raw, "pgbench_raw_job_row_runs": raw_row,
            "percent_of_pgbench_raw_job_row": pct(raw),
        });
        lines.push(line.with(extra).with_work(offered, done));
    }
    sqlx::query("DELETE FROM conveyor.job_rows WHERE queue = 'bench_pgbench'")
        .execute(&db.pool)
        .await?;
    Ok(lines)
}

/// What one A run did.
struct EnqueueRun {
    rate: f64,
    /// Rows written by one transaction (they share its xmin).
    jobs_per_transaction: f64,
    /// `enqueue()` calls that returned Ok.
    acknowledged: u64,
    /// Jobs found in the table afterwards.
    stored: u64,
}

/// One A run: each client in `clients` calls `enqueue()` in a loop for
/// `run_secs` seconds. Deletes the jobs after counting them.
async fn enqueue_loop(
    db: &BenchDb,
    clients: &[conveyor::Client],
    run_secs: u64,
) -> Result<EnqueueRun> {
    let done = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let until = start + Duration::from_secs(run_secs);
    let mut tasks = tokio::task::JoinSet::new();
    for client in clients {
        let (client, done) = (client.clone(), done.clone());
        tasks.spawn(async move {
            while Instant::now() < until {
                client
                    .enqueue(NewJob::new(TASK, json!({})).queue("bench_a"))
                    .await?;
                done.fetch_add(1, Ordering::Relaxed);
            }
            Ok::<_, conveyor::Error>(())
        });
    }
    while let Some(r) = tasks.join_next().await {
        r??;
    }
    let rate = done.load(Ordering::Relaxed) as f64 / secs(start);
    let (jobs, transactions): (i64, i64) = sqlx::query_as(
        "SELECT count(*), count(DISTINCT xmin::text) FROM conveyor.job_rows WHERE queue = 'bench_a'",
    )
    .fetch_one(&db.pool)
    .await?;
    sqlx::query("DELETE FROM conveyor.job_rows WHERE queue = 'bench_a'")
        .execute(&db.pool)
        .await?;
    Ok(EnqueueRun {
        rate,
        jobs_per_transaction: jobs as f64 / transactions.max(1) as f64,
        acknowledged: done.load(Ordering::Relaxed),
        stored: jobs as u64,
    })
}

/// B: bulk enqueue in batches from one connection.
pub async fn enqueue_bulk(db: &BenchDb, cfg: &Config) -> Result<Vec<Line>> {
    let mut runs = Vec::new();
    let mut stored = Vec::new();
    for _ in 0..cfg.runs {
        let start = Instant::now();
        db.preload_timed(cfg.jobs, cfg.batch).await?;
        runs.push(cfg.jobs as f64 / secs(start));
        // Untimed: the jobs ready to claim (their ring rows).
        stored.push(db.count_state("pending").await? as u64);
        db.clear_queue().await?;
    }
    let offered = vec![cfg.jobs as u64; runs.len()];
    Ok(vec![
        Line::new(
            "B",
            format!("bulk enqueue {} jobs, batches of {}", cfg.jobs, cfg.batch),
            "jobs/s",
            runs,
        )
        .with_work(offered, stored),
    ])
}

/// One timed processing run.
pub struct ProcessRun {
    pub rate: f64,
    /// The run's jobs that succeeded (all of them, or it is an error).
    pub succeeded: u64,
    /// Peak RSS of the first worker process, bytes.
    pub rss: u64,
    /// Server counters per job during the run ([`crate::support::Counters`]).
    pub server: Value,
    /// CPU of the server, the workers and the machine ([`crate::cpu::CpuMark`]).
    pub cpu: Value,
    /// Transactions, statements and connections ([`crate::probe::Probe`]).
    pub probe: Value,
}

/// Where a worker process runs: a network namespace (a "host") or this
/// one, and the URL it connects with from there.
#[derive(Clone, Debug)]
pub struct Spot {
    pub netns: Option<String>,
    pub url: String,
    /// Through a transaction-mode pooler: the worker's `Pooler`
    /// ([`crate::support::POOLER_ENV`]); `None` for a direct connection.
    pub pooler: Option<String>,
}

/// Runs `jobs` preloaded no-op jobs through `processes` worker processes of
/// `concurrency` slots each. The set-up's dirty pages are written by a
/// checkpoint before the clock starts.
pub async fn process_once(
    db: &BenchDb,
    jobs: usize,
    processes: usize,
    concurrency: usize,
    claim_ahead: Option<usize>,
) -> Result<ProcessRun> {
    let here = Spot {
        netns: None,
        url: db.url.clone(),
        pooler: None,
    };
    let spots = vec![here; processes];
    process_on(db, jobs, &spots, concurrency, claim_ahead, Count::Announced).await
}

/// How a processing run learns that its jobs finished.
#[derive(Clone, Copy, Debug)]
pub enum Count {
    /// From `job_finished`, listened for as a `Client` awaiting handles
    /// does (so the workers announce their outcomes): as C has always been
    /// measured.
    Announced,
    /// From the outcome rollups, with nobody listening (so the workers
    /// announce nothing): a fleet with nobody awaiting its jobs.
    Rollups,
}

/// [`process_once`] with a worker process at each of `spots`.
pub async fn process_on(
    db: &BenchDb,
    jobs: usize,
    spots: &[Spot],
    concurrency: usize,
    claim_ahead: Option<usize>,
    count: Count,
) -> Result<ProcessRun> {
    db.preload(jobs, 5_000).await?;
    db.client.pause_queue(QUEUE).await?;
    let children = spots
        .iter()
        .map(|s| {
            let pooler = s.pooler.as_deref();
            WorkerChild::start_on(
                s.netns.as_deref(),
                &s.url,
                concurrency,
                None,
                claim_ahead,
                pooler,
            )
        })
        .collect::<Result<Vec<_>>>()?;
    // Workers that poll do not LISTEN: wait for them in the registry.
    let polling = spots
        .iter()
        .filter(|s| s.pooler.as_deref() == Some("poll"))
        .count();
    db.wait_listeners((spots.len() - polling) as i64).await?;
    db.wait_registered(polling as i64).await?;
    let counter = match count {
        Count::Announced => FinishedCounter::listen(&db.url).await?,
        Count::Rollups => FinishedCounter::from_rollups(&db.url).await?,
    };
    if std::env::var(NO_CHECKPOINT_ENV).is_err() {
        db.checkpoint().await?;
    }
    let probe = Probe::start(db).await?;
    let postmaster = db.postmaster_pid().await?;
    let pids: Vec<u32> = children.iter().map(WorkerChild::pid).collect();
    let before = db.counters().await?;
    let cpu = CpuMark::now(postmaster, &pids);
    let start = Instant::now();
    db.client.resume_queue(QUEUE).await?;
    counter.wait_for(jobs as u64, TIMEOUT).await?;
    let rate = jobs as f64 / secs(start);
    probe.stop_sampling();
    let cpu = cpu.since(postmaster, &pids);
    let server = db.counters().await?.per_job_since(&before, jobs);
    let rss = children
        .first()
        .map(|c| c.peak_rss())
        .transpose()?
        .unwrap_or(0);
    for child in children {
        child.stop()?;
    }
    let probe = probe.finish(db, jobs).await?;
    let done = db.count_state("success").await?;
    if done != jobs as i64 {
        return Err(format!("{done} of {jobs} jobs succeeded").into());
    }
    db.clear_queue().await?;
    Ok(ProcessRun {
        rate,
        succeeded: done as u64,
        rss,
        server,
        cpu,
        probe,
    })
}

/// C: processing throughput of one worker process at several concurrency
/// levels, claiming ahead (the default) and not, and of two processes. Also
/// reports peak RSS. The runs of one concurrency alternate between the two
/// claim modes, so that their ratio is measured in the same stretch of time.
pub async fn process(db: &BenchDb, cfg: &Config) -> Result<Vec<Line>> {
    let mut lines = Vec::new();
    let mut groups: Vec<Vec<(usize, usize, Option<usize>)>> = cfg
        .concurrency
        .iter()
        .map(|c| vec![(1, *c, None), (1, *c, Some(0))])
        .collect();
    groups.push(vec![(2, 100, None)]);
    for group in groups {
        let mut runs = vec![Vec::new(); group.len()];
        let mut succeeded = vec![Vec::new(); group.len()];
        let mut rss = vec![Vec::new(); group.len()];
        let mut server_cpu = vec![Vec::new(); group.len()];
        for _ in 0..cfg.runs {
            for (i, (processes, concurrency, ahead)) in group.iter().enumerate() {
                let run = process_once(db, cfg.jobs, *processes, *concurrency, *ahead).await?;
                runs[i].push(run.rate);
                succeeded[i].push(run.succeeded);
                rss[i].push(run.rss as f64 / 1_048_576.0);
                if let Some(pct) = run.cpu["server_cpu_pct_of_core"].as_f64() {
                    server_cpu[i].push(pct);
                }
            }
        }
        for (i, (processes, concurrency, ahead)) in group.into_iter().enumerate() {
            let mode = if ahead == Some(0) {
                ", no claim-ahead"
            } else {
                ""
            };
            let variant = format!(
                "{processes} process(es) x concurrency {concurrency}{mode}, {} jobs",
                cfg.jobs
            );
            let offered = vec![cfg.jobs as u64; runs[i].len()];
            lines.push(
                Line::new("C", variant, "jobs/s", runs[i].clone())
                    .with(json!({
                        "peak_rss_mib": median(&rss[i]),
                        "server_cpu_pct_of_core": median(&server_cpu[i]),
                    }))
                    .with_work(offered, succeeded[i].clone()),
            );
        }
    }
    Ok(lines)
}

/// D: commit → handler start, idle worker, one job per transaction at ~50/s.
pub async fn wake_latency(db: &BenchDb, cfg: &Config) -> Result<Vec<Line>> {
    let mut p50s = Vec::new();
    let mut p99s = Vec::new();
    let mut maxes = Vec::new();
    let mut started = Vec::new();
    for _ in 0..cfg.runs {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(conveyor::JobId, Instant)>();
        let worker = conveyor::Worker::builder(&db.client)
            .queues(["bench_d"])
            .concurrency(10)
            .register_fn(TASK, move |ctx, _args| {
                let _ = tx.send((ctx.job_id(), Instant::now()));
                async { Ok(Value::Null) }
            })
            .start()?;
        db.wait_listeners(1).await?;
        let mut committed = std::collections::HashMap::new();
        let mut tick = tokio::time::interval(Duration::from_millis(20));
        for _ in 0..cfg.latency_jobs {
            tick.tick().await;
            let handle = db
                .client
                .enqueue(NewJob::new(TASK, json!({})).queue("bench_d"))
                .await?;
            committed.insert(handle.id(), Instant::now());
        }
        let mut latencies = Vec::new();
        while latencies.len() < cfg.latency_jobs {
            let (id, started) = tokio::time::timeout(TIMEOUT, rx.recv())
                .await?
                .ok_or("worker stopped")?;
            let at = committed.get(&id).ok_or("unknown job")?;
            latencies.push(started.saturating_duration_since(*at).as_secs_f64() * 1000.0);
        }
        worker.shutdown(Duration::from_secs(5)).await?;
        started.push(latencies.len() as u64);
        latencies.sort_by(|a, b| a.total_cmp(b));
        p50s.push(percentile(&latencies, 50.0));
        p99s.push(percentile(&latencies, 99.0));
        maxes.push(percentile(&latencies, 100.0));
    }
    sqlx::query("DELETE FROM conveyor.job_rows WHERE queue = 'bench_d'")
        .execute(&db.pool)
        .await?;
    let v = format!("{} jobs at 50/s, commit -> handler start", cfg.latency_jobs);
    // Offered: enqueued; done: seen starting by the handler.
    let offered = vec![cfg.latency_jobs as u64; started.len()];
    let line = |what: &str, runs: Vec<f64>| {
        Line::new("D", format!("{v}, {what}"), "ms", runs)
            .with_work(offered.clone(), started.clone())
    };
    Ok(vec![
        line("p50", p50s),
        line("p99", p99s),
        line("max", maxes),
    ])
}

/// When producers stop: at a time, or when told to ([`Deadline::stop`]).
#[derive(Clone)]
pub struct Deadline(Arc<std::sync::Mutex<Option<Instant>>>);

impl Deadline {
    pub fn at(when: Instant) -> Deadline {
        Deadline(Arc::new(std::sync::Mutex::new(Some(when))))
    }

    /// Not until [`Deadline::stop`].
    pub fn when_told() -> Deadline {
        Deadline(Arc::new(std::sync::Mutex::new(None)))
    }

    pub fn stop(&self) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
    }

    fn passed(&self) -> bool {
        let when = *self.0.lock().unwrap_or_else(|p| p.into_inner());
        when.is_some_and(|when| Instant::now() >= when)
    }
}

/// Enqueues at `rate` jobs/s (batches every 100 ms) from `producers` tasks
/// until `until` passes, or as fast as possible when `rate` is 0 (batches of 50).
/// Counts the jobs enqueued in `enqueued`.
pub fn spawn_producers(
    db: &BenchDb,
    producers: usize,
    rate: u64,
    until: Deadline,
    enqueued: Arc<AtomicU64>,
) -> tokio::task::JoinSet<Result<()>> {
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..producers {
        let (client, enqueued, until) = (db.client.clone(), enqueued.clone(), until.clone());
        tasks.spawn(async move {
            let per_batch = if rate == 0 {
                50
            } else {
                (rate / 10 / producers as u64).max(1) as usize
            };
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            while !until.passed() {
                if rate > 0 {
                    tick.tick().await;
                }
                let jobs = (0..per_batch)
                    .map(|_| NewJob::new(TASK, json!({})).queue(QUEUE))
                    .collect();
                client.enqueue_many(jobs).await?;
                enqueued.fetch_add(per_batch as u64, Ordering::Relaxed);
            }
            Ok(())
        });
    }
    tasks
}

/// E: 4 producers enqueueing as fast as they can while one worker process
/// (concurrency 500) works, for a fixed time.
pub async fn mixed(db: &BenchDb, cfg: &Config) -> Result<Vec<Line>> {
    let mut processed = Vec::new();
    let mut enqueued_rates = Vec::new();
    let mut depths = Vec::new();
    let (mut enqueued_counts, mut finished_counts) = (Vec::new(), Vec::new());
    for _ in 0..cfg.runs {
        let child = WorkerChild::start(&db.url, 500, None)?;
        db.wait_listeners(1).await?;
        let counter = FinishedCounter::listen(&db.url).await?;
        let enqueued = Arc::new(AtomicU64::new(0));
        let start = Instant::now();
        let until = start + Duration::from_secs(cfg.mixed_secs);
        let mut producers = spawn_producers(db, 4, 0, Deadline::at(until), enqueued.clone());
        let mut samples = Vec::new();
        let step = Duration::from_secs((cfg.mixed_secs / 6).max(1));
        while Instant::now() < until {
            tokio::time::sleep(step.min(until.saturating_duration_since(Instant::now()))).await;
            samples.push(db.count_state("pending").await?);
        }
        while let Some(r) = producers.join_next().await {
            r??;
        }
        let elapsed = secs(start);
        let (seen, sent) = (counter.seen(), enqueued.load(Ordering::Relaxed));
        processed.push(seen as f64 / elapsed);
        enqueued_rates.push(sent as f64 / elapsed);
        finished_counts.push(seen);
        enqueued_counts.push(sent);
        depths.push(samples);
        child.stop()?;
        db.clear_queue().await?;
    }
    let line = Line::new(
        "E",
        format!(
            "4 producers (batches of 50) + 1 worker x 500, {} s",
            cfg.mixed_secs
        ),
        "jobs/s",
        processed,
    );
    // Jobs enqueued by the producers, and finished (announced) within the
    // run: a backlog may be left, so not all of them.
    Ok(vec![line.with(json!({
        "enqueued_per_sec": enqueued_rates,
        "pending_depth_samples": depths,
        "jobs_enqueued": enqueued_counts,
        "jobs_finished": finished_counts,
    }))])
}

/// H: a steady enqueue rate for a long time with pruning on; table and index
/// size and throughput sampled over time.
pub async fn soak(db: &BenchDb, cfg: &Config) -> Result<Vec<Line>> {
    let autovacuum: String = sqlx::query_scalar("SELECT current_setting('autovacuum')")
        .fetch_one(&db.pool)
        .await?;
    let vacuum = autovacuum != "on";
    let child = WorkerChild::start(&db.url, 100, Some(60))?;
    db.wait_listeners(1).await?;
    let counter = FinishedCounter::listen(&db.url).await?;
    let enqueued = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let until = start + Duration::from_secs(cfg.soak_secs);
    let mut producers =
        spawn_producers(db, 2, cfg.soak_rate, Deadline::at(until), enqueued.clone());
    let mut samples = Vec::new();
    let mut last = 0;
    let mut next = start;
    while Instant::now() < until {
        next += Duration::from_secs(cfg.soak_sample_secs);
        tokio::time::sleep_until(next.into()).await;
        if vacuum {
            // Stand-in for autovacuum, which this server has turned off.
            sqlx::query("VACUUM conveyor.job_rows, conveyor.claims")
                .execute(&db.pool)
                .await?;
        }
        let seen = counter.seen();
        let (table, indexes) = db.sizes().await?;
        let depth = db.count_state("pending").await?;
        let rate = (seen - last) as f64 / cfg.soak_sample_secs as f64;
        last = seen;
        eprintln!(
            "soak: t={:.0}s processed/s={rate:.0} table={}MiB indexes={}MiB pending={depth}",
            secs(start),
            table / 1_048_576,
            indexes / 1_048_576
        );
        samples.push(json!({"t": secs(start).round(), "jobs_per_sec": rate, "table_mib": table as f64 / 1_048_576.0, "indexes_mib": indexes as f64 / 1_048_576.0, "pending": depth}));
    }
    while let Some(r) = producers.join_next().await {
        r??;
    }
    let (finished, sent) = (counter.seen(), enqueued.load(Ordering::Relaxed));
    child.stop()?;
    let rate_at = |i: usize| {
        samples
            .get(i)
            .and_then(|s| s["jobs_per_sec"].as_f64())
            .unwrap_or(f64::NAN)
    };
    let size_at = |i: usize| {
        samples
            .get(i)
            .map(|s| {
                s["table_mib"].as_f64().unwrap_or(0.0) + s["indexes_mib"].as_f64().unwrap_or(0.0)
            })
            .unwrap_or(f64::NAN)
    };
    let n = samples.len();
    let first = rate_at(0);
    let last_rate = rate_at(n.saturating_sub(1));
    let line = Line::new(
        "H",
        format!(
            "soak {} s at {}/s, retention 60 s",
            cfg.soak_secs, cfg.soak_rate
        ),
        "jobs/s",
        vec![last_rate],
    );
    db.clear_queue().await?;
    Ok(vec![line.with(json!({
        "first_interval_jobs_per_sec": first,
        "last_interval_percent_of_first": 100.0 * last_rate / first,
        "size_mib_at_half": size_at(n / 2),
        "size_mib_at_end": size_at(n.saturating_sub(1)),
        "vacuum_by_bench_each_sample": vacuum,
        "samples": samples,
        "jobs_enqueued": [sent],
        "jobs_finished": [finished],
    }))])
}

/// Idle CPU of a worker process with nothing to do.
pub async fn idle(db: &BenchDb, cfg: &Config) -> Result<Vec<Line>> {
    let mut runs = Vec::new();
    for _ in 0..cfg.runs {
        let child = WorkerChild::start(&db.url, 10, None)?;
        db.wait_listeners(1).await?;
        let before = child.cpu_time()?;
        tokio::time::sleep(Duration::from_secs(cfg.idle_secs)).await;
        let used = child.cpu_time()? - before;
        runs.push(100.0 * used.as_secs_f64() / cfg.idle_secs as f64);
        child.stop()?;
    }
    Ok(vec![Line::new(
        "idle",
        format!("worker with nothing to do, {} s", cfg.idle_secs),
        "% of a core",
        runs,
    )])
}
