//! Plumbing for the benchmark: a throwaway database, worker child
//! processes, /proc readings, percentiles and pgbench.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use conveyor::{Client, NewJob};
use serde_json::{Value, json};
use sqlx::PgPool;
use sqlx::postgres::{PgListener, PgPoolOptions};
use tokio::sync::Notify;

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
pub type Result<T> = std::result::Result<T, BoxError>;

/// The queue every scenario uses, and the task its no-op handler serves.
pub const QUEUE: &str = "bench";
pub const TASK: &str = "noop";

/// Env var that turns this executable into a worker child process.
pub const CHILD_ENV: &str = "CONVEYOR_BENCH_WORKER";
/// Env var that turns sqlx's ping-before-acquire back on (its default).
pub const PING_ENV: &str = "CONVEYOR_BENCH_PING";
/// Env var that skips the checkpoint before each timed processing run (to
/// see what the set-up's writes cost a run).
pub const NO_CHECKPOINT_ENV: &str = "CONVEYOR_BENCH_NO_CHECKPOINT";
/// Env var giving the worker child a retention (seconds) and a 10 s pruning pass.
pub const RETENTION_ENV: &str = "CONVEYOR_BENCH_RETENTION_SECS";
/// Tells a worker child its claim-ahead cap (unset or empty: the default).
pub const AHEAD_ENV: &str = "CONVEYOR_BENCH_CLAIM_AHEAD";
/// How a worker child reaches PostgreSQL when its `DATABASE_URL` is a
/// PgBouncer in transaction mode: `poll` (no session: idle workers poll every
/// 100 ms), or a direct session URL for `LISTEN`. Unset or empty: no pooler.
pub const POOLER_ENV: &str = "CONVEYOR_BENCH_POOLER";

/// A database created for one benchmark run and dropped at the end.
pub struct BenchDb {
    pub url: String,
    admin_url: String,
    name: String,
    pub pool: PgPool,
    pub client: Client,
}

