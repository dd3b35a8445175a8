//! The worker registry: a worker registers, beats with its busy slots,
//! leaves at a clean stop, and is marked dead by another worker's
//! maintenance when it goes silent.

use std::sync::Arc;
use std::time::Duration;

use conveyor::{NewJob, Worker, WorkerInfo};
use serde_json::{Value, json};
use tokio::sync::Semaphore;

use crate::common::{TestDb, WAIT, eventually};

async fn registered(db: &TestDb, id: &str) -> Option<WorkerInfo> {
    let workers = db.client.workers().await.unwrap();
    workers.into_iter().find(|w| w.id == id)
}

#[tokio::test]
async fn a_worker_registers_beats_with_its_busy_slots_and_leaves_at_a_clean_stop() {
    let db = TestDb::new().await;
    let gate = Arc::new(Semaphore::new(0));
    let held = gate.clone();
    let worker = Worker::builder(&db.client)
        .id("w1")
        .queues(["default", "mail"])
        .concurrency(3)
        // Beats every 4 s; the jobs' leases are kept on a loaded machine.
        .lease(Duration::from_secs(12))
        .register_fn("block", move |_ctx, _args| {
            let gate = held.clone();
            async move {
                let _permit = gate.acquire().await;
                Ok(Value::Null)
            }
        })
        .start()
        .unwrap();
    for _ in 0..2 {
        db.client
            .enqueue(NewJob::new("block", json!({})))
            .await
            .unwrap();
    }
    let w = eventually(WAIT, "w1 beats with 2 busy slots", || async {
        registered(&db, "w1").await.filter(|w| w.busy == 2)
    })
    .await;
    assert_eq!(w.queues, ["default", "mail"]);
    assert_eq!((w.concurrency, w.dead_at), (3, None));
    assert_eq!(w.pid, std::process::id() as i32);
    assert!(
        (w.beat_interval_secs - 4.0).abs() < 1e-9,
        "a third of the lease"
    );
    assert!(!w.version.is_empty() && !w.host.is_empty());
    #[cfg(feature = "cli")]
    {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_conveyor"))
            .args(["--database-url", &db.url(), "--json", "workers"])
            .output()
            .unwrap();
        assert!(out.status.success());
        let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(listed[0]["id"], "w1");
        assert_eq!(listed[0]["busy"], 2);
    }

    gate.add_permits(2);
    worker.shutdown(WAIT).await.unwrap();
    assert!(
        db.client.workers().await.unwrap().is_empty(),
        "a clean stop leaves the registry"
    );
}

#[tokio::test]
async fn a_worker_that_goes_silent_is_marked_dead_by_another_workers_maintenance() {
    let db = TestDb::new().await;
    let start = |id: &str| {
        Worker::builder(&db.client)
            .id(id)
            .lease(Duration::from_millis(600))
            .rescue_interval(Duration::from_millis(100))
            .register_fn("noop", |_, _| async { Ok(Value::Null) })
            .start()
            .unwrap()
    };
    let a = start("a");
    let b = start("b");
    eventually(WAIT, "both registered", || async {
        let (a, b) = (registered(&db, "a").await?, registered(&db, "b").await?);
        (a.dead_at.is_none() && b.dead_at.is_none()).then_some(())
    })
    .await;
    // b stays alive in the registry however late its own beats come on a
    // loaded machine (it marks silent workers dead itself, every 100 ms):
    // its row says it beats hourly.
    let b_hourly = sqlx::query(
        "UPDATE conveyor.workers SET beat_interval = interval '1 hour', dead_at = NULL
         WHERE id = 'b'",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    assert_eq!(b_hourly.rows_affected(), 1);
    // Dropped without shutdown: its tasks stop at once, as in a crash.
    drop(a);
    eventually(WAIT, "b's maintenance marks a dead", || async {
        let marked: Option<bool> =
            sqlx::query_scalar("SELECT dead_at IS NOT NULL FROM conveyor.workers WHERE id = 'a'")
                .fetch_optional(&db.pool)
                .await
                .unwrap();
        (marked == Some(true)).then_some(())
    })
    .await;
    let workers = db.client.workers().await.unwrap();
    let ids: Vec<(&str, bool)> = workers
        .iter()
        .map(|w| (w.id.as_str(), w.dead_at.is_some()))
        .collect();
    assert_eq!(ids, [("b", false), ("a", true)], "live ones first");
    b.shutdown(WAIT).await.unwrap();
}
