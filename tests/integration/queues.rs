//! Unique jobs, weighted and strict queues, pause / resume, global limits.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use conveyor::{NewJob, Unique, Worker};
use serde_json::{Value, json};

use crate::common::{TestDb, WAIT, count_jobs, eventually};

#[tokio::test]
async fn fifty_concurrent_enqueues_of_one_unique_key_make_one_job() {
    let db = TestDb::new().await;
    let mut tasks = Vec::new();
    for conn in 0..10 {
        let client = db.client.clone();
        tasks.push(tokio::spawn(async move {
            let mut handles = Vec::new();
            for _ in 0..5 {
                // Each in its own transaction on its own connection.
                let mut tx = client.pool().begin().await.unwrap();
                let job = NewJob::new("report", json!({"day": "2026-11-22", "conn": conn}))
                    .unique_key("daily-report");
                handles.push(client.enqueue_tx(&mut tx, job).await.unwrap());
                tx.commit().await.unwrap();
            }
            handles
        }));
    }
    let mut handles = Vec::new();
    for task in tasks {
        handles.extend(task.await.unwrap());
    }
    assert_eq!(handles.len(), 50);
    assert_eq!(handles.iter().filter(|h| !h.is_duplicate()).count(), 1);
    let first = handles.iter().find(|h| !h.is_duplicate()).unwrap().id();
    assert!(
        handles.iter().all(|h| h.id() == first),
        "duplicates return the existing job"
    );
    assert_eq!(count_jobs(&db.pool, "true").await, 1);

    // After it finished, the key is free again.
    let worker = Worker::builder(&db.client)
        .register_fn("report", |_, _| async move { Ok(json!("done")) })
        .start()
        .unwrap();
    handles[0].wait(WAIT).await.unwrap();
    let again = db
        .client
        .enqueue(NewJob::new("report", json!({})).unique_key("daily-report"))
        .await
        .unwrap();
    assert!(!again.is_duplicate());
    assert_ne!(again.id(), first);
    again.wait(WAIT).await.unwrap();
    worker.shutdown(WAIT).await.unwrap();
}

#[tokio::test]
async fn the_default_unique_key_is_queue_task_and_args_and_a_ttl_outlives_the_job() {
    let db = TestDb::new().await;
    let c = &db.client;
    let a = c
        .enqueue(
            NewJob::new("sync", json!({"user": 1, "full": true})).unique(Unique::UntilFinished),
        )
        .await
        .unwrap();
    // Same args in another key order: the same key.
    let b = c
        .enqueue(
            NewJob::new("sync", json!({"full": true, "user": 1})).unique(Unique::UntilFinished),
        )
        .await
        .unwrap();
    assert!(b.is_duplicate());
    assert_eq!(a.id(), b.id());
    // Other args, other queue: other keys.
    let other = c
        .enqueue(NewJob::new("sync", json!({"user": 2})).unique(Unique::UntilFinished))
        .await
        .unwrap();
    let queue = c
        .enqueue(
            NewJob::new("sync", json!({"user": 1, "full": true}))
                .queue("q2")
                .unique(Unique::UntilFinished),
        )
        .await
        .unwrap();
    assert!(!other.is_duplicate() && !queue.is_duplicate());

    // TTL scope: a duplicate even after the first finished, until the TTL ends.
    // (An hour, which running the job cannot outlast; it is then made to end
    // by moving the key's expiry into the past, not by waiting for it.)
    let ttl = Unique::For(Duration::from_secs(3600));
    let first = c
        .enqueue(NewJob::new("ping", json!({})).unique(ttl))
        .await
        .unwrap();
    // The key is held for the TTL, counted from the enqueue.
    let held_for: f64 = sqlx::query_scalar(
        "SELECT extract(epoch FROM u.expires_at - j.created_at)::float8
         FROM conveyor.unique_keys u JOIN conveyor.jobs j ON j.id = u.job_id WHERE j.id = $1",
    )
    .bind(first.id())
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(held_for, 3600.0);
    let worker = Worker::builder(c)
        .register_fn("ping", |_, _| async move { Ok(Value::Null) })
        .start()
        .unwrap();
    first.wait(WAIT).await.unwrap();
    let dup = c
        .enqueue(NewJob::new("ping", json!({})).unique(ttl))
        .await
        .unwrap();
    assert!(dup.is_duplicate());
    assert_eq!(dup.id(), first.id());
    // The TTL ends: the key is free again.
    let expired = sqlx::query(
        "UPDATE conveyor.unique_keys SET expires_at = now() - interval '1 second' WHERE job_id = $1",
    )
    .bind(first.id())
    .execute(&db.pool)
    .await
    .unwrap();
    assert_eq!(expired.rows_affected(), 1);
    let later = c
        .enqueue(NewJob::new("ping", json!({})).unique(ttl))
        .await
        .unwrap();
    assert!(!later.is_duplicate(), "the key is free once its TTL ended");
    assert_ne!(later.id(), first.id());
    later.wait(WAIT).await.unwrap();
    worker.shutdown(WAIT).await.unwrap();
}