impl BenchDb {
    /// Creates `conveyor_bench_<pid>_<tag>` beside the database `base_url`
    /// names, and migrates it.
    pub async fn create(base_url: &str, pool_size: u32, tag: &str) -> Result<BenchDb> {
        let name = format!(
            "conveyor_bench_{}_{}",
            std::process::id(),
            tag.to_ascii_lowercase()
        );
        let admin = PgPool::connect(base_url).await?;
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
        )))
        .execute(&admin)
        .await?;
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&admin)
            .await?;
        admin.close().await;
        let url = with_database(base_url, &name);
        // No ping before each acquire (sqlx's default adds a round trip to
        // every statement; docs/benchmarks.md shows what it costs).
        let pool = PgPoolOptions::new()
            .max_connections(pool_size)
            .test_before_acquire(std::env::var(PING_ENV).is_ok())
            .connect(&url)
            .await?;
        conveyor::migrate(&pool).await?;
        let client = Client::new(pool.clone());
        Ok(BenchDb {
            url,
            admin_url: base_url.to_string(),
            name,
            pool,
            client,
        })
    }

    pub async fn drop_db(self) -> Result<()> {
        self.pool.close().await;
        let admin = PgPool::connect(&self.admin_url).await?;
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "DROP DATABASE IF EXISTS {} WITH (FORCE)",
            self.name
        )))
        .execute(&admin)
        .await?;
        Ok(())
    }

    /// Enqueues `n` no-op jobs in batches, then analyzes the table (as
    /// autovacuum would), so every run starts from fresh statistics.
    pub async fn preload(&self, n: usize, batch: usize) -> Result<()> {
        self.preload_timed(n, batch).await?;
        sqlx::query("ANALYZE conveyor.job_rows, conveyor.claims")
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Enqueues `n` no-op jobs with `Client::enqueue_many`, `batch` per call.
    pub async fn preload_timed(&self, n: usize, batch: usize) -> Result<()> {
        let mut left = n;
        while left > 0 {
            let take = left.min(batch);
            let jobs = (0..take)
                .map(|_| NewJob::new(TASK, json!({})).queue(QUEUE))
                .collect();
            self.client.enqueue_many(jobs).await?;
            left -= take;
        }
        Ok(())
    }

    /// Adds `n` rows straight in SQL, a million per statement: finished
    /// history (`success`, queue `bench_history`) or future jobs
    /// (`scheduled` a day ahead, in the bench queue). Ids are time-ordered
    /// and older than any real one, as history would be.
    pub async fn load_rows(&self, state: &str, offset: u64, n: u64) -> Result<()> {
        let (queue, prefix) = match state {
            "success" => ("bench_history", "00000000-0000-7000-8000-"),
            _ => (QUEUE, "00000000-0001-7000-8000-"),
        };
        let mut done = 0;
        while done < n {
            let take = (n - done).min(1_000_000) as i64;
            sqlx::query(
                "INSERT INTO conveyor.job_rows
                     (id, queue, task, state, attempt, run_at, started_at, finished_at, result, created_at)
                 SELECT ($1 || lpad(to_hex($5::bigint + g), 12, '0'))::uuid, $2, 'noop', $3,
                        CASE WHEN $3 = 'success' THEN 1 ELSE 0 END,
                        CASE WHEN $3 = 'success' THEN now() - interval '1 day'
                             ELSE now() + interval '1 day' END,
                        CASE WHEN $3 = 'success' THEN now() - interval '1 day' END,
                        CASE WHEN $3 = 'success' THEN now() - interval '1 day' END,
                        CASE WHEN $3 = 'success' THEN 'null'::jsonb END,
                        now() - interval '1 day'
                 FROM generate_series(1, $4::bigint) AS g",
            )
            .bind(prefix)
            .bind(queue)
            .bind(state)
            .bind(take)
            .bind((offset + done) as i64)
            .execute(&self.pool)
            .await?;
            done += take as u64;
        }
        Ok(())
    }

    /// Removes the bench queue's jobs so the next run starts from the same
    /// table, and vacuums.
    pub async fn clear_queue(&self) -> Result<()> {
        // A worker may still be recording outcomes of the same rows, locking
        // them in another order: PostgreSQL then ends one side with a
        // deadlock error (the worker's side retries by itself), so this does
        // too.
        let mut tries = 0;
        loop {
            let deleted = sqlx::query(
                "DELETE FROM conveyor.job_rows WHERE queue = $1 AND state <> 'scheduled'",
            )
            .bind(QUEUE)
            .execute(&self.pool)
            .await;
            match deleted {
                Err(sqlx::Error::Database(e))
                    if e.code().as_deref() == Some("40P01") && tries < 5 =>
                {
                    tries += 1;
                }
                other => {
                    other?;
                    break;
                }
            }
        }
        sqlx::query("VACUUM (ANALYZE) conveyor.job_rows, conveyor.claims")
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    pub async fn count_state(&self, state: &str) -> Result<i64> {
        // Pending jobs are the ready ring's; counting them in conveyor.jobs
        // would read the whole table (no index serves it).
        let sql = if state == "pending" {
            "SELECT count(*) FROM conveyor.ready WHERE queue = $1 AND $2 = 'pending'"
        } else {
            "SELECT count(*) FROM conveyor.jobs WHERE queue = $1 AND state = $2"
        };
        Ok(sqlx::query_scalar(sql)
            .bind(QUEUE)
            .bind(state)
            .fetch_one(&self.pool)
            .await?)
    }

    /// Waits until `n` worker listeners are connected (they LISTEN for job_ready).
    pub async fn wait_listeners(&self, n: i64) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let seen: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_stat_activity
                 WHERE datname = current_database() AND query LIKE 'LISTEN%job_ready%'",
            )
            .fetch_one(&self.pool)
            .await?;
            if seen >= n {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!("only {seen} of {n} worker listeners connected").into());
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Waits until at least `n` live workers are in the registry.
    pub async fn wait_registered(&self, n: i64) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let seen: i64 =
                sqlx::query_scalar("SELECT count(*) FROM conveyor.workers WHERE dead_at IS NULL")
                    .fetch_one(&self.pool)
                    .await?;
            if seen >= n {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!("only {seen} of {n} workers registered").into());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Server-wide counters, read before and after a timed run: WAL bytes
    /// and full-page images, this database's block reads and hits, and
    /// checkpoints started.
    pub async fn counters(&self) -> Result<Counters> {
        let row: (i64, i64, i64, i64, i64) = sqlx::query_as(
            "SELECT w.wal_bytes::bigint, w.wal_fpi, d.blks_read, d.blks_hit,
                    b.checkpoints_timed + b.checkpoints_req
             FROM pg_stat_wal w, pg_stat_bgwriter b, pg_stat_database d
             WHERE d.datname = current_database()",
        )
        .fetch_one(&self.pool)
        .await?;
        Ok(Counters {
            wal_bytes: row.0,
            wal_fpi: row.1,
            blks_read: row.2,
            blks_hit: row.3,
            checkpoints: row.4,
        })
    }

    /// The server's postmaster, if it runs on this machine: the parent of
    /// this session's backend.
    pub async fn postmaster_pid(&self) -> Result<Option<u32>> {
        let backend: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
            .fetch_one(&self.pool)
            .await?;
        let stat = std::fs::read_to_string(format!("/proc/{backend}/stat")).unwrap_or_default();
        Ok(stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse().ok()))
    }

    /// Writes every dirty buffer now, so a timed run does not pay for the
    /// set-up's writes (a checkpoint started by loading millions of rows).
    pub async fn checkpoint(&self) -> Result<()> {
        sqlx::query("CHECKPOINT").execute(&self.pool).await?;
        Ok(())
    }

    /// Bytes of the jobs table: (heap + toast, indexes).
    pub async fn sizes(&self) -> Result<(i64, i64)> {
        let row: (i64, i64) = sqlx::query_as(
            // Summed over the partitions of the stored jobs
            // (conveyor.job_rows) and the claims' rows (conveyor.claims).
            "SELECT coalesce(sum(pg_table_size(relid)), 0)::bigint,
                    coalesce(sum(pg_indexes_size(relid)), 0)::bigint
             FROM (SELECT relid FROM pg_partition_tree('conveyor.job_rows') WHERE isleaf
                   UNION ALL SELECT 'conveyor.claims'::regclass) AS t",
        )
        .fetch_one(&self.pool)
        .await?;
        Ok(row)
    }
}

