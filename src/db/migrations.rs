//! What `crate::migrate` runs: its advisory lock, the schemas, the function
//! files, migration batches and refinery's history table.

use sqlx::{PgConnection, Row};

use super::Queries;
use crate::error::Result;

/// Takes the advisory lock that serialises migrations of one schema, until
/// the end of `conn`'s transaction (a transaction-scoped lock, so that it is
/// held on the server connection the transaction runs on, also behind a
/// transaction-mode pooler). Sent unnamed: a named statement would live on
/// one server connection of a pooler only.
pub(crate) async fn lock_migrations(conn: &mut PgConnection, q: &Queries) -> Result<()> {
    sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended('conveyor.migrate:' || $1, 0))")
        .bind(q.schema)
        .persistent(false)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

pub(crate) async fn create_schema(conn: &mut PgConnection, q: &Queries) -> Result<()> {
    sqlx::raw_sql(q.create_schema).execute(&mut *conn).await?;
    Ok(())
}

/// Every PL/pgSQL and SQL function of the schema, one file each in
/// `migrations/functions/` (file name = function name), applied by
/// [`apply_functions`]. A test checks that the list and the directory agree.
pub(crate) const FUNCTIONS: &[(&str, &str)] = &[
    (
        "after_finish",
        include_str!("../../migrations/functions/after_finish.sql"),
    ),
    (
        "cancel",
        include_str!("../../migrations/functions/cancel.sql"),
    ),
    (
        "claim_lease_in_the_past",
        include_str!("../../migrations/functions/claim_lease_in_the_past.sql"),
    ),
    (
        "claim_statement",
        include_str!("../../migrations/functions/claim_statement.sql"),
    ),
    (
        "claims_done",
        include_str!("../../migrations/functions/claims_done.sql"),
    ),
    (
        "claims_given_back",
        include_str!("../../migrations/functions/claims_given_back.sql"),
    ),
    (
        "count_enqueued",
        include_str!("../../migrations/functions/count_enqueued.sql"),
    ),
    (
        "count_outcomes",
        include_str!("../../migrations/functions/count_outcomes.sql"),
    ),
    (
        "create_history_partitions",
        include_str!("../../migrations/functions/create_history_partitions.sql"),
    ),
    (
        "define_ready_slot",
        include_str!("../../migrations/functions/define_ready_slot.sql"),
    ),
    (
        "drop_history_partitions",
        include_str!("../../migrations/functions/drop_history_partitions.sql"),
    ),
    (
        "due_at",
        include_str!("../../migrations/functions/due_at.sql"),
    ),
    (
        "enqueue",
        include_str!("../../migrations/functions/enqueue.sql"),
    ),
    (
        "enqueue_each",
        include_str!("../../migrations/functions/enqueue_each.sql"),
    ),
    (
        "enqueue_many",
        include_str!("../../migrations/functions/enqueue_many.sql"),
    ),
    (
        "enqueue_unique",
        include_str!("../../migrations/functions/enqueue_unique.sql"),
    ),
    (
        "failure_args",
        include_str!("../../migrations/functions/failure_args.sql"),
    ),
    (
        "flush_enqueue_tally",
        include_str!("../../migrations/functions/flush_enqueue_tally.sql"),
    ),
    (
        "histogram",
        include_str!("../../migrations/functions/histogram.sql"),
    ),
    (
        "histogram_add",
        include_str!("../../migrations/functions/histogram_add.sql"),
    ),
    (
        "histogram_count_step",
        include_str!("../../migrations/functions/histogram_count_step.sql"),
    ),
    (
        "history_days_start",
        include_str!("../../migrations/functions/history_days_start.sql"),
    ),
    (
        "initial_state",
        include_str!("../../migrations/functions/initial_state.sql"),
    ),
    (
        "insert_job_specs",
        include_str!("../../migrations/functions/insert_job_specs.sql"),
    ),
    (
        "jobs_view_write",
        include_str!("../../migrations/functions/jobs_view_write.sql"),
    ),
    (
        "live_leases",
        include_str!("../../migrations/functions/live_leases.sql"),
    ),
    (
        "notify_job_ready",
        include_str!("../../migrations/functions/notify_job_ready.sql"),
    ),
    (
        "pause_queue",
        include_str!("../../migrations/functions/pause_queue.sql"),
    ),
    (
        "ready_bank_tables",
        include_str!("../../migrations/functions/ready_bank_tables.sql"),
    ),
    (
        "ready_insert",
        include_str!("../../migrations/functions/ready_insert.sql"),
    ),
    (
        "ready_moved",
        include_str!("../../migrations/functions/ready_moved.sql"),
    ),
    (
        "ready_sync",
        include_str!("../../migrations/functions/ready_sync.sql"),
    ),
    (
        "rebuild_ready",
        include_str!("../../migrations/functions/rebuild_ready.sql"),
    ),
    (
        "record_outcomes",
        include_str!("../../migrations/functions/record_outcomes.sql"),
    ),
    (
        "requeue",
        include_str!("../../migrations/functions/requeue.sql"),
    ),
    (
        "resume_queue",
        include_str!("../../migrations/functions/resume_queue.sql"),
    ),
    (
        "rotate_ring",
        include_str!("../../migrations/functions/rotate_ring.sql"),
    ),
    (
        "run_follow_ups",
        include_str!("../../migrations/functions/run_follow_ups.sql"),
    ),
    (
        "set_queue_limit",
        include_str!("../../migrations/functions/set_queue_limit.sql"),
    ),
    (
        "set_queue_rate_limit",
        include_str!("../../migrations/functions/set_queue_rate_limit.sql"),
    ),
    (
        "settle_claims",
        include_str!("../../migrations/functions/settle_claims.sql"),
    ),
    (
        "settle_expired_claims",
        include_str!("../../migrations/functions/settle_expired_claims.sql"),
    ),
    (
        "spawn",
        include_str!("../../migrations/functions/spawn.sql"),
    ),
    (
        "stats_buckets_ms",
        include_str!("../../migrations/functions/stats_buckets_ms.sql"),
    ),
    (
        "stats_to_totals",
        include_str!("../../migrations/functions/stats_to_totals.sql"),
    ),
    (
        "unique_key",
        include_str!("../../migrations/functions/unique_key.sql"),
    ),
    (
        "uuid_v7",
        include_str!("../../migrations/functions/uuid_v7.sql"),
    ),
    (
        "workflow_failed",
        include_str!("../../migrations/functions/workflow_failed.sql"),
    ),
    (
        "workflow_succeeded",
        include_str!("../../migrations/functions/workflow_succeeded.sql"),
    ),
];

