//! N (issue 18): scenario C with its worker processes on 1, 2 and 3
//! "hosts", network namespaces of `scripts/hosts.sh` that reach the server
//! over a link of their own, directly and through PgBouncer in transaction
//! mode, and the same processes beside the server (loopback) for
//! comparison; then a fleet of [`FLEET`] worker processes through PgBouncer,
//! counting the server connections they hold. The server is a private
//! cluster listening on the hosts' bridge (the shared one listens on
//! 127.0.0.1 only and is not reconfigured), with the shared server's
//! settings: stock, autovacuum off.
//!
//! Besides jobs/s, each line gives the server's and the workers' CPU and
//! how busy the machine was: every "host" shares this machine's cores, so
//! these say where the ceiling comes from.

use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use sqlx::postgres::PgConnectOptions;

use crate::bouncer::{Bouncer, Options as BouncerOptions};
use crate::cluster::{Cluster, Options};
use crate::net::{self, Hosts};
use crate::scenarios::{Config, Count, Line, Spot, process_on};
use crate::support::{BenchDb, Result, median};

/// Worker processes of the fleet run (full mode).
pub const FLEET: usize = 100;

/// PgBouncer's server connections per database (`default_pool_size`).
const POOL: u32 = 20;

/// Concurrency of each fleet process.
const FLEET_CONCURRENCY: usize = 10;

/// Runs N; nothing (with a note) where namespaces cannot be made.
pub async fn many_hosts(cfg: &Config) -> Result<Vec<Line>> {
    if let Some(why) = net::unavailable() {
        eprintln!("N skipped: {why}");
        return Ok(Vec::new());
    }
    let most = cfg.hosts.iter().copied().max().unwrap_or(1);
    let hosts = Hosts::up(most, &format!("b{}", std::process::id()))?;
    let options = Options {
        listen: vec!["127.0.0.1".into(), hosts.server.clone()],
        trust: vec![hosts.network.clone()],
        settings: vec!["autovacuum=off".into()],
    };
    let cluster = tokio::task::spawn_blocking(move || Cluster::start_with(options)).await?;
    // PgBouncer beside the server, reaching it at the bridge address: its
    // server connections are then the only ones from that address.
    let port = PgConnectOptions::from_str(&cluster.url())?.get_port();
    let bouncer_options = BouncerOptions {
        listen: vec![hosts.server.clone()],
        server: (hosts.server.clone(), port),
        pool_size: POOL,
    };
    let bouncer = tokio::task::spawn_blocking(move || Bouncer::start(&bouncer_options)).await?;
    let db = BenchDb::create(&cluster.url(), 16, "n").await?;
    let result = run(&db, &hosts, bouncer.port(), cfg).await;
    db.drop_db().await?;
    drop(bouncer);
    drop(cluster);
    result
}