/// Server counters (see [`BenchDb::counters`]); subtract two readings.
#[derive(Clone, Copy, Debug, Default)]
pub struct Counters {
    pub wal_bytes: i64,
    pub wal_fpi: i64,
    pub blks_read: i64,
    pub blks_hit: i64,
    pub checkpoints: i64,
}

impl Counters {
    /// What happened between `before` and `self`, per job.
    pub fn per_job_since(&self, before: &Counters, jobs: usize) -> Value {
        let per = |a: i64, b: i64| (a - b) as f64 / jobs.max(1) as f64;
        json!({
            "wal_bytes_per_job": per(self.wal_bytes, before.wal_bytes),
            "wal_fpi_per_job": per(self.wal_fpi, before.wal_fpi),
            "blks_read_per_job": per(self.blks_read, before.blks_read),
            "blks_hit_per_job": per(self.blks_hit, before.blks_hit),
            "checkpoints": self.checkpoints - before.checkpoints,
        })
    }
}

/// `url` with its database name replaced.
pub fn with_database(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, format!("?{q}")),
        None => (url, String::new()),
    };
    let host_end = base.find("://").map_or(0, |i| i + 3);
    let base = match base[host_end..].find('/') {
        Some(slash) => &base[..host_end + slash],
        None => base,
    };
    format!("{base}/{name}{query}")
}

/// Counts finished jobs in a background task: announced on
/// `conveyor.job_finished` (the ids listed in each notification), or
/// counted in the outcome rollups.
pub struct FinishedCounter {
    count: Arc<AtomicU64>,
    changed: Arc<Notify>,
    task: tokio::task::JoinHandle<()>,
}

