//! What the server did for a timed processing run, beside jobs/s: write
//! transactions and commits per job, statements per job and the costliest
//! ones (when the server loads `pg_stat_statements`), and the server
//! connections the database had, at most and busy on average.
//!
//! Write transactions are exact (the next transaction id, read before and
//! after). Commits come from `pg_stat_database`, which a backend updates at
//! most once a second while idle, so each reading first waits a little over
//! a second for the workers' backends to report.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{BenchDb, Result};

/// Long enough for every idle backend to have reported its counters.
const SETTLE: Duration = Duration::from_millis(1_100);

/// How often the connection sampler looks. (Every 50 ms, its reads of
/// `pg_stat_activity` took up to a tenth of the server's CPU with a fleet's
/// 300 connections, and so slowed the fleets it measured.)
const SAMPLE: Duration = Duration::from_millis(200);

/// Readings taken before a run, and the connection sampler.
pub struct Probe {
    next_xid: i64,
    commits: i64,
    rollbacks: i64,
    statements: bool,
    most: Arc<AtomicI64>,
    busy_sum: Arc<AtomicU64>,
    samples: Arc<AtomicU64>,
    /// Samples of busy backends by what they waited for and their statement.
    waits: Arc<Mutex<HashMap<String, u64>>>,
    done: Arc<AtomicBool>,
    sampler: tokio::task::JoinHandle<()>,
}

async fn readings(db: &BenchDb) -> Result<(i64, i64, i64)> {
    tokio::time::sleep(SETTLE).await;
    let row: (i64, i64, i64) = sqlx::query_as(
        "SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint, xact_commit, xact_rollback
         FROM pg_stat_database WHERE datname = current_database()",
    )
    .fetch_one(&db.pool)
    .await?;
    Ok(row)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Probe {
    /// Reads the counters, resets `pg_stat_statements` if this database has
    /// it, and starts sampling connections.
    pub async fn start(db: &BenchDb) -> Result<Probe> {
        let (next_xid, commits, rollbacks) = readings(db).await?;
        let statements = sqlx::query("SELECT pg_stat_statements_reset()")
            .execute(&db.pool)
            .await
            .is_ok();
        let most = Arc::new(AtomicI64::new(0));
        let busy_sum = Arc::new(AtomicU64::new(0));
        let samples = Arc::new(AtomicU64::new(0));
        let done = Arc::new(AtomicBool::new(false));
        let waits = Arc::new(Mutex::new(HashMap::new()));
        let sampler = {
            let pool = db.pool.clone();
            let (most, busy_sum, samples, done) = (
                most.clone(),
                busy_sum.clone(),
                samples.clone(),
                done.clone(),
            );
            let waits = waits.clone();
            tokio::spawn(async move {
                while !done.load(Ordering::Relaxed) {
                    // Client backends of this database, and what the busy
                    // ones (all but this very query) wait for, if anything.
                    let rows: Vec<(String, Option<String>)> = sqlx::query_as(
                        "SELECT state, CASE WHEN state <> 'idle' THEN
                                    coalesce(wait_event_type || ':' || wait_event, 'CPU') || ' | '
                                    || left(regexp_replace(left(query, 200), '\\s+', ' ', 'g'), 60) END
                         FROM pg_stat_activity
                         WHERE datname = current_database() AND backend_type = 'client backend'
                           AND pid <> pg_backend_pid()",
                    )
                    .fetch_all(&pool)
                    .await
                    .unwrap_or_default();
                    if !rows.is_empty() {
                        most.fetch_max(rows.len() as i64 + 1, Ordering::Relaxed);
                        let mut waits = lock(&waits);
                        for what in rows.into_iter().filter_map(|r| r.1) {
                            busy_sum.fetch_add(1, Ordering::Relaxed);
                            *waits.entry(what).or_default() += 1;
                        }
                        samples.fetch_add(1, Ordering::Relaxed);
                    }
                    tokio::time::sleep(SAMPLE).await;
                }
            })
        };
        Ok(Probe {
            next_xid,
            commits,
            rollbacks,
            statements,
            most,
            busy_sum,
            samples,
            waits,
            done,
            sampler,
        })
    }

    /// Stops sampling (call it when the last job finished).
    pub fn stop_sampling(&self) {
        self.done.store(true, Ordering::Relaxed);
    }

    /// What the run cost the server, per job (call it once the workers
    /// stopped).
    pub async fn finish(self, db: &BenchDb, jobs: usize) -> Result<Value> {
        self.done.store(true, Ordering::Relaxed);
        let _ = self.sampler.await;
        let (next_xid, commits, rollbacks) = readings(db).await?;
        let per = |n: f64| n / jobs.max(1) as f64;
        let samples = self.samples.load(Ordering::Relaxed).max(1) as f64;
        let mut out = json!({
            "write_xacts_per_job": per((next_xid - self.next_xid) as f64),
            "commits_per_job": per((commits - self.commits) as f64),
            "rollbacks_per_job": per((rollbacks - self.rollbacks) as f64),
            "most_server_connections": self.most.load(Ordering::Relaxed),
            "mean_busy_server_connections": self.busy_sum.load(Ordering::Relaxed) as f64 / samples,
        });
        let mut waits: Vec<(String, u64)> = lock(&self.waits).drain().collect();
        waits.sort_by_key(|w| std::cmp::Reverse(w.1));
        out["busy_backends_by_wait"] = waits
            .into_iter()
            .take(12)
            .map(|(what, n)| json!({"mean_backends": n as f64 / samples, "wait_and_query": what}))
            .collect::<Vec<_>>()
            .into();
        if self.statements {
            // Statements run inside functions count too (the server runs
            // with `pg_stat_statements.track = all`), for their planning:
            // a new connection plans each statement of a PL/pgSQL function
            // five times or more before it keeps a generic plan, and a slot
            // emptied makes every session plan its claim again.
            let rows: Vec<(i64, f64, String, i64, f64, bool)> = sqlx::query_as(
                "SELECT calls, total_exec_time, left(regexp_replace(query, '\\s+', ' ', 'g'), 120),
                        plans, total_plan_time, toplevel
                 FROM pg_stat_statements
                 WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
                 ORDER BY total_exec_time + total_plan_time DESC",
            )
            .fetch_all(&db.pool)
            .await?;
            let top_level = || rows.iter().filter(|r| r.5);
            let calls: i64 = top_level().map(|r| r.0).sum();
            out["statements_per_job"] = per(calls as f64).into();
            out["exec_ms_per_job"] = per(top_level().map(|r| r.1).sum::<f64>()).into();
            out["plan_ms_per_job"] = per(rows.iter().map(|r| r.4).sum::<f64>()).into();
            let top: Vec<Value> = rows
                .iter()
                .take(8)
                .map(|(calls, ms, query, plans, plan_ms, top_level)| {
                    json!({
                        "calls_per_1000_jobs": 1000.0 * per(*calls as f64),
                        "total_ms": ms,
                        "mean_ms": ms / (*calls).max(1) as f64,
                        "plans_per_1000_jobs": 1000.0 * per(*plans as f64),
                        "plan_ms": plan_ms,
                        "in_a_function": !top_level,
                        "query": query,
                    })
                })
                .collect();
            out["costliest_statements"] = top.into();
        }
        Ok(out)
    }
}
