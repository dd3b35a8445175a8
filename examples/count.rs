//! Counts the work each job costs instead of timing it: CPU time of this
//! process and of every PostgreSQL process, and WAL bytes written, per job.
//!
//! ```sh
//! cargo run --release --example count -- A 20000        # enqueue, 1 job per call, 1 client
//! cargo run --release --example count -- C 100000 100    # one worker at concurrency 100
//! ```
//!
//! On a shared two-core machine the throughput of two runs of one build can
//! differ by more than 5 %; these counts differ far less, so they compare two
//! builds where timing cannot (docs/benchmarks.md, "Counting"). The file uses
//! only the API every build since the first has, so it can be copied into an
//! older checkout and run there. It needs PostgreSQL on this machine (it reads
//! its processes' CPU time from `/proc`) and `DATABASE_URL` (default
//! `postgres://postgres@127.0.0.1:5432/postgres`); it creates a database of
//! its own and drops it.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use conveyor::{Client, NewJob, Worker};
use serde_json::{Value, json};
use sqlx::postgres::PgPoolOptions;
use sqlx::{Connection, PgConnection};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// CPU seconds and WAL position at one moment.
struct Snapshot {
    at: Instant,
    own_cpu: f64,
    server_cpu: f64,
    wal: i64,
    /// Transactions committed in this database (PostgreSQL's statistics,
    /// which a backend flushes at most once a second: see [`settle`]).
    commits: i64,
}

/// Waits until every backend has flushed its statistics (at least once a
/// second while busy, after 10 s when idle), so `xact_commit` is complete.
/// Marks the start and the end of the measured part. Under `valgrind
/// --tool=callgrind` it writes the instructions counted since the last dump
/// to a numbered file and starts counting afresh (every thread); outside
/// valgrind that sequence is a no-op. With `COUNT_MARKS` set it also prints
/// `count: mark` to stderr and waits for a line on stdin, so that a script
/// can dump a server run under callgrind at the same points
/// (scripts/count-instructions.sh).
fn mark() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: valgrind's client-request preamble: the four rotations of rdi
    // add up to 128 bits and `xchg rbx, rbx` swaps a register with itself,
    // so natively nothing changes; valgrind reads the request from [rax].
    unsafe {
        // VG_USERREQ__DUMP_STATS = VG_USERREQ_TOOL_BASE('C', 'T').
        let request: [u64; 6] = [0x4354_0000, 0, 0, 0, 0, 0];
        std::arch::asm!(
            "rol rdi, 3", "rol rdi, 13", "rol rdi, 61", "rol rdi, 51",
            "xchg rbx, rbx",
            in("rax") request.as_ptr(),
            inout("rdx") 0u64 => _,
            inout("rdi") 0u64 => _,
        );
    }
    if std::env::var_os("COUNT_MARKS").is_some() {
        eprintln!("count: mark");
        let mut line = String::new();
        let _ = std::io::stdin().read_line(&mut line);
    }
}

async fn settle() {
    tokio::time::sleep(Duration::from_secs(11)).await;
}

/// User + system CPU seconds of `/proc/<pid>/stat`, with reaped children's
/// when `children` (the postmaster's, for backends that have exited).
fn cpu_of(pid: &str, children: bool) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    // Fields after the command name (which may hold spaces) start after ')'.
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return 0.0;
    };
    let fields: Vec<u64> = rest
        .split_whitespace()
        .skip(11)
        .take(4)
        .map(|f| f.parse().unwrap_or(0))
        .collect();
    let ticks = if children {
        fields.iter().sum::<u64>()
    } else {
        fields.iter().take(2).sum()
    };
    ticks as f64 / 100.0 // USER_HZ is 100 on Linux
}

/// CPU seconds of every process named `postgres`.
fn server_cpu() -> f64 {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0.0;
    };
    dir.flatten()
        .filter_map(|entry| entry.file_name().into_string().ok())
        .filter(|pid| pid.bytes().all(|b| b.is_ascii_digit()))
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|comm| comm.trim() == "postgres")
        })
        .map(|pid| cpu_of(&pid, true))
        .sum()
}

/// Reads the counters through `conn`, the probe. Its own backend is left
/// out of the server's CPU: in C it counts finished jobs while the last
/// outcomes are written, a scan of the whole history each time (tens of
/// milliseconds each at 200,000 jobs), which is the measurement's work,
/// not the queue's.
async fn snapshot(conn: &mut PgConnection) -> Result<Snapshot> {
    let probe_pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut *conn)
        .await?;
    let wal: i64 = sqlx::query_scalar("SELECT (pg_current_wal_lsn() - '0/0')::bigint")
        .fetch_one(&mut *conn)
        .await?;
    let commits: i64 = sqlx::query_scalar(
        "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()",
    )
    .fetch_one(&mut *conn)
    .await?;
    Ok(Snapshot {
        at: Instant::now(),
        own_cpu: cpu_of("self", false),
        server_cpu: server_cpu() - cpu_of(&probe_pid.to_string(), false),
        wal,
        commits,
    })
}