impl FinishedCounter {
    /// Listens for `job_finished` as a `Client` awaiting a `JobHandle`
    /// does: with the shared lock that has outcomes announced at all
    /// (sql/enqueue/notify.sql).
    pub async fn listen(url: &str) -> Result<FinishedCounter> {
        let mut listener = PgListener::connect(url).await?;
        listener.listen("conveyor.job_finished").await?;
        sqlx::query("SELECT pg_advisory_lock_shared(hashtextextended('conveyor.job_finished', 0))")
            .execute(&mut listener)
            .await?;
        let count = Arc::new(AtomicU64::new(0));
        let changed = Arc::new(Notify::new());
        let (c, n) = (count.clone(), changed.clone());
        let task = tokio::spawn(async move {
            while let Ok(note) = listener.recv().await {
                let ids = note.payload().split(',').filter(|s| !s.is_empty()).count();
                c.fetch_add(ids as u64, Ordering::Relaxed);
                n.notify_waiters();
            }
        });
        Ok(FinishedCounter {
            count,
            changed,
            task,
        })
    }

    /// Counts the successes of the bench queue in `conveyor.stats`, every
    /// 10 ms: for runs that would otherwise be the only reason workers
    /// announce their outcomes (a fleet of processes with nobody awaiting
    /// a job, as in production).
    pub async fn from_rollups(url: &str) -> Result<FinishedCounter> {
        let pool = PgPool::connect(url).await?;
        let sql =
            "SELECT coalesce(sum(succeeded), 0)::bigint FROM conveyor.stats WHERE queue = 'bench'";
        let base: i64 = sqlx::query_scalar(sql).fetch_one(&pool).await?;
        let count = Arc::new(AtomicU64::new(0));
        let changed = Arc::new(Notify::new());
        let (c, n) = (count.clone(), changed.clone());
        let task = tokio::spawn(async move {
            loop {
                if let Ok(now) = sqlx::query_scalar::<_, i64>(sql).fetch_one(&pool).await {
                    c.store((now - base).max(0) as u64, Ordering::Relaxed);
                    n.notify_waiters();
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        });
        Ok(FinishedCounter {
            count,
            changed,
            task,
        })
    }

    pub fn seen(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// Waits until `target` jobs in all have been announced, or `timeout` passes.
    pub async fn wait_for(&self, target: u64, timeout: Duration) -> Result<()> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let changed = self.changed.notified();
            if self.seen() >= target {
                return Ok(());
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                return Err(format!(
                    "only {} of {target} jobs finished in {timeout:?}",
                    self.seen()
                )
                .into());
            }
        }
    }
}

impl Drop for FinishedCounter {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A worker running in a child process (this same executable).
pub struct WorkerChild {
    child: Child,
}

/// This executable, to start worker processes from. On Linux the process's
/// own `/proc/<pid>/exe`, which still opens the running binary after a
/// rebuild replaced its file (`current_exe()` then names a path ending in
/// " (deleted)", and a run an hour into scenario G could start no worker),
/// and resolves from another network namespace too (`ip netns exec`).
fn own_exe() -> std::io::Result<std::path::PathBuf> {
    let link = std::path::PathBuf::from(format!("/proc/{}/exe", std::process::id()));
    if link.exists() {
        Ok(link)
    } else {
        std::env::current_exe()
    }
}

impl WorkerChild {
    /// Starts a worker process with `concurrency` slots and waits until it
    /// has connected and is listening.
    pub fn start(
        url: &str,
        concurrency: usize,
        retention_secs: Option<u64>,
    ) -> Result<WorkerChild> {
        WorkerChild::start_with(url, concurrency, retention_secs, None)
    }

    /// [`WorkerChild::start`], with the worker's claim-ahead cap set
    /// (`None`: the library's default).
    pub fn start_with(
        url: &str,
        concurrency: usize,
        retention_secs: Option<u64>,
        claim_ahead: Option<usize>,
    ) -> Result<WorkerChild> {
        WorkerChild::start_on(None, url, concurrency, retention_secs, claim_ahead, None)
    }

