//! Conveyor's benchmark: scenarios A–H, M, N, S, dump, fleet, sqlbulk and view of
//! docs/benchmarks.md against a database it creates and drops (N and fleet:
//! on a private cluster they start). Prints one JSON line per result, then a table. Figures only:
//! nothing here asserts a timing.
//!
//! ```sh
//! cargo run --release --example bench                      # everything (about an hour)
//! cargo run --release --example bench -- --only A,B,C,F   # some scenarios
//! cargo run --release --example bench -- --only sqlbulk    # many jobs in one SQL statement
//! cargo run --release --example bench -- --quick           # seconds; what CI runs
//! cargo run --release --example bench -- --only N --hosts 1,2,3   # C on many hosts (root)
//! cargo run --release --example bench -- --only fleet --fleet 50x4,100x10/pgbouncer
//! cargo run --release --example bench -- --only view --view-jobs 10000000,1000000,1000
//! DATABASE_URL=postgres://... cargo run --release --example bench
//! ```
//!
//! Scenario H (the soak) runs only when named with `--only H` or `--soak`,
//! as it takes 30 minutes.

mod baseline;
#[allow(dead_code)] // the pgbouncer tests' launcher; N starts its own
#[path = "../../tests/integration/common/bouncer.rs"]
mod bouncer;
#[allow(dead_code)] // the chaos test's private cluster; N uses part of it
#[path = "../../tests/chaos/cluster.rs"]
mod cluster;
mod cpu;
mod fleet;
mod history;
mod hosts;
#[cfg(feature = "metrics")]
mod metrics;
#[allow(dead_code)] // the chaos test's hosts; N does not cut links
#[path = "../../tests/chaos/hosts.rs"]
mod net;
mod plot;
mod probe;
mod scenarios;
mod snapshot;
mod sqlbulk;
mod support;
mod view;

use clap::Parser;
use scenarios::{Config, Line};
use support::{BenchDb, CHILD_ENV, Result};

#[derive(Parser, Debug)]
#[command(about = "Conveyor benchmark")]
struct Args {
    /// PostgreSQL URL of a database to connect to first (the benchmark
    /// creates and drops its own database beside it).
    #[arg(
        long,
        env = "DATABASE_URL",
        default_value = "postgres://postgres@127.0.0.1:5432/postgres"
    )]
    database_url: String,
    /// Small sizes: seconds in all. For CI.
    #[arg(long)]
    quick: bool,
    /// Scenarios to run, comma-separated (A,B,C,D,E,F,G,H,M,N,S,dump,fleet,idle,sqlbulk,view).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Also run H (the 30-minute soak) with the rest.
    #[arg(long)]
    soak: bool,
    /// Runs per measurement (medians are reported).
    #[arg(long)]
    runs: Option<usize>,
    /// B, C, F and fleet: jobs per run (default 100,000).
    #[arg(long)]
    jobs: Option<usize>,
    /// G and M: finished-job counts to measure at, comma-separated (default
    /// 0,1000000,10000000).
    #[arg(long, value_delimiter = ',')]
    history: Vec<u64>,
    /// view: finished, waiting and running jobs, comma-separated (default
    /// 10000000,1000000,1000).
    #[arg(long, value_delimiter = ',')]
    view_jobs: Vec<u64>,
    /// N: host counts to measure, comma-separated (default 1,2,3).
    #[arg(long, value_delimiter = ',')]
    hosts: Vec<usize>,
    /// N: worker processes per host (default 1).
    #[arg(long)]
    host_processes: Option<usize>,
    /// fleet: fleets to run, each against one process of the same slots,
    /// comma-separated PROCESSESxSLOTS[/pgbouncer] (default 50x4,100x10/pgbouncer).
    #[arg(long, value_delimiter = ',')]
    fleet: Vec<fleet::Shape>,
    /// N: concurrency of each worker process (default 100).
    #[arg(long)]
    host_concurrency: Option<usize>,
    /// H: duration in seconds.
    #[arg(long)]
    soak_secs: Option<u64>,
    /// S: how long the snapshot is held, in seconds (default 150; the
    /// target of docs/benchmarks.md is about 600).
    #[arg(long)]
    hold_secs: Option<u64>,
    /// S: offered rate, jobs/s (default 1,500).
    #[arg(long)]
    offered_rate: Option<u64>,
    /// S: what the holding session reads first.
    #[arg(long, value_enum, default_value = "bare")]
    holder: snapshot::Holder,
    /// S: give the queue this global concurrency limit (claims then lock
    /// the queue's row and count its running jobs; default none).
    #[arg(long)]
    queue_limit: Option<u32>,
    /// sqlbulk: jobs per statement for `conveyor.enqueue_many` and its
    /// statement trigger, comma-separated (default 10000,50000,100000,200000).
    #[arg(long, value_delimiter = ',')]
    sqlbulk_sizes: Vec<usize>,
    /// sqlbulk: jobs per statement for `conveyor.enqueue()` per row and its
    /// row trigger (default 5000,10000,20000).
    #[arg(long, value_delimiter = ',')]
    sqlbulk_row_sizes: Vec<usize>,
    /// Instead of running: plot captured S runs, LABEL=PATH of a saved
    /// output (repeat for each run), into `--plot-out`.
    #[arg(long)]
    plot_s: Vec<String>,
    /// The SVG file `--plot-s` writes.
    #[arg(long, default_value = "docs/held-snapshot.svg")]
    plot_out: String,
}

