//! The `Pooler` setting itself, through this binary's PgBouncer
//! (transaction mode, `bouncer::SERVER_CONNECTIONS` server connections per
//! database).

use std::time::Duration;

use conveyor::{Client, NewJob, Periodic, Worker};
use serde_json::{Value, json};

use crate::common::{TestDb, WAIT, count_jobs, eventually, futures_join_all};

/// Many tasks enqueue jobs and read them back through a few server
/// connections; every answer must be the one asked for. Without the
/// setting, sqlx's named statements and its two round trips per statement
/// make such a run fail: statements missing or already existing on the
/// server connection a client lands on, and rows of another client's query
/// (docs/decisions/2026-11-23-pgbouncer-transaction-mode-findings.md).
#[tokio::test]
async fn concurrent_enqueues_and_reads_get_their_own_answers() {
    let db = TestDb::new().await;
    let client = db.bouncer_client(true);
    let tasks = (0..16).map(|task| {
        let client = client.clone();
        async move {
            let mut wrong = Vec::new();
            for i in 0..40 {
                let value = format!("{task}-{i}");
                let job = NewJob::new("echo", json!({ "v": value })).queue(format!("q{task}"));
                let id = match client.enqueue(job).await {
                    Ok(handle) => handle.id(),
                    Err(error) => {
                        wrong.push(format!("enqueue {value}: {error}"));
                        continue;
                    }
                };
                match client.job(id).await {
                    Ok(Some(job)) if job.args["v"] == value && job.queue == format!("q{task}") => {}
                    Ok(other) => wrong.push(format!("read {value}: got {other:?}")),
                    Err(error) => wrong.push(format!("read {value}: {error}")),
                }
            }
            wrong
        }
    });
    let wrong: Vec<String> = futures_join_all(tasks)
        .await
        .into_iter()
        .flatten()
        .collect();
    assert!(
        wrong.is_empty(),
        "{} of 640 enqueues and reads went wrong through PgBouncer, e.g. {:?}",
        wrong.len(),
        &wrong[..wrong.len().min(3)]
    );
    assert_eq!(count_jobs(&db.pool, "task = 'echo'").await, 640);
}

/// With no session URL there is no LISTEN: idle workers poll, handles look
/// again, and jobs still run and report their results.
#[tokio::test]
async fn without_a_session_url_idle_workers_poll() {
    let db = TestDb::new().await;
    let client = db.bouncer_client(false);
    let worker = Worker::builder(&client)
        .register_fn("double", |_, args: Value| async move {
            Ok(json!(args["n"].as_i64().unwrap_or(0) * 2))
        })
        .start()
        .unwrap();
    // Let the worker go idle first: only a poll can find the next job. Its
    // claims show in pg_stat_activity (PgBouncer's server connections show
    // the statement each ran last): past its start-up claim and the one its
    // listener's first wake-up makes, claims begun at other times, with
    // nothing to claim and no notification, are polls (without them, the
    // next claim would come at the safety interval, 30 s).
    let claims = std::sync::Mutex::new(std::collections::HashSet::new());
    eventually(WAIT, "the idle worker to poll", || async {
        let starts: Vec<chrono::DateTime<chrono::Utc>> = sqlx::query_scalar(
            "SELECT query_start FROM pg_stat_activity
             WHERE datname = current_database() AND query LIKE '-- Claim up to%'",
        )
        .fetch_all(&db.pool)
        .await
        .ok()?;
        let mut claims = claims.lock().unwrap();
        claims.extend(starts);
        (claims.len() >= 5).then_some(())
    })
    .await;
    assert_eq!(count_jobs(&db.pool, "true").await, 0);
    for n in 0..5 {
        let handle = client
            .enqueue(NewJob::new("double", json!({ "n": n })))
            .await
            .unwrap();
        let result: Value = handle.wait(WAIT).await.unwrap();
        assert_eq!(result, json!(n * 2));
    }
    let listening: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity
         WHERE datname = current_database() AND query LIKE 'LISTEN%'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(listening, 0, "nothing listens without a session URL");
    worker.shutdown(WAIT).await.unwrap();
}