    /// [`WorkerChild::start_with`], in network namespace `netns` if given
    /// (a "host" of `scripts/hosts.sh`).
    pub fn start_on(
        netns: Option<&str>,
        url: &str,
        concurrency: usize,
        retention_secs: Option<u64>,
        claim_ahead: Option<usize>,
        pooler: Option<&str>,
    ) -> Result<WorkerChild> {
        let exe = own_exe()?;
        let mut cmd = match netns {
            Some(netns) => {
                let mut cmd = Command::new("ip");
                cmd.args(["netns", "exec", netns]).arg(exe);
                cmd
            }
            None => Command::new(exe),
        };
        if cfg!(test) {
            // Under the test harness, re-enter through the child test.
            cmd.args([
                "--ignored",
                "--exact",
                "tests::worker_child",
                "--nocapture",
                "--test-threads=1",
            ]);
        }
        let mut child = cmd
            .env(CHILD_ENV, concurrency.to_string())
            .env(
                AHEAD_ENV,
                claim_ahead.map(|n| n.to_string()).unwrap_or_default(),
            )
            .env("DATABASE_URL", url)
            .env(POOLER_ENV, pooler.unwrap_or_default())
            .env(
                RETENTION_ENV,
                retention_secs.map(|s| s.to_string()).unwrap_or_default(),
            )
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        loop {
            match lines.next() {
                // Under the test harness "ready" follows "test tests::worker_child ... ".
                Some(Ok(line)) if line.trim_end().ends_with("ready") => break,
                Some(Ok(_)) => continue,
                _ => return Err("worker child exited before it was ready".into()),
            }
        }
        Ok(WorkerChild { child })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Peak resident memory (VmHWM) in bytes.
    pub fn peak_rss(&self) -> Result<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()))?;
        let line = status
            .lines()
            .find(|l| l.starts_with("VmHWM:"))
            .ok_or("no VmHWM")?;
        let kb: u64 = line.split_whitespace().nth(1).ok_or("bad VmHWM")?.parse()?;
        Ok(kb * 1024)
    }

    /// CPU time used so far (user + system).
    pub fn cpu_time(&self) -> Result<Duration> {
        cpu_time_of(self.pid())
    }

    pub fn stop(mut self) -> Result<()> {
        drop(self.child.stdin.take());
        let _ = self.child.kill();
        self.child.wait()?;
        Ok(())
    }
}

impl Drop for WorkerChild {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// CPU time of process `pid` from /proc/<pid>/stat (clock ticks of 1/100 s).
pub fn cpu_time_of(pid: u32) -> Result<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command name (which may hold spaces) start after ')'.
    let rest = stat.rsplit_once(')').ok_or("bad stat")?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11).ok_or("no utime")?.parse()?;
    let stime: u64 = fields.get(12).ok_or("no stime")?.parse()?;
    Ok(Duration::from_millis((utime + stime) * 10))
}

/// The worker child's main: runs a no-op worker until stdin closes.
pub async fn worker_child_main(concurrency: usize) -> Result<()> {
    let url = std::env::var("DATABASE_URL")?;
    let pool = PgPoolOptions::new()
        .max_connections(8)
        .test_before_acquire(std::env::var(PING_ENV).is_ok())
        .connect(&url)
        .await?;
    let mut client = Client::builder(pool);
    match std::env::var(POOLER_ENV).ok().filter(|s| !s.is_empty()) {
        None => {}
        Some(how) if how == "poll" => {
            let pooler =
                conveyor::Pooler::transaction_mode().poll_every(Duration::from_millis(100));
            client = client.pooler(pooler);
        }
        Some(session) => {
            client = client.pooler(conveyor::Pooler::transaction_mode().session_url(session));
        }
    }
    let client = client.build()?;
    let mut builder = conveyor::Worker::builder(&client)
        .queues([QUEUE])
        .concurrency(concurrency)
        .register_fn(TASK, |_ctx, _args| async { Ok(Value::Null) });
    if let Some(ahead) = std::env::var(AHEAD_ENV).ok().and_then(|s| s.parse().ok()) {
        builder = builder.claim_ahead(ahead);
    }
    if let Some(keep) = std::env::var(RETENTION_ENV)
        .ok()
        .and_then(|s| s.parse().ok())
    {
        let keep = Duration::from_secs(keep);
        builder = builder
            .retention(conveyor::Retention {
                success: Some(keep),
                failure: Some(keep),
                cancelled: Some(keep),
                ..conveyor::Retention::default()
            })
            .prune_interval(Duration::from_secs(10));
    }
    let worker = builder.start()?;
    // The parent waits for this worker's LISTEN in pg_stat_activity too.
    println!("ready");
    std::io::stdout().flush()?;
    tokio::task::spawn_blocking(|| {
        let mut sink = String::new();
        while std::io::stdin()
            .read_line(&mut sink)
            .map(|n| n > 0)
            .unwrap_or(false)
        {}
    })
    .await?;
    worker.shutdown(Duration::from_secs(5)).await?;
    Ok(())
}