fn main() -> Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    if let Ok(concurrency) = std::env::var(CHILD_ENV) {
        return runtime.block_on(support::worker_child_main(concurrency.parse()?));
    }
    let args = Args::parse();
    if !args.plot_s.is_empty() {
        return plot::held_snapshot(&args.plot_s, &args.plot_out);
    }
    runtime.block_on(run(args)).map(drop)
}

/// Runs the scenarios `args` asks for, prints the table, and returns its
/// lines.
async fn run(args: Args) -> Result<Vec<Line>> {
    let mut cfg = if args.quick {
        Config::quick()
    } else {
        Config::full()
    };
    if let Some(runs) = args.runs {
        cfg.runs = runs.max(1);
    }
    if let Some(jobs) = args.jobs {
        cfg.jobs = jobs.max(1);
    }
    if !args.history.is_empty() {
        cfg.history = args.history.clone();
    }
    if let [finished, waiting, running] = args.view_jobs[..] {
        cfg.view = (finished, waiting, running as usize);
    } else if !args.view_jobs.is_empty() {
        return Err("--view-jobs takes three numbers: finished,waiting,running".into());
    }
    if !args.hosts.is_empty() {
        cfg.hosts = args.hosts.clone();
    }
    if let Some(n) = args.host_processes {
        cfg.host_processes = n.max(1);
    }
    if !args.fleet.is_empty() {
        cfg.fleets = args.fleet.clone();
    }
    if let Some(n) = args.host_concurrency {
        cfg.host_concurrency = n.max(1);
    }
    if let Some(secs) = args.soak_secs {
        cfg.soak_secs = secs;
    }
    if let Some(secs) = args.hold_secs {
        cfg.snapshot_hold_secs = secs;
    }
    if let Some(rate) = args.offered_rate {
        cfg.snapshot_rate = rate;
    }
    if !args.sqlbulk_sizes.is_empty() {
        cfg.sqlbulk_sizes = args.sqlbulk_sizes.clone();
    }
    if !args.sqlbulk_row_sizes.is_empty() {
        cfg.sqlbulk_row_sizes = args.sqlbulk_row_sizes.clone();
    }
    cfg.snapshot_holder = args.holder;
    cfg.snapshot_queue_limit = args.queue_limit;
    let wanted = |name: &str| {
        if args.only.is_empty() {
            name != "H" || args.soak || args.quick
        } else {
            args.only.iter().any(|o| o.eq_ignore_ascii_case(name))
        }
    };
    let lines = run_all(&args.database_url, &cfg, &wanted).await?;
    print_table(&lines);
    Ok(lines)
}

/// The scenarios in the order they run. Each gets a database of its own,
/// created before it and dropped after it, so none inherits another's
/// bloat (E leaves a million-row backlog behind) or settings.
const SCENARIOS: [&str; 16] = [
    "A", "B", "sqlbulk", "C", "F", "N", "fleet", "D", "E", "idle", "S", "dump", "G", "view", "M",
    "H",
];