/// (Re)creates every function of [`FUNCTIONS`] in one transaction, before
/// the migrations run: each file is a `CREATE OR REPLACE`, so applying them
/// again is harmless, and the body in the repository is the one the
/// database runs. Bodies are not checked against the tables here
/// (`check_function_bodies = off`, as `pg_dump` does): on a new database the
/// functions come first, because the baseline names them (a column default,
/// the triggers) and calls three of them to make the ready ring's slot
/// tables and the history's day tables.
pub(crate) async fn apply_functions(conn: &mut PgConnection, q: &Queries) -> Result<()> {
    use sqlx::Connection;
    let mut tx = conn.begin().await?;
    sqlx::raw_sql("SET LOCAL check_function_bodies = off")
        .execute(&mut *tx)
        .await?;
    for (_, text) in FUNCTIONS {
        let sql = super::in_schema(text, q.schema);
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    Ok(())
}

/// Runs a batch of statements (a migration) in one transaction.
pub(crate) async fn execute_in_transaction<'a>(
    conn: &mut PgConnection,
    statements: impl Iterator<Item = &'a str>,
) -> std::result::Result<usize, sqlx::Error> {
    use sqlx::Connection;
    let mut tx = conn.begin().await?;
    let mut count = 0;
    for statement in statements {
        sqlx::raw_sql(sqlx::AssertSqlSafe(statement))
            .execute(&mut *tx)
            .await?;
        count += 1;
    }
    tx.commit().await?;
    Ok(count)
}

/// Reads refinery's history table: (version, name, applied_on, checksum).
pub(crate) async fn applied_migrations(
    conn: &mut PgConnection,
    query: &str,
) -> std::result::Result<Vec<(i32, String, String, String)>, sqlx::Error> {
    let rows = sqlx::query(sqlx::AssertSqlSafe(query))
        .persistent(false)
        .fetch_all(&mut *conn)
        .await?;
    rows.iter()
        .map(|row| {
            Ok((
                row.try_get(0)?,
                row.try_get(1)?,
                row.try_get(2)?,
                row.try_get(3)?,
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::FUNCTIONS;

    /// The name a `CREATE OR REPLACE FUNCTION schema.name(` statement gives.
    fn created(text: &str) -> Vec<String> {
        let marker = "CREATE OR REPLACE FUNCTION ";
        text.match_indices(marker)
            .map(|(at, _)| {
                let rest = &text[at + marker.len()..];
                let name = &rest[..rest.find('(').unwrap_or(rest.len())];
                name.rsplit('.').next().unwrap_or(name).to_string()
            })
            .collect()
    }

    #[test]
    fn each_function_has_one_file_and_one_body() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/migrations/functions");
        let mut files: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().into_string().unwrap())
            .collect();
        files.sort();
        let listed: Vec<String> = FUNCTIONS.iter().map(|(n, _)| format!("{n}.sql")).collect();
        assert_eq!(
            listed, files,
            "FUNCTIONS and migrations/functions/ disagree"
        );
        for (name, text) in FUNCTIONS {
            // define_ready_slot() writes claim_ready() and ready_slot(), whose
            // bodies hold the ring's current bank (define_ready_slot.sql says why).
            let mut expected = vec![name.to_string()];
            if *name == "define_ready_slot" {
                expected.push("claim_ready".to_string());
                expected.push("ready_slot".to_string());
            }
            assert_eq!(
                created(text),
                expected,
                "{name}.sql must create {name} only"
            );
        }
        // No other SQL in the repository defines a function.
        let elsewhere = [
            concat!(env!("CARGO_MANIFEST_DIR"), "/migrations"),
            concat!(env!("CARGO_MANIFEST_DIR"), "/src/db"),
        ];
        for dir in elsewhere {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                if path.extension().is_some_and(|e| e == "sql") {
                    let text = std::fs::read_to_string(&path).unwrap().to_uppercase();
                    assert!(
                        !text.contains("CREATE FUNCTION") && !text.contains("REPLACE FUNCTION"),
                        "{} defines a function; its home is migrations/functions/",
                        path.display()
                    );
                }
            }
        }
    }
}
