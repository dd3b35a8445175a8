//! F: the old design's baseline (issue 16). The storage before the ready
//! ring (`fae5eab^`), rebuilt in a schema of its own, `bench_old`: the
//! jobs table with the indexes it had then (among them the claim index
//! over pending rows), no ring and no triggers; its claim and outcome
//! statements replayed as raw SQL from one connection, batched as a worker
//! batches them. Scenario C (Conveyor as it is) runs in the same invocation,
//! so "C against F" is a ratio measured in one run.

use std::time::Instant;

use serde_json::json;
use sqlx::Row;

use crate::scenarios::{Config, Line};
use crate::support::{BenchDb, NO_CHECKPOINT_ENV, Result, secs};

/// The jobs table and indexes of the old design (before the ready ring).
const SCHEMA: &str = "
    DROP SCHEMA IF EXISTS bench_old CASCADE;
    CREATE SCHEMA bench_old;
    CREATE TABLE bench_old.jobs (LIKE conveyor.jobs INCLUDING DEFAULTS INCLUDING CONSTRAINTS);
    -- The rules on several columns, which conveyor.jobs keeps on its
    -- partitions (LIKE copies the column types, so the one-column
    -- rules, domains, come with them): the same rules as C's tables.
    ALTER TABLE bench_old.jobs ADD CHECK (
        CASE WHEN state = 'started' THEN lease_expires_at IS NOT NULL AND lease_token IS NOT NULL
             ELSE lease_expires_at IS NULL END);
    ALTER TABLE bench_old.jobs ADD CHECK (
        (state IN ('success', 'failure', 'cancelled')) = (finished_at IS NOT NULL)
        AND finished_at >= '0001-01-01 00:00:00+00' AND finished_at < '10000-01-01 00:00:00+00');
    ALTER TABLE bench_old.jobs ADD PRIMARY KEY (id);
    ALTER TABLE bench_old.jobs SET (fillfactor = 90);
    CREATE INDEX ON bench_old.jobs (queue, priority DESC, run_at, id) WHERE state = 'pending';
    CREATE INDEX ON bench_old.jobs (queue, run_at) WHERE state IN ('scheduled', 'retry');
    CREATE INDEX ON bench_old.jobs (worker_id, lease_expires_at) WHERE state = 'started';
    CREATE INDEX ON bench_old.jobs (workflow_id, workflow_index) WHERE workflow_id IS NOT NULL;
    CREATE UNIQUE INDEX ON bench_old.jobs (unique_key)
        WHERE unique_key IS NOT NULL AND unique_until IS NULL
          AND state IN ('scheduled', 'pending', 'started', 'retry');
    CREATE INDEX ON bench_old.jobs (state, finished_at) WHERE finished_at IS NOT NULL;
    CREATE INDEX ON bench_old.jobs (queue, state, finished_at) INCLUDE (task, id)
        WHERE finished_at IS NOT NULL;
    CREATE INDEX ON bench_old.jobs (task, state, finished_at) INCLUDE (queue, id)
        WHERE finished_at IS NOT NULL;
";

