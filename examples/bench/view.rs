//! view: reads of `conveyor.jobs` at scale (issue 31). The view over the
//! day tables, the unfinished rows and the live claims is loaded with
//! finished jobs spread over the last 30 days, a backlog of waiting jobs and
//! jobs running under real claims; a plain table of the same rows
//! (`bench_view.jobs`, ordinary indexes) is built beside it. Each read (the
//! example queries of docs/sql.md, the dashboard's and the CLI's statements) runs
//! on both, alternately, as a fresh statement with its values written in
//! (planning included, as a person in `psql` or a custom plan pays it);
//! the ratio view / table is printed per read.

use std::time::{Duration, Instant};

use conveyor::{NewJob, Retention};
use serde_json::{Value, json};
use sqlx::{Connection, Executor, PgConnection};

use crate::history::DAYS;
use crate::scenarios::{Config, Line};
use crate::support::{BenchDb, Result, median};

/// The queue the running jobs hold their claims in.
const RUNNING_QUEUE: &str = "bench_running";

/// Columns the library reads for a whole job (`sql/inspect/job_columns.sql`).
const JOB_COLUMNS: &str = include_str!("../../sql/inspect/job_columns.sql");

/// One read: a name, and its SQL on `conveyor.jobs` with the values
/// written in. The plain table's copy is the same text with
/// `conveyor.jobs` replaced.
struct Read {
    name: &'static str,
    sql: String,
    /// The plain table's query, where it is not `sql` on the plain table
    /// (a documented shape that reads another table than a user of a plain
    /// table would).
    plain: Option<String>,
}

/// view: sizes from `cfg.view` (finished, waiting, running), reads timed
/// `cfg.view_tries` times each on the view and on the plain table.
pub async fn at_scale(db: &BenchDb, cfg: &Config) -> Result<Vec<Line>> {
    let (finished, waiting, running) = cfg.view;
    let began = Instant::now();
    load(db, finished, waiting).await?;
    let worker = start_running(db, running).await?;
    copy_to_plain(db).await?;
    let load_secs = began.elapsed().as_secs_f64();
    let reads = reads(db).await?;
    let mut conn = PgConnection::connect(&db.url).await?;
    // JIT compiles the big scans differently from run to run; PostgreSQL's
    // default is on, and so it stays here, for both sides alike.
    let mut lines = Vec::new();
    for read in &reads {
        let plain = read
            .plain
            .clone()
            .unwrap_or_else(|| on_plain_table(&read.sql));
        // One untimed run of each warms the caches (and checks the SQL).
        run(&mut conn, &read.sql).await?;
        run(&mut conn, &plain).await?;
        let (mut on_view, mut on_table) = (Vec::new(), Vec::new());
        for _ in 0..cfg.view_tries {
            on_view.push(run(&mut conn, &read.sql).await?);
            on_table.push(run(&mut conn, &plain).await?);
        }
        let ratio = median(&on_view) / median(&on_table).max(0.001);
        let variant = format!("{} ({finished} finished)", read.name);
        lines.push(Line::new("view", variant, "ms", on_view).with(json!({
            "plain_table_ms": median(&on_table),
            "view_over_table": ratio,
        })));
    }
    conn.close().await?;
    worker.shutdown(Duration::from_secs(5)).await?;
    if let Some(first) = lines.first_mut()
        && let Some(extra) = first.extra.as_object_mut()
    {
        extra.insert("load_secs".into(), load_secs.into());
    }
    Ok(lines)
}

/// Runs one statement (simple protocol: planned afresh), returns ms.
async fn run(conn: &mut PgConnection, sql: &str) -> Result<f64> {
    let began = Instant::now();
    conn.execute(sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_string())))
        .await
        .map_err(|e| format!("{e}\n in: {sql}"))?;
    Ok(began.elapsed().as_secs_f64() * 1000.0)
}

/// The same query on the plain table: the view and the tables behind it
/// become `bench_view.jobs`, or a view of the rows of it they hold.
fn on_plain_table(sql: &str) -> String {
    let mut out = sql.to_string();
    // Longest names first: `conveyor.jobs` is a prefix of the others.
    for (from, to) in [
        ("conveyor.jobs_success", "bench_view.success"),
        ("conveyor.jobs_failure", "bench_view.failure"),
        ("conveyor.jobs_cancelled", "bench_view.cancelled"),
        ("conveyor.running_jobs", "bench_view.running"),
        ("conveyor.active_jobs", "bench_view.active"),
        ("conveyor.job_rows", "bench_view.jobs"),
        ("conveyor.jobs", "bench_view.jobs"),
    ] {
        out = out.replace(from, to);
    }
    out
}

