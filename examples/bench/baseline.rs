//! F: the old design's baseline (issue 16). The storage before the ready
//! ring (migration V3), rebuilt in a schema of its own, `bench_old`: the
//! jobs table with the indexes of migration V1 (among them the claim index
//! over pending rows), no ring and no triggers; its claim and outcome
//! statements replayed as raw SQL from one connection, batched as a worker
//! batches them. Scenario C (Conveyor as it is) runs in the same invocation,
//! so "C against F" is a ratio measured in one run.

use std::time::Instant;

use serde_json::json;

use crate::scenarios::{Config, Line};
use crate::support::{BenchDb, NO_CHECKPOINT_ENV, Result, secs};

/// The jobs table and indexes of the old design (migration V1).
const SCHEMA: &str = "
    DROP SCHEMA IF EXISTS bench_old CASCADE;
    CREATE SCHEMA bench_old;
    CREATE TABLE bench_old.jobs (LIKE conveyor.jobs INCLUDING DEFAULTS INCLUDING CONSTRAINTS);
    -- The rules on several columns, which conveyor.jobs keeps on its
    -- partitions since V10 (LIKE copies the column types, so the one-column
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

/// The old claim (src/db/claim.sql before V3, without limits).
const CLAIM: &str = "WITH picked AS (
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

/// The old outcome of a success (src/db/complete.sql's row writes).
const COMPLETE: &str = "UPDATE bench_old.jobs j
    SET state = 'success', result = 'null'::jsonb, finished_at = now(),
        lease_expires_at = NULL, worker_id = NULL
    FROM unnest($1::uuid[], $2::bigint[]) AS o(id, lease_token)
    WHERE j.id = ANY($1) AND j.id = o.id AND j.lease_token = o.lease_token
      AND j.state = 'started'";

pub async fn old_design(db: &BenchDb, cfg: &Config) -> Result<Vec<Line>> {
    sqlx::raw_sql(SCHEMA).execute(&db.pool).await?;
    let mut lines = Vec::new();
    for batch in cfg.raw_batches.clone() {
        let mut runs = Vec::new();
        for _ in 0..cfg.runs {
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
            // checkpoint that the set-up's WAL would trigger mid-run, as it
            // did in one F run of three, slowed that run by a fifth).
            if std::env::var(NO_CHECKPOINT_ENV).is_err() {
                db.checkpoint().await?;
            }
            let mut conn = db.pool.acquire().await?;
            let start = Instant::now();
            let mut done = 0usize;
            loop {
                let rows: Vec<(uuid::Uuid, i64)> = sqlx::query_as(CLAIM)
                    .bind(crate::support::QUEUE)
                    .bind(batch as i64)
                    .fetch_all(&mut *conn)
                    .await?;
                if rows.is_empty() {
                    break;
                }
                let (ids, tokens): (Vec<_>, Vec<_>) = rows.into_iter().unzip();
                done += ids.len();
                // Planned per call, as Conveyor plans its outcome batches.
                sqlx::query(COMPLETE)
                    .persistent(false)
                    .bind(ids)
                    .bind(tokens)
                    .execute(&mut *conn)
                    .await?;
            }
            runs.push(done as f64 / secs(start));
            drop(conn);
            sqlx::raw_sql("TRUNCATE bench_old.jobs")
                .execute(&db.pool)
                .await?;
        }
        let variant = format!(
            "old design (before the ready ring), raw SQL claim {batch} + complete {batch}, {} jobs, 1 connection",
            cfg.jobs
        );
        lines.push(Line::new("F", variant, "jobs/s", runs).with(json!({"batch": batch})));
    }
    sqlx::raw_sql("DROP SCHEMA bench_old CASCADE")
        .execute(&db.pool)
        .await?;
    Ok(lines)
}