/// Without a session URL the periodic leader holds its lock in a
/// transaction through PgBouncer: two processes still enqueue each slot
/// once, the dashboard's record names the backend that holds the lock, and
/// the lock goes when the leader does.
#[tokio::test]
async fn the_periodic_leader_leads_in_a_transaction_through_the_pooler() {
    let db = TestDb::new().await;
    let tick = |slot: chrono::DateTime<chrono::Utc>| NewJob::new("tick", json!({ "slot": slot }));
    let start = |client: &Client| {
        Worker::builder(client)
            .periodic(Periodic::every("fast", Duration::from_millis(200), tick))
            .register_fn("tick", |_, _| async move { Ok(Value::Null) })
            .start()
            .unwrap()
    };
    let (a, b) = (db.bouncer_client(false), db.bouncer_client(false));
    let workers = [start(&a), start(&b)];
    eventually(WAIT, "ten slots ran", || async {
        (count_jobs(&db.pool, "task = 'tick' AND state = 'success'").await >= 10).then_some(())
    })
    .await;
    let repeated: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT args->>'slot' FROM conveyor.jobs
         WHERE task = 'tick' GROUP BY 1 HAVING count(*) > 1) s",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(repeated, 0, "a slot was enqueued twice");
    let holder_recorded: bool = sqlx::query_scalar(
        "SELECT l.backend_pid = k.pid FROM conveyor.periodic_leader l, pg_locks k
         WHERE k.locktype = 'advisory' AND k.granted
           AND k.database = (SELECT oid FROM pg_database WHERE datname = current_database())
           AND k.objid = (hashtextextended('conveyor.periodic:conveyor', 0) & 4294967295)::oid",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert!(holder_recorded, "the leader row names the lock's holder");
    for worker in workers {
        worker.shutdown(WAIT).await.unwrap();
    }
    // Gone with its transaction: a session lock taken through the pooler
    // would stay on PgBouncer's server connection, and no process could
    // lead again (or any that landed on that connection would).
    eventually(WAIT, "the leader's lock released", || async {
        let held: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'
               AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
        )
        .fetch_one(&db.pool)
        .await
        .unwrap();
        (held == 0).then_some(())
    })
    .await;
}

/// `migrate` is one transaction under a transaction-scoped lock: callers
/// through PgBouncer are serialised and the schema is applied once.
#[tokio::test]
async fn concurrent_migrations_through_the_pooler_apply_once() {
    let db = TestDb::empty().await;
    let pool = db.bouncer_pool(8);
    let runs = (0..4).map(|_| {
        let pool = pool.clone();
        async move { conveyor::migrate(&pool).await }
    });
    // (With a session lock, one left on a server connection of PgBouncer
    // blocked every caller landing on another one: this hung.)
    let applied: Vec<Vec<i32>> = tokio::time::timeout(WAIT, futures_join_all(runs))
        .await
        .expect("the migrations finish")
        .into_iter()
        .map(|r| r.expect("migrate through PgBouncer"))
        .collect();
    let nonempty = applied.iter().filter(|v| !v.is_empty()).count();
    assert_eq!(
        nonempty, 1,
        "one caller applies the migrations: {applied:?}"
    );
}

/// A job enqueued in the caller's transaction through PgBouncer commits
/// with the caller's own write, or not at all (the caller's statements
/// unnamed, as the README asks).
#[tokio::test]
async fn an_enqueue_in_the_callers_transaction_commits_or_rolls_back_with_it() {
    let db = TestDb::new().await;
    sqlx::raw_sql("CREATE TABLE orders (id int PRIMARY KEY)")
        .execute(&db.pool)
        .await
        .unwrap();
    let client = db.bouncer_client(true);
    for (id, commit) in [(1, false), (2, true)] {
        let mut tx = client.pool().begin().await.unwrap();
        sqlx::query("INSERT INTO orders (id) VALUES ($1)")
            .bind(id)
            .persistent(false)
            .execute(&mut *tx)
            .await
            .unwrap();
        let job = NewJob::new("ship", json!({ "order": id }));
        client.enqueue_tx(&mut tx, job).await.unwrap();
        if commit {
            tx.commit().await.unwrap();
        } else {
            tx.rollback().await.unwrap();
        }
    }
    let orders: Vec<i32> = sqlx::query_scalar("SELECT id FROM orders")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(orders, vec![2]);
    let shipped: Vec<i64> = sqlx::query_scalar(
        "SELECT (args->>'order')::bigint FROM conveyor.jobs WHERE task = 'ship'",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(shipped, vec![2]);
}
