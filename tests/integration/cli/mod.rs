//! The `conveyor` command line, run as a process against a test database,
//! its output parsed in `--json` mode. Queue limits, `stats --watch` and
//! progress on a terminal are in `watch`.

mod watch;

use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};

use crate::common::{TestDb, count_jobs};

/// The command on `url` (none if empty: `DATABASE_URL` or the default).
fn command(url: &str, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_conveyor"));
    if !url.is_empty() {
        command.arg("--database-url").arg(url);
    }
    command.args(args).env("RUST_BACKTRACE", "0");
    command.stdin(Stdio::null());
    command
}

fn conveyor(url: &str, args: &[&str]) -> Output {
    command(url, args).output().expect("run conveyor")
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

/// Runs, expects success, returns stdout (the human output).
fn text(url: &str, args: &[&str]) -> String {
    let out = conveyor(url, args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "conveyor {args:?} failed: {err}");
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// `"a b c"` → `["a", "b", "c"]`.
fn words(line: &str) -> Vec<&str> {
    line.split_whitespace().collect()
}

/// Runs, expects failure, returns stderr.
fn fails(url: &str, args: &[&str]) -> String {
    let out = conveyor(url, args);
    assert_eq!(out.status.code(), Some(1), "conveyor {args:?} should fail");
    String::from_utf8_lossy(&out.stderr).to_string()
}

/// Runs, expects a usage error (exit code 2), returns stderr.
fn misused(url: &str, args: &[&str]) -> String {
    let out = conveyor(url, args);
    assert_eq!(out.status.code(), Some(2), "conveyor {args:?}: usage");
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
        &words(r#"enqueue resize --args {"w":64} --queue media"#),
    );
    assert_eq!(a["state"], "pending");
    let b = json(
        &db,
        &words("enqueue resize --args {} --queue media --delay 3600 --priority 5"),
    );
    assert_eq!(b["state"], "scheduled");
    json(&db, &["enqueue", "email"]);

    let listed = json(&db, &["jobs", "list", "--queue", "media"]);
    let listed = listed.as_array().unwrap();
    assert_eq!(listed.len(), 2);
    assert_eq!(listed[0]["id"], b["id"], "newest first");
    let pending = json(&db, &words("jobs list --state pending --task resize"));
    assert_eq!(pending.as_array().unwrap().len(), 1);
    let one = json(&db, &words("jobs list --limit 1"));
    assert_eq!(one.as_array().map(Vec::len), Some(1));

    let id = a["id"].as_str().unwrap();
    let shown = json(&db, &["jobs", "show", id]);
    assert_eq!(shown["args"], json!({"w": 64}));
    assert_eq!(shown["queue"], "media");

    json(&db, &["queue", "pause", "media"]);
    let stats = json(&db, &["stats"]);
    let queue = |name: &str| {
        stats
            .as_array()
            .unwrap()
            .iter()
            .find(|q| q["queue"] == name)
    };
    let media = queue("media").unwrap();
    assert_eq!(
        (media["pending"].as_i64(), media["scheduled"].as_i64()),
        (Some(1), Some(1))
    );
    assert_eq!(media["paused"], true);
    assert!(media["oldest_pending_secs"].as_f64().unwrap() >= 0.0);
    assert_eq!(queue("default").unwrap()["pending"].as_i64(), Some(1));
    json(&db, &["queue", "resume", "media"]);
    let stats = json(&db, &["stats"]).as_array().cloned().unwrap();
    assert!(stats.iter().all(|q| q["paused"] == false));

    // Human output is a table.
    let table = text(&db.url(), &["jobs", "list"]);
    assert!(
        ["resize", "email", "state"]
            .iter()
            .all(|w| table.contains(w)),
        "{table}"
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
    assert_eq!(
        json(&db, &["retry", &first]),
        json!({ "requeued": 1, "skipped": 0 })
    );
    let requeued = count_jobs(&db.pool, "state = 'pending' AND attempt = 0").await;
    assert_eq!(requeued, 1);
    // A filter needs --yes when nobody can answer the prompt.
    let err = fails(&db.url(), &["retry", "--state", "failure"]);
    assert!(err.contains("without --yes"), "{err}");
    assert_eq!(
        json(&db, &["retry", "--state", "failure", "--yes"]),
        json!({ "requeued": 2, "skipped": 0 })
    );

    let cancelled = json(&db, &["cancel", &first]);
    assert_eq!(
        cancelled,
        json!({ "cancelled": 1, "stopping": 0, "skipped": 0 })
    );
    assert_eq!(
        json(&db, &["delete", "--state", "cancelled", "--yes"]),
        json!({ "deleted": 1, "skipped": 0 })
    );
    assert_eq!(
        json(&db, &["delete", "--task", "charge", "--yes"]),
        json!({ "deleted": 2, "skipped": 0 })
    );
    assert_eq!(count_jobs(&db.pool, "true").await, 0);
    let err = misused(&db.url(), &["delete"]);
    assert!(err.contains("give job ids, or a filter"), "{err}");
    let err = misused(&db.url(), &["delete", &first, "--state", "failure"]);
    assert!(err.contains("not both"), "{err}");
}

#[tokio::test]
async fn bad_input_gets_a_clear_error() {
    let db = TestDb::new().await;
    let err = fails("postgres://postgres@127.0.0.1:1/nowhere", &["stats"]);
    assert!(
        err.contains("cannot connect to the database") && err.contains("refused"),
        "{err}"
    );
    let err = misused(&db.url(), &["jobs", "show", "42"]);
    assert!(err.contains("`42` is not a job id"), "{err}");
    let missing = uuid::Uuid::now_v7().to_string();
    let err = fails(&db.url(), &["jobs", "show", &missing]);
    assert!(err.contains("no job with id"), "{err}");
    let err = misused(&db.url(), &["enqueue", "x", "--args", "{not json"]);
    assert!(err.contains("--args is not valid JSON"), "{err}");
    let err = misused(&db.url(), &["jobs", "list", "--state", "running"]);
    assert!(err.contains("unknown job state"), "{err}");
    let err = misused(&db.url(), &["jobs", "list", "--since", "yesterday"]);
    assert!(err.contains("RFC 3339"), "{err}");
}

/// Issue 17.1: bulk actions by filter reach every matching job, in pages,
/// and the confirmation counts them all.
#[tokio::test]
async fn bulk_actions_reach_every_matching_job() {
    let db = TestDb::new().await;
    // More than two pages of 1,000, and a job the filters must leave alone.
    sqlx::query(
        "INSERT INTO conveyor.jobs (task, state, attempt, finished_at, last_error)
         SELECT 'charge', 'failure', 3, now(), 'declined' FROM generate_series(1, 2345)",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    json(&db, &["enqueue", "other"]);
    let err = fails(&db.url(), &["retry", "--state", "failure"]);
    assert!(
        err.contains("refusing to re-queue 2345 job(s)"),
        "the prompt must count every matching job: {err}"
    );
    let said = text(&db.url(), &words("retry --state failure --yes"));
    assert!(said.contains("re-queued 2345 job(s)"), "{said}");
    assert_eq!(count_jobs(&db.pool, "state = 'pending'").await, 2346);

    let cancelled = json(&db, &["cancel", "--task", "charge", "--yes"]);
    assert_eq!(cancelled["cancelled"], 2345, "{cancelled}");
    assert_eq!(count_jobs(&db.pool, "state = 'cancelled'").await, 2345);
    // An explicit cap is a cap.
    let deleted = json(&db, &words("delete --state cancelled --limit 100 --yes"));
    assert_eq!(deleted["deleted"], 100, "{deleted}");
    let deleted = json(&db, &["delete", "--state", "cancelled", "--yes"]);
    assert_eq!(deleted["deleted"], 2245, "{deleted}");
    assert_eq!(count_jobs(&db.pool, "true").await, 1);
}

/// Issue 17.2: a reader that stops early (`| head -1`) ends the output
/// quietly, not with a panic.
#[tokio::test]
async fn output_into_a_closed_pipe_ends_quietly() {
    use std::io::{BufRead, BufReader};
    let db = TestDb::new().await;
    sqlx::query("INSERT INTO conveyor.jobs (task) SELECT 'many' FROM generate_series(1, 2000)")
        .execute(&db.pool)
        .await
        .unwrap();
    for args in [
        &["--json", "jobs", "list", "--limit", "2000"][..],
        &["jobs", "list", "--limit", "2000"],
    ] {
        let mut child = command(&db.url(), args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run conveyor");
        let mut first = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut first)
            .unwrap();
        // The read end is closed here, long before the output ends.
        assert!(!first.is_empty());
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert!(
            matches!(out.status.code(), Some(0 | 141)),
            "{args:?}: {:?} {stderr}",
            out.status
        );
    }
}

/// Issue 17.3: neither help nor errors show the database password.
#[test]
fn the_database_password_is_never_printed() {
    let env = [("DATABASE_URL", "postgres://u:secretpw@host/db")];
    for args in [&["--help"][..], &["retry", "--help"]] {
        let out = command("", args).envs(env).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("DATABASE_URL"), "{text}");
        assert!(
            !text.contains("secretpw"),
            "{args:?} shows the password: {text}"
        );
    }
    for url in [
        "postgres://u:secretpw@127.0.0.1:1/db",
        "postgres://127.0.0.1:1/db?user=u&password=secretpw",
        "postgres://u:secretpw@127.0.0.1:1/db?sslmode=nonsense",
        "host=127.0.0.1 password=secretpw",
    ] {
        let out = command("", &["stats"])
            .env("DATABASE_URL", url)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{url}: {err}");
        assert!(
            !err.contains("secretpw"),
            "{url}: the error shows the password: {err}"
        );
    }
}

/// Issue 17.4: one exit code convention: an id that does not exist, or a
/// job the action cannot apply to, is an error (1) naming the id.
#[tokio::test]
async fn unknown_ids_and_wrong_states_fail_alike() {
    let db = TestDb::new().await;
    let missing = uuid::Uuid::now_v7().to_string();
    for action in ["retry", "cancel", "delete"] {
        let err = fails(&db.url(), &[action, &missing]);
        assert!(
            err.contains(&missing) && err.contains("no job"),
            "{action}: {err}"
        );
    }
    let pending = json(&db, &["enqueue", "x"]);
    let pending = pending["id"].as_str().unwrap();
    let err = fails(&db.url(), &["retry", pending]);
    assert!(err.contains(pending) && err.contains("pending"), "{err}");
    // The good ids are still acted on; the bad ones are named.
    let out = conveyor(&db.url(), &["--json", "cancel", pending, &missing]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&missing) && !err.contains(pending), "{err}");
    let done: Value = serde_json::from_slice(&out.stdout).expect("JSON output");
    assert_eq!(done["cancelled"], 1, "{done}");
    let err = fails(&db.url(), &["cancel", pending]);
    assert!(err.contains(pending) && err.contains("cancelled"), "{err}");
    // Usage errors stay clap's 2.
    let out = conveyor(&db.url(), &["retry", "--no-such-flag"]);
    assert_eq!(out.status.code(), Some(2));
}

/// Issue 17.5: a negative priority is a value, not a flag.
#[tokio::test]
async fn enqueue_takes_a_negative_priority() {
    let db = TestDb::new().await;
    let job = json(&db, &["enqueue", "low", "--priority", "-5"]);
    let id: uuid::Uuid = job["id"].as_str().unwrap().parse().unwrap();
    let priority: i32 = sqlx::query_scalar("SELECT priority FROM conveyor.jobs WHERE id = $1")
        .bind(id)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(priority, -5);
}

/// Issue 17.6: enqueue's options for retries, time limit, id, headers and
/// start time land in the row; bad values are refused with one line.
#[tokio::test]
async fn enqueue_options_land_in_the_row() {
    let db = TestDb::new().await;
    let id = uuid::Uuid::now_v7();
    let line = format!(
        "enqueue report --id {id} --max-retries 3 --timeout 90.5 --header tenant=acme \
         --header note=a=b --run-at 2030-01-02T03:04:05+01:00"
    );
    let job = json(&db, &words(&line));
    assert_eq!(job["id"], id.to_string());
    assert_eq!(job["state"], "scheduled");
    let row: (i32, f64, Value, chrono::DateTime<chrono::Utc>) = sqlx::query_as(
        "SELECT max_retries, extract(epoch FROM timeout)::float8, headers, run_at
         FROM conveyor.jobs WHERE id = $1",
    )
    .bind(id)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(row.0, 3);
    assert!((row.1 - 90.5).abs() < 1e-6, "{}", row.1);
    assert_eq!(row.2, json!({ "tenant": "acme", "note": "a=b" }));
    assert_eq!(row.3.to_rfc3339(), "2030-01-02T02:04:05+00:00");

    for (args, code, says) in [
        ("--timeout 0", 1, "timeout"),
        ("--timeout -1", 2, "seconds >= 0"),
        ("--delay -1", 2, "seconds >= 0"),
        ("--timeout nan", 2, "seconds"),
        ("--max-retries 4294967295", 1, "max_retries"),
        ("--id nope", 2, "--id"),
        ("--header novalue", 2, "KEY=VALUE"),
        ("--run-at tomorrow", 2, "RFC 3339"),
        ("--max-retries -1", 2, "--max-retries"),
        ("--delay 5 --run-at 2030-01-01T00:00:00Z", 2, "--run-at"),
    ] {
        let out = conveyor(&db.url(), &words(&format!("enqueue bad {args}")));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        if code == 1 {
            assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        }
    }
    assert_eq!(count_jobs(&db.pool, "task = 'bad'").await, 0);
}

/// Issue 17.7: a database error is one clean line: PostgreSQL's message,
/// without sqlx's decorations (" at line N" of PostgreSQL's C source).
#[tokio::test]
async fn database_errors_print_one_clean_line() {
    let db = TestDb::new().await;
    let url = db.url();
    let nowhere = format!(
        "{}/conveyor_no_such_database",
        url.rsplit_once('/').unwrap().0
    );
    let nul = ["enqueue", "x", "--args", r#"{"a": "\u0000"}"#];
    for (url, args, says) in [
        // Connecting…
        (
            &nowhere,
            &["stats"][..],
            "database \"conveyor_no_such_database\" does not exist",
        ),
        // …and a statement, once connected.
        (&url, &nul, "error: database: "),
    ] {
        let err = fails(url, args);
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(err.starts_with("error: ") && err.contains(says), "{err}");
        for noise in [" at line ", ".rs:", "sqlx", "error returned from database"] {
            assert!(!err.contains(noise), "{noise:?} in {err}");
        }
    }
}
