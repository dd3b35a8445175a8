//! N (issue 18): scenario C with its worker processes on 1, 2 and 3
//! "hosts", network namespaces of `scripts/hosts.sh` that reach the server
//! over a link of their own, and the same processes beside the server
//! (loopback) for comparison. The server is a private cluster listening on
//! the hosts' bridge (the shared one listens on 127.0.0.1 only and is not
//! reconfigured), with the shared server's settings: stock, autovacuum off.
//!
//! Besides jobs/s, each line gives the server's and the workers' CPU and
//! how busy the machine was: every "host" shares this machine's cores, so
//! these say where the ceiling comes from.

use serde_json::{Value, json};

use crate::cluster::{Cluster, Options};
use crate::net::{self, Hosts};
use crate::scenarios::{Config, Line, Spot, process_on};
use crate::support::{BenchDb, Result, median};

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
    let db = BenchDb::create(&cluster.url(), 16, "n").await?;
    let result = run(&db, &hosts, cfg).await;
    db.drop_db().await?;
    drop(cluster);
    result
}

async fn run(db: &BenchDb, hosts: &Hosts, cfg: &Config) -> Result<Vec<Line>> {
    let per_host = cfg.host_processes;
    let remote_url = db.url.replacen("127.0.0.1", &hosts.server, 1);
    let here = Spot {
        netns: None,
        url: db.url.clone(),
    };
    let mut variants = vec![("loopback".to_string(), vec![here; per_host])];
    for &n in &cfg.hosts {
        let spots = (0..n)
            .flat_map(|h| {
                let spot = Spot {
                    netns: Some(hosts.namespaces[h].clone()),
                    url: remote_url.clone(),
                };
                vec![spot; per_host]
            })
            .collect();
        variants.push((format!("{n} host(s)"), spots));
    }
    // Round by round, every variant once, so the machine's noise falls on
    // all of them alike.
    let mut runs: Vec<Vec<f64>> = vec![Vec::new(); variants.len()];
    let mut details: Vec<Vec<Value>> = vec![Vec::new(); variants.len()];
    for _ in 0..cfg.runs {
        for (i, (_, spots)) in variants.iter().enumerate() {
            let run = process_on(db, cfg.jobs, spots, cfg.host_concurrency, None).await?;
            runs[i].push(run.rate);
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
            "{name} x {per_host} process(es) x concurrency {}, direct, {} jobs",
            cfg.host_concurrency, cfg.jobs
        );
        lines.push(Line::new("N", variant, "jobs/s", runs[i].clone()).with(extra));
    }
    Ok(lines)
}