/// The old claim as it was (src/db/claim.sql before the ready ring,
/// `fae5eab^`), with `conveyor.jobs` read as `bench_old.jobs`: the limits'
/// room, the pause check and the task filter, and every column of the
/// claimed jobs returned (the worker ran them from those rows). Prepared
/// once, as sqlx did.
const CLAIM: &str = "WITH room AS (
        SELECT greatest(0, least(
                   $3::bigint,
                   coalesce($7::int, $3::bigint),
                   CASE WHEN $6::int IS NULL THEN $3::bigint
                        ELSE $6::int - (SELECT count(*) FROM bench_old.jobs
                                        WHERE state = 'started' AND queue = $1) END)) AS n
    ),
    picked AS (
        SELECT id FROM bench_old.jobs
        WHERE state = 'pending' AND queue = $1 AND task = ANY($2) AND run_at <= now()
          AND NOT EXISTS (SELECT 1 FROM conveyor.queues
                          WHERE name = $1 AND paused_at IS NOT NULL)
        ORDER BY priority DESC, run_at, id
        LIMIT (SELECT n FROM room)
        FOR UPDATE SKIP LOCKED
    )
    UPDATE bench_old.jobs j
    SET state = 'started',
        attempt = least(j.attempt, 2147483646) + 1,
        lease_token = (SELECT nextval('conveyor.lease_tokens')),
        started_at = now(),
        lease_expires_at = now() + make_interval(secs => $4),
        worker_id = $5
    WHERE j.id = ANY(ARRAY(SELECT id FROM picked))
    RETURNING j.id, j.queue, j.task, j.args, j.headers, j.state, j.priority, j.run_at,
        j.attempt, j.max_retries,
        extract(epoch FROM j.retry_backoff_base)::float8 AS retry_backoff_base_secs,
        extract(epoch FROM j.retry_backoff)::float8 AS retry_backoff_secs,
        extract(epoch FROM j.timeout)::float8 AS timeout_secs,
        j.lease_expires_at, j.worker_id, j.result, j.last_error, j.errors,
        j.created_at, j.started_at, j.finished_at,
        j.workflow_id, j.workflow_index, j.on_success, j.on_error, j.lease_token";

/// The old outcome statement as it was (src/db/complete.sql before the ready
/// ring, `fae5eab^`), on `bench_old.jobs`: every kind of outcome in one UPDATE,
/// the queues to wake and the ids to announce returned. Planned per call,
/// as it was (`persistent(false)`).
const COMPLETE: &str = "WITH outcome AS (
        SELECT *
        FROM unnest($1::uuid[], $2::bigint[], $3::text[], $4::jsonb[], $5::text[], $6::float8[])
             AS t(id, lease_token, state, result, error, retry_in_secs)
    ),
    updated AS (
        UPDATE bench_old.jobs j SET
            state = CASE WHEN o.state = 'retry' AND j.cancel_requested_at IS NOT NULL
                         THEN 'cancelled' ELSE o.state END,
            result = CASE WHEN o.state = 'success' THEN o.result ELSE j.result END,
            last_error = coalesce(o.error, j.last_error),
            errors = CASE WHEN o.error IS NULL THEN j.errors
                     ELSE j.errors || jsonb_build_array(jsonb_build_object(
                         'attempt', j.attempt, 'at', now(), 'error', o.error,
                         'worker_id', j.worker_id))
                     END,
            run_at = CASE WHEN o.state = 'retry' AND j.cancel_requested_at IS NULL
                          THEN now() + make_interval(secs => o.retry_in_secs)
                          ELSE j.run_at END,
            retry_backoff = CASE WHEN o.state = 'retry'
                                 THEN make_interval(secs => o.retry_in_secs)
                                 ELSE j.retry_backoff END,
            finished_at = CASE WHEN o.state IN ('success', 'failure', 'cancelled')
                                 OR j.cancel_requested_at IS NOT NULL THEN now() END,
            lease_expires_at = NULL,
            worker_id = NULL
        FROM outcome o
        WHERE j.id = ANY($1::uuid[]) AND j.id = o.id AND j.lease_token = o.lease_token
          AND j.state = 'started'
        RETURNING j.id, j.queue, j.state,
                  (j.workflow_id IS NOT NULL OR j.on_success IS NOT NULL OR j.on_error IS NOT NULL) AS follow_up
    ),
    freed AS (
        SELECT json_build_object('queue', q.queue, 'scheduled', false)::text AS payload
        FROM (SELECT DISTINCT queue FROM updated WHERE state <> 'retry') AS q
        WHERE EXISTS (SELECT 1 FROM conveyor.queues c
                      WHERE c.name = q.queue AND c.concurrency_limit IS NOT NULL)
    ),
    retrying AS (
        SELECT json_build_object('queue', q.queue, 'scheduled', true)::text AS payload
        FROM (SELECT DISTINCT queue FROM updated WHERE state = 'retry') AS q
    )
    SELECT (SELECT coalesce(array_agg(id), '{}') FROM updated) AS updated,
           (SELECT coalesce(array_agg(id), '{}') FROM updated WHERE follow_up AND state <> 'retry') AS follow_ups,
           (SELECT string_agg(id::text, ',') FROM updated WHERE state <> 'retry') AS finished_ids,
           (SELECT coalesce(array_agg(payload), '{}')
            FROM (SELECT payload FROM freed UNION ALL SELECT payload FROM retrying) AS w) AS wake";