/// An id of version 7 at `ts` with `n` as its tail, in SQL (deterministic,
/// so rows of one workflow share theirs).
const UUID_AT: &str = "CREATE FUNCTION bench_view.uuid_at(ts timestamptz, n bigint) RETURNS uuid
    LANGUAGE sql IMMUTABLE AS $$
    SELECT (substr(h, 1, 8) || '-' || substr(h, 9, 4) || '-7000-8000-' || lpad(to_hex(n), 12, '0'))::uuid
    FROM (SELECT lpad(to_hex((extract(epoch FROM ts) * 1000)::bigint), 12, '0') AS h) AS t
$$";

/// Loads `finished` jobs spread evenly over the last [`DAYS`] days, in time
/// order (90 % success, 9 % failure, 1 % cancelled; four queues, eight
/// tasks; one job in a hundred in a chord of ten), the chords'
/// `conveyor.workflows` rows, and `waiting` jobs enqueued over the last
/// hour (nine in ten pending, the rest scheduled a day ahead).
async fn load(db: &BenchDb, finished: u64, waiting: u64) -> Result<()> {
    sqlx::query("SELECT conveyor_internal.create_history_partitions(2, $1::int)")
        .bind(DAYS as i32)
        .execute(&db.pool)
        .await?;
    sqlx::raw_sql("CREATE SCHEMA bench_view")
        .execute(&db.pool)
        .await?;
    sqlx::raw_sql(UUID_AT).execute(&db.pool).await?;
    let mut done = 0;
    while done < finished {
        let take = (finished - done).min(1_000_000) as i64;
        sqlx::query(
            "INSERT INTO conveyor.job_rows
                 (id, queue, task, args, state, attempt, max_retries, run_at, started_at,
                  finished_at, result, last_error, errors, created_at, workflow_id, workflow_index)
             SELECT bench_view.uuid_at(f - interval '2 seconds', g),
                    (ARRAY['email', 'media', 'reports', 'default'])[1 + g % 4],
                    'task_' || g % 8, jsonb_build_object('n', g, 'to', 'user' || g % 1000),
                    s, CASE s WHEN 'success' THEN 1 WHEN 'failure' THEN 3 ELSE 0 END, 2,
                    f - interval '2 seconds', f - interval '1 second', f,
                    CASE WHEN s = 'success' THEN '{\"ok\": true}'::jsonb END,
                    CASE WHEN s = 'failure' THEN 'upstream timed out (' || g % 50 || ')' END,
                    CASE WHEN s = 'failure'
                         THEN jsonb_build_array(jsonb_build_object('attempt', 3, 'at', f,
                                  'error', 'upstream timed out (' || g % 50 || ')'))
                         ELSE '[]'::jsonb END,
                    f - interval '2 seconds',
                    CASE WHEN g % 1000 < 10
                         THEN bench_view.uuid_at(f - interval '3 seconds', 40000000 + g / 1000) END,
                    CASE WHEN g % 1000 < 10 THEN (g % 1000)::int END
             FROM generate_series($1::bigint + 1, $1::bigint + $2::bigint) AS g,
                  LATERAL (SELECT now() - make_interval(days => $3::int)
                                  + make_interval(secs => g::float8 / $4::float8 * $3::float8 * 86400)
                                  - interval '5 seconds' AS f,
                                  CASE WHEN g % 100 < 90 THEN 'success'
                                       WHEN g % 100 < 99 THEN 'failure'
                                       ELSE 'cancelled' END AS s) AS t",
        )
        .bind(done as i64)
        .bind(take)
        .bind(DAYS as i32)
        .bind(finished as f64)
        .execute(&db.pool)
        .await?;
        done += take as u64;
    }
    sqlx::raw_sql(
        "INSERT INTO conveyor.workflows (id, kind, state, total, succeeded, result_job_id, created_at, finished_at)
         SELECT workflow_id, 'chord', 'success', 10, 10, id, created_at - interval '1 second', finished_at
         FROM conveyor.job_rows WHERE workflow_index = 9",
    )
    .execute(&db.pool)
    .await?;
    let mut done = 0;
    while done < waiting {
        let take = (waiting - done).min(1_000_000) as i64;
        sqlx::query(
            "INSERT INTO conveyor.job_rows (id, queue, task, args, state, run_at, created_at)
             SELECT bench_view.uuid_at(c, 20000000 + g),
                    (ARRAY['email', 'media', 'reports', 'default'])[1 + g % 4],
                    'task_' || g % 8, jsonb_build_object('n', g, 'to', 'user' || g % 1000),
                    CASE WHEN g % 10 = 0 THEN 'scheduled' ELSE 'pending' END,
                    CASE WHEN g % 10 = 0 THEN c + interval '1 day' ELSE c END, c
             FROM generate_series($1::bigint + 1, $1::bigint + $2::bigint) AS g,
                  LATERAL (SELECT now() - interval '1 hour'
                                  + make_interval(secs => g::float8 / $3::float8 * 3600)
                                  - interval '5 seconds' AS c) AS t",
        )
        .bind(done as i64)
        .bind(take)
        .bind(waiting as f64)
        .execute(&db.pool)
        .await?;
        done += take as u64;
    }
    sqlx::raw_sql("VACUUM (ANALYZE) conveyor.job_rows, conveyor.workflows")
        .execute(&db.pool)
        .await?;
    Ok(())
}