async fn run_all(url: &str, cfg: &Config, wanted: &dyn Fn(&str) -> bool) -> Result<Vec<Line>> {
    let mut lines: Vec<Line> = Vec::new();
    for name in SCENARIOS.into_iter().filter(|n| wanted(n)) {
        if name == "N" || name == "fleet" {
            // On a private cluster of its own (N's reachable from the hosts).
            let new = if name == "N" {
                hosts::many_hosts(cfg).await?
            } else {
                fleet::fleets(cfg).await?
            };
            for line in new {
                println!("{}", line.json());
                lines.push(line);
            }
            continue;
        }
        let db = BenchDb::create(url, 16, name).await?;
        let result = run_scenario(name, &db, cfg).await;
        db.drop_db().await?;
        let mut new = result?;
        if name == "F" {
            // Best C against each F line (the last: the replay as it was,
            // at the largest batch; issue 16's ratio).
            let best_c = lines
                .iter()
                .filter(|l| l.scenario == "C")
                .map(|l| l.median)
                .fold(f64::NAN, f64::max);
            for line in new.iter_mut() {
                if best_c.is_finite()
                    && let Some(extra) = line.extra.as_object_mut()
                {
                    extra.insert(
                        "best_c_percent_of_f".into(),
                        (100.0 * best_c / line.median).into(),
                    );
                }
            }
        }
        for line in new {
            println!("{}", line.json());
            lines.push(line);
        }
    }
    Ok(lines)
}

async fn run_scenario(name: &str, db: &BenchDb, cfg: &Config) -> Result<Vec<Line>> {
    match name {
        "A" => scenarios::enqueue_single(db, cfg).await,
        "B" => scenarios::enqueue_bulk(db, cfg).await,
        "sqlbulk" => sqlbulk::sql_bulk(db, cfg).await,
        "C" => scenarios::process(db, cfg).await,
        "F" => baseline::old_design(db, cfg).await,
        "D" => scenarios::wake_latency(db, cfg).await,
        "E" => scenarios::mixed(db, cfg).await,
        "idle" => scenarios::idle(db, cfg).await,
        "G" => history::scale(db, cfg).await,
        "view" => view::at_scale(db, cfg).await,
        #[cfg(feature = "metrics")]
        "M" => metrics::scrapes(db, cfg).await,
        // The scrape needs the `metrics` feature (`--all-features`).
        #[cfg(not(feature = "metrics"))]
        "M" => Ok(Vec::new()),
        "H" => scenarios::soak(db, cfg).await,
        "S" => snapshot::held_snapshot(db, cfg).await,
        // S with a real pg_dump as the holder.
        "dump" => {
            let cfg = Config {
                snapshot_holder: snapshot::Holder::PgDump,
                ..cfg.clone()
            };
            snapshot::held_snapshot(db, &cfg).await
        }
        other => Err(format!("unknown scenario {other}").into()),
    }
}