/// Prints one JSON line; `commits_after` is `xact_commit` read once the
/// statistics settled (the probe's own transactions are left out: two per
/// reading).
fn report(what: &str, jobs: usize, before: &Snapshot, after: &Snapshot, commits_after: i64) {
    let per = |x: f64| x / jobs as f64;
    let secs = after.at.duration_since(before.at).as_secs_f64();
    let line = json!({
        "scenario": what,
        "jobs": jobs,
        "jobs_per_sec": (jobs as f64 / secs).round(),
        "client_cpu_us_per_job": (per(after.own_cpu - before.own_cpu) * 1e6 * 10.0).round() / 10.0,
        "server_cpu_us_per_job": (per(after.server_cpu - before.server_cpu) * 1e6 * 10.0).round() / 10.0,
        "wal_bytes_per_job": per((after.wal - before.wal) as f64).round(),
        "commits_per_job": (per((commits_after - before.commits - 2) as f64) * 1000.0).round() / 1000.0,
    });
    println!("{line}");
}

#[tokio::main]
async fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let scenario = args.first().map(String::as_str).unwrap_or("A");
    let jobs: usize = args.get(1).map_or(Ok(20_000), |n| n.parse())?;
    let concurrency: usize = args.get(2).map_or(Ok(100), |n| n.parse())?;
    let url = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
    let name = format!("conveyor_count_{}", std::process::id());
    let mut admin = PgConnection::connect(&url).await?;
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&mut admin)
        .await?;
    let db_url = match url.rsplit_once('/') {
        Some((base, _)) => format!("{base}/{name}"),
        None => url.clone(),
    };
    let outcome = run(&db_url, scenario, jobs, concurrency).await;
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "DROP DATABASE {name} WITH (FORCE)"
    )))
    .execute(&mut admin)
    .await?;
    outcome
}

/// A pool, a `Client` on it and a probe connection.
async fn connect(url: &str) -> Result<(sqlx::PgPool, Client, PgConnection)> {
    let pool = PgPoolOptions::new()
        .max_connections(10)
        .test_before_acquire(false)
        .connect(url)
        .await?;
    let client = Client::new(pool.clone());
    Ok((pool, client, PgConnection::connect(url).await?))
}

async fn run(url: &str, scenario: &str, jobs: usize, concurrency: usize) -> Result<()> {
    let (pool, client, mut probe) = connect(url).await?;
    conveyor::migrate(&pool).await?;
    if scenario == "C" {
        for chunk in (0..jobs).collect::<Vec<_>>().chunks(5_000) {
            let batch = chunk.iter().map(|_| NewJob::new("noop", json!({})));
            client.enqueue_many(batch.collect()).await?;
        }
        sqlx::query("VACUUM ANALYZE conveyor.job_rows")
            .execute(&mut probe)
            .await?;
    }
    // The measured part runs on connections of its own, so that the server's
    // processes that did the set-up are not counted with it.
    pool.close().await;
    drop((client, probe));
    mark();
    let (_pool, client, mut probe) = connect(url).await?;
    match scenario {
        "A" => {
            // Warm up the statement caches, then start from a checkpoint so
            // both builds pay the same full-page writes.
            for _ in 0..100 {
                client.enqueue(NewJob::new("noop", json!({}))).await?;
            }
            sqlx::query("CHECKPOINT").execute(&mut probe).await?;
            settle().await;
            let before = snapshot(&mut probe).await?;
            for _ in 0..jobs {
                client.enqueue(NewJob::new("noop", json!({}))).await?;
            }
            mark();
            let after = snapshot(&mut probe).await?;
            settle().await;
            let commits = snapshot(&mut probe).await?.commits;
            report(
                "A: enqueue, 1 job per call, 1 client",
                jobs,
                &before,
                &after,
                commits,
            );
        }
        "C" => {
            sqlx::query("CHECKPOINT").execute(&mut probe).await?;
            settle().await;
            let ran = Arc::new(AtomicUsize::new(0));
            let counter = ran.clone();
            let before = snapshot(&mut probe).await?;
            let worker = Worker::builder(&client)
                .concurrency(concurrency)
                .register_fn("noop", move |_ctx, _args| {
                    counter.fetch_add(1, Ordering::Relaxed);
                    async { Ok(Value::Null) }
                })
                .start()?;
            let deadline = Instant::now() + Duration::from_secs(600);
            loop {
                tokio::time::sleep(Duration::from_millis(20)).await;
                if ran.load(Ordering::Relaxed) < jobs {
                    continue;
                }
                let done: i64 = sqlx::query_scalar(
                    "SELECT count(*) FROM conveyor.jobs WHERE state = 'success'",
                )
                .fetch_one(&mut probe)
                .await?;
                if done as usize >= jobs || Instant::now() > deadline {
                    break;
                }
            }
            mark();
            let after = snapshot(&mut probe).await?;
            worker.shutdown(Duration::from_secs(5)).await?;
            settle().await;
            let commits = snapshot(&mut probe).await?.commits;
            let what = format!("C: 1 worker, concurrency {concurrency}");
            report(&what, jobs, &before, &after, commits);
        }
        other => return Err(format!("unknown scenario {other}: A or C").into()),
    }
    Ok(())
}