/// A worker holding `n` jobs of [`RUNNING_QUEUE`] under live claims (its
/// handler never returns), once all `n` read `started` in the view.
async fn start_running(db: &BenchDb, n: usize) -> Result<conveyor::WorkerHandle> {
    let jobs = (0..n)
        .map(|i| NewJob::new("task_running", json!({ "i": i })).queue(RUNNING_QUEUE))
        .collect();
    db.client.enqueue_many(jobs).await?;
    let worker = conveyor::Worker::builder(&db.client)
        .queues([RUNNING_QUEUE])
        .concurrency(n)
        .retention(Retention::forever())
        .register_fn("task_running", |_ctx, _args| async {
            std::future::pending::<()>().await;
            Ok(Value::Null)
        })
        .start()?;
    let until = Instant::now() + Duration::from_secs(120);
    loop {
        let started: i64 =
            sqlx::query_scalar("SELECT count(*) FROM conveyor.active_jobs WHERE state = 'started'")
                .fetch_one(&db.pool)
                .await?;
        if started as usize >= n {
            return Ok(worker);
        }
        if Instant::now() > until {
            return Err(format!("only {started} of {n} jobs started in 120 s").into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `bench_view.jobs`: the view's rows as one plain table, with the indexes
/// one table holding every state would have: the primary key; finished
/// jobs by state and time, by queue and by task; workflows; the waiting,
/// pending and running jobs' partial indexes. Beside it, views of the rows
/// of one state (or the unfinished ones) stand for the tables that hold
/// them.
async fn copy_to_plain(db: &BenchDb) -> Result<()> {
    sqlx::raw_sql(
        "CREATE TABLE bench_view.jobs AS SELECT * FROM conveyor.jobs;
         ALTER TABLE bench_view.jobs ADD PRIMARY KEY (id);
         CREATE INDEX ON bench_view.jobs (state, finished_at) WHERE finished_at IS NOT NULL;
         CREATE INDEX ON bench_view.jobs (state, queue, finished_at) INCLUDE (task, id)
             WHERE finished_at IS NOT NULL;
         CREATE INDEX ON bench_view.jobs (state, task, finished_at) INCLUDE (queue, id)
             WHERE finished_at IS NOT NULL;
         CREATE INDEX ON bench_view.jobs (workflow_id) WHERE workflow_id IS NOT NULL;
         CREATE INDEX ON bench_view.jobs (queue, run_at) WHERE state IN ('scheduled', 'retry');
         CREATE INDEX ON bench_view.jobs (queue, run_at) WHERE state = 'pending';
         CREATE INDEX ON bench_view.jobs (queue) WHERE state = 'started';",
    )
    .execute(&db.pool)
    .await?;
    sqlx::raw_sql(
        "CREATE VIEW bench_view.success AS SELECT * FROM bench_view.jobs WHERE state = 'success';
         CREATE VIEW bench_view.failure AS SELECT * FROM bench_view.jobs WHERE state = 'failure';
         CREATE VIEW bench_view.cancelled AS SELECT * FROM bench_view.jobs WHERE state = 'cancelled';
         CREATE VIEW bench_view.running AS SELECT * FROM bench_view.jobs WHERE state = 'started';
         CREATE VIEW bench_view.active AS SELECT * FROM bench_view.jobs WHERE finished_at IS NULL;",
    )
    .execute(&db.pool)
    .await?;
    sqlx::raw_sql("VACUUM (ANALYZE) bench_view.jobs")
        .execute(&db.pool)
        .await?;
    Ok(())
}

/// SQL for the earliest finish time `conveyor jobs show` assumes for the
/// job `id` (a quoted literal): a day before its id's time.
fn since_sql(id: &str) -> String {
    format!(
        "SELECT (to_timestamp((('x' || substr(replace({id}, '-', ''), 1, 12))::bit(48)::bigint) / 1000.0)
                 - interval '1 day')::text"
    )
}

/// The reads, with values picked from the loaded rows: a finished job from
/// the middle of the history and one from the last hour, a pending one, a
/// chord.
async fn reads(db: &BenchDb) -> Result<Vec<Read>> {
    let pick = async |sql: &str| -> Result<String> {
        Ok(format!(
            "'{}'",
            sqlx::query_scalar::<_, String>(sqlx::AssertSqlSafe(sql.to_string()))
                .fetch_one(&db.pool)
                .await?
        ))
    };
    let old = pick(
        "SELECT id::text FROM bench_view.jobs WHERE state = 'success'
         ORDER BY finished_at LIMIT 1 OFFSET (SELECT count(*) / 2 FROM conveyor.jobs_success)",
    )
    .await?;
    let recent = pick(
        "SELECT id::text FROM bench_view.jobs WHERE state = 'success'
         ORDER BY finished_at DESC LIMIT 1 OFFSET 100",
    )
    .await?;
    let pending =
        pick("SELECT job_id::text FROM conveyor.ready ORDER BY job_id LIMIT 1 OFFSET 100").await?;
    let workflow =
        pick("SELECT id::text FROM conveyor.workflows ORDER BY id DESC LIMIT 1 OFFSET 5").await?;
    // `conveyor jobs show`'s lower bound on the finish time, from the id's
    // time (db::inspect::finished_since): bound as a value, as the CLI does.
    let since_old = pick(&since_sql(&old)).await?;
    let since_recent = pick(&since_sql(&recent)).await?;
    let columns = JOB_COLUMNS.trim();
    let lib = |file: &str, values: &[&str]| -> String {
        // Comments out first: they name the parameters too.
        let mut sql = file
            .lines()
            .filter(|l| !l.trim_start().starts_with("--"))
            .collect::<Vec<_>>()
            .join("\n")
            .replace("{job_columns}", columns);
        // Highest first, so $1 does not match the start of $10.
        for (i, v) in values.iter().enumerate().rev() {
            sql = sql.replace(&format!("${}", i + 1), v);
        }
        sql
    };
    let read = |name: &'static str, sql: String| Read {
        name,
        sql,
        plain: None,
    };
    const N: &str = "NULL";
    let finished_page = include_str!("../../sql/dashboard/dashboard_jobs_finished.sql");
    let active_page = include_str!("../../sql/dashboard/dashboard_jobs_active.sql");
    let list = include_str!("../../sql/inspect/list_jobs.sql");
    Ok(vec![
        // The example queries of docs/sql.md, as written there (labelled
        // "README": they were the README's, and docs/benchmarks.md quotes the labels).
        read(
            "README: by queue and state",
            "SELECT queue, state, count(*) FROM conveyor.jobs GROUP BY 1, 2 ORDER BY 1, 2".into(),
        ),
        Read {
            name: "README: oldest wait (ring; table: pending rows)",
            sql: "SELECT queue, now() - min(run_at) AS oldest_wait FROM conveyor.ready GROUP BY 1"
                .into(),
            plain: Some(
                "SELECT queue, now() - min(run_at) AS oldest_wait
                 FROM bench_view.jobs WHERE state = 'pending' GROUP BY 1"
                    .into(),
            ),
        },
        read(
            "README: failures of the last hour",
            "SELECT id, task, attempt, last_error, jsonb_path_query_array(errors, '$[*].error') AS all_errors
             FROM conveyor.jobs_failure
             WHERE finished_at > now() - interval '1 hour'
             ORDER BY finished_at DESC"
                .into(),
        ),
        read(
            "README: run time per task, last day",
            "SELECT task, count(*), avg(finished_at - started_at) AS avg_run, max(attempt) AS max_attempts
             FROM conveyor.jobs_success
             WHERE finished_at > now() - interval '1 day'
             GROUP BY 1 ORDER BY 2 DESC"
                .into(),
        ),
        read(
            "README: workflow progress, last hour",
            "SELECT w.id, w.kind, w.state, w.succeeded || '/' || w.total AS done, w.failed,
                    cb.state AS callback_state
             FROM conveyor.workflows w
             LEFT JOIN LATERAL (SELECT j.state FROM conveyor.jobs j
                                WHERE j.id = w.result_job_id LIMIT 1) cb ON true
             WHERE w.created_at > now() - interval '1 hour'
             ORDER BY w.created_at DESC"
                .into(),
        ),
        read(
            "README: members of one chord",
            format!(
                "SELECT workflow_index, task, state, attempt, result
                 FROM conveyor.jobs WHERE workflow_id = {workflow} ORDER BY workflow_index"
            ),
        ),
        read(
            "README: who is running what",
            "SELECT worker_id, task, id, now() - started_at AS running_for, lease_expires_at
             FROM conveyor.running_jobs ORDER BY started_at"
                .into(),
        ),
        // By hand in psql.
        read(
            "psql: a job finished 15 days ago, by id",
            format!("SELECT * FROM conveyor.jobs WHERE id = {old}"),
        ),
        read(
            "psql: a job finished a minute ago, by id",
            format!("SELECT * FROM conveyor.jobs WHERE id = {recent}"),
        ),
        read(
            "psql: a pending job by id",
            format!("SELECT * FROM conveyor.jobs WHERE id = {pending}"),
        ),
        read(
            "psql: the newest 50 finished",
            "SELECT * FROM conveyor.jobs WHERE finished_at IS NOT NULL
             ORDER BY finished_at DESC LIMIT 50"
                .into(),
        ),
        // The CLI (`conveyor jobs show`, `conveyor jobs list`).
        read(
            "CLI: jobs show, finished 15 days ago",
            lib(
                include_str!("../../sql/inspect/fetch_job.sql"),
                &[&old, &since_old],
            ),
        ),
        read(
            "CLI: jobs show, finished a minute ago",
            lib(
                include_str!("../../sql/inspect/fetch_job.sql"),
                &[&recent, &since_recent],
            ),
        ),
        read("CLI: jobs list, 20", lib(list, &[N, N, N, N, N, N, "20"])),
        read(
            "CLI: jobs list --queue media --state failure",
            lib(list, &["'media'", "'failure'", N, N, N, N, "20"]),
        ),
        read(
            "CLI: jobs list --state started",
            lib(list, &[N, "'started'", N, N, N, N, "20"]),
        ),
        // The dashboard.
        read(
            "dashboard: overview",
            lib(include_str!("../../sql/dashboard/dashboard_overview.sql"), &[]),
        ),
        read(
            "dashboard: 50 successes",
            lib(finished_page, &["'success'", N, N, N, N, "50", N, N, N]),
        ),
        read(
            "dashboard: 50 failures of one queue",
            lib(finished_page, &["'failure'", "'media'", N, N, N, "50", N, N, N]),
        ),
        read(
            "dashboard: 50 pending",
            lib(
                include_str!("../../sql/dashboard/dashboard_jobs_pending.sql"),
                &[N, N, N, "50", N, N],
            ),
        ),
        read(
            "dashboard: 50 running",
            lib(active_page, &["'started'", N, N, N, "50", N, N]),
        ),
        read(
            "dashboard: 50 scheduled",
            lib(active_page, &["'scheduled'", N, N, N, "50", N, N]),
        ),
        read(
            "dashboard: jobs by id prefix",
            lib(
                include_str!("../../sql/dashboard/dashboard_jobs_by_id.sql"),
                &[&recent, &format!("({recent}::uuid::text::uuid)"), "50"],
            ),
        ),
        read(
            "dashboard: workflows",
            lib(
                include_str!("../../sql/dashboard/dashboard_workflows.sql"),
                &[N, N, N, "50"],
            ),
        ),
        read(
            "dashboard: chord members",
            lib(
                include_str!("../../sql/dashboard/dashboard_workflow_jobs.sql"),
                &[&workflow, "1000"],
            ),
        ),
        read(
            "dashboard: totals",
            lib(include_str!("../../sql/dashboard/dashboard_totals.sql"), &["10000"]),
        ),
    ])
}