/// F as measured until 2026-11-25: the same row writes stripped of the
/// rest (no room, pause check or task filter; the claim returns only id
/// and token; the outcome sets only the columns of a success). Kept beside
/// the replay so that the change of baseline is visible in one run.
const CLAIM_STRIPPED: &str = "WITH picked AS (
        SELECT id FROM bench_old.jobs
        WHERE state = 'pending' AND queue = $1 AND run_at <= now()
        ORDER BY priority DESC, run_at, id
        LIMIT $2 FOR UPDATE SKIP LOCKED)
    UPDATE bench_old.jobs j
    SET state = 'started', attempt = least(j.attempt, 2147483646) + 1,
        lease_token = (SELECT nextval('conveyor.lease_tokens')), started_at = now(),
        lease_expires_at = now() + interval '60 seconds', worker_id = 'raw'
    WHERE j.id = ANY(ARRAY(SELECT id FROM picked))
    RETURNING j.id, j.lease_token";

/// The stripped outcome of a success (complete.sql's row writes alone).
const COMPLETE_STRIPPED: &str = "UPDATE bench_old.jobs j
    SET state = 'success', result = 'null'::jsonb, finished_at = now(),
        lease_expires_at = NULL, worker_id = NULL
    FROM unnest($1::uuid[], $2::bigint[]) AS o(id, lease_token)
    WHERE j.id = ANY($1) AND j.id = o.id AND j.lease_token = o.lease_token
      AND j.state = 'started'";

/// Which statements an F run replays.
#[derive(Clone, Copy, PartialEq)]
enum Replay {
    /// The old statements as they were.
    AsTheyWere,
    /// Their row writes alone.
    Stripped,
}

/// F: for each batch size, runs of the replay as it was and of the stripped
/// statements, alternated so that both are measured in the same stretch of
/// time. The replay as it was comes last (the line C is compared with).
pub async fn old_design(db: &BenchDb, cfg: &Config) -> Result<Vec<Line>> {
    sqlx::raw_sql(SCHEMA).execute(&db.pool).await?;
    let mut lines = Vec::new();
    for batch in cfg.raw_batches.clone() {
        let (mut stripped, mut as_they_were) = (Vec::new(), Vec::new());
        let (mut stripped_done, mut as_they_were_done) = (Vec::new(), Vec::new());
        for _ in 0..cfg.runs {
            let (rate, done) = run_once(db, cfg, batch, Replay::Stripped).await?;
            stripped.push(rate);
            stripped_done.push(done);
            let (rate, done) = run_once(db, cfg, batch, Replay::AsTheyWere).await?;
            as_they_were.push(rate);
            as_they_were_done.push(done);
        }
        let jobs = cfg.jobs;
        let offered = vec![jobs as u64; cfg.runs];
        lines.push(
            Line::new(
                "F",
                format!(
                    "old design (before the ready ring), its row writes alone (stripped), claim {batch} + complete {batch}, {jobs} jobs, 1 connection"
                ),
                "jobs/s",
                stripped,
            )
            .with(json!({"batch": batch, "replay": "stripped"}))
            .with_work(offered.clone(), stripped_done),
        );
        lines.push(
            Line::new(
                "F",
                format!(
                    "old design (before the ready ring), its claim and outcome statements as they were, claim {batch} + complete {batch}, {jobs} jobs, 1 connection"
                ),
                "jobs/s",
                as_they_were,
            )
            .with(json!({"batch": batch, "replay": "as they were"}))
            .with_work(offered, as_they_were_done),
        );
    }
    sqlx::raw_sql("DROP SCHEMA bench_old CASCADE")
        .execute(&db.pool)
        .await?;
    Ok(lines)
}

