//! The `conveyor` command line, run as a process against a test database,
//! its output parsed in `--json` mode.

use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};

use crate::common::{TestDb, count_jobs};

fn conveyor(url: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_conveyor"))
        .arg("--database-url")
        .arg(url)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run conveyor")
}

/// Runs with `--json`, expects success, returns the parsed output.
fn json(db: &TestDb, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let out = conveyor(&db.url(), &all);
    assert!(
        out.status.success(),
        "conveyor {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON output")
}

/// Runs, expects failure, returns stderr.
fn fails(url: &str, args: &[&str]) -> String {
    let out = conveyor(url, args);
    assert_eq!(out.status.code(), Some(1), "conveyor {args:?} should fail");
    String::from_utf8_lossy(&out.stderr).to_string()
}

#[tokio::test]
async fn migrate_enqueue_list_show_and_stats() {
    let db = TestDb::empty().await;
    // Before migrating: a clear error.
    let err = fails(&db.url(), &["stats"]);
    assert!(err.contains("conveyor migrate"), "{err}");
    let applied = json(&db, &["migrate"]);
    assert!(!applied["applied"].as_array().unwrap().is_empty());
    assert_eq!(json(&db, &["migrate"]), json!({ "applied": [] }));

    let a = json(
        &db,
        &[
            "enqueue",
            "resize",
            "--args",
            r#"{"w": 64}"#,
            "--queue",
            "media",
        ],
    );
    assert_eq!(a["state"], "pending");
    let b = json(
        &db,
        &[
            "enqueue",
            "resize",
            "--args",
            "{}",
            "--queue",
            "media",
            "--delay",
            "3600",
            "--priority",
            "5",
        ],
    );
    assert_eq!(b["state"], "scheduled");
    json(&db, &["enqueue", "email"]);

    let listed = json(&db, &["jobs", "list", "--queue", "media"]);
    let listed = listed.as_array().unwrap();
    assert_eq!(listed.len(), 2);
    assert_eq!(listed[0]["id"], b["id"], "newest first");
    let pending = json(
        &db,
        &["jobs", "list", "--state", "pending", "--task", "resize"],
    );
    assert_eq!(pending.as_array().unwrap().len(), 1);
    assert_eq!(
        json(&db, &["jobs", "list", "--limit", "1"])
            .as_array()
            .unwrap()
            .len(),
        1
    );

    let id = a["id"].as_str().unwrap();
    let shown = json(&db, &["jobs", "show", id]);
    assert_eq!(shown["args"], json!({"w": 64}));
    assert_eq!(shown["queue"], "media");

    json(&db, &["queue", "pause", "media"]);
    let stats = json(&db, &["stats"]);
    let media = stats
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["queue"] == "media")
        .unwrap();
    assert_eq!(
        (media["pending"].as_i64(), media["scheduled"].as_i64()),
        (Some(1), Some(1))
    );
    assert_eq!(media["paused"], true);
    assert!(media["oldest_pending_secs"].as_f64().unwrap() >= 0.0);
    let default = stats
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["queue"] == "default")
        .unwrap();
    assert_eq!(default["pending"].as_i64(), Some(1));
    json(&db, &["queue", "resume", "media"]);
    let stats = json(&db, &["stats"]);
    assert!(
        stats
            .as_array()
            .unwrap()
            .iter()
            .all(|q| q["paused"] == false)
    );

    // Human output is a table.
    let out = conveyor(&db.url(), &["jobs", "list"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("resize") && text.contains("email") && text.contains("state"),
        "{text}"
    );
}

#[tokio::test]
async fn retry_cancel_and_delete_by_id_or_filter() {
    let db = TestDb::new().await;
    let failed: Vec<uuid::Uuid> = sqlx::query_scalar(
        "INSERT INTO conveyor.jobs (task, state, attempt, finished_at, last_error)
         SELECT 'charge', 'failure', 3, now(), 'declined' FROM generate_series(1, 3) RETURNING id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let first = failed[0].to_string();
    assert_eq!(json(&db, &["retry", &first]), json!({ "requeued": 1 }));
    assert_eq!(
        count_jobs(&db.pool, "state = 'pending' AND attempt = 0").await,
        1
    );
    // A filter needs --yes when nobody can answer the prompt.
    let err = fails(&db.url(), &["retry", "--state", "failure"]);
    assert!(err.contains("without --yes"), "{err}");
    assert_eq!(
        json(&db, &["retry", "--state", "failure", "--yes"]),
        json!({ "requeued": 2 })
    );

    let cancelled = json(&db, &["cancel", &first]);
    assert_eq!(cancelled["cancelled"][&first], "cancelled");
    assert_eq!(
        json(&db, &["delete", "--state", "cancelled", "--yes"]),
        json!({ "deleted": 1 })
    );
    assert_eq!(
        json(&db, &["delete", "--task", "charge", "--yes"]),
        json!({ "deleted": 2 })
    );
    assert_eq!(count_jobs(&db.pool, "true").await, 0);
    let err = fails(&db.url(), &["delete"]);
    assert!(err.contains("give job ids, or a filter"), "{err}");
}

#[tokio::test]
async fn bad_input_gets_a_clear_error() {
    let db = TestDb::new().await;
    let err = fails("postgres://postgres@127.0.0.1:1/nowhere", &["stats"]);
    assert!(
        err.contains("cannot connect to the database") && err.contains("refused"),
        "{err}"
    );
    let err = fails(&db.url(), &["jobs", "show", "42"]);
    assert!(err.contains("`42` is not a job id"), "{err}");
    let missing = uuid::Uuid::now_v7().to_string();
    let err = fails(&db.url(), &["jobs", "show", &missing]);
    assert!(err.contains("no job with id"), "{err}");
    let err = fails(&db.url(), &["enqueue", "x", "--args", "{not json"]);
    assert!(err.contains("--args is not valid JSON"), "{err}");
    let err = fails(&db.url(), &["jobs", "list", "--state", "running"]);
    assert!(err.contains("unknown job state"), "{err}");
    let err = fails(&db.url(), &["jobs", "list", "--since", "yesterday"]);
    assert!(err.contains("RFC 3339"), "{err}");
}
