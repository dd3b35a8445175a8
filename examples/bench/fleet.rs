//! fleet (issue 31): many small worker processes against one process with
//! the same total slots, on a backlog of no-op jobs (C's run: preloaded in a
//! paused queue, timed from the resume to the last `job_finished`).
//!
//! Each shape is `processes x slots`, directly or through PgBouncer in
//! transaction mode (beside the server, `POOL` server connections; every
//! statement through it, `LISTEN` on a direct session as docs/connections.md's
//! set-up has it). The fleet and its single process alternate run by run, so
//! their ratio is measured in the same stretch of time. The server is a
//! private cluster with the shared server's settings (stock, autovacuum off)
//! and room for the fleet's connections, and loads `pg_stat_statements`, so
//! each line also says where the server's time went ([`crate::probe`]).

use std::str::FromStr;

use serde_json::{Value, json};
use sqlx::postgres::PgConnectOptions;

use crate::bouncer::{Bouncer, Options as BouncerOptions};
use crate::cluster::{Cluster, Options};
use crate::scenarios::{Config, Count, Line, Spot, process_on};
use crate::support::{BenchDb, Result, median};

/// PgBouncer's server connections per database (`default_pool_size`).
const POOL: u32 = 20;

/// A fleet: `processes` worker processes of `slots` each.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Shape {
    pub processes: usize,
    pub slots: usize,
    pub pgbouncer: bool,
}

impl FromStr for Shape {
    type Err = String;

    /// `50x4` (direct) or `100x10/pgbouncer`.
    fn from_str(s: &str) -> std::result::Result<Shape, String> {
        let (size, pgbouncer) = match s.split_once('/') {
            Some((size, "pgbouncer")) => (size, true),
            Some((_, other)) => return Err(format!("unknown way in {other:?} (pgbouncer)")),
            None => (s, false),
        };
        let (p, n) = size
            .split_once('x')
            .ok_or_else(|| format!("{s:?} is not PROCESSESxSLOTS"))?;
        let number = |t: &str| t.parse::<usize>().ok().filter(|n| *n > 0);
        match (number(p), number(n)) {
            (Some(processes), Some(slots)) => Ok(Shape {
                processes,
                slots,
                pgbouncer,
            }),
            _ => Err(format!("{s:?}: processes and slots must be positive")),
        }
    }
}

impl Shape {
    /// One process with the same total slots.
    fn single(self) -> Shape {
        Shape {
            processes: 1,
            slots: self.processes * self.slots,
            ..self
        }
    }

    fn name(self) -> String {
        let way = if self.pgbouncer {
            "through PgBouncer"
        } else {
            "direct"
        };
        format!(
            "{} process(es) x {} slots, {way}",
            self.processes, self.slots
        )
    }
}

/// Runs every shape of `cfg.fleets` and its single process.
pub async fn fleets(cfg: &Config) -> Result<Vec<Line>> {
    let most: usize = cfg.fleets.iter().map(|s| s.processes).max().unwrap_or(1);
    let options = Options {
        listen: vec!["127.0.0.1".into()],
        trust: Vec::new(),
        settings: vec![
            "autovacuum=off".into(),
            // Each direct worker process holds up to 5 (its bookkeeping
            // pool and its LISTEN session).
            format!("max_connections={}", 100 + 6 * most),
            "shared_preload_libraries=pg_stat_statements".into(),
            // Statements inside functions too, and planning (see probe).
            "pg_stat_statements.track=all".into(),
            "pg_stat_statements.track_planning=on".into(),
        ],
    };
    let cluster = tokio::task::spawn_blocking(move || Cluster::start_with(options)).await?;
    let port = PgConnectOptions::from_str(&cluster.url())?.get_port();
    let bouncer = if cfg.fleets.iter().any(|s| s.pgbouncer) {
        let options = BouncerOptions {
            listen: Vec::new(),
            server: ("127.0.0.1".into(), port),
            pool_size: POOL,
        };
        Some(tokio::task::spawn_blocking(move || Bouncer::start(&options)).await?)
    } else {
        None
    };
    let db = BenchDb::create(&cluster.url(), 16, "fleet").await?;
    sqlx::query("CREATE EXTENSION pg_stat_statements")
        .execute(&db.pool)
        .await?;
    let result = run(&db, bouncer.as_ref().map(Bouncer::port), cfg).await;
    db.drop_db().await?;
    drop(bouncer);
    drop(cluster);
    result
}

