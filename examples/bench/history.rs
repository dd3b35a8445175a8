//! G: the queue with a large history kept (issue 16: "retention at 100M").
//! Finished jobs are loaded with bulk SQL into the day tables of the last
//! 30 days (`conveyor.jobs_success_<day>`, …), then at each level: C (the
//! claim path), enqueue one job per call, a page of the finished list (as
//! `conveyor jobs list`), a job fetched by id, and a retention pass that
//! drops the oldest day.

use std::time::{Duration, Instant};

use conveyor::{JobFilter, JobState, NewJob};
use serde_json::json;

use crate::scenarios::{Config, Line, process_once};
use crate::support::{BenchDb, QUEUE, Result, TASK};

/// Days the loaded history is spread over.
pub const DAYS: i64 = 30;

/// G: C (1 process, concurrency 100), enqueue, list, fetch and a retention
/// pass, with 0 … N finished jobs kept and future jobs present.
pub async fn scale(db: &BenchDb, cfg: &Config) -> Result<Vec<Line>> {
    sqlx::query("SELECT conveyor_internal.create_history_partitions(2, $1::int)")
        .bind(DAYS as i32)
        .execute(&db.pool)
        .await?;
    db.load_rows("scheduled", 0, cfg.future).await?;
    let mut lines: Vec<Line> = Vec::new();
    let (mut base_claim, mut base_enqueue) = (None, None);
    let mut loaded = 0;
    for level in cfg.history.clone() {
        let began = Instant::now();
        load_history(db, loaded, level - loaded).await?;
        let load_secs = began.elapsed().as_secs_f64();
        loaded = level;
        sqlx::query("VACUUM (ANALYZE) conveyor.job_rows, conveyor.claims")
            .execute(&db.pool)
            .await?;
        let kept = kept(db).await?;
        let mut claim = Vec::new();
        let mut server = Vec::new();
        let mut enqueue = Vec::new();
        let (mut claimed, mut sent, mut stored) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..cfg.runs {
            let run = process_once(db, cfg.jobs, 1, 100, None).await?;
            claim.push(run.rate);
            claimed.push(run.succeeded);
            server.push(run.server);
            let (rate, acknowledged, found) = enqueue_rate(db, cfg.enqueue_secs).await?;
            enqueue.push(rate);
            sent.push(acknowledged);
            stored.push(found);
        }
        let reads = reads(db).await?;
        let (table, indexes) = db.sizes().await?;
        let at = |variant: &str| {
            format!(
                "{variant} with {kept} finished + {} future jobs",
                cfg.future
            )
        };
        let c = Line::new("G", at("C x 100"), "jobs/s", claim);
        let e = Line::new("G", at("enqueue 1/call"), "jobs/s", enqueue);
        let c0 = *base_claim.get_or_insert(c.median);
        let e0 = *base_enqueue.get_or_insert(e.median);
        let details = json!({
            "load_secs": load_secs,
            "table_mib": table / 1_048_576,
            "indexes_mib": indexes / 1_048_576,
        });
        let (c_pct, e_pct) = (100.0 * c.median / c0, 100.0 * e.median / e0);
        let offered = vec![cfg.jobs as u64; claimed.len()];
        lines.push(
            c.with(json!({"percent_of_level_0": c_pct, "server_per_run": server, "size": details}))
                .with_work(offered, claimed),
        );
        lines.push(
            e.with(json!({"percent_of_level_0": e_pct}))
                .with_work(sent, stored),
        );
        for (what, ms) in reads {
            lines.push(Line::new("G", at(what), "ms", ms));
        }
        // Last: it removes a thirtieth of the history.
        let (ms, dropped) = retention_pass(db).await?;
        lines.push(
            Line::new("G", at("retention pass, oldest day"), "ms", vec![ms])
                .with(json!({"jobs_in_the_day": dropped, "finished_kept": kept})),
        );
        loaded -= dropped.min(loaded);
    }
    sqlx::query("DELETE FROM conveyor.job_rows WHERE queue IN ('bench_history', 'bench')")
        .execute(&db.pool)
        .await?;
    sqlx::query("VACUUM conveyor.job_rows, conveyor.claims")
        .execute(&db.pool)
        .await?;
    Ok(lines)
}

/// Inserts `n` successes spread evenly over the last [`DAYS`] days (one
/// statement per million), ids after `offset`. Rows go in in time order, so
/// each day table's indexes grow at their right edge: spread at random over
/// the days (as before 2026-11-25), 90M rows took about an hour on the
/// two-core machine, most of it writing back index pages that
/// `shared_buffers` could not keep.
pub async fn load_history(db: &BenchDb, offset: u64, n: u64) -> Result<()> {
    let mut done = 0;
    while done < n {
        let take = (n - done).min(1_000_000) as i64;
        sqlx::query(
            "INSERT INTO conveyor.job_rows
                 (id, queue, task, state, attempt, run_at, started_at, finished_at, result, created_at)
             SELECT ('00000000-0000-7000-8000-' || lpad(to_hex($1::bigint + g), 12, '0'))::uuid,
                    'bench_history', 'noop', 'success', 1, f - interval '1 second',
                    f - interval '1 second', f, 'null'::jsonb, f - interval '2 seconds'
             FROM generate_series(1, $2::bigint) AS g,
                  LATERAL (SELECT now() - make_interval(days => $3::int + 1)
                                  + make_interval(secs => ($4::bigint + g)::float8 / $5::float8
                                                          * $3::float8 * 86400) AS f) AS t",
        )
        .bind((offset + done) as i64)
        .bind(take)
        .bind(DAYS)
        .bind(done as i64)
        .bind(n as f64)
        .execute(&db.pool)
        .await?;
        done += take as u64;
    }
    Ok(())
}