/// Counts how many jobs of each queue were started, in start order.
async fn started_by_queue(db: &TestDb, first: i64) -> Vec<(String, i64)> {
    sqlx::query_as(
        "SELECT queue, count(*) FROM (SELECT queue FROM conveyor.jobs WHERE started_at IS NOT NULL
                                      ORDER BY started_at, id LIMIT $1) s
         GROUP BY 1 ORDER BY 1",
    )
    .bind(first)
    .fetch_all(&db.pool)
    .await
    .unwrap()
}

async fn fill(db: &TestDb, queue: &str, n: usize) {
    let jobs = (0..n)
        .map(|i| NewJob::new("noop", json!({ "i": i })).queue(queue))
        .collect();
    db.client.enqueue_many(jobs).await.unwrap();
}

#[tokio::test]
async fn weighted_queues_share_claims_six_three_one() {
    let db = TestDb::new().await;
    for queue in ["critical", "default", "low"] {
        fill(&db, queue, 3_000).await;
    }
    let worker = Worker::builder(&db.client)
        .weighted_queues([("critical", 6), ("default", 3), ("low", 1)])
        .concurrency(10)
        // The split holds over each claim, queue by queue, and the first
        // 3,000 starts end inside one: with claims of up to 1,000 (slow
        // claims on a loaded machine hold up to `claim_ahead`) they leaned
        // to 69/23/7 in one run; claims of 100 lean by 2 points at most.
        .max_claim_batch(100)
        .register_fn("noop", |_, _| async move { Ok(Value::Null) })
        .start()
        .unwrap();
    eventually(Duration::from_secs(60), "3,000 claims", || async {
        (count_jobs(&db.pool, "started_at IS NOT NULL").await >= 3_000).then_some(())
    })
    .await;
    worker.shutdown(WAIT).await.unwrap();
    let shares: Vec<(String, f64)> = started_by_queue(&db, 3_000)
        .await
        .into_iter()
        .map(|(q, n)| (q, n as f64 / 30.0))
        .collect();
    let share = |q: &str| shares.iter().find(|s| s.0 == q).map_or(0.0, |s| s.1);
    assert!((share("critical") - 60.0).abs() <= 5.0, "{shares:?}");
    assert!((share("default") - 30.0).abs() <= 5.0, "{shares:?}");
    assert!((share("low") - 10.0).abs() <= 5.0, "{shares:?}");
    {
        use std::io::Write as _;
        // Not print!: shown even under the harness's capture.
        let _ = writeln!(
            std::io::stderr(),
            "weighted 6/3/1 over 3,000 claims: {shares:?}"
        );
    }
}

#[tokio::test]
async fn strict_queues_drain_higher_queues_first() {
    let db = TestDb::new().await;
    fill(&db, "low", 300).await;
    fill(&db, "critical", 300).await;
    let worker = Worker::builder(&db.client)
        .queues(["critical", "low"])
        .concurrency(5)
        // A held critical job given back (it waited 500 ms for a slot on a
        // loaded machine, where slow claims hold many ahead) is runnable
        // again, claimed after low jobs taken while critical had none left:
        // strict order as documented, but not what this test measures.
        .give_back_held_after(Duration::from_secs(600))
        .register_fn("noop", |_, _| async move { Ok(Value::Null) })
        .start()
        .unwrap();
    eventually(WAIT, "all done", || async {
        (count_jobs(&db.pool, "state = 'success'").await == 600).then_some(())
    })
    .await;
    worker.shutdown(WAIT).await.unwrap();
    // No low job started before the last critical one was claimed.
    let (last_critical, first_low): (chrono::DateTime<chrono::Utc>, chrono::DateTime<chrono::Utc>) =
        sqlx::query_as(
            "SELECT (SELECT max(started_at) FROM conveyor.jobs WHERE queue = 'critical'),
                    (SELECT min(started_at) FROM conveyor.jobs WHERE queue = 'low')",
        )
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(
        first_low >= last_critical,
        "low started at {first_low}, critical until {last_critical}"
    );
}

