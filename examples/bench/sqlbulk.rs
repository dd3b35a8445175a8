//! Scenario sqlbulk: jobs enqueued from SQL, many in ONE statement, by each
//! way SQL has (docs/benchmarks.md, "sqlbulk"):
//!
//! * `conveyor.enqueue_many(jsonb)` on an array of job objects built with
//!   `jsonb_agg`;
//! * `conveyor.enqueue_each(task, jsonb[])` on an array of arguments built
//!   with `array_agg`;
//! * a FOR EACH STATEMENT trigger on a business table, with a transition
//!   table, calling `conveyor.enqueue_each` (an `INSERT ... SELECT` of N
//!   rows into the table: the trigger recipe of docs/sql.md);
//! * `conveyor.enqueue()` once per row of a `SELECT`;
//! * a FOR EACH ROW trigger on a business table calling `conveyor.enqueue()`.
//!
//! Each size is one autocommit statement, timed from the client, into an
//! empty queue (the tables are truncated and checkpointed between runs, so
//! no run pays for the previous one's dirty pages). Prints jobs/s and µs per
//! row at each size: a cost per row that does not grow with the statement
//! shows as equal µs per row across sizes.

use std::time::Instant;

use serde_json::json;

use crate::scenarios::{Config, Line};
use crate::support::{BenchDb, Result, median, secs};

const QUEUE: &str = "bench_sqlbulk";
const TASK: &str = "noop";

/// The business tables and their triggers (in the scenario's own database).
const SETUP: &str = "
CREATE TABLE bench_orders (id bigint PRIMARY KEY, total numeric NOT NULL);
CREATE FUNCTION bench_orders_enqueue() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM FROM conveyor.enqueue_each('noop',
        (SELECT array_agg(jsonb_build_object('order_id', n.id, 'total', n.total)) FROM new_orders n),
        queue => 'bench_sqlbulk');
    RETURN NULL;
END
$$;
CREATE TRIGGER bench_orders_enqueue AFTER INSERT ON bench_orders
    REFERENCING NEW TABLE AS new_orders
    FOR EACH STATEMENT EXECUTE FUNCTION bench_orders_enqueue();

CREATE TABLE bench_rows (id bigint PRIMARY KEY, total numeric NOT NULL);
CREATE FUNCTION bench_rows_enqueue() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM conveyor.enqueue('noop', jsonb_build_object('order_id', NEW.id, 'total', NEW.total),
                             queue => 'bench_sqlbulk');
    RETURN NULL;
END
$$;
CREATE TRIGGER bench_rows_enqueue AFTER INSERT ON bench_rows
    FOR EACH ROW EXECUTE FUNCTION bench_rows_enqueue();
";

/// One way in: its name and the statement that enqueues `$1` jobs.
pub struct Path {
    name: &'static str,
    sql: &'static str,
    /// Whether it is one of the slow per-row ways (measured at the smaller sizes).
    pub per_row: bool,
}

pub const PATHS: [Path; 5] = [
    Path {
        name: "enqueue_many(jsonb_agg(...))",
        sql: "SELECT count(*) FROM conveyor.enqueue_many((
                  SELECT jsonb_agg(jsonb_build_object('task', 'noop', 'queue', 'bench_sqlbulk',
                                                      'args', jsonb_build_object('n', g)))
                  FROM generate_series(1, $1::int) AS g))",
        per_row: false,
    },
    Path {
        name: "enqueue_each('noop', array_agg(...))",
        sql: "SELECT count(*) FROM conveyor.enqueue_each('noop',
                  (SELECT array_agg(jsonb_build_object('n', g)) FROM generate_series(1, $1::int) AS g),
                  queue => 'bench_sqlbulk')",
        per_row: false,
    },
    Path {
        name: "statement trigger -> enqueue_each",
        sql: "INSERT INTO bench_orders SELECT g, g * 1.5 FROM generate_series(1, $1::int) AS g",
        per_row: false,
    },
    Path {
        name: "enqueue() per row of a SELECT",
        sql: "SELECT count(conveyor.enqueue('noop', jsonb_build_object('n', g), queue => 'bench_sqlbulk'))
              FROM generate_series(1, $1::int) AS g",
        per_row: true,
    },
    Path {
        name: "row trigger -> enqueue()",
        sql: "INSERT INTO bench_rows SELECT g, g * 1.5 FROM generate_series(1, $1::int) AS g",
        per_row: true,
    },
];

/// Empties the queue and the business tables, and writes the dirty pages.
async fn clear(db: &BenchDb) -> Result<()> {
    sqlx::raw_sql(
        "TRUNCATE conveyor.job_rows, conveyor.ready, bench_orders, bench_rows;
         CHECKPOINT;",
    )
    .execute(&db.pool)
    .await?;
    Ok(())
}

/// Runs one statement of `path` for `n` jobs; returns its seconds and the
/// jobs it stored, after checking that it stored `n` pending jobs, each
/// with its ring row.
async fn once(db: &BenchDb, path: &Path, n: usize) -> Result<(f64, u64)> {
    let start = Instant::now();
    sqlx::query(sqlx::AssertSqlSafe(path.sql))
        .bind(n as i32)
        .execute(&db.pool)
        .await?;
    let elapsed = secs(start);
    let (jobs, ring): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM conveyor.job_rows WHERE queue = $1 AND task = $2 AND state = 'pending'),
                (SELECT count(*) FROM conveyor.ready WHERE queue = $1)",
    )
    .bind(QUEUE)
    .bind(TASK)
    .fetch_one(&db.pool)
    .await?;
    if (jobs, ring) != (n as i64, n as i64) {
        return Err(format!("{}: {n} asked, {jobs} jobs and {ring} ring rows", path.name).into());
    }
    clear(db).await?;
    Ok((elapsed, jobs as u64))
}

/// sqlbulk: each path at each of its sizes, `cfg.runs` runs; sizes of one
/// run alternate, so that a slow stretch of a shared machine spreads over
/// them. Leaves the queue empty.
pub async fn sql_bulk(db: &BenchDb, cfg: &Config) -> Result<Vec<Line>> {
    sqlx::raw_sql(SETUP).execute(&db.pool).await?;
    clear(db).await?;
    let mut lines = Vec::new();
    for path in &PATHS {
        let sizes = if path.per_row {
            &cfg.sqlbulk_row_sizes
        } else {
            &cfg.sqlbulk_sizes
        };
        let mut times = vec![Vec::new(); sizes.len()];
        let mut stored = vec![Vec::new(); sizes.len()];
        for _ in 0..cfg.runs {
            for (i, n) in sizes.iter().enumerate() {
                let (elapsed, jobs) = once(db, path, *n).await?;
                times[i].push(elapsed);
                stored[i].push(jobs);
            }
        }
        for ((n, runs), stored) in sizes.iter().zip(times).zip(stored) {
            let offered = vec![*n as u64; runs.len()];
            let rates: Vec<f64> = runs.iter().map(|s| *n as f64 / s).collect();
            let us: Vec<f64> = runs.iter().map(|s| s * 1e6 / *n as f64).collect();
            lines.push(
                Line::new(
                    "sqlbulk",
                    format!("{}, {n} jobs in 1 statement", path.name),
                    "jobs/s",
                    rates,
                )
                .with(json!({ "us_per_row": median(&us), "us_per_row_runs": us }))
                .with_work(offered, stored),
            );
        }
    }
    sqlx::raw_sql("TRUNCATE conveyor.job_rows, conveyor.ready, bench_orders, bench_rows")
        .execute(&db.pool)
        .await?;
    Ok(lines)
}
