//! Enqueue in all four ways, results, idempotent ids, transactions and wake-ups.

use std::time::Duration;

use conveyor::{Client, JobState, NewJob, Task, TaskContext, TaskError, Worker};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::common::{
    TestDb, WAIT, count_jobs, eventually, futures_join_all, shared_pages, wait_for_listen,
};

#[derive(Serialize, Deserialize, Debug, Clone, Copy)]
pub struct AddArgs {
    pub a: i64,
    pub b: i64,
}

pub struct Add;

impl Task for Add {
    const NAME: &'static str = "add";
    type Args = AddArgs;
    type Output = i64;

    async fn run(&self, _ctx: TaskContext, args: AddArgs) -> Result<i64, TaskError> {
        Ok(args.a + args.b)
    }
}

fn echo_worker(client: &Client) -> conveyor::WorkerBuilder {
    Worker::builder(client)
        .register(Add)
        .register_fn("echo", |ctx, args| async move {
            Ok(json!({ "args": args, "attempt": ctx.attempt(), "tenant": ctx.header("tenant") }))
        })
}

/// An echo worker that has done its start-up scan and gone idle, with a
/// safety interval of an hour: only a notification can wake it.
async fn idle_echo_worker(db: &TestDb, concurrency: usize) -> conveyor::WorkerHandle {
    let worker = echo_worker(&db.client)
        .concurrency(concurrency)
        .safety_interval(Duration::from_secs(3600))
        .start()
        .unwrap();
    wait_for_listen(&db.pool, 1).await;
    // A first job proves the start-up scan is over.
    let warmup = db
        .client
        .enqueue(Add::job(AddArgs { a: 0, b: 0 }))
        .await
        .unwrap();
    warmup.wait(WAIT).await.unwrap();
    worker
}