#[tokio::test]
async fn pause_stops_claims_on_every_worker_and_resume_restarts_them_at_once() {
    let db = TestDb::new().await;
    // A job ends only once every worker has started one: the first worker
    // to wake fills its 10 slots and stops claiming, so the other two claim
    // too, however fast it is (left to timing, one worker once ran all 60
    // and the count of workers below was 2).
    let (seen_tx, seen_rx) = tokio::sync::watch::channel(std::collections::HashSet::new());
    let seen_tx = Arc::new(seen_tx);
    let mut workers = Vec::new();
    for _ in 0..3 {
        let (seen_tx, seen_rx) = (seen_tx.clone(), seen_rx.clone());
        workers.push(
            Worker::builder(&db.client)
                .queues(["media", "other"])
                .safety_interval(Duration::from_secs(3600))
                .register_fn("noop", move |ctx, _| {
                    let worker = ctx.worker_id().to_string();
                    seen_tx.send_modify(|seen| {
                        seen.insert(worker.clone());
                    });
                    let mut seen_rx = seen_rx.clone();
                    async move {
                        let _ = seen_rx.wait_for(|seen| seen.len() >= 3).await;
                        Ok(json!(worker))
                    }
                })
                .start()
                .unwrap(),
        );
    }
    crate::common::wait_for_listen(&db.pool, 3).await;
    sqlx::query("SELECT conveyor.pause_queue('media')")
        .execute(&db.pool)
        .await
        .unwrap();
    let paused: Vec<_> = {
        let jobs = (0..20)
            .map(|i| NewJob::new("noop", json!({ "i": i })).queue("media"))
            .collect();
        db.client.enqueue_many(jobs).await.unwrap()
    };
    // Every worker keeps claiming from the other queue meanwhile.
    let others = {
        let jobs = (0..60)
            .map(|i| NewJob::new("noop", json!({ "i": i })).queue("other"))
            .collect();
        db.client.enqueue_many(jobs).await.unwrap()
    };
    for handle in &others {
        handle.wait(WAIT).await.unwrap();
    }
    // Every worker claimed (media first, as it comes first in its list) while
    // media was paused, and got nothing from it.
    let workers_seen: i64 = sqlx::query_scalar(
        "SELECT count(DISTINCT result) FROM conveyor.jobs WHERE queue = 'other'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(workers_seen, 3);
    assert_eq!(
        count_jobs(&db.pool, "queue = 'media' AND state = 'pending'").await,
        20
    );

    // Resume: the idle workers (safety interval of an hour) are woken at once.
    sqlx::query("SELECT conveyor.resume_queue('media')")
        .execute(&db.pool)
        .await
        .unwrap();
    // (Waiting less than the safety interval, by far: only the wake-up can
    // have started them.)
    for handle in &paused {
        handle.wait(WAIT).await.unwrap();
    }
    for worker in workers {
        worker.shutdown(WAIT).await.unwrap();
    }
}

/// Also: the claims lock the queue's row and leave it as it is. Each one
/// used to write it (a new version per claim, which vacuum may not remove
/// while another session holds a snapshot, so every lock and read of the
/// row walked more of them as the hold went on: bench S with a limited
/// queue); the row's address (`ctid`) now stays the same over all 120 jobs.
#[tokio::test]
async fn a_global_limit_of_three_holds_across_four_workers() {
    let db = TestDb::new().await;
    sqlx::query("SELECT conveyor.set_queue_limit('scarce', 3)")
        .execute(&db.pool)
        .await
        .unwrap();
    let row_address = || {
        sqlx::query_scalar::<_, String>(
            "SELECT ctid::text FROM conveyor.queues WHERE name = 'scarce'",
        )
        .fetch_one(&db.pool)
    };
    let address = row_address().await.unwrap();
    let running = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    // The first jobs wait until three run at once (so that reaching the
    // limit does not depend on how fast the next claims come): a limit that
    // let fewer run would keep them waiting, and the test fails.
    let (reached, _) = tokio::sync::watch::channel(false);
    let mut workers = Vec::new();
    for _ in 0..4 {
        let (running, peak, reached) = (running.clone(), peak.clone(), reached.clone());
        workers.push(
            Worker::builder(&db.client)
                .queues(["scarce"])
                .concurrency(10)
                .register_fn("limited", move |_, _| {
                    let (running, peak) = (running.clone(), peak.clone());
                    let (reached, mut three) = (reached.clone(), reached.subscribe());
                    async move {
                        let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                        peak.fetch_max(now, Ordering::SeqCst);
                        if now >= 3 {
                            reached.send_replace(true);
                        }
                        let _ = tokio::time::timeout(WAIT, three.wait_for(|r| *r)).await;
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        running.fetch_sub(1, Ordering::SeqCst);
                        Ok(Value::Null)
                    }
                })
                .start()
                .unwrap(),
        );
    }
    let jobs = (0..120)
        .map(|i| NewJob::new("limited", json!({ "i": i })).queue("scarce"))
        .collect();
    let handles = db.client.enqueue_many(jobs).await.unwrap();
    for handle in &handles {
        handle.wait(WAIT).await.unwrap();
    }
    for worker in workers {
        worker.shutdown(WAIT).await.unwrap();
    }
    let peak = peak.load(Ordering::SeqCst);
    assert!(peak <= 3, "{peak} ran at once");
    assert_eq!(peak, 3, "the limit was reached, not undershot");
    assert_eq!(count_jobs(&db.pool, "state = 'success'").await, 120);
    assert_eq!(
        row_address().await.unwrap(),
        address,
        "the claims wrote the queue's row"
    );
}

#[tokio::test]
async fn the_pruner_removes_exactly_the_rows_past_their_age() {
    let db = TestDb::new().await;
    // (state, finished this many days ago, expected to survive default retention)
    let rows = [
        ("success", 2.0, true),
        ("success", 6.9, true),
        ("success", 7.1, false),
        ("failure", 7.1, true),
        ("failure", 29.9, true),
        ("failure", 30.1, false),
        ("cancelled", 6.0, true),
        ("cancelled", 8.0, false),
    ];
    let mut keep = Vec::new();
    let mut gone = Vec::new();
    for (state, days, survives) in rows {
        let id: uuid::Uuid = sqlx::query_scalar(
            "INSERT INTO conveyor.jobs (task, state, attempt, finished_at)
             VALUES ('old', $1, 1, now() - make_interval(secs => $2 * 86400)) RETURNING id",
        )
        .bind(state)
        .bind(days)
        .fetch_one(&db.pool)
        .await
        .unwrap();
        if survives {
            keep.push(id)
        } else {
            gone.push(id)
        }
    }
    // Unfinished jobs are never pruned, however old.
    let old_pending: uuid::Uuid = sqlx::query_scalar(
        "INSERT INTO conveyor.jobs (task, created_at, run_at) VALUES ('old', now() - interval '1 year', now() + interval '1 day')
         RETURNING id",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    keep.push(old_pending);

    let deleted = db
        .client
        .prune(&conveyor::Retention::default())
        .await
        .unwrap()
        .deleted;
    assert_eq!(deleted, gone.len() as u64);
    let left: Vec<uuid::Uuid> = sqlx::query_scalar("SELECT id FROM conveyor.jobs ORDER BY id")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    keep.sort();
    assert_eq!(left, keep);
    // A custom retention, and "forever".
    assert_eq!(
        db.client
            .prune(&conveyor::Retention::forever())
            .await
            .unwrap(),
        conveyor::Pruned::default()
    );
    let short = conveyor::Retention {
        success: Some(Duration::from_secs(86_400)),
        ..conveyor::Retention::forever()
    };
    assert_eq!(db.client.prune(&short).await.unwrap().deleted, 2);
    assert_eq!(count_jobs(&db.pool, "state = 'success'").await, 0);
    assert_eq!(count_jobs(&db.pool, "state = 'failure'").await, 2);
}

#[tokio::test]
async fn a_rate_limit_spreads_starts_over_windows() {
    let db = TestDb::new().await;
    db.client
        .set_queue_rate_limit("metered", Some((10, Duration::from_secs(1))))
        .await
        .unwrap();
    let mut workers = Vec::new();
    for _ in 0..2 {
        workers.push(
            Worker::builder(&db.client)
                .queues(["metered"])
                .concurrency(20)
                .register_fn("noop", |_, _| async move { Ok(Value::Null) })
                .start()
                .unwrap(),
        );
    }
    let jobs = (0..30)
        .map(|i| NewJob::new("noop", json!({ "i": i })).queue("metered"))
        .collect();
    for handle in db.client.enqueue_many(jobs).await.unwrap() {
        handle.wait(WAIT).await.unwrap();
    }
    for worker in workers {
        worker.shutdown(WAIT).await.unwrap();
    }
    let starts: Vec<chrono::DateTime<chrono::Utc>> = sqlx::query_scalar(
        "SELECT started_at FROM conveyor.jobs WHERE queue = 'metered' ORDER BY started_at",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    // 30 starts at 10 per window need three windows; the first start may come
    // late in the first window, the last is in the third: more than 1 s apart.
    let span = starts[29] - starts[0];
    assert!(span > chrono::TimeDelta::seconds(1), "30 starts in {span}");
    // Fixed windows: never more than twice the limit in any one-second span.
    for (i, first) in starts.iter().enumerate() {
        let within = starts[i..]
            .iter()
            .filter(|t| **t - *first < chrono::TimeDelta::seconds(1))
            .count();
        assert!(within <= 20, "{within} starts within 1 s of {first}");
    }
    // And with the limit removed, the queue is unthrottled again.
    db.client
        .set_queue_rate_limit("metered", None)
        .await
        .unwrap();
    let n: i64 =
        sqlx::query_scalar("SELECT count(*) FROM conveyor.queues WHERE rate_limit IS NOT NULL")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(n, 0);
}

#[tokio::test]
async fn a_unique_job_with_an_existing_id_is_a_duplicate() {
    let db = TestDb::new().await;
    let id = conveyor::job_id_from_key("order-9");
    let first = db
        .client
        .enqueue(NewJob::new("t", json!({"n": 1})).id(id))
        .await
        .unwrap();
    assert!(!first.is_duplicate());
    let again = db
        .client
        .enqueue(
            NewJob::new("t", json!({"n": 2}))
                .id(id)
                .unique_key("other-key"),
        )
        .await
        .unwrap();
    assert!(again.is_duplicate());
    assert_eq!(again.id(), id);
    assert_eq!(count_jobs(&db.pool, "true").await, 1);
}

#[tokio::test]
async fn requeue_leaves_a_unique_job_whose_key_another_job_holds() {
    let db = TestDb::new().await;
    let c = &db.client;
    let worker = Worker::builder(c)
        .register_fn("sync", |_, _| async move {
            Err::<Value, _>(conveyor::TaskError::fail("down"))
        })
        .start()
        .unwrap();
    let job = || NewJob::new("sync", json!({"user": 1})).unique(Unique::UntilFinished);
    let first = c.enqueue(job()).await.unwrap();
    assert!(first.wait(WAIT).await.is_err());
    let second = c.enqueue(job()).await.unwrap();
    assert!(!second.is_duplicate());
    assert!(second.wait(WAIT).await.is_err());
    worker.shutdown(WAIT).await.unwrap();

    // Two failed jobs with one key: re-queuing both puts back one.
    assert_eq!(c.requeue(&[first.id(), second.id()]).await.unwrap(), 1);
    // The key is held again: the other one stays failed, without an error.
    assert_eq!(c.requeue(&[first.id(), second.id()]).await.unwrap(), 0);
    assert_eq!(count_jobs(&db.pool, "state = 'pending'").await, 1);
    assert_eq!(count_jobs(&db.pool, "state = 'failure'").await, 1);
}