async fn run(db: &BenchDb, bouncer_port: Option<u16>, cfg: &Config) -> Result<Vec<Line>> {
    let db_name = PgConnectOptions::from_str(&db.url)?
        .get_database()
        .unwrap_or("postgres")
        .to_string();
    let spots = |shape: Shape| -> Result<Vec<Spot>> {
        let spot = match (shape.pgbouncer, bouncer_port) {
            (false, _) => Spot {
                netns: None,
                url: db.url.clone(),
                pooler: None,
            },
            // LISTEN on a direct session; every other statement through PgBouncer.
            (true, Some(port)) => Spot {
                netns: None,
                url: format!("postgres://postgres@127.0.0.1:{port}/{db_name}"),
                pooler: Some(db.url.clone()),
            },
            (true, None) => return Err("no PgBouncer".into()),
        };
        Ok(vec![spot; shape.processes])
    };
    let mut lines = Vec::new();
    for &fleet in &cfg.fleets {
        let pair = [fleet.single(), fleet];
        let mut rates = [Vec::new(), Vec::new()];
        let mut succeeded = [Vec::new(), Vec::new()];
        let mut details: [Vec<Value>; 2] = [Vec::new(), Vec::new()];
        let mut ratios = Vec::new();
        for _ in 0..cfg.runs {
            for (i, shape) in pair.iter().enumerate() {
                let run = process_on(
                    db,
                    cfg.jobs,
                    &spots(*shape)?,
                    shape.slots,
                    None,
                    Count::Rollups,
                )
                .await?;
                rates[i].push(run.rate);
                succeeded[i].push(run.succeeded);
                details[i].push(json!({
                    "jobs_per_sec": run.rate,
                    "cpu": run.cpu,
                    "server": run.server,
                    "probe": run.probe,
                }));
            }
            let n = rates[0].len() - 1;
            ratios.push(100.0 * rates[1][n] / rates[0][n]);
        }
        for (i, shape) in pair.into_iter().enumerate() {
            let pick = |f: &dyn Fn(&Value) -> Option<f64>| {
                median(&details[i].iter().filter_map(f).collect::<Vec<_>>())
            };
            let mut extra = json!({
                "worker_processes": shape.processes,
                "commits_per_job": pick(&|d| d["probe"]["commits_per_job"].as_f64()),
                "rollbacks_per_job": pick(&|d| d["probe"]["rollbacks_per_job"].as_f64()),
                "write_xacts_per_job": pick(&|d| d["probe"]["write_xacts_per_job"].as_f64()),
                "statements_per_job": pick(&|d| d["probe"]["statements_per_job"].as_f64()),
                "plan_ms_per_job": pick(&|d| d["probe"]["plan_ms_per_job"].as_f64()),
                "most_server_connections":
                    pick(&|d| d["probe"]["most_server_connections"].as_f64()),
                "mean_busy_server_connections":
                    pick(&|d| d["probe"]["mean_busy_server_connections"].as_f64()),
                "server_cpu_pct_of_core": pick(&|d| d["cpu"]["server_cpu_pct_of_core"].as_f64()),
                "workers_cpu_pct_of_core":
                    pick(&|d| d["cpu"]["workers_cpu_pct_of_core"].as_f64()),
                "per_run": details[i],
            });
            if i == 1 {
                extra["percent_of_one_process"] = median(&ratios).into();
                extra["percent_per_run"] = ratios.clone().into();
            }
            let variant = format!("{}, {} jobs", shape.name(), cfg.jobs);
            let offered = vec![cfg.jobs as u64; rates[i].len()];
            lines.push(
                Line::new("fleet", variant, "jobs/s", rates[i].clone())
                    .with(extra)
                    .with_work(offered, succeeded[i].clone()),
            );
        }
    }
    Ok(lines)
}

#[cfg(test)]
mod tests {
    use super::Shape;

    #[test]
    fn shapes_parse() {
        let direct = Shape {
            processes: 50,
            slots: 4,
            pgbouncer: false,
        };
        assert_eq!("50x4".parse::<Shape>(), Ok(direct));
        let pooled: Shape = "100x10/pgbouncer".parse().unwrap();
        assert!(pooled.pgbouncer && pooled.single().slots == 1000);
        for bad in ["", "50", "0x4", "4x0", "ax4", "4x4/pooler"] {
            assert!(bad.parse::<Shape>().is_err(), "{bad}");
        }
    }
}