#[tokio::test]
async fn typed_json_and_sql_jobs_run_and_return_results() {
    let db = TestDb::new().await;
    let worker = echo_worker(&db.client).start().unwrap();

    let typed = db
        .client
        .enqueue(Add::job(AddArgs { a: 2, b: 40 }))
        .await
        .unwrap();
    let untyped = db
        .client
        .enqueue(NewJob::new("echo", json!({"x": 1})).header("tenant", json!("acme")))
        .await
        .unwrap();
    let from_sql: uuid::Uuid =
        sqlx::query_scalar("SELECT conveyor.enqueue('add', '{\"a\": 1, \"b\": 2}')")
            .fetch_one(&db.pool)
            .await
            .unwrap();

    assert_eq!(typed.wait(WAIT).await.unwrap(), 42);
    assert_eq!(
        untyped.wait(WAIT).await.unwrap(),
        json!({"args": {"x": 1}, "attempt": 1, "tenant": "acme"})
    );
    assert_eq!(
        db.client.handle::<i64>(from_sql).wait(WAIT).await.unwrap(),
        3
    );

    // Everything is in the table, queryable with SQL.
    let rows: Vec<(String, String, Value, i32)> = sqlx::query_as(
        "SELECT task, state, result, attempt FROM conveyor.jobs ORDER BY created_at, id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(rows.len(), 3);
    assert!(
        rows.iter()
            .all(|(_, state, _, attempt)| state == "success" && *attempt == 1)
    );
    let job = typed.job().await.unwrap();
    assert!(job.started_at.is_some() && job.finished_at.is_some());
    assert!(job.lease_expires_at.is_none() && job.worker_id.is_none());
    worker.shutdown(WAIT).await.unwrap();
}

#[tokio::test]
async fn all_four_ways_share_the_same_defaults() {
    let db = TestDb::new().await;
    let c = &db.client;
    let a = c.enqueue(NewJob::new("t", json!({}))).await.unwrap().id();
    let mut tx = db.pool.begin().await.unwrap();
    let b = c
        .enqueue_tx(&mut tx, NewJob::new("t", json!({})))
        .await
        .unwrap()
        .id();
    tx.commit().await.unwrap();
    let d = c
        .enqueue_many(vec![NewJob::new("t", json!({}))])
        .await
        .unwrap()[0]
        .id();
    let e: uuid::Uuid = sqlx::query_scalar("SELECT conveyor.enqueue('t')")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    type Defaults = (
        String,
        String,
        i32,
        i32,
        f64,
        Option<f64>,
        Value,
        Value,
        i32,
    );
    let rows: Vec<Defaults> = sqlx::query_as(
        "SELECT queue, state, priority, max_retries,
                    extract(epoch FROM retry_backoff_base)::float8,
                    extract(epoch FROM timeout)::float8, headers, args, attempt
             FROM conveyor.jobs WHERE id = ANY($1)",
    )
    .bind(vec![a, b, d, e])
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(rows.len(), 4);
    for row in &rows {
        assert_eq!(row, &rows[0], "defaults differ between enqueue paths");
    }
    assert_eq!(
        rows[0],
        (
            "default".into(),
            "pending".into(),
            0,
            25,
            1.0,
            None,
            json!({}),
            json!({}),
            0
        )
    );
    // Table defaults agree too (a hand-written INSERT).
    sqlx::query("INSERT INTO conveyor.jobs (task) VALUES ('t')")
        .execute(&db.pool)
        .await
        .unwrap();
    assert_eq!(count_jobs(&db.pool, "queue = 'default' AND max_retries = 25 AND priority = 0 AND retry_backoff_base = '1 second'").await, 5);
}

#[tokio::test]
async fn rollback_leaves_no_job_and_commit_wakes_an_idle_worker() {
    let db = TestDb::new().await;
    sqlx::query("CREATE TABLE orders (id int PRIMARY KEY)")
        .execute(&db.pool)
        .await
        .unwrap();
    let worker = idle_echo_worker(&db, 10).await;

    let mut tx = db.pool.begin().await.unwrap();
    sqlx::query("INSERT INTO orders VALUES (1)")
        .execute(&mut *tx)
        .await
        .unwrap();
    let rolled_back = db
        .client
        .enqueue_tx(&mut tx, Add::job(AddArgs { a: 1, b: 1 }))
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(
        count_jobs(&db.pool, &format!("id = '{}'", rolled_back.id())).await,
        0
    );
    assert_eq!(count_jobs(&db.pool, "true").await, 1);

    for n in 0..3 {
        let mut tx = db.pool.begin().await.unwrap();
        sqlx::query("INSERT INTO orders VALUES ($1)")
            .bind(10 + n)
            .execute(&mut *tx)
            .await
            .unwrap();
        let handle = db
            .client
            .enqueue_tx(&mut tx, Add::job(AddArgs { a: n.into(), b: 1 }))
            .await
            .unwrap();
        // Invisible to workers until commit.
        assert_eq!(
            count_jobs(&db.pool, &format!("id = '{}'", handle.id())).await,
            0
        );
        tx.commit().await.unwrap();
        // The worker sleeps for an hour unless notified: the job runs
        // within WAIT only if the commit woke it.
        assert_eq!(handle.wait(WAIT).await.unwrap(), i64::from(n) + 1);
    }
    worker.shutdown(WAIT).await.unwrap();
}

#[tokio::test]
async fn bulk_enqueue_inserts_thousands_in_the_callers_transaction() {
    let db = TestDb::new().await;
    let jobs: Vec<_> = (0..12_000)
        .map(|i| Add::job(AddArgs { a: i, b: 1 }))
        .collect();
    let mut tx = db.pool.begin().await.unwrap();
    let handles = db.client.enqueue_many_tx(&mut tx, jobs).await.unwrap();
    assert_eq!(handles.len(), 12_000);
    assert!(handles.iter().all(|h| !h.is_duplicate()));
    tx.rollback().await.unwrap();
    assert_eq!(count_jobs(&db.pool, "true").await, 0);

    let jobs: Vec<_> = (0..3_000)
        .map(|i| Add::job(AddArgs { a: i, b: 1 }))
        .collect();
    let handles = db.client.enqueue_many(jobs).await.unwrap();
    assert_eq!(count_jobs(&db.pool, "state = 'pending'").await, 3_000);
    let worker = echo_worker(&db.client).concurrency(50).start().unwrap();
    // Handles come back in input order.
    assert_eq!(handles[0].wait(WAIT).await.unwrap(), 1);
    assert_eq!(handles[2_999].wait(WAIT).await.unwrap(), 3_000);
    eventually(WAIT, "all bulk jobs succeed", || async {
        (count_jobs(&db.pool, "state = 'success'").await == 3_000).then_some(())
    })
    .await;
    worker.shutdown(WAIT).await.unwrap();
}

#[tokio::test]
async fn same_caller_given_id_twice_gives_one_job_and_the_first_result() {
    let db = TestDb::new().await;
    let worker = echo_worker(&db.client).start().unwrap();
    let id = conveyor::job_id_from_key("webhook-message-7");
    let first = db
        .client
        .enqueue(NewJob::new("echo", json!({"n": 1})).id(id))
        .await
        .unwrap();
    assert!(!first.is_duplicate());
    let result = first.wait(WAIT).await.unwrap();

    // The webhook is delivered again, even with other arguments.
    let second = db
        .client
        .enqueue(NewJob::new("echo", json!({"n": 2})).id(id))
        .await
        .unwrap();
    assert!(second.is_duplicate());
    assert_eq!(second.id(), id);
    assert_eq!(second.wait(WAIT).await.unwrap(), result);
    assert_eq!(result["args"], json!({"n": 1}));
    // From SQL too: the existing id is returned and nothing is inserted.
    let again: uuid::Uuid = sqlx::query_scalar("SELECT conveyor.enqueue('echo', id => $1)")
        .bind(id)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(again, id);
    // And twice in one batch.
    let twice = db
        .client
        .enqueue_many(vec![
            NewJob::new("echo", json!({})).id(id),
            NewJob::new("echo", json!({})).id(id),
        ])
        .await
        .unwrap();
    assert!(twice.iter().all(|h| h.is_duplicate()));
    assert_eq!(count_jobs(&db.pool, "true").await, 1);
    assert_eq!(first.job().await.unwrap().attempt, 1);
    worker.shutdown(WAIT).await.unwrap();
}

#[tokio::test]
async fn a_job_never_starts_before_its_run_at() {
    let db = TestDb::new().await;
    let starts = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = starts.clone();
    let client = db.client.clone();
    let worker = Worker::builder(&db.client)
        .concurrency(10)
        .register_fn("stamp", move |ctx, _args| {
            let (seen, client) = (seen.clone(), client.clone());
            async move {
                let now = chrono::Utc::now();
                let job = client
                    .job(ctx.job_id())
                    .await?
                    .ok_or(TaskError::fail("gone"))?;
                seen.lock().unwrap().push((job.run_at, now));
                Ok(Value::Null)
            }
        })
        .start()
        .unwrap();
    let mut handles = Vec::new();
    for i in 0..10u64 {
        let job = NewJob::new("stamp", json!({})).delay(Duration::from_millis(150 * i));
        handles.push(db.client.enqueue(job).await.unwrap());
    }
    let at = chrono::Utc::now() + chrono::Duration::milliseconds(700);
    handles.push(
        db.client
            .enqueue(NewJob::new("stamp", json!({})).run_at(at))
            .await
            .unwrap(),
    );
    assert_eq!(handles[10].state().await.unwrap(), JobState::Scheduled);
    for handle in &handles {
        handle.wait(WAIT).await.unwrap();
    }
    let starts = starts.lock().unwrap().clone();
    assert_eq!(starts.len(), 11);
    for (run_at, started) in starts {
        assert!(
            started >= run_at,
            "started {started} before run_at {run_at}"
        );
    }
    // The database agrees: no claim before run_at.
    assert_eq!(count_jobs(&db.pool, "started_at < run_at").await, 0);
    worker.shutdown(WAIT).await.unwrap();
}

/// Notifications received on `conveyor.job_ready` until a sentinel sent
/// after `work` commits arrives (notifications of committed transactions are
/// delivered in commit order, so everything `work` sent comes before it).
async fn job_ready_notifications<F: std::future::Future<Output = ()>>(
    pool: &sqlx::PgPool,
    work: F,
) -> Vec<String> {
    let mut listener = sqlx::postgres::PgListener::connect_with(pool)
        .await
        .unwrap();
    listener.listen("conveyor.job_ready").await.unwrap();
    work.await;
    sqlx::query("SELECT pg_notify('conveyor.job_ready', 'sentinel')")
        .execute(pool)
        .await
        .unwrap();
    let mut seen = Vec::new();
    loop {
        let n = tokio::time::timeout(WAIT, listener.recv())
            .await
            .unwrap()
            .unwrap();
        if n.payload() == "sentinel" {
            return seen;
        }
        seen.push(n.payload().to_string());
    }
}

#[tokio::test]
async fn enqueue_notifies_once_per_transaction_and_queue() {
    let db = TestDb::new().await;
    let c = db.client.clone();
    let pool = db.pool.clone();
    let seen = job_ready_notifications(&db.pool, async move {
        // 50 single enqueues, a bulk enqueue and SQL enqueues, all in one transaction.
        let mut tx = pool.begin().await.unwrap();
        for i in 0..50 {
            c.enqueue_tx(&mut tx, Add::job(AddArgs { a: i, b: 0 }))
                .await
                .unwrap();
        }
        let bulk = (0..500).map(|i| Add::job(AddArgs { a: i, b: 0 })).collect();
        c.enqueue_many_tx(&mut tx, bulk).await.unwrap();
        for _ in 0..20 {
            sqlx::query("SELECT conveyor.enqueue('add', '{\"a\": 1, \"b\": 1}')")
                .execute(&mut *tx)
                .await
                .unwrap();
        }
        let other = (0..10)
            .map(|i| Add::job(AddArgs { a: i, b: 0 }).queue("other"))
            .collect();
        c.enqueue_many_tx(&mut tx, other).await.unwrap();
        tx.commit().await.unwrap();
    })
    .await;
    let mut payloads: Vec<Value> = seen
        .iter()
        .map(|p| serde_json::from_str(p).unwrap())
        .collect();
    payloads.sort_by_key(|p| p["queue"].as_str().unwrap_or_default().to_string());
    assert_eq!(
        payloads,
        [
            json!({"queue": "default", "scheduled": false}),
            json!({"queue": "other", "scheduled": false})
        ],
        "one notification per queue for 580 jobs"
    );
    assert_eq!(count_jobs(&db.pool, "true").await, 580);

    // A rolled-back transaction notifies nobody.
    let (c, pool) = (db.client.clone(), db.pool.clone());
    let seen = job_ready_notifications(&db.pool, async move {
        let mut tx = pool.begin().await.unwrap();
        c.enqueue_tx(&mut tx, Add::job(AddArgs { a: 1, b: 0 }))
            .await
            .unwrap();
        tx.rollback().await.unwrap();
    })
    .await;
    assert!(seen.is_empty(), "{seen:?}");
}

#[tokio::test]
async fn claiming_reads_only_the_ready_ring_whatever_the_history() {
    let db = TestDb::new().await;
    // 200,000 finished jobs and 50,000 future ones, 10 runnable.
    sqlx::raw_sql(
        "INSERT INTO conveyor.jobs (task, state, attempt, finished_at, result)
         SELECT 'add', 'success', 1, now(), '1' FROM generate_series(1, 200000);
         INSERT INTO conveyor.jobs (task, state, run_at)
         SELECT 'add', 'scheduled', now() + interval '1 day' FROM generate_series(1, 50000);
         INSERT INTO conveyor.jobs (task, args)
         SELECT 'add', '{\"a\": 1, \"b\": 1}' FROM generate_series(1, 10);
         ANALYZE conveyor.job_rows;",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    // The claim's row selection (sql/claim/claim.sql): the ready ring holds
    // the ten runnable jobs and nothing else.
    let plan: Vec<String> = sqlx::query_scalar(
        "EXPLAIN (ANALYZE, BUFFERS, FORMAT TEXT)
         SELECT tableoid, ctid, job_id FROM conveyor.ready
         WHERE queue = 'default' AND task = ANY('{add}') AND run_at <= now()
         ORDER BY -(priority::bigint), run_at, job_id LIMIT 10 FOR UPDATE SKIP LOCKED",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let plan = plan.join("\n");
    assert!(!plan.contains("on jobs"), "{plan}");
    let in_ring: i64 = sqlx::query_scalar("SELECT count(*) FROM conveyor.ready")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(in_ring, 10);
    assert!(!plan.contains("Seq Scan"), "{plan}");
    // Touches a handful of pages, not the 250,000 other rows.
    let buffers: u64 = plan
        .lines()
        .take_while(|l| !l.starts_with("Planning"))
        .filter_map(shared_pages)
        .max()
        .unwrap_or(0);
    assert!(buffers < 100, "claim touched {buffers} pages:\n{plan}");
    // And a worker claims exactly the runnable ten.
    let worker = Worker::builder(&db.client).register(Add).start().unwrap();
    eventually(WAIT, "runnable jobs done", || async {
        (count_jobs(&db.pool, "state = 'success'").await == 200_010).then_some(())
    })
    .await;
    worker.shutdown(WAIT).await.unwrap();
    assert_eq!(count_jobs(&db.pool, "state = 'scheduled'").await, 50_000);
}

#[tokio::test]
async fn testing_helpers_see_uncommitted_jobs_and_run_handlers_inline() {
    let db = TestDb::new().await;
    let mut tx = db.pool.begin().await.unwrap();
    db.client
        .enqueue_tx(&mut tx, Add::job(AddArgs { a: 2, b: 3 }))
        .await
        .unwrap();
    let job = conveyor::testing::assert_enqueued(&db.client, &mut tx, "add", json!({"a": 2})).await;
    assert_eq!(job.args, json!({"a": 2, "b": 3}));
    conveyor::testing::assert_not_enqueued(&db.client, &mut tx, "add", json!({"a": 9})).await;
    // Not visible outside the transaction.
    let mut other = db.pool.acquire().await.unwrap();
    conveyor::testing::assert_not_enqueued(&db.client, &mut other, "add", json!({})).await;
    tx.rollback().await.unwrap();

    let missing = tokio::spawn({
        let client = db.client.clone();
        let pool = db.pool.clone();
        async move {
            let mut conn = pool.acquire().await.unwrap();
            conveyor::testing::assert_enqueued(&client, &mut conn, "add", json!({})).await;
        }
    })
    .await
    .unwrap_err();
    let message = *missing.into_panic().downcast::<String>().unwrap();
    assert!(message.contains("expected a `add` job"), "{message}");

    assert_eq!(
        conveyor::testing::perform(&Add, AddArgs { a: 40, b: 2 })
            .await
            .unwrap(),
        42
    );
}

#[tokio::test]
async fn own_transaction_enqueues_notify_once_per_call_and_queue() {
    let db = TestDb::new().await;
    let c = db.client.clone();
    let seen = job_ready_notifications(&db.pool, async move {
        c.enqueue(Add::job(AddArgs { a: 1, b: 1 })).await.unwrap();
        let few = (0..10).map(|i| Add::job(AddArgs { a: i, b: 0 })).collect();
        c.enqueue_many(few).await.unwrap();
        // From COPY_MIN jobs due now: the COPY path.
        let many = (0..crate::common::COPY_MIN as i64)
            .map(|i| Add::job(AddArgs { a: i, b: 0 }).queue("bulk"))
            .collect();
        c.enqueue_many(many).await.unwrap();
        c.enqueue(Add::job(AddArgs { a: 1, b: 1 }).delay(Duration::from_secs(3600)))
            .await
            .unwrap();
    })
    .await;
    let mut payloads: Vec<Value> = seen
        .iter()
        .map(|p| serde_json::from_str(p).unwrap())
        .collect();
    payloads.sort_by_key(|p| p.to_string());
    assert_eq!(
        payloads,
        [
            json!({"queue": "bulk", "scheduled": false}),
            json!({"queue": "default", "scheduled": false}),
            json!({"queue": "default", "scheduled": false}),
            json!({"queue": "default", "scheduled": true}),
        ],
        "one notification per call and queue, sent after each commit"
    );
    assert_eq!(
        count_jobs(&db.pool, "true").await,
        12 + crate::common::COPY_MIN as i64
    );
}

#[tokio::test]
async fn copy_bulk_enqueue_stores_exactly_what_insert_stores() {
    let db = TestDb::new().await;
    let tricky = json!({
        "path": "C:\\temp\\new\tfile\n\r", "quote": "\"'", "unicode": "żółw ✓ 🐢",
        "nested": [1, 2.5, null, {"\\N": "\\N"}], "empty": ""
    });
    let job = |queue: &str| {
        NewJob::new("echo", tricky.clone())
            .queue(queue)
            .priority(7)
            .max_retries(3)
            .retry_backoff_base(Duration::from_millis(1500))
            .timeout(Duration::from_secs(90))
            .header("tenant", json!("a\tb\\c"))
    };
    let single = db.client.enqueue(job("q\\one")).await.unwrap();
    let copied = db
        .client
        .enqueue_many(
            (0..crate::common::COPY_MIN)
                .map(|_| job("q\\one"))
                .collect(),
        )
        .await
        .unwrap();
    assert_eq!(copied.len(), crate::common::COPY_MIN);
    assert!(copied.iter().all(|h| !h.is_duplicate()));
    let columns = "queue, task, args, headers, state, priority, max_retries, \
                   retry_backoff_base::text, timeout::text, attempt, errors, on_success, on_error";
    let row_of = |id: uuid::Uuid| {
        let pool = db.pool.clone();
        let sql = format!(
            "SELECT to_jsonb(t) FROM (SELECT {columns} FROM conveyor.jobs WHERE id = $1) t"
        );
        async move {
            sqlx::query_scalar::<_, Value>(sqlx::AssertSqlSafe(sql))
                .bind(id)
                .fetch_one(&pool)
                .await
                .unwrap()
        }
    };
    let expected = row_of(single.id()).await;
    assert_eq!(expected["args"], tricky);
    assert_eq!(expected["headers"]["tenant"], json!("a\tb\\c"));
    for handle in [&copied[0], &copied[crate::common::COPY_MIN - 1]] {
        assert_eq!(row_of(handle.id()).await, expected);
    }

    // A repeated id makes COPY fail as a whole; the insert path then returns
    // the existing job as a duplicate and adds the others.
    let mut again: Vec<NewJob> = (0..crate::common::COPY_MIN - 1)
        .map(|_| job("q\\one"))
        .collect();
    again.push(job("q\\one").id(single.id()));
    let handles = db.client.enqueue_many(again).await.unwrap();
    assert_eq!(handles.iter().filter(|h| h.is_duplicate()).count(), 1);
    assert_eq!(handles[crate::common::COPY_MIN - 1].id(), single.id());
    assert_eq!(
        count_jobs(&db.pool, "true").await,
        1 + 2 * crate::common::COPY_MIN as i64 - 1
    );
}

#[tokio::test]
async fn notifications_sent_after_commit_wake_an_idle_worker() {
    let db = TestDb::new().await;
    let worker = idle_echo_worker(&db, 50).await;

    // COPY always leaves the notification to the client, after the commit.
    let jobs = (0..crate::common::COPY_MIN as i64)
        .map(|i| Add::job(AddArgs { a: i, b: 0 }))
        .collect();
    let handles = db.client.enqueue_many(jobs).await.unwrap();
    let last = handles.last().unwrap().wait(WAIT).await.unwrap();
    assert_eq!(last, crate::common::COPY_MIN as i64 - 1);

    // Concurrent single enqueues: all but the first share transactions
    // (group commit), whose insert trigger notifies at commit.
    let calls = (0..20).map(|i| {
        let client = db.client.clone();
        async move { client.enqueue(Add::job(AddArgs { a: i, b: 1 })).await }
    });
    let handles = futures_join_all(calls).await;
    for (i, handle) in handles.into_iter().enumerate() {
        assert_eq!(handle.unwrap().wait(WAIT).await.unwrap(), i as i64 + 1);
    }
    worker.shutdown(WAIT).await.unwrap();
}

/// The business tables of the SQL bulk tests, each enqueueing an `add` job
/// per inserted row, as README's trigger recipe says: `orders` from a FOR
/// EACH STATEMENT trigger with a transition table calling
/// `conveyor.enqueue_each` (queue `default`), `refunds` the same calling
/// `conveyor.enqueue_many` (queue `refunds`), `lines` from a FOR EACH ROW
/// trigger calling `conveyor.enqueue()` (queue `lines`).
const BUSINESS_TABLES: &str = "
CREATE TABLE orders (id bigint PRIMARY KEY, qty int NOT NULL);
CREATE FUNCTION orders_enqueue() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM FROM conveyor.enqueue_each('add',
        (SELECT array_agg(jsonb_build_object('a', n.id, 'b', n.qty)) FROM new_orders n));
    RETURN NULL;
END
$$;
CREATE TRIGGER orders_enqueue AFTER INSERT ON orders
    REFERENCING NEW TABLE AS new_orders
    FOR EACH STATEMENT EXECUTE FUNCTION orders_enqueue();
CREATE TABLE refunds (id bigint PRIMARY KEY, qty int NOT NULL);
CREATE FUNCTION refunds_enqueue() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM FROM conveyor.enqueue_many((
        SELECT jsonb_agg(jsonb_build_object('task', 'add', 'queue', 'refunds',
                                            'args', jsonb_build_object('a', n.id, 'b', n.qty)))
        FROM new_refunds n));
    RETURN NULL;
END
$$;
CREATE TRIGGER refunds_enqueue AFTER INSERT ON refunds
    REFERENCING NEW TABLE AS new_refunds
    FOR EACH STATEMENT EXECUTE FUNCTION refunds_enqueue();
CREATE TABLE lines (id bigint PRIMARY KEY, qty int NOT NULL);
CREATE FUNCTION lines_enqueue() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM conveyor.enqueue('add', jsonb_build_object('a', NEW.id, 'b', NEW.qty), queue => 'lines');
    RETURN NULL;
END
$$;
CREATE TRIGGER lines_enqueue AFTER INSERT ON lines
    FOR EACH ROW EXECUTE FUNCTION lines_enqueue();
";

/// Inserts `n` rows of quantity `qty` into each business table, one
/// statement per table, in one transaction that commits or rolls back.
async fn insert_business_rows(pool: sqlx::PgPool, n: i32, qty: i32, commit: bool) {
    let mut tx = pool.begin().await.unwrap();
    for table in ["orders", "refunds", "lines"] {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "INSERT INTO {table} SELECT g, $2 FROM generate_series(1, $1) g"
        )))
        .bind(n)
        .bind(qty)
        .execute(&mut *tx)
        .await
        .unwrap();
    }
    if commit {
        tx.commit().await.unwrap();
    } else {
        tx.rollback().await.unwrap();
    }
}

