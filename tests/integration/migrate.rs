//! Migrations: concurrent callers, idempotence, other schemas, clear errors.

use std::time::Duration;

use conveyor::{Client, NewJob, Worker};
use serde_json::json;

use crate::common::{TestDb, WAIT};

#[tokio::test]
async fn eight_concurrent_migrations_apply_the_schema_once() {
    let db = TestDb::empty().await;
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let pool = db.pool.clone();
        tasks.push(tokio::spawn(async move { conveyor::migrate(&pool).await }));
    }
    let mut applied = Vec::new();
    for task in tasks {
        applied.extend(task.await.unwrap().unwrap());
    }
    applied.sort();
    // Every migration file, V1 … Vn, applied exactly once across the callers.
    let files = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations"))
        .unwrap()
        .filter(|entry| entry.as_ref().unwrap().path().is_file())
        .count() as i32;
    assert_eq!(
        applied,
        (1..=files).collect::<Vec<_>>(),
        "each migration applied by exactly one caller"
    );
    let history: i64 = sqlx::query_scalar("SELECT count(*) FROM conveyor.schema_history")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(history, i64::from(files));
    // Idempotent afterwards.
    assert!(conveyor::migrate(&db.pool).await.unwrap().is_empty());
}

/// A schema migrated by a build from before the first release has in its
/// history migrations squashed into the baseline since (V2 … V20, and a V1
/// of another text). Migrating it again must fail, apply nothing, and say
/// what to do: not apply the baseline's missing parts around it.
#[tokio::test]
async fn a_schema_migrated_by_a_pre_release_build_is_refused_with_what_to_do() {
    let db = TestDb::new().await;
    let history = "SELECT count(*) FROM conveyor.schema_history";
    // A history entry this build does not have (written as refinery does).
    sqlx::query(
        "INSERT INTO conveyor.schema_history (version, name, applied_on, checksum)
         VALUES (20, 'rescue_floor', '2026-11-29T09:35:21.757577344Z', '1251689876527592463')",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let err = conveyor::migrate(&db.pool).await.unwrap_err();
    assert!(matches!(err, conveyor::Error::Migrate(_)), "{err:?}");
    let text = err.to_string();
    for needed in [
        "schema `conveyor` was migrated by another build",
        "conveyor.schema_history",
        "V20__rescue_floor, which this build does not have",
        "from before the first release cannot be upgraded",
        "recreate it with `DROP SCHEMA conveyor, conveyor_internal CASCADE`",
    ] {
        assert!(text.contains(needed), "{needed:?} not in: {text}");
    }
    // The baseline of another text (every pre-release history has one).
    sqlx::raw_sql(
        "DELETE FROM conveyor.schema_history WHERE version = 20;
         UPDATE conveyor.schema_history SET checksum = '13530179738628275685' WHERE version = 1",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let text = conveyor::migrate(&db.pool).await.unwrap_err().to_string();
    assert!(
        text.contains("V1__baseline with another text than this build's V1__baseline")
            && text.contains("DROP SCHEMA conveyor, conveyor_internal CASCADE"),
        "{text}"
    );
    let rows: i64 = sqlx::query_scalar(history)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(rows, 1, "nothing applied");
    // Another schema's error names that schema.
    conveyor::migrate_schema(&db.pool, "tenant_b")
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO tenant_b.schema_history (version, name, applied_on, checksum)
         VALUES (2, 'workers', '2026-11-29T09:35:20.811139884Z', '4032916765564760055')",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let text = conveyor::migrate_schema(&db.pool, "tenant_b")
        .await
        .unwrap_err()
        .to_string();
    assert!(
        text.contains("tenant_b.schema_history")
            && text.contains("V2__workers")
            && text.contains("DROP SCHEMA tenant_b, tenant_b_internal CASCADE"),
        "{text}"
    );
}

#[tokio::test]
async fn an_unmigrated_database_gives_a_clear_error() {
    let db = TestDb::empty().await;
    let err = db
        .client
        .enqueue(NewJob::new("t", json!({})))
        .await
        .unwrap_err();
    assert!(matches!(err, conveyor::Error::NotMigrated(_)), "{err:?}");
    assert!(err.to_string().contains("run conveyor::migrate"), "{err}");
}

#[tokio::test]
async fn another_schema_works_side_by_side() {
    let db = TestDb::new().await;
    conveyor::migrate_schema(&db.pool, "tenant_a")
        .await
        .unwrap();
    let tenant = Client::builder(db.pool.clone())
        .schema("tenant_a")
        .build()
        .unwrap();
    assert!(
        Client::builder(db.pool.clone())
            .schema("Bad-Name")
            .build()
            .is_err()
    );
    let worker = Worker::builder(&tenant)
        .register_fn("hello", |_, _| async move { Ok(json!("from tenant_a")) })
        .start()
        .unwrap();
    let handle = tenant
        .enqueue(NewJob::new("hello", json!({})))
        .await
        .unwrap();
    assert_eq!(handle.wait(WAIT).await.unwrap(), json!("from tenant_a"));
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM tenant_a.jobs")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let default: i64 = sqlx::query_scalar("SELECT count(*) FROM conveyor.jobs")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!((n, default), (1, 0));
    // SQL enqueue in that schema wakes that schema's workers.
    let id: uuid::Uuid = sqlx::query_scalar("SELECT tenant_a.enqueue('hello')")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let out: serde_json::Value = tenant.handle(id).wait(WAIT).await.unwrap();
    assert_eq!(out, json!("from tenant_a"));
    worker.shutdown(Duration::from_secs(5)).await.unwrap();
}

/// The schema is a public interface read in psql: every table, view,
/// sequence, column and function of it says what it is.
#[tokio::test]
async fn every_table_column_and_function_has_a_comment() {
    let db = TestDb::new().await;
    let missing: Vec<String> = sqlx::query_scalar(
        "SELECT c.relname::text FROM pg_class c
         WHERE c.relnamespace = 'conveyor'::regnamespace AND c.relkind IN ('r', 'v', 'S', 'p')
           AND c.relname <> 'schema_history'
           AND obj_description(c.oid, 'pg_class') IS NULL
         UNION ALL
         SELECT c.relname || '.' || a.attname FROM pg_class c
         JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
         WHERE c.relnamespace = 'conveyor'::regnamespace AND c.relkind IN ('r', 'v', 'p')
           AND c.relname <> 'schema_history'
           -- A partition's columns are its parent's, documented there.
           AND NOT c.relispartition
           AND col_description(c.oid, a.attnum) IS NULL
         UNION ALL
         SELECT p.oid::regprocedure::text FROM pg_proc p
         WHERE p.pronamespace IN ('conveyor'::regnamespace, 'conveyor_internal'::regnamespace)
           AND obj_description(p.oid, 'pg_proc') IS NULL
         ORDER BY 1",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert!(missing.is_empty(), "without a COMMENT: {missing:?}");
}

#[tokio::test]
async fn the_database_holds_exactly_the_functions_of_the_function_files() {
    let db = TestDb::new().await;
    // Applying them again (as every migrate does) changes nothing.
    conveyor::migrate(&db.pool).await.unwrap();
    let mut in_db: Vec<String> = sqlx::query_scalar(
        "SELECT p.proname::text FROM pg_proc p
         WHERE p.pronamespace IN ('conveyor'::regnamespace, 'conveyor_internal'::regnamespace)
           AND p.prokind <> 'a'",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    in_db.sort();
    // Aggregates are created in the file of their step function.
    let aggregates: Vec<String> = sqlx::query_scalar(
        "SELECT p.proname::text || ' ' || a.aggtransfn::regproc::text FROM pg_proc p
         JOIN pg_aggregate a ON a.aggfnoid = p.oid
         WHERE p.pronamespace IN ('conveyor'::regnamespace, 'conveyor_internal'::regnamespace)
         ORDER BY 1",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        aggregates,
        ["histogram_count conveyor_internal.histogram_count_step"]
    );
    // The function files of sql/ (any folder): those that create a function,
    // named after it; the other files are statements.
    let mut dirs = vec![std::path::PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/sql"
    ))];
    let mut files: Vec<String> = Vec::new();
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "sql")
                && std::fs::read_to_string(&path)
                    .unwrap()
                    .contains("CREATE OR REPLACE FUNCTION")
            {
                let name = path.file_stem().unwrap().to_str().unwrap();
                files.push(name.to_string());
            }
        }
    }
    // define_ready_slot.sql also writes claim_ready() and ready_slot(),
    // whose bodies hold the ring's current bank.
    files.push("claim_ready".to_string());
    files.push("ready_slot".to_string());
    files.sort();
    assert_eq!(
        in_db, files,
        "one function per file, no other (and no overloads)"
    );
    // The public interface (README's list) is in `conveyor`, the rest apart.
    let public: Vec<String> = sqlx::query_scalar(
        "SELECT p.proname::text FROM pg_proc p
         WHERE p.pronamespace = 'conveyor'::regnamespace ORDER BY 1",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        public,
        [
            "cancel",
            "enqueue",
            "enqueue_each",
            "enqueue_many",
            "pause_queue",
            "rebuild_ready",
            "requeue",
            "resume_queue",
            "set_queue_limit",
            "set_queue_rate_limit",
            "stats_buckets_ms",
            "unique_key",
            "uuid_v7"
        ]
    );
}