async fn run(db: &BenchDb, hosts: &Hosts, bouncer_port: u16, cfg: &Config) -> Result<Vec<Line>> {
    let per_host = cfg.host_processes;
    let remote_url = db.url.replacen("127.0.0.1", &hosts.server, 1);
    let db_name = PgConnectOptions::from_str(&db.url)?
        .get_database()
        .unwrap_or("postgres")
        .to_string();
    let pooled_url = format!(
        "postgres://postgres@{}:{bouncer_port}/{db_name}",
        hosts.server
    );
    let on_hosts = |n: usize, url: &str, pooler: Option<&str>| -> Vec<Spot> {
        (0..n)
            .flat_map(|h| {
                let spot = Spot {
                    netns: Some(hosts.namespaces[h].clone()),
                    url: url.to_string(),
                    pooler: pooler.map(str::to_string),
                };
                vec![spot; per_host]
            })
            .collect()
    };
    let here = Spot {
        netns: None,
        url: db.url.clone(),
        pooler: None,
    };
    let mut variants = vec![("loopback, direct".to_string(), vec![here; per_host])];
    for &n in &cfg.hosts {
        variants.push((
            format!("{n} host(s), direct"),
            on_hosts(n, &remote_url, None),
        ));
        // LISTEN on a direct session; every other statement through PgBouncer.
        let spots = on_hosts(n, &pooled_url, Some(&remote_url));
        variants.push((format!("{n} host(s), through PgBouncer"), spots));
    }
    // Round by round, every variant once, so the machine's noise falls on
    // all of them alike.
    let mut runs: Vec<Vec<f64>> = vec![Vec::new(); variants.len()];
    let mut succeeded: Vec<Vec<u64>> = vec![Vec::new(); variants.len()];
    let mut details: Vec<Vec<Value>> = vec![Vec::new(); variants.len()];
    for _ in 0..cfg.runs {
        for (i, (_, spots)) in variants.iter().enumerate() {
            let run = process_on(
                db,
                cfg.jobs,
                spots,
                cfg.host_concurrency,
                None,
                Count::Announced,
            )
            .await?;
            runs[i].push(run.rate);
            succeeded[i].push(run.succeeded);
            details[i]
                .push(json!({"jobs_per_sec": run.rate, "cpu": run.cpu, "server": run.server}));
        }
    }
    let mut lines = Vec::new();
    for (i, (name, spots)) in variants.into_iter().enumerate() {
        let pick = |f: &dyn Fn(&Value) -> Option<f64>| {
            median(&details[i].iter().filter_map(f).collect::<Vec<_>>())
        };
        let extra = json!({
            "worker_processes": spots.len(),
            "server_cpu_pct_of_core": pick(&|d| d["cpu"]["server_cpu_pct_of_core"].as_f64()),
            "workers_cpu_pct_of_core": pick(&|d| d["cpu"]["workers_cpu_pct_of_core"].as_f64()),
            "machine_busy_pct": pick(&|d| d["cpu"]["machine_busy_pct"].as_f64()),
            "wal_bytes_per_job": pick(&|d| d["server"]["wal_bytes_per_job"].as_f64()),
            "per_run": details[i],
        });
        let variant = format!(
            "{name} x {per_host} process(es) x concurrency {}, {} jobs",
            cfg.host_concurrency, cfg.jobs
        );
        let offered = vec![cfg.jobs as u64; runs[i].len()];
        lines.push(
            Line::new("N", variant, "jobs/s", runs[i].clone())
                .with(extra)
                .with_work(offered, succeeded[i].clone()),
        );
    }
    lines.push(fleet(db, hosts, &pooled_url, cfg).await?);
    Ok(lines)
}

/// The fleet: `cfg.fleet_processes` worker processes spread over the hosts,
/// every connection through PgBouncer and none direct (idle workers poll),
/// while a sampler counts the server connections PgBouncer holds (the
/// backends connected from the bridge address) every 20 ms.
async fn fleet(db: &BenchDb, hosts: &Hosts, pooled_url: &str, cfg: &Config) -> Result<Line> {
    let n = cfg.fleet_processes;
    let spots: Vec<Spot> = (0..n)
        .map(|p| Spot {
            netns: Some(hosts.namespaces[p % hosts.namespaces.len()].clone()),
            url: pooled_url.to_string(),
            pooler: Some("poll".into()),
        })
        .collect();
    let most = Arc::new(AtomicI64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (pool, most, done) = (db.pool.clone(), most.clone(), done.clone());
        let from = hosts.server.clone();
        tokio::spawn(async move {
            while !done.load(Ordering::Relaxed) {
                let held: Option<i64> = sqlx::query_scalar(
                    "SELECT count(*) FROM pg_stat_activity
                     WHERE datname = current_database() AND client_addr = $1::inet",
                )
                .bind(&from)
                .fetch_one(&pool)
                .await
                .ok();
                most.fetch_max(held.unwrap_or(0), Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    let run = process_on(
        db,
        cfg.jobs,
        &spots,
        FLEET_CONCURRENCY,
        None,
        Count::Announced,
    )
    .await;
    done.store(true, Ordering::Relaxed);
    sampler.await?;
    let run = run?;
    let held = most.load(Ordering::Relaxed);
    let variant = format!(
        "fleet: {n} worker processes on {} host(s) x concurrency {FLEET_CONCURRENCY}, all through \
         PgBouncer (pool of {POOL}, polling), {} jobs",
        hosts.namespaces.len(),
        cfg.jobs
    );
    let extra = json!({
        "worker_processes": n,
        "pool_server_connections": POOL,
        "most_server_connections_seen": held,
        "within_pool": held <= i64::from(POOL),
        "cpu": run.cpu,
    });
    Ok(Line::new("N", variant, "jobs/s", vec![run.rate])
        .with(extra)
        .with_work(vec![cfg.jobs as u64], vec![run.succeeded]))
}