fn print_table(lines: &[Line]) {
    println!();
    println!(
        "{:<6} {:<62} {:>12} {:<12} runs / notes",
        "", "variant", "median", "unit"
    );
    for l in lines {
        let runs: Vec<String> = l.runs.iter().map(|r| format!("{r:.1}")).collect();
        let mut notes = String::new();
        if let Some(map) = l.extra.as_object() {
            for (k, v) in map {
                if v.is_number() {
                    notes.push_str(&format!(" {k}={:.1}", v.as_f64().unwrap_or(f64::NAN)));
                }
            }
        }
        println!(
            "{:<6} {:<62} {:>12.1} {:<12} [{}]{}",
            l.scenario,
            l.variant,
            l.median,
            l.unit,
            runs.join(", "),
            notes
        );
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use serde_json::Value;

    use super::scenarios::{Config, Line};

    /// Writes past the harness's output capture, so that every run's
    /// output shows the line.
    fn report(line: &str) {
        let _ = writeln!(std::io::stderr(), "{line}");
    }

    /// CI (`cargo test --all-features`): every scenario in quick mode, so
    /// the benchmark keeps compiling and running, and keeps doing its
    /// work. Timings are printed, never asserted: no speed target belongs
    /// in a test. What is asserted, scenario by scenario (`check`):
    ///
    /// - it printed every line it should: one per configured variant, size,
    ///   level or phase of [`Config::quick`], none silently missing (N
    ///   needs root, as the chaos test's network cut does; M the `metrics`
    ///   feature, and without it the test says SKIPPED for M);
    /// - every run's figure is a finite number, not negative, and a rate
    ///   in jobs/s is above zero;
    /// - the counts behind the figures say the work was done: each
    ///   throughput run (A, B, sqlbulk, C, F, N, fleet, G's C and enqueue)
    ///   and D stored or ran every job it was offered (`jobs_offered` ==
    ///   `jobs_done`, counted in the database); the time-boxed ones (E, H,
    ///   and S and dump in each of their three phases) enqueued jobs and
    ///   finished some, never more than were enqueued; M's scrapes returned
    ///   something; G's retention pass dropped jobs once there were some.
    ///
    /// Every problem found is listed in one failure.
    #[test]
    fn quick_mode_runs() {
        let args = <super::Args as clap::Parser>::parse_from(["bench", "--quick"]);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let lines = match runtime.block_on(super::run(args)) {
            Ok(lines) => lines,
            Err(e) => panic!("benchmark failed: {e}"),
        };
        let cfg = Config::quick();
        let mut problems = Vec::new();
        for scenario in super::SCENARIOS {
            let of: Vec<&Line> = lines.iter().filter(|l| l.scenario == scenario).collect();
            if scenario == "M" && !cfg!(feature = "metrics") {
                report("SKIPPED: scenario M (the metrics scrape) needs the `metrics` feature");
                continue;
            }
            check(scenario, &of, &cfg, &mut |p| {
                problems.push(format!("{scenario}: {p}"))
            });
        }
        let unknown: Vec<&str> = (lines.iter())
            .map(|l| l.scenario)
            .filter(|s| !super::SCENARIOS.contains(s))
            .collect();
        if !unknown.is_empty() {
            problems.push(format!("lines of no known scenario: {unknown:?}"));
        }
        assert!(
            problems.is_empty(),
            "the quick benchmark did not do its work ({} problem(s)):\n{}",
            problems.len(),
            problems.join("\n")
        );
        report(&format!(
            "quick_mode_runs: {} lines from {} scenarios, each with its lines and its work done",
            lines.len(),
            super::SCENARIOS.len() - usize::from(!cfg!(feature = "metrics")),
        ));
    }

    /// How many lines `scenario` prints with `cfg` (None: at least one).
    fn expected_lines(scenario: &str, cfg: &Config) -> Option<usize> {
        Some(match scenario {
            "A" => 3, // 1 client, 8 sharing a Client, 8 with a Client each
            "B" | "E" | "idle" | "H" => 1,
            "sqlbulk" => (super::sqlbulk::PATHS.iter())
                .map(|p| match p.per_row {
                    true => cfg.sqlbulk_row_sizes.len(),
                    false => cfg.sqlbulk_sizes.len(),
                })
                .sum(),
            // Each concurrency with and without claim-ahead, and 2 x 100.
            "C" => 2 * cfg.concurrency.len() + 1,
            "F" => 2 * cfg.raw_batches.len(), // stripped and as they were
            // Loopback, each host count direct and through PgBouncer, the fleet.
            "N" => 1 + 2 * cfg.hosts.len() + 1,
            "fleet" => 2 * cfg.fleets.len(), // each fleet and its one process
            "D" => 3,                        // p50, p99, max
            "S" | "dump" => 3,               // steady, held, after
            // C, enqueue, five reads and a retention pass at each level.
            "G" => 8 * cfg.history.len(),
            // A scrape at each level, one with the backlog, the old statement.
            "M" => cfg.history.len() + 2,
            _ => return None,
        })
    }

    /// A count, or a count per run, from a line's `extra`.
    fn counts(extra: &Value, key: &str) -> Option<Vec<u64>> {
        match &extra[key] {
            Value::Array(items) => items.iter().map(Value::as_u64).collect(),
            other => other.as_u64().map(|n| vec![n]),
        }
    }

    /// The checks of [`quick_mode_runs`] on the lines of one scenario;
    /// each problem goes to `problem`.
    fn check(scenario: &str, of: &[&Line], cfg: &Config, problem: &mut dyn FnMut(String)) {
        match expected_lines(scenario, cfg) {
            _ if of.is_empty() => {
                let why = match scenario {
                    "N" => super::net::unavailable()
                        .map(|why| format!(" ({why})"))
                        .unwrap_or_default(),
                    _ => String::new(),
                };
                return problem(format!("printed no line{why}"));
            }
            Some(n) if of.len() != n => {
                let variants: Vec<&str> = of.iter().map(|l| l.variant.as_str()).collect();
                problem(format!("{} lines, not {n}: {variants:?}", of.len()));
            }
            _ => {}
        }
        for line in of {
            let mut fail = |what: String| problem(format!("{}: {what}", line.variant));
            let extra = &line.extra;
            if line.runs.is_empty() || !line.runs.iter().all(|r| r.is_finite() && *r >= 0.0) {
                fail(format!("runs {:?}", line.runs));
            }
            if line.unit == "jobs/s" && (line.median.is_nan() || line.median <= 0.0) {
                fail(format!("a rate of {} jobs/s", line.median));
            }
            // Runs given a number of jobs: every one stored, or run.
            let offered_work = matches!(scenario, "A" | "B" | "sqlbulk" | "C" | "F" | "N")
                || matches!(scenario, "fleet" | "D")
                || (scenario == "G" && line.unit == "jobs/s");
            match (counts(extra, "jobs_offered"), counts(extra, "jobs_done")) {
                (Some(offered), Some(done)) => {
                    let all = offered.len() == line.runs.len() && !offered.contains(&0);
                    if !all || done != offered {
                        let runs = line.runs.len();
                        fail(format!(
                            "jobs offered {offered:?}, done {done:?} ({runs} runs)"
                        ));
                    }
                }
                _ if offered_work => fail("no jobs_offered and jobs_done".into()),
                _ => {}
            }
            // Time-boxed runs: jobs enqueued, and some finished.
            if matches!(scenario, "E" | "H" | "S" | "dump") {
                match (
                    counts(extra, "jobs_enqueued"),
                    counts(extra, "jobs_finished"),
                ) {
                    (Some(enqueued), Some(finished))
                        if !enqueued.is_empty()
                            && enqueued.len() == finished.len()
                            && enqueued.iter().zip(&finished).all(|(e, f)| {
                                // A phase may finish the previous one's backlog.
                                *e > 0 && *f > 0 && (f <= e || matches!(scenario, "S" | "dump"))
                            }) => {}
                    (enqueued, finished) => {
                        fail(format!("jobs enqueued {enqueued:?}, finished {finished:?}"))
                    }
                }
            }
            if scenario == "M" {
                let key = match line.variant.starts_with("before") {
                    true => "rows",
                    false => "response_bytes",
                };
                let none = |key: &str| extra[key].as_u64().unwrap_or(0) == 0;
                if none("scrapes") || none(key) {
                    fail(format!(
                        "scrapes {}, {key} {}",
                        extra["scrapes"], extra[key]
                    ));
                }
            }
            if scenario == "G"
                && line.variant.starts_with("retention pass")
                && extra["finished_kept"].as_u64() > Some(0)
                && extra["jobs_in_the_day"].as_u64().unwrap_or(0) == 0
            {
                fail(format!("dropped no job of {} kept", extra["finished_kept"]));
            }
            if scenario == "view" && !extra["plain_table_ms"].as_f64().is_some_and(f64::is_finite) {
                fail(format!("plain table: {}", extra["plain_table_ms"]));
            }
        }
        if matches!(scenario, "S" | "dump") {
            for phase in ["steady", "held", "after"] {
                if !of
                    .iter()
                    .any(|l| l.variant.ends_with(&format!(": {phase}")))
                {
                    problem(format!("no line for the {phase} phase"));
                }
            }
            let last = of[of.len() - 1];
            let (enqueued, finished) = (
                last.extra["run_jobs_enqueued"].as_u64(),
                last.extra["run_jobs_finished"].as_u64(),
            );
            if !(finished > Some(0) && finished <= enqueued) {
                problem(format!(
                    "the run enqueued {enqueued:?} jobs and finished {finished:?}"
                ));
            }
        }
    }

    /// Not a test: the entry point of worker child processes when the
    /// benchmark runs under the test harness. `support::WorkerChild::start`
    /// runs this binary with `--ignored --exact tests::worker_child` and
    /// `CONVEYOR_BENCH_WORKER=<concurrency>`; it then serves the bench queue
    /// until its stdin closes. It is `#[ignore]`d so that a plain run lists
    /// it as ignored, not as passed.
    ///
    /// Run without `CONVEYOR_BENCH_WORKER` (`cargo test -- --ignored` or
    /// `--include-ignored` over the whole suite) it has nothing to serve and
    /// checks nothing: it prints a line starting `SKIPPED:` that says so
    /// (past the harness's capture) and returns, an explicit skip rather
    /// than a failure, since nothing is broken; libtest has no runtime
    /// skip, so it is listed `ok` after that line. `quick_mode_runs` fails
    /// when it serves nothing.
    #[test]
    #[ignore = "not a test: the benchmark's worker process, started by quick_mode_runs"]
    fn worker_child() {
        let Ok(concurrency) = std::env::var(super::CHILD_ENV) else {
            report(&format!(
                "SKIPPED: tests::worker_child is not a test but the benchmark's worker process: \
                 quick_mode_runs runs this binary with `--ignored --exact tests::worker_child` \
                 and {}=<concurrency>; without it, it serves nothing and checks nothing",
                super::CHILD_ENV
            ));
            return;
        };
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let concurrency = concurrency.parse().expect("concurrency");
        if let Err(e) = runtime.block_on(super::support::worker_child_main(concurrency)) {
            panic!("worker child failed: {e}");
        }
    }
}
