//! Chaos tests: worker *processes* killed with SIGKILL, PostgreSQL
//! restarted under load, and a worker's network cut (`netcut.rs`), on a
//! private cluster (see `cluster.rs`).
//!
//! The worker processes are this same test binary, re-run with
//! `--ignored --exact worker_process` and `CONVEYOR_CHAOS_WORKER` set: the
//! `worker_process` "test" then serves jobs until it is killed, logging
//! every run to a file of its own. (No other test runs in such a process:
//! `--exact` selects that one alone.)

mod cluster;
mod hosts;

/// Prints a result line even under the test harness's output capture (which
/// only catches `print!`), so CI logs show the counts.
macro_rules! report {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

mod netcut;

use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use cluster::Cluster;
use conveyor::{Client, JobState, NewJob, Periodic, TaskError, Worker};
use serde_json::{Value, json};
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;

/// One chaos test at a time: each runs its own cluster and three processes.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const ROLE: &str = "CONVEYOR_CHAOS_WORKER";
/// A file the worker process writes its tracing events to (when set).
const TRACE_LOG: &str = "CHAOS_TRACE_LOG";

fn now_nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

/// Not a test: the worker process the chaos tests start. They run this
/// binary as `<chaos test binary> --ignored --exact worker_process` with
/// `CONVEYOR_CHAOS_WORKER=<run log>` and `DATABASE_URL` set (see
/// `spawn_worker_cmd`); it then serves `chaos` jobs until killed, logging
/// every run, and the tests check those logs. It is `#[ignore]`d so that a
/// plain run lists it as ignored, not as passed.
///
/// Run without `CONVEYOR_CHAOS_WORKER` (`cargo test -- --ignored` or
/// `--include-ignored` over the whole suite) it has nothing to serve and
/// checks nothing. It then prints a line starting `SKIPPED:` that says so
/// (to stderr, past the harness's capture, so every run's output shows
/// it) and returns: an explicit skip rather than a failure, since nothing
/// is broken, and libtest has no runtime skip, so it is listed `ok` after
/// that line. The chaos tests that start it fail when it serves nothing.
#[tokio::test]
#[ignore = "not a test: the chaos tests' worker process, started by them"]
async fn worker_process() {
    let Ok(log_path) = std::env::var(ROLE) else {
        report!(
            "SKIPPED: worker_process is not a test but the chaos tests' worker process: they \
             run this binary with `--ignored --exact worker_process`, {ROLE}=<run log> and \
             DATABASE_URL; without {ROLE} it serves nothing and checks nothing"
        );
        return;
    };
    let url = std::env::var("DATABASE_URL").expect("DATABASE_URL");
    let lease = Duration::from_millis(
        std::env::var("CHAOS_LEASE_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(3000),
    );
    let log = Arc::new(Mutex::new(
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .expect("run log"),
    ));
    if let Ok(path) = std::env::var(TRACE_LOG) {
        // Conveyor's warnings and sqlx's slow statements, for the parent to read.
        let file = std::fs::File::create(path).expect("trace log");
        tracing_subscriber::fmt()
            .with_writer(Mutex::new(file))
            .with_ansi(false)
            .with_env_filter("conveyor=info,sqlx::query=warn")
            .init();
    }
    let pool = PgPoolOptions::new()
        .max_connections(5)
        .acquire_timeout(Duration::from_secs(5))
        .connect_lazy(&url)
        .expect("database url");
    let client = Client::new(pool);
    let mut builder = Worker::builder(&client);
    if std::env::var("CHAOS_PERIODIC").is_ok() {
        builder = builder.periodic(Periodic::every("tick", Duration::from_secs(1), |slot| {
            NewJob::new("tick", json!({ "slot": slot }))
        }));
    }
    let worker = builder
        .register_fn("tick", |_, _| async move { Ok(Value::Null) })
        .concurrency(10)
        .lease(lease)
        .rescue_interval(Duration::from_millis(500))
        .register_fn("chaos", move |ctx, args| {
            let log = log.clone();
            async move {
                let line = |kind: &str| {
                    format!(
                        "{kind} {} {} {}\n",
                        ctx.job_id(),
                        ctx.attempt(),
                        now_nanos()
                    )
                };
                write_line(&log, &line("S"));
                let ms = args["ms"].as_u64().unwrap_or(10);
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(ms)) => {}
                    _ = ctx.cancelled() => {
                        // Told to stop (its lease was lost): this run ends here.
                        write_line(&log, &line("C"));
                        return Err(TaskError::retry("told to stop"));
                    }
                }
                write_line(&log, &line("E"));
                // Which process's outcome the database recorded.
                Ok(json!({ "pid": std::process::id() }))
            }
        })
        .start()
        .expect("worker");
    // Until killed (or the parent's stdin closes, when it was asked to stop).
    std::future::pending::<()>().await;
    drop(worker);
}

