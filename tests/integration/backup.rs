//! The nightly backup: a real `pg_dump` of a database whose workers are
//! running, restored into a new database where workers then start.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::Semaphore;

use conveyor::{JobId, NewJob, TaskError, Worker, WorkerHandle};

use crate::common::{TestDb, WAIT, count_jobs, eventually};

/// A program of the server's own version (`/usr/lib/postgresql/<n>/bin`).
fn pg_program(name: &str) -> PathBuf {
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .expect("PostgreSQL's programs under /usr/lib/postgresql")
        .filter_map(|e| e.ok().map(|e| e.path().join("bin").join(name)))
        .filter(|p| p.exists())
        .collect();
    found.sort();
    found
        .pop()
        .unwrap_or_else(|| panic!("no {name} under /usr/lib/postgresql/*/bin"))
}

/// Runs a PostgreSQL program to completion, failing the test if it fails.
fn run(program: &str, args: &[&str]) {
    let out = std::process::Command::new(pg_program(program))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// How many times each job ran, by id, in one database's workers.
type Runs = Arc<Mutex<HashMap<JobId, u32>>>;

/// A worker serving `queues`: `quick` returns its argument, `doomed` fails
/// for good, `block` waits for `gate`. Every run is counted in `runs`.
fn worker(db: &TestDb, queues: &[&str], gate: &Arc<Semaphore>, runs: &Runs) -> WorkerHandle {
    let count = |runs: &Runs| {
        let runs = runs.clone();
        move |id: JobId| *runs.lock().unwrap().entry(id).or_default() += 1
    };
    let (quick, doomed, block) = (count(runs), count(runs), count(runs));
    let gate = gate.clone();
    Worker::builder(&db.client)
        .queues(queues.iter().copied())
        .concurrency(10)
        .lease(Duration::from_secs(5))
        .rescue_interval(Duration::from_millis(500))
        .register_fn("quick", move |ctx, args| {
            quick(ctx.job_id());
            async move { Ok(args) }
        })
        .register_fn("doomed", move |ctx, _args| {
            doomed(ctx.job_id());
            async { Err::<Value, _>(TaskError::fail("no")) }
        })
        .register_fn("block", move |ctx, _args| {
            block(ctx.job_id());
            let gate = gate.clone();
            async move {
                let _permit = gate.acquire().await;
                Ok(Value::Null)
            }
        })
        .start()
        .unwrap()
}

/// What a restore gives back. Dumped while its jobs were finished, failed,
/// waiting (pending in a queue nobody served, and scheduled), and running
/// (held by a live claim):
/// - finished and failed jobs keep their state and results, and never run;
/// - every waiting job runs, once;
/// - a job that was running at the dump runs again, once its lease (taken
///   before the dump) has expired, as after a crash of its worker: the
///   attempt it was in counts, as the rescue of any expired lease does;
/// - nothing else is lost or added; `migrate` on the restored database has
///   nothing to apply.
#[tokio::test]
async fn a_dump_taken_while_workers_run_restores_into_a_queue_that_runs_on() {
    let db = TestDb::new().await;
    let gate = Arc::new(Semaphore::new(0));
    let runs_before: Runs = Arc::default();
    let before = worker(&db, &["default"], &gate, &runs_before);
    let enqueue = |jobs: Vec<NewJob>| db.client.enqueue_many(jobs);
    let ids = |handles: Vec<conveyor::JobHandle<Value>>| -> Vec<JobId> {
        handles.iter().map(|h| h.id()).collect()
    };
    let finished = ids(
        enqueue((0..40).map(|i| NewJob::new("quick", json!(i))).collect())
            .await
            .unwrap(),
    );
    let failed = ids(
        enqueue((0..5).map(|_| NewJob::new("doomed", json!({}))).collect())
            .await
            .unwrap(),
    );
    eventually(WAIT, "40 jobs done and 5 failed", || async {
        (count_jobs(&db.pool, "state IN ('success', 'failure')").await == 45).then_some(())
    })
    .await;
    let running = ids(
        enqueue((0..5).map(|_| NewJob::new("block", json!({}))).collect())
            .await
            .unwrap(),
    );
    eventually(WAIT, "5 jobs running", || async {
        (count_jobs(&db.pool, "task = 'block' AND state = 'started'").await == 5).then_some(())
    })
    .await;
    let waiting = ids(enqueue(
        (0..30)
            .map(|i| NewJob::new("quick", json!(i)).queue("later"))
            .collect(),
    )
    .await
    .unwrap());
    let scheduled = ids(enqueue(
        (0..10)
            .map(|i| {
                NewJob::new("quick", json!(i))
                    .queue("later")
                    .delay(Duration::from_secs(1))
            })
            .collect(),
    )
    .await
    .unwrap());

    // The dump, while the worker holds its five jobs and renews their leases.
    let dir = std::env::temp_dir().join(format!("conveyor-dump-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("queue.dump");
    run(
        "pg_dump",
        &[
            "--format=custom",
            "--file",
            file.to_str().unwrap(),
            "--dbname",
            &db.url(),
        ],
    );
    gate.add_permits(100);
    before.shutdown(WAIT).await.unwrap();
    assert!(
        running
            .iter()
            .all(|id| runs_before.lock().unwrap()[id] == 1),
        "each blocking job ran once before the dump"
    );

    let restored = TestDb::empty().await;
    run(
        "pg_restore",
        &[
            "--exit-on-error",
            "--dbname",
            &restored.url(),
            file.to_str().unwrap(),
        ],
    );
    std::fs::remove_dir_all(&dir).ok();
    let applied = conveyor::migrate(&restored.pool).await.unwrap();
    assert_eq!(
        applied,
        Vec::<i32>::new(),
        "a restored schema is up to date"
    );
    let states = |pool| async move {
        let rows: Vec<(String, i64)> =
            sqlx::query_as("SELECT state, count(*) FROM conveyor.jobs GROUP BY 1 ORDER BY 1")
                .fetch_all(pool)
                .await
                .unwrap();
        rows
    };
    assert_eq!(
        states(&restored.pool).await,
        [
            ("failure".to_string(), 5),
            ("pending".to_string(), 30),
            ("scheduled".to_string(), 10),
            ("started".to_string(), 5),
            ("success".to_string(), 40)
        ],
        "the restored jobs, as they were at the dump"
    );

    let runs_after: Runs = Arc::default();
    let gate = Arc::new(Semaphore::new(100));
    let after = worker(&restored, &["default", "later"], &gate, &runs_after);
    eventually(WAIT * 3, "every job of the restore finished", || async {
        (count_jobs(&restored.pool, "state IN ('success', 'failure')").await == 90).then_some(())
    })
    .await;
    after.shutdown(WAIT).await.unwrap();
    let runs = runs_after.lock().unwrap().clone();
    for id in finished.iter().chain(&failed) {
        assert_eq!(runs.get(id), None, "finished job {id} ran again");
    }
    for id in waiting.iter().chain(&scheduled).chain(&running) {
        assert_eq!(
            runs.get(id),
            Some(&1),
            "job {id} ran {:?} times",
            runs.get(id)
        );
    }
    assert_eq!(runs.len(), 45, "no other job ran");
    assert_eq!(
        states(&restored.pool).await,
        [("failure".to_string(), 5), ("success".to_string(), 85)]
    );
    // The jobs running at the dump: their second attempt, after the lease
    // they had at the dump expired.
    let attempts: Vec<(i32, Option<String>)> = sqlx::query_as(
        "SELECT attempt, errors->0->>'error' FROM conveyor.jobs WHERE id = ANY($1) ORDER BY id",
    )
    .bind(&running)
    .fetch_all(&restored.pool)
    .await
    .unwrap();
    assert_eq!(
        attempts,
        vec![(2, Some("lease expired".to_string())); 5],
        "each ran again as a second attempt"
    );
    let results: Vec<Value> = sqlx::query_scalar(
        "SELECT result FROM conveyor.jobs WHERE id = ANY($1) ORDER BY (args::text)::int",
    )
    .bind(&finished)
    .fetch_all(&restored.pool)
    .await
    .unwrap();
    assert_eq!(results, (0..40).map(|i| json!(i)).collect::<Vec<_>>());
}