/// One timed F run: `cfg.jobs` pending jobs loaded, checkpointed, then
/// claimed and completed `batch` at a time from one connection. Jobs/s,
/// and the jobs that ended in `success` (counted after the clock stops).
async fn run_once(db: &BenchDb, cfg: &Config, batch: usize, replay: Replay) -> Result<(f64, u64)> {
    sqlx::query(
        "INSERT INTO bench_old.jobs (queue, task) SELECT $1, 'noop' FROM generate_series(1, $2)",
    )
    .bind(crate::support::QUEUE)
    .bind(cfg.jobs as i64)
    .execute(&db.pool)
    .await?;
    sqlx::query("VACUUM (ANALYZE) bench_old.jobs")
        .execute(&db.pool)
        .await?;
    // As before C's runs: the set-up's writes are not the run's (a
    // checkpoint that the set-up's WAL would trigger mid-run, as it did in
    // one F run of three, slowed that run by a fifth).
    if std::env::var(NO_CHECKPOINT_ENV).is_err() {
        db.checkpoint().await?;
    }
    let mut conn = db.pool.acquire().await?;
    let tasks = vec!["noop".to_string()];
    let start = Instant::now();
    let mut done = 0usize;
    loop {
        let rows: Vec<sqlx::postgres::PgRow> = match replay {
            Replay::AsTheyWere => {
                sqlx::query(CLAIM)
                    .bind(crate::support::QUEUE)
                    .bind(&tasks)
                    .bind(batch as i64)
                    .bind(60.0f64)
                    .bind("raw")
                    .bind(None::<i32>)
                    .bind(None::<i32>)
                    .fetch_all(&mut *conn)
                    .await?
            }
            Replay::Stripped => {
                sqlx::query(CLAIM_STRIPPED)
                    .bind(crate::support::QUEUE)
                    .bind(batch as i64)
                    .fetch_all(&mut *conn)
                    .await?
            }
        };
        if rows.is_empty() {
            break;
        }
        let mut ids = Vec::with_capacity(rows.len());
        let mut tokens = Vec::with_capacity(rows.len());
        for row in &rows {
            ids.push(row.try_get::<uuid::Uuid, _>("id")?);
            tokens.push(row.try_get::<i64, _>("lease_token")?);
        }
        done += ids.len();
        let n = ids.len();
        // Planned per call, as both old statements were.
        match replay {
            Replay::AsTheyWere => {
                sqlx::query(COMPLETE)
                    .persistent(false)
                    .bind(ids)
                    .bind(tokens)
                    .bind(vec!["success"; n])
                    .bind(vec![serde_json::Value::Null; n])
                    .bind(vec![None::<String>; n])
                    .bind(vec![None::<f64>; n])
                    .execute(&mut *conn)
                    .await?;
            }
            Replay::Stripped => {
                sqlx::query(COMPLETE_STRIPPED)
                    .persistent(false)
                    .bind(ids)
                    .bind(tokens)
                    .execute(&mut *conn)
                    .await?;
            }
        }
    }
    let rate = done as f64 / secs(start);
    drop(conn);
    let succeeded: i64 =
        sqlx::query_scalar("SELECT count(*) FROM bench_old.jobs WHERE state = 'success'")
            .fetch_one(&db.pool)
            .await?;
    sqlx::raw_sql("TRUNCATE bench_old.jobs")
        .execute(&db.pool)
        .await?;
    Ok((rate, succeeded as u64))
}