fn write_line(log: &Mutex<std::fs::File>, line: &str) {
    let mut file = log.lock().unwrap_or_else(|p| p.into_inner());
    file.write_all(line.as_bytes()).expect("write run log");
}

/// A worker process and the log it writes. Killed when dropped, so a
/// test that fails half-way leaves no worker behind.
struct Proc {
    child: Child,
    log: PathBuf,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn_worker(url: &str, log: PathBuf, lease_ms: u64) -> Proc {
    spawn_worker_with(url, log, lease_ms, &[])
}

fn spawn_worker_with(url: &str, log: PathBuf, lease_ms: u64, env: &[(&str, &str)]) -> Proc {
    let exe = std::env::current_exe().expect("test binary");
    spawn_worker_cmd(Command::new(exe), url, log, lease_ms, env)
}

/// Starts `command` (this test binary, possibly wrapped) as a worker process.
fn spawn_worker_cmd(
    mut command: Command,
    url: &str,
    log: PathBuf,
    lease_ms: u64,
    env: &[(&str, &str)],
) -> Proc {
    let child = command
        .envs(env.iter().copied())
        .args([
            "--ignored",
            "--exact",
            "worker_process",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(ROLE, &log)
        .env("DATABASE_URL", url)
        .env("CHAOS_LEASE_MS", lease_ms.to_string())
        .env("RUST_LOG", "off")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn worker process");
    Proc { child, log }
}

/// Kills with SIGKILL; returns when it is gone.
fn kill(proc: &mut Proc) -> u128 {
    let _ = proc.child.kill();
    let _ = proc.child.wait();
    now_nanos()
}

async fn connect(url: &str) -> PgPool {
    PgPoolOptions::new()
        .max_connections(4)
        .connect(url)
        .await
        .expect("connect to the private cluster")
}

/// `SELECT count(*) … WHERE state = 'success'`, or None while the database is away.
async fn succeeded(pool: &PgPool) -> Option<i64> {
    sqlx::query_scalar("SELECT count(*) FROM conveyor.jobs WHERE state = 'success'")
        .fetch_one(pool)
        .await
        .ok()
}

/// One run of a job, read back from a worker's log.
#[derive(Debug, Clone)]
struct Run {
    log: PathBuf,
    attempt: u32,
    start: u128,
    /// When it finished, or was told to stop (`cancelled`).
    end: Option<u128>,
    cancelled: bool,
}

fn read_runs(logs: &[PathBuf]) -> HashMap<String, Vec<Run>> {
    let mut runs: HashMap<String, Vec<Run>> = HashMap::new();
    for log in logs {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        for line in text.lines() {
            let parts: Vec<&str> = line.split(' ').collect();
            let [kind, id, attempt, ts] = parts[..] else {
                continue; // a line cut by SIGKILL
            };
            let Ok(ts) = ts.parse::<u128>() else { continue };
            let entry = runs.entry(id.to_string()).or_default();
            match kind {
                "S" => entry.push(Run {
                    log: log.clone(),
                    attempt: attempt.parse().unwrap_or(0),
                    start: ts,
                    end: None,
                    cancelled: false,
                }),
                "E" | "C" => {
                    if let Some(run) = entry
                        .iter_mut()
                        .rev()
                        .find(|r| r.log == *log && r.end.is_none())
                    {
                        run.end = Some(ts);
                        run.cancelled = kind == "C";
                    }
                }
                _ => {}
            }
        }
    }
    runs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_jobs_survive_killed_workers_and_database_restarts() {
    let _serial = SERIAL.lock().await;
    const JOBS: i64 = 10_000;
    let cluster = Cluster::start();
    let url = cluster.url();
    let pool = connect(&url).await;
    conveyor::migrate(&pool).await.unwrap();
    let client = Client::new(pool.clone());
    let jobs = (0..JOBS)
        .map(|i| NewJob::new("chaos", json!({ "i": i, "ms": 10 + (i * 7919) % 30 })))
        .collect();
    client.enqueue_many(jobs).await.unwrap();

    let logs_dir = cluster.dir().join("logs");
    std::fs::create_dir_all(&logs_dir).unwrap();
    let mut generation = 0;
    let mut next_log = || {
        generation += 1;
        logs_dir.join(format!("worker-{generation}.log"))
    };
    // Renewed every 5 s: a worker that lives keeps its leases through the
    // restarts and the load (its handlers would be told to stop 15 s after
    // a last renewal, and their jobs run again elsewhere).
    let lease_ms = 15_000;
    let mut procs: Vec<Proc> = (0..3)
        .map(|_| spawn_worker(&url, next_log(), lease_ms))
        .collect();
    let mut all_logs: Vec<PathBuf> = procs.iter().map(|p| p.log.clone()).collect();
    let mut killed: HashMap<PathBuf, u128> = HashMap::new();
    let mut restarts = 0;
    let started = Instant::now();
    let mut victim = 0;
    let deadline = started + Duration::from_secs(300);
    loop {
        tokio::time::sleep(Duration::from_millis(1_000)).await;
        let done = succeeded(&pool).await.unwrap_or(0);
        if done == JOBS {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "only {done} of {JOBS} jobs succeeded in time"
        );
        // Kill one worker process about every second, and start a new one.
        let proc = &mut procs[victim % 3];
        let at = kill(proc);
        killed.insert(proc.log.clone(), at);
        *proc = spawn_worker(&url, next_log(), lease_ms);
        all_logs.push(proc.log.clone());
        victim += 1;
        // Restart PostgreSQL twice: once cleanly, once like a crash.
        if restarts < 2 && done >= JOBS * (restarts + 1) / 4 {
            let mode = if restarts == 0 { "fast" } else { "immediate" };
            tokio::task::block_in_place(|| cluster.restart(mode));
            restarts += 1;
        }
    }
    let elapsed = started.elapsed();
    for proc in &mut procs {
        kill(proc);
    }
    assert_eq!(restarts, 2, "PostgreSQL was restarted twice during the run");

    // Every job succeeded; none is missing.
    let pool = connect(&url).await;
    let states: Vec<(String, i64)> =
        sqlx::query_as("SELECT state, count(*) FROM conveyor.jobs GROUP BY 1")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(states, [("success".to_string(), JOBS)]);
    let distinct: i64 = sqlx::query_scalar("SELECT count(DISTINCT args->'i') FROM conveyor.jobs")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(distinct, JOBS);

    // From the workers' own logs: every job ran; no job ran concurrently with
    // itself; only jobs whose worker died ran more than once.
    let runs = read_runs(&all_logs);
    assert_eq!(runs.len() as i64, JOBS, "every job ran at least once");
    let mut twice = 0;
    let mut total_runs = 0;
    for (id, list) in &runs {
        let mut list = list.clone();
        list.sort_by_key(|r| r.start);
        total_runs += list.len();
        assert!(
            list.iter().any(|r| r.end.is_some() && !r.cancelled),
            "job {id} never finished a run"
        );
        for pair in list.windows(2) {
            let (a, b) = (&pair[0], &pair[1]);
            let end = a.end.or_else(|| killed.get(&a.log).copied());
            let end = end.unwrap_or_else(|| panic!("job {id}: unfinished run in a live worker"));
            assert!(
                end <= b.start,
                "job {id} ran concurrently with itself: {list:?}"
            );
            assert!(
                killed.contains_key(&a.log),
                "job {id} ran again although its worker did not die: {list:?}"
            );
        }
        if list.len() > 1 {
            twice += 1;
        }
    }
    report!(
        "chaos: {JOBS} jobs, {total_runs} runs, {twice} jobs ran more than once (all after their worker was killed), \
         {} worker kills, {restarts} PostgreSQL restarts, {:.1}s",
        killed.len(),
        elapsed.as_secs_f64()
    );
}

#[tokio::test]
async fn a_worker_killed_mid_job_has_the_job_retried_after_the_lease_expires() {
    let _serial = SERIAL.lock().await;
    let cluster = Cluster::start();
    let url = cluster.url();
    let pool = connect(&url).await;
    conveyor::migrate(&pool).await.unwrap();
    let client = Client::new(pool.clone());
    let logs = cluster.dir().join("logs");
    std::fs::create_dir_all(&logs).unwrap();

    let handle = client
        .enqueue(NewJob::new("chaos", json!({"ms": 60_000})))
        .await
        .unwrap();
    // Renewed every 5 s while the first process lives: kept until it is
    // killed, however loaded the machine; the second process beats every
    // 5 s too, and is marked dead only after 15 s of silence.
    let lease_ms = 15_000;
    let mut first = spawn_worker(&url, logs.join("first.log"), lease_ms);
    let lease = wait_for(Duration::from_secs(30), || async {
        let job = handle.job().await.ok()?;
        (job.state == JobState::Started).then_some(job.lease_expires_at?)
    })
    .await;
    let first_pid = i32::try_from(first.child.id()).unwrap();
    kill(&mut first);
    let killed_at = chrono::Utc::now();
    // Still started: nothing may take it before its lease runs out.
    assert_eq!(handle.state().await.unwrap(), JobState::Started);
    let mut second = spawn_worker(&url, logs.join("second.log"), lease_ms);
    let job = wait_for(Duration::from_secs(60), || async {
        let job = handle.job().await.ok()?;
        (job.attempt == 2 && job.state == JobState::Started).then_some(job)
    })
    .await;
    // The killed process stays in the registry, marked dead by the second's
    // maintenance; the second is listed first, alive.
    let workers = wait_for(Duration::from_secs(60), || async {
        let workers = client.workers().await.ok()?;
        let dead = workers.iter().find(|w| w.pid == first_pid)?;
        dead.dead_at.is_some().then_some(workers)
    })
    .await;
    assert!(workers[0].dead_at.is_none() && workers[0].pid != first_pid);
    kill(&mut second);
    assert!(
        job.started_at.unwrap() > lease,
        "retried at {:?}, before the lease expired at {lease}",
        job.started_at
    );
    assert_eq!(job.errors.len(), 1);
    assert_eq!(job.errors[0].error, "lease expired");
    report!(
        "killed mid-job at {killed_at}; lease expired at {lease}; attempt 2 started at {}",
        job.started_at.unwrap()
    );
}

#[tokio::test]
async fn a_periodic_job_every_second_on_four_processes_runs_once_per_slot() {
    let _serial = SERIAL.lock().await;
    let cluster = Cluster::start();
    let url = cluster.url();
    let pool = connect(&url).await;
    conveyor::migrate(&pool).await.unwrap();
    let logs = cluster.dir().join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    let mut procs: Vec<Proc> = (0..4)
        .map(|n| {
            spawn_worker_with(
                &url,
                logs.join(format!("p{n}.log")),
                3_000,
                &[("CHAOS_PERIODIC", "1")],
            )
        })
        .collect();
    // The window starts at the first slot a leader enqueued (process start-up
    // and the election are not part of it) and lasts 20 seconds.
    let started: chrono::DateTime<chrono::Utc> = wait_for(Duration::from_secs(30), || async {
        let first: Option<String> =
            sqlx::query_scalar("SELECT min(args->>'slot') FROM conveyor.jobs WHERE task = 'tick'")
                .fetch_one(&pool)
                .await
                .ok()?;
        first?.parse().ok()
    })
    .await;
    let stopped = started + chrono::Duration::seconds(20);
    // Until a slot past the window was enqueued (every slot of the window
    // was then, by the leader's loop) and every job of the window ran.
    wait_for(Duration::from_secs(60), || async {
        let (past, left): (bool, i64) = sqlx::query_as(
            "SELECT bool_or((args->>'slot')::timestamptz >= $2),
                    count(*) FILTER (WHERE state <> 'success' AND (args->>'slot')::timestamptz < $2)
             FROM conveyor.jobs WHERE task = 'tick' AND (args->>'slot')::timestamptz >= $1",
        )
        .bind(started)
        .bind(stopped)
        .fetch_one(&pool)
        .await
        .ok()?;
        (past && left == 0).then_some(())
    })
    .await;
    for proc in &mut procs {
        kill(proc);
    }
    let (jobs, slots, ran): (i64, i64, i64) = sqlx::query_as(
        "SELECT count(*), count(DISTINCT args->>'slot'), count(*) FILTER (WHERE state = 'success')
         FROM conveyor.jobs WHERE task = 'tick'
           AND (args->>'slot')::timestamptz >= $1 AND (args->>'slot')::timestamptz < $2",
    )
    .bind(started)
    .bind(stopped)
    .fetch_one(&pool)
    .await
    .unwrap();
    report!("periodic: {jobs} jobs for {slots} one-second slots in 20 s, {ran} ran, 4 processes");
    assert_eq!(jobs, slots, "no slot twice");
    assert!((19..=21).contains(&slots), "{slots} slots in 20 s");
    assert_eq!(ran, slots, "every slot's job ran");
}

async fn wait_for<T, F, Fut>(timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out after {timeout:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
