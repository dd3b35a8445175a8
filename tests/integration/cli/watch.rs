//! `queue limit` / `queue rate`, `stats --watch` (refreshes until Ctrl-C,
//! quiet on a closed pipe), bulk progress on a terminal only, and an
//! enqueue under an id that exists.

use std::io::{BufRead, BufReader};
use std::process::Stdio;

use serde_json::{Value, json};

use super::{command, conveyor, misused, words};
use crate::common::{TestDb, WAIT, count_jobs};

type Settings = (Option<i32>, Option<i32>, Option<f64>);

async fn settings(db: &TestDb, queue: &str) -> Option<Settings> {
    sqlx::query_as(
        "SELECT concurrency_limit, rate_limit, extract(epoch FROM rate_period)::float8
         FROM conveyor.queues WHERE name = $1",
    )
    .bind(queue)
    .fetch_optional(&db.pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn queue_limit_and_rate() {
    let db = TestDb::new().await;
    assert_eq!(
        super::json(&db, &words("queue limit api 3")),
        json!({ "queue": "api", "concurrency_limit": 3 })
    );
    assert_eq!(settings(&db, "api").await, Some((Some(3), None, None)));
    for (period, secs) in [
        ("1m", 60.0),
        ("90", 90.0),
        ("500ms", 0.5),
        ("2h", 7200.0),
        ("1.5s", 1.5),
    ] {
        let out = super::json(&db, &["queue", "rate", "api", "100", period]);
        assert_eq!(out["rate_period_secs"], secs, "{period}");
        assert_eq!(
            settings(&db, "api").await,
            Some((Some(3), Some(100), Some(secs))),
            "{period}"
        );
    }
    let said = super::text(&db.url(), &words("queue rate api 100 1m"));
    assert_eq!(said.trim(), "api: at most 100 job(s) started per 1m");
    super::json(&db, &words("queue limit api none"));
    super::json(&db, &words("queue rate api none"));
    assert_eq!(settings(&db, "api").await, Some((None, None, None)));

    for (args, says) in [
        ("queue limit api 0", "from 1 to 2147483647, or none"),
        ("queue limit api lots", "from 1 to 2147483647, or none"),
        (
            "queue limit api 2147483648",
            "from 1 to 2147483647, or none",
        ),
        ("queue limit api", "<N|none>"),
        ("queue rate api 100", "give the rate's period too"),
        ("queue rate api none 1m", "give no period after it"),
        ("queue rate api 100 0s", "from 1 ms to 100 years"),
        ("queue rate api 100 soon", "from 1 ms to 100 years"),
        ("queue rate api 100 1y", "from 1 ms to 100 years"),
    ] {
        let err = misused(&db.url(), &words(args));
        assert!(err.contains(says), "{args}: {err}");
    }
    assert_eq!(
        settings(&db, "api").await,
        Some((None, None, None)),
        "nothing changed"
    );
}

/// `stats --watch`: a line per refresh (JSON), which follows the queue;
/// Ctrl-C ends it with exit code 0; a closed stdout with 141, quietly.
#[tokio::test]
async fn stats_watch_refreshes_until_interrupted() {
    let db = TestDb::new().await;
    let mut child = command(&db.url(), &["--json", "stats", "--watch", "0.2"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (lines_tx, mut lines) = tokio::sync::mpsc::unbounded_channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    let next = async |lines: &mut tokio::sync::mpsc::UnboundedReceiver<String>| -> Vec<Value> {
        let line = tokio::time::timeout(WAIT, lines.recv())
            .await
            .expect("a refresh")
            .expect("a line");
        serde_json::from_str::<Value>(&line)
            .expect("one JSON array per line")
            .as_array()
            .unwrap()
            .clone()
    };
    assert_eq!(next(&mut lines).await, Vec::<Value>::new(), "no queue yet");
    super::json(&db, &words("enqueue resize --queue media"));
    // A later refresh shows the new job.
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let stats = next(&mut lines).await;
        if stats
            .iter()
            .any(|q| q["queue"] == "media" && q["pending"] == 1)
        {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the watch never showed the job"
        );
    }
    let pid = child.id().to_string();
    let sent = std::process::Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .unwrap();
    assert!(sent.success());
    let out = wait(child).await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "Ctrl-C ends the watch cleanly: {:?}",
        out
    );
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Tables, into a reader that stops after the first line.
    let mut child = command(&db.url(), &["stats", "--watch", "0.1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.contains("every 100ms (Ctrl-C to stop)"), "{first}");
    let out = wait(child).await;
    assert_eq!(out.status.code(), Some(141), "{out:?}");
    assert!(
        out.stderr.is_empty(),
        "quiet: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    for bad in ["0", "0.05", "-1", "soon"] {
        let err = misused(&db.url(), &["stats", "--watch", bad]);
        assert!(err.contains("at least 0.1"), "{bad}: {err}");
    }
}

/// Waits for a child without blocking the runtime, failing after [`WAIT`].
async fn wait(child: std::process::Child) -> std::process::Output {
    let waited = tokio::task::spawn_blocking(move || child.wait_with_output());
    tokio::time::timeout(WAIT, waited)
        .await
        .expect("the command ends")
        .unwrap()
        .unwrap()
}

/// Bulk commands show progress on a terminal's stderr (here a pseudo
/// terminal from util-linux's `script`), never into a pipe; both end with
/// the count.
#[tokio::test]
async fn bulk_progress_shows_on_a_terminal_only() {
    let db = TestDb::new().await;
    sqlx::query(
        "INSERT INTO conveyor.jobs (task, state, attempt, finished_at, last_error)
         SELECT 'charge', 'failure', 1, now(), 'x' FROM generate_series(1, 2500)",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    // Into pipes: the count on stdout, nothing on stderr.
    let out = conveyor(
        &db.url(),
        &words("retry --state failure --limit 1500 --yes"),
    );
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "re-queued 1500 job(s)"
    );
    sqlx::query(
        "INSERT INTO conveyor.jobs (task, state, attempt, finished_at, last_error)
         SELECT 'charge', 'failure', 1, now(), 'x' FROM generate_series(1, 1000)",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    assert!(
        out.stderr.is_empty(),
        "no progress into a pipe: {:?}",
        String::from_utf8_lossy(&out.stderr)
    );
    // On a terminal: "deleted 1000 of 2000…" between the pages.
    let line = format!(
        "{} --database-url '{}' delete --state failure --yes",
        env!("CARGO_BIN_EXE_conveyor"),
        db.url()
    );
    let out = std::process::Command::new("script")
        .args(["-qec", &line, "/dev/null"])
        .stdin(Stdio::null())
        .output()
        .expect("util-linux's `script` runs the command on a pseudo terminal");
    let screen = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{screen}");
    assert!(screen.contains("\rdeleted 1000 of 2000…"), "{screen:?}");
    assert!(screen.contains("deleted 2000 job(s)"), "{screen:?}");
    assert_eq!(count_jobs(&db.pool, "state = 'failure'").await, 0);
}

/// `enqueue --id` of an id that exists inserts nothing and says so.
#[tokio::test]
async fn enqueue_under_an_existing_id_is_a_duplicate() {
    let db = TestDb::new().await;
    let id = uuid::Uuid::now_v7().to_string();
    let first = super::json(&db, &["enqueue", "report", "--id", &id]);
    assert_eq!(first["duplicate"], false);
    let second = super::json(
        &db,
        &[
            "enqueue",
            "report",
            "--id",
            &id,
            "--args",
            r#"{"other": 1}"#,
        ],
    );
    assert_eq!(
        (second["id"].as_str(), second["duplicate"].as_bool()),
        (Some(id.as_str()), Some(true))
    );
    let said = super::text(&db.url(), &["enqueue", "report", "--id", &id]);
    assert!(said.contains("a duplicate: nothing inserted"), "{said}");
    assert_eq!(count_jobs(&db.pool, "task = 'report'").await, 1);
    let args: Value = sqlx::query_scalar("SELECT args FROM conveyor.jobs")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(args, json!({}), "the first job's args");
}