/// (jobs, pending jobs with their ring row, enqueued per the rollups) of
/// task `add` in `queue`.
async fn sql_bulk_counts(pool: &sqlx::PgPool, queue: &str) -> (i64, i64, i64) {
    sqlx::query_as(
        "SELECT (SELECT count(*) FROM conveyor.jobs WHERE task = 'add' AND queue = $1),
                (SELECT count(*) FROM conveyor.jobs j JOIN conveyor.ready r ON r.job_id = j.id
                 WHERE j.task = 'add' AND j.queue = $1 AND j.state = 'pending'
                   AND (r.queue, r.task, r.priority, r.run_at) = (j.queue, j.task, j.priority, j.run_at)),
                (SELECT coalesce(sum(enqueued), 0)::bigint FROM conveyor.stats
                 WHERE task = 'add' AND queue = $1)",
    )
    .bind(queue)
    .fetch_one(pool)
    .await
    .unwrap()
}

/// A trigger on a business table enqueues a job per inserted row inside the
/// business transaction, from a statement trigger (`conveyor.enqueue_each`,
/// `conveyor.enqueue_many`) or a row trigger (`conveyor.enqueue()`): the jobs get their ring rows,
/// their rollup counts and one notification per queue at commit, and
/// workers run them like jobs enqueued from Rust. A rolled-back business
/// transaction leaves no job, ring row, count or notification.
#[tokio::test]
async fn business_table_triggers_enqueue_jobs_that_run_like_rust_ones() {
    let db = TestDb::new().await;
    sqlx::raw_sql(BUSINESS_TABLES)
        .execute(&db.pool)
        .await
        .unwrap();

    // Rolled back: nothing is left, nobody is woken.
    let seen = job_ready_notifications(
        &db.pool,
        insert_business_rows(db.pool.clone(), 200, 1, false),
    )
    .await;
    assert!(seen.is_empty(), "{seen:?}");
    assert_eq!(count_jobs(&db.pool, "true").await, 0);
    let ring: i64 = sqlx::query_scalar("SELECT count(*) FROM conveyor.ready")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let counted: i64 =
        sqlx::query_scalar("SELECT coalesce(sum(enqueued), 0)::bigint FROM conveyor.stats")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!((ring, counted), (0, 0), "(ring rows, enqueued counted)");

    // Committed: 300 rows in each table, one statement each (the row
    // trigger's: 300 statements inside it), in one business transaction.
    let seen = job_ready_notifications(
        &db.pool,
        insert_business_rows(db.pool.clone(), 300, 2, true),
    )
    .await;
    let mut payloads: Vec<Value> = seen
        .iter()
        .map(|p| serde_json::from_str(p).unwrap())
        .collect();
    payloads.sort_by_key(|p| p["queue"].as_str().unwrap_or_default().to_string());
    assert_eq!(
        payloads,
        [
            json!({"queue": "default", "scheduled": false}),
            json!({"queue": "lines", "scheduled": false}),
            json!({"queue": "refunds", "scheduled": false})
        ],
        "one notification per queue for 900 jobs"
    );
    for queue in ["default", "refunds", "lines"] {
        assert_eq!(
            sql_bulk_counts(&db.pool, queue).await,
            (300, 300, 300),
            "{queue}"
        );
    }

    // Workers run them like Rust's own jobs.
    let rust = db
        .client
        .enqueue(Add::job(AddArgs { a: 1000, b: 2 }))
        .await
        .unwrap();
    let worker = echo_worker(&db.client)
        .queues(["default", "refunds", "lines"])
        .concurrency(20)
        .start()
        .unwrap();
    assert_eq!(rust.wait(WAIT).await.unwrap(), 1002);
    let jobs: Vec<(uuid::Uuid, String, i64)> = sqlx::query_as(
        "SELECT id, queue, (args->>'a')::bigint FROM conveyor.jobs WHERE task = 'add' AND id <> $1",
    )
    .bind(rust.id())
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(jobs.len(), 900);
    for (id, queue, a) in jobs {
        let result = db.client.handle::<i64>(id).wait(WAIT).await.unwrap();
        assert_eq!(result, a + 2, "job {id} of queue {queue}");
    }
    worker.shutdown(WAIT).await.unwrap();
    let done: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM conveyor.jobs WHERE state = 'success' AND attempt = 1",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(done, 901);
}