/// Finished jobs kept now (from the statistics: counting 100M rows would take
/// longer than the scenario).
async fn kept(db: &BenchDb) -> Result<i64> {
    Ok(sqlx::query_scalar(
        "SELECT coalesce(sum(greatest(c.reltuples::bigint, 0)), 0)::bigint
         FROM pg_partition_tree('conveyor.jobs_success') t JOIN pg_class c ON c.oid = t.relid
         WHERE t.isleaf",
    )
    .fetch_one(&db.pool)
    .await?)
}

/// Jobs per second enqueued one per call by one caller for `secs`; the
/// calls that returned Ok, and the jobs then found in the table.
async fn enqueue_rate(db: &BenchDb, secs: u64) -> Result<(f64, u64, u64)> {
    let until = Instant::now() + Duration::from_secs(secs);
    let began = Instant::now();
    let mut n = 0u64;
    while Instant::now() < until {
        db.client
            .enqueue(NewJob::new(TASK, json!({})).queue("bench_enqueue"))
            .await?;
        n += 1;
    }
    let rate = n as f64 / began.elapsed().as_secs_f64();
    let stored: i64 =
        sqlx::query_scalar("SELECT count(*) FROM conveyor.job_rows WHERE queue = 'bench_enqueue'")
            .fetch_one(&db.pool)
            .await?;
    sqlx::query("DELETE FROM conveyor.job_rows WHERE queue = 'bench_enqueue'")
        .execute(&db.pool)
        .await?;
    Ok((rate, n, stored as u64))
}

/// The dashboard's list of finished jobs (its own statement, as the page
/// runs it: newest first, keyset-paged).
const DASHBOARD_FINISHED: &str = include_str!("../../sql/dashboard/dashboard_jobs_finished.sql");

/// Milliseconds, 20 tries each: pages of the dashboard's finished list (all
/// successes; one queue's, from its history; one queue with no finished job
/// at all), a page of `conveyor jobs list --state success`, and one job
/// fetched by id (from the middle of the history).
async fn reads(db: &BenchDb) -> Result<Vec<(&'static str, Vec<f64>)>> {
    let some: uuid::Uuid = sqlx::query_scalar(
        "SELECT id FROM conveyor.jobs_success WHERE queue = 'bench_history' LIMIT 1 OFFSET 1000",
    )
    .fetch_optional(&db.pool)
    .await?
    .unwrap_or_else(uuid::Uuid::nil);
    let mut out: Vec<(&'static str, Vec<f64>)> = vec![
        ("dashboard page of 50 successes", Vec::new()),
        ("dashboard page, one queue", Vec::new()),
        ("dashboard page, a queue without history", Vec::new()),
        ("jobs list --state success, 50", Vec::new()),
        ("fetch one job by id", Vec::new()),
    ];
    for _ in 0..20 {
        for (i, queue) in [None, Some("bench_history"), Some(QUEUE)]
            .into_iter()
            .enumerate()
        {
            let began = Instant::now();
            sqlx::query(DASHBOARD_FINISHED)
                .bind("success")
                .bind(queue)
                .bind(None::<String>)
                .bind(None::<chrono::DateTime<chrono::Utc>>)
                .bind(None::<uuid::Uuid>)
                .bind(50_i64)
                .bind(None::<serde_json::Value>)
                .bind(None::<String>)
                .bind(None::<f64>)
                .fetch_all(&db.pool)
                .await?;
            out[i].1.push(ms(began));
        }
        let filter = JobFilter {
            state: Some(JobState::Success),
            limit: 50,
            ..JobFilter::default()
        };
        let began = Instant::now();
        db.client.list_jobs(&filter).await?;
        out[3].1.push(ms(began));
        let began = Instant::now();
        db.client.job(some).await?;
        out[4].1.push(ms(began));
    }
    Ok(out)
}

fn ms(began: Instant) -> f64 {
    began.elapsed().as_secs_f64() * 1000.0
}

/// Drops the oldest day table of successes, as the pruner does; returns the
/// time it took (ms) and the jobs it held.
async fn retention_pass(db: &BenchDb) -> Result<(f64, u64)> {
    let oldest: Option<(String, chrono::DateTime<chrono::Utc>, i64)> = sqlx::query_as(
        "SELECT c.relname::text,
                substring(pg_get_expr(c.relpartbound, c.oid) FROM 'TO \\(''([^'']+)''\\)')::timestamptz,
                greatest(c.reltuples::bigint, 0)
         FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
         WHERE i.inhparent = 'conveyor.jobs_success'::regclass
           AND pg_get_expr(c.relpartbound, c.oid) LIKE 'FOR VALUES FROM (''%'
         ORDER BY 2 LIMIT 1",
    )
    .fetch_optional(&db.pool)
    .await?;
    let Some((_, upper, jobs)) = oldest else {
        return Ok((0.0, 0));
    };
    let began = Instant::now();
    sqlx::query("SELECT conveyor_internal.drop_history_partitions('success', $1)")
        .bind(upper)
        .execute(&db.pool)
        .await?;
    Ok((ms(began), jobs.max(0) as u64))
}
