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

/// Every PL/pgSQL and SQL function of the schema, one file each in `sql/`,
/// in the folder of the area that uses it (file name = function name),
/// applied by [`apply_functions`]. Sorted by name. A test checks that the
/// list and the function files under `sql/` agree.
pub(crate) const FUNCTIONS: &[(&str, &str)] = &[
    ("after_finish", sql!("workflow/after_finish.sql")),
    ("cancel", sql!("inspect/cancel.sql")),
    (
        "claim_lease_in_the_past",
        sql!("claim/claim_lease_in_the_past.sql"),
    ),
    ("claim_statement", sql!("claim/claim_statement.sql")),
    ("claims_done", sql!("claim/claims_done.sql")),
    ("claims_given_back", sql!("claim/claims_given_back.sql")),
    ("count_enqueued", sql!("stats/count_enqueued.sql")),
    ("count_outcomes", sql!("stats/count_outcomes.sql")),
    (
        "create_history_partitions",
        sql!("maintenance/create_history_partitions.sql"),
    ),
    ("define_ready_slot", sql!("ring/define_ready_slot.sql")),
    (
        "drop_history_partitions",
        sql!("maintenance/drop_history_partitions.sql"),
    ),
    ("due_at", sql!("enqueue/due_at.sql")),
    ("enqueue", sql!("enqueue/enqueue.sql")),
    ("enqueue_each", sql!("enqueue/enqueue_each.sql")),
    ("enqueue_many", sql!("enqueue/enqueue_many.sql")),
    ("enqueue_unique", sql!("enqueue/enqueue_unique.sql")),
    ("failure_args", sql!("workflow/failure_args.sql")),
    ("flush_enqueue_tally", sql!("stats/flush_enqueue_tally.sql")),
    ("histogram", sql!("stats/histogram.sql")),
    ("histogram_add", sql!("stats/histogram_add.sql")),
    (
        "histogram_count_step",
        sql!("stats/histogram_count_step.sql"),
    ),
    (
        "history_days_start",
        sql!("maintenance/history_days_start.sql"),
    ),
    ("initial_state", sql!("enqueue/initial_state.sql")),
    ("insert_job_specs", sql!("enqueue/insert_job_specs.sql")),
    ("jobs_view_write", sql!("inspect/jobs_view_write.sql")),
    ("live_leases", sql!("claim/live_leases.sql")),
    ("notify_job_ready", sql!("enqueue/notify_job_ready.sql")),
    ("pause_queue", sql!("queues/pause_queue.sql")),
    ("ready_bank_tables", sql!("ring/ready_bank_tables.sql")),
    ("ready_insert", sql!("ring/ready_insert.sql")),
    ("ready_moved", sql!("ring/ready_moved.sql")),
    ("ready_sync", sql!("ring/ready_sync.sql")),
    ("rebuild_ready", sql!("ring/rebuild_ready.sql")),
    ("record_outcomes", sql!("outcome/record_outcomes.sql")),
    ("requeue", sql!("inspect/requeue.sql")),
    ("resume_queue", sql!("queues/resume_queue.sql")),
    ("rotate_ring", sql!("ring/rotate_ring.sql")),
    ("run_follow_ups", sql!("workflow/run_follow_ups.sql")),
    ("set_queue_limit", sql!("queues/set_queue_limit.sql")),
    (
        "set_queue_rate_limit",
        sql!("queues/set_queue_rate_limit.sql"),
    ),
    ("settle_claims", sql!("claim/settle_claims.sql")),
    (
        "settle_expired_claims",
        sql!("maintenance/settle_expired_claims.sql"),
    ),
    ("spawn", sql!("workflow/spawn.sql")),
    ("stats_buckets_ms", sql!("stats/stats_buckets_ms.sql")),
    ("stats_to_totals", sql!("stats/stats_to_totals.sql")),
    ("unique_key", sql!("enqueue/unique_key.sql")),
    ("uuid_v7", sql!("enqueue/uuid_v7.sql")),
    ("workflow_failed", sql!("workflow/workflow_failed.sql")),
    (
        "workflow_succeeded",
        sql!("workflow/workflow_succeeded.sql"),
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
        let sql = function_text(text, q.schema);
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    Ok(())
}

/// A function file's text as it is applied to `schema`: schema names
/// rewritten ([`super::in_schema`]) and `{ring_slots}` replaced with
/// [`super::ring::RING_SLOTS`], so the bodies the database holds name the
/// number itself, as if written there.
pub(crate) fn function_text(text: &str, schema: &str) -> String {
    super::in_schema(
        &text.replace("{ring_slots}", &super::ring::RING_SLOTS.to_string()),
        schema,
    )
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

    /// Every `.sql` file under `dir`, at any depth, sorted.
    fn sql_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
        let mut found = Vec::new();
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                found.extend(sql_files(&path));
            } else if path.extension().is_some_and(|e| e == "sql") {
                found.push(path);
            }
        }
        found.sort();
        found
    }

    fn defines_a_function(text: &str) -> bool {
        let text = text.to_uppercase();
        text.contains("CREATE FUNCTION") || text.contains("REPLACE FUNCTION")
    }

    #[test]
    fn each_function_has_one_file_and_one_body() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let names: Vec<&str> = FUNCTIONS.iter().map(|(n, _)| *n).collect();
        let mut sorted = names.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(names, sorted, "FUNCTIONS is sorted by name, each once");
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
        // Under sql/: a file that defines a function is named after it and
        // listed in FUNCTIONS with its text; every other file (a statement
        // the library sends) defines none.
        let mut function_files = Vec::new();
        let mut stems = std::collections::BTreeSet::new();
        for path in sql_files(&root.join("sql")) {
            let stem = path.file_stem().unwrap().to_str().unwrap().to_string();
            assert!(
                stems.insert(stem),
                "two files of sql/ are named {}: each name says one thing",
                path.display()
            );
            let text = std::fs::read_to_string(&path).unwrap();
            let stem = path.file_stem().unwrap().to_str().unwrap().to_string();
            match FUNCTIONS.iter().find(|(n, _)| *n == stem) {
                Some((_, listed)) if defines_a_function(&text) => {
                    assert_eq!(
                        *listed,
                        text,
                        "FUNCTIONS' text for {stem} is not {}",
                        path.display()
                    );
                    function_files.push(stem);
                }
                _ => assert!(
                    !defines_a_function(&text),
                    "{} defines a function: name the file after it and list it in FUNCTIONS",
                    path.display()
                ),
            }
        }
        function_files.sort();
        assert_eq!(
            names, function_files,
            "FUNCTIONS and the function files of sql/ disagree"
        );
        // The migrations (migrations/, at any depth) define no function:
        // functions live in sql/ and are applied before the migrations.
        for path in sql_files(&root.join("migrations")) {
            let text = std::fs::read_to_string(&path).unwrap();
            assert!(
                !defines_a_function(&text),
                "{} defines a function; its home is sql/<area>/",
                path.display()
            );
        }
    }
}