/// The p-th percentile (0..=100) of sorted samples.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (p / 100.0 * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

pub fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    percentile(&v, 50.0)
}

/// What pgbench runs as its one-statement transaction.
#[derive(Clone, Copy, Debug)]
pub enum PgbenchScript {
    /// A one-row insert into a two-column table (uuid key, jsonb).
    PlainInsert,
    /// `SELECT conveyor.enqueue(...)`: the same job row, index entries and
    /// notification as a Conveyor enqueue, from SQL.
    SqlEnqueue,
    /// A job row inserted into conveyor.jobs with its notification
    /// suppressed: the table's own cost, with no queue logic at all.
    RawJobRow,
}

/// pgbench's transactions/s for `script` with `clients` clients for `secs`
/// seconds (prepared statements).
pub async fn pgbench(
    db: &BenchDb,
    script: PgbenchScript,
    clients: usize,
    secs: u64,
) -> Result<Option<f64>> {
    let Some(pgbench) = find_pg_binary("pgbench") else {
        return Ok(None);
    };
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS bench_pgbench_insert (
             id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
             payload jsonb NOT NULL)",
    )
    .execute(&db.pool)
    .await?;
    let script_kind = script;
    let script = std::env::temp_dir().join(format!("conveyor-bench-{}.sql", std::process::id()));
    let sql = match script_kind {
        PgbenchScript::PlainInsert => "INSERT INTO bench_pgbench_insert (payload) VALUES ('{}');\n",
        PgbenchScript::SqlEnqueue => "SELECT conveyor.enqueue('noop', '{}', 'bench_pgbench');\n",
        PgbenchScript::RawJobRow => {
            "WITH d AS MATERIALIZED (SELECT set_config('conveyor.defer_notify', 'on', true)) \
             INSERT INTO conveyor.job_rows (task, queue) SELECT 'noop', 'bench_pgbench' FROM d;\n"
        }
    };
    std::fs::write(&script, sql)?;
    let threads = clients.min(2);
    let (script_path, url) = (script.clone(), db.url.clone());
    let out = tokio::task::spawn_blocking(move || {
        Command::new(pgbench)
            .args([
                "-n",
                "-M",
                "prepared",
                "-c",
                &clients.to_string(),
                "-j",
                &threads.to_string(),
            ])
            .args(["-T", &secs.to_string(), "-f"])
            .arg(&script_path)
            .arg(&url)
            .output()
    })
    .await??;
    let _ = std::fs::remove_file(&script);
    let text = String::from_utf8_lossy(&out.stdout);
    let tps = text
        .lines()
        .find(|l| l.starts_with("tps = "))
        .and_then(|l| l["tps = ".len()..].split_whitespace().next())
        .and_then(|n| n.parse().ok());
    if tps.is_none() {
        return Err(format!(
            "pgbench printed no tps: {}{}",
            text,
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    Ok(tps)
}

/// A PostgreSQL client binary on PATH or under /usr/lib/postgresql/*/bin.
pub fn find_pg_binary(name: &str) -> Option<std::path::PathBuf> {
    if let Ok(path) = std::env::var("PATH") {
        for dir in std::env::split_paths(&path) {
            let p = dir.join(name);
            if p.is_file() {
                return Some(p);
            }
        }
    }
    let mut found: Vec<_> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .flatten()
        .map(|e| e.path().join("bin").join(name))
        .filter(|p| p.is_file())
        .collect();
    found.sort();
    found.pop()
}

/// Seconds since `start`.
pub fn secs(start: Instant) -> f64 {
    start.elapsed().as_secs_f64()
}