/// Bad input to `conveyor.enqueue_many` fails the whole call with an error
/// naming the element and what is wrong, and inserts nothing (the good
/// elements before the bad one included); jobs enqueued before stay.
#[tokio::test]
async fn enqueue_many_refuses_bad_input_and_inserts_nothing() {
    let db = TestDb::new().await;
    let good: Vec<uuid::Uuid> = sqlx::query_scalar(
        "SELECT * FROM conveyor.enqueue_many('[{\"task\": \"add\"}, {\"task\": \"add\", \"args\": {\"a\": 1}}]')",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(good.len(), 2);
    let cases = [
        (
            r#"{"task": "add"}"#,
            "must be a JSON array of job objects, not a JSON object",
        ),
        (
            r#"[{"task": "add"}, {"task": null}]"#,
            "job 2 of 2 has no task",
        ),
        (
            r#"[{"task": "add"}, {"args": {}}]"#,
            "job 2 of 2 has no task",
        ),
        (
            r#"[{"task": "add"}, {"task": 7}]"#,
            "job 2 of 2 has no task",
        ),
        (
            r#"[{"task": "add"}, "add"]"#,
            "job 2 of 2 is a JSON string, not an object",
        ),
        (
            r#"[{"task": "add", "queu": "x", "delay": 5}]"#,
            "job 1 of 1 has unknown fields: delay, queu",
        ),
        (
            r#"[{"task": "add", "priority": "high"}]"#,
            "job 1 of 1 has a priority that is not a number",
        ),
        (
            r#"[{"task": "add", "headers": [1]}]"#,
            "job 1 of 1 has headers that are not an object",
        ),
        (
            r#"[{"task": "add", "unique": "yes"}]"#,
            "job 1 of 1 has a unique that is not true or false",
        ),
        (
            r#"[{"task": "add", "queue": 5}]"#,
            "job 1 of 1 has a queue that is not a string",
        ),
    ];
    for (input, expected) in cases {
        let err = sqlx::query("SELECT * FROM conveyor.enqueue_many($1::jsonb)")
            .bind(input)
            .execute(&db.pool)
            .await
            .expect_err(input);
        let db_err = err.as_database_error().expect("a database error");
        assert_eq!(db_err.code().as_deref(), Some("22023"), "{input}: {db_err}");
        assert!(
            db_err.message().contains(expected),
            "{input}: {} does not say {expected:?}",
            db_err.message()
        );
    }
    // What the column types refuse is refused as conveyor.enqueue() refuses it.
    for input in [
        r#"[{"task": "add"}, {"task": ""}]"#,
        r#"[{"task": "add"}, {"task": "add", "run_at": "soon"}]"#,
        r#"[{"task": "add"}, {"task": "add", "max_retries": -1}]"#,
        r#"[{"task": "add"}, {"task": "add", "timeout": "0 seconds"}]"#,
    ] {
        sqlx::query("SELECT * FROM conveyor.enqueue_many($1::jsonb)")
            .bind(input)
            .execute(&db.pool)
            .await
            .expect_err(input);
    }
    // conveyor.enqueue_each: a NULL option is refused by name.
    for (call, expected) in [
        (
            "conveyor.enqueue_each(NULL, ARRAY['{}'::jsonb])",
            "task must not be NULL",
        ),
        (
            "conveyor.enqueue_each('add', ARRAY['{}'::jsonb], queue => NULL)",
            "queue must not be NULL",
        ),
        (
            "conveyor.enqueue_each('add', ARRAY['{}'::jsonb], priority => NULL)",
            "priority must not be NULL",
        ),
    ] {
        let err = sqlx::query(sqlx::AssertSqlSafe(format!("SELECT * FROM {call}")))
            .execute(&db.pool)
            .await
            .expect_err(call);
        let db_err = err.as_database_error().expect("a database error");
        assert_eq!(db_err.code().as_deref(), Some("23502"), "{call}: {db_err}");
        assert!(db_err.message().contains(expected), "{call}: {db_err}");
    }
    for call in [
        "conveyor.enqueue_each('', ARRAY['{}'::jsonb, '{}'])",
        "conveyor.enqueue_each('add', ARRAY['{}'::jsonb, '{}'], headers => '[1]')",
        "conveyor.enqueue_each('add', ARRAY['{}'::jsonb, '{}'], max_retries => -1)",
    ] {
        sqlx::query(sqlx::AssertSqlSafe(format!("SELECT * FROM {call}")))
            .execute(&db.pool)
            .await
            .expect_err(call);
    }
    // From a statement trigger, the business insert fails with it.
    sqlx::raw_sql(
        "CREATE TABLE imports (id bigint PRIMARY KEY, task text);
         CREATE FUNCTION imports_enqueue() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             PERFORM FROM conveyor.enqueue_many((
                 SELECT jsonb_agg(jsonb_build_object('task', n.task)) FROM new_imports n));
             RETURN NULL;
         END
         $$;
         CREATE TRIGGER imports_enqueue AFTER INSERT ON imports
             REFERENCING NEW TABLE AS new_imports
             FOR EACH STATEMENT EXECUTE FUNCTION imports_enqueue();",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let err = sqlx::query("INSERT INTO imports VALUES (1, 'add'), (2, NULL)")
        .execute(&db.pool)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("job 2 of 2 has no task"), "{err}");
    let imported: i64 = sqlx::query_scalar("SELECT count(*) FROM imports")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(imported, 0);
    // Nothing but the two good jobs, each with its ring row, counted once.
    assert_eq!(sql_bulk_counts(&db.pool, "default").await, (2, 2, 2));
    // NULL, JSON null and an empty array enqueue nothing, without error.
    for input in [None, Some("null"), Some("[]")] {
        let ids: Vec<uuid::Uuid> =
            sqlx::query_scalar("SELECT * FROM conveyor.enqueue_many($1::jsonb)")
                .bind(input)
                .fetch_all(&db.pool)
                .await
                .unwrap();
        assert!(ids.is_empty(), "{input:?}");
    }
    for input in [None, Some(Vec::<Value>::new())] {
        let ids: Vec<uuid::Uuid> =
            sqlx::query_scalar("SELECT * FROM conveyor.enqueue_each('add', $1::jsonb[])")
                .bind(input.clone())
                .fetch_all(&db.pool)
                .await
                .unwrap();
        assert!(ids.is_empty(), "{input:?}");
    }
    assert_eq!(count_jobs(&db.pool, "true").await, 2);
}

/// An id given twice, or one an existing job holds (finished or not), gives
/// one job, as `conveyor.enqueue()` and the Rust client do; `unique` jobs
/// share the Rust client's default key and are skipped while one holding
/// it is unfinished, as `Unique::UntilFinished` duplicates are.
#[tokio::test]
async fn enqueue_many_skips_existing_ids_and_held_unique_keys() {
    let db = TestDb::new().await;
    let finished = db
        .client
        .enqueue(Add::job(AddArgs { a: 1, b: 1 }))
        .await
        .unwrap();
    let worker = echo_worker(&db.client).start().unwrap();
    assert_eq!(finished.wait(WAIT).await.unwrap(), 2);
    worker.shutdown(WAIT).await.unwrap();
    let waiting = db
        .client
        .enqueue(NewJob::new("echo", json!({"n": 0})))
        .await
        .unwrap();
    let fresh = uuid::Uuid::now_v7();
    let specs = json!([
        {"task": "echo", "id": finished.id().to_string(), "args": {"n": 1}},
        {"task": "echo", "id": waiting.id().to_string(), "args": {"n": 2}},
        {"task": "echo", "id": fresh.to_string(), "args": {"n": 3}},
        {"task": "echo", "id": fresh.to_string(), "args": {"n": 4}},
        {"task": "sync", "args": {"user": 1, "full": true}, "unique": true},
        {"task": "sync", "args": {"full": true, "user": 1}, "unique": true},
        {"task": "sync", "args": {"user": 2}, "unique_key": "user-2"},
        {"task": "other", "args": {"user": 2}, "unique_key": "user-2"}
    ]);
    let inserted: Vec<uuid::Uuid> = sqlx::query_scalar("SELECT * FROM conveyor.enqueue_many($1)")
        .bind(&specs)
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(inserted.len(), 3, "{inserted:?}");
    assert_eq!(inserted[0], fresh);
    let args_of = |id: uuid::Uuid| {
        let pool = db.pool.clone();
        async move {
            sqlx::query_scalar::<_, Value>("SELECT args FROM conveyor.jobs WHERE id = $1")
                .bind(id)
                .fetch_one(&pool)
                .await
                .unwrap()
        }
    };
    assert_eq!(args_of(fresh).await, json!({"n": 3}));
    assert_eq!(args_of(waiting.id()).await, json!({"n": 0}));
    // As conveyor.enqueue() does with the same ids.
    for id in [finished.id(), waiting.id(), fresh] {
        let again: uuid::Uuid = sqlx::query_scalar("SELECT conveyor.enqueue('echo', id => $1)")
            .bind(id)
            .fetch_one(&db.pool)
            .await
            .unwrap();
        assert_eq!(again, id);
    }
    // The key is the Rust client's: its unique enqueue is a duplicate.
    let rust = db
        .client
        .enqueue(
            NewJob::new("sync", json!({"user": 1, "full": true}))
                .unique(conveyor::Unique::UntilFinished),
        )
        .await
        .unwrap();
    assert!(rust.is_duplicate());
    assert_eq!(rust.id(), inserted[1]);
    // Again in a later call: skipped while the holder is unfinished.
    let later: Vec<uuid::Uuid> = sqlx::query_scalar("SELECT * FROM conveyor.enqueue_many($1)")
        .bind(json!([{"task": "sync", "args": {"user": 1, "full": true}, "unique": true}]))
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert!(later.is_empty());
    // 1 finished + 1 waiting + fresh + sync (default key) + sync (user-2).
    assert_eq!(count_jobs(&db.pool, "true").await, 5);
    // Once the holder finished, the key is free again.
    db.client.cancel(inserted[1]).await.unwrap();
    let after: Vec<uuid::Uuid> = sqlx::query_scalar("SELECT * FROM conveyor.enqueue_many($1)")
        .bind(json!([{"task": "sync", "args": {"user": 1, "full": true}, "unique": true}]))
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(after.len(), 1);
}
