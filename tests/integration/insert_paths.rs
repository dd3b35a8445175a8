//! Every way into `conveyor.jobs` stores the same row for the same job: one
//! enqueue, in the caller's transaction, a bulk statement, COPY, concurrent
//! calls merged by group commit, a unique job, a workflow member, a success
//! callback, `conveyor.enqueue()` in SQL, and the set-based
//! `conveyor.enqueue_many()` and `conveyor.enqueue_each()` in SQL (called
//! directly and from a statement trigger). Compared column by column.

use std::time::Duration;

use conveyor::{Group, NewJob, Unique, Worker};
use serde_json::{Value, json};

use crate::common::{TestDb, WAIT, eventually};

/// Columns that describe the job as enqueued (not ids, times, or the
/// workflow it belongs to).
const COLUMNS: &str = "queue, task, args, headers, state, priority, max_retries, \
     retry_backoff_base::text AS retry_backoff_base, timeout::text AS timeout, attempt, \
     errors, on_success, on_error, result, last_error, cancel_requested_at, \
     (run_at - created_at < interval '5 seconds') AS due_at_once";

fn spec() -> NewJob {
    NewJob::new(
        "copy",
        json!({ "text": "a\tb\\c \"q\" żółw", "n": [1, 2.5, null] }),
    )
    .queue("paths")
    .priority(3)
    .max_retries(4)
    .retry_backoff_base(Duration::from_millis(2500))
    .timeout(Duration::from_secs(45))
    .header("tenant", json!("acme"))
}

async fn row(db: &TestDb, id: uuid::Uuid) -> Value {
    let sql =
        format!("SELECT to_jsonb(t) FROM (SELECT {COLUMNS} FROM conveyor.jobs WHERE id = $1) t");
    sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
        .bind(id)
        .fetch_one(&db.pool)
        .await
        .unwrap_or_else(|e| panic!("job {id}: {e}"))
}

#[tokio::test]
async fn every_enqueue_path_stores_the_same_row() {
    let db = TestDb::new().await;
    let c = &db.client;
    let mut paths: Vec<(&str, uuid::Uuid)> = Vec::new();

    paths.push(("enqueue", c.enqueue(spec()).await.unwrap().id()));
    let mut tx = db.pool.begin().await.unwrap();
    let id = c.enqueue_tx(&mut tx, spec()).await.unwrap().id();
    tx.commit().await.unwrap();
    paths.push(("enqueue_tx", id));
    let few = c.enqueue_many(vec![spec(), spec()]).await.unwrap();
    paths.push(("enqueue_many (one statement)", few[1].id()));
    let copied = c
        .enqueue_many((0..crate::common::COPY_MIN).map(|_| spec()).collect())
        .await
        .unwrap();
    paths.push(("enqueue_many (COPY)", copied[7].id()));
    let concurrent: Vec<_> = (0..16)
        .map(|_| {
            let c = c.clone();
            tokio::spawn(async move { c.enqueue(spec()).await.unwrap().id() })
        })
        .collect();
    for task in concurrent {
        paths.push(("concurrent enqueue (group commit)", task.await.unwrap()));
    }
    let unique = c
        .enqueue(spec().unique(Unique::For(Duration::from_secs(60))))
        .await
        .unwrap();
    paths.push(("unique enqueue, for a TTL", unique.id()));
    let until_finished = c
        .enqueue(spec().unique(Unique::UntilFinished))
        .await
        .unwrap();
    assert!(!until_finished.is_duplicate());
    paths.push(("unique enqueue, until finished", until_finished.id()));
    let group = c
        .enqueue_workflow(Group::new([spec(), spec()]))
        .await
        .unwrap();
    let member: uuid::Uuid = sqlx::query_scalar(
        "SELECT id FROM conveyor.jobs WHERE workflow_id = $1 ORDER BY workflow_index LIMIT 1",
    )
    .bind(group.id())
    .fetch_one(&db.pool)
    .await
    .unwrap();
    paths.push(("group member (conveyor_internal.spawn)", member));
    let sql: uuid::Uuid = sqlx::query_scalar(
        "SELECT conveyor.enqueue('copy', $1, queue => 'paths', priority => 3, max_retries => 4,
                retry_backoff_base => interval '2.5 seconds', timeout => interval '45 seconds',
                headers => '{\"tenant\": \"acme\"}')",
    )
    .bind(spec_args())
    .fetch_one(&db.pool)
    .await
    .unwrap();
    paths.push(("conveyor.enqueue() in SQL", sql));
    let each: Vec<uuid::Uuid> = sqlx::query_scalar(
        "SELECT * FROM conveyor.enqueue_each('copy', ARRAY[$1, $1], queue => 'paths', priority => 3,
                max_retries => 4, retry_backoff_base => interval '2.5 seconds',
                timeout => interval '45 seconds', headers => '{\"tenant\": \"acme\"}')",
    )
    .bind(spec_args())
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(each.len(), 2);
    paths.push(("conveyor.enqueue_each() in SQL", each[1]));
    let many: Vec<uuid::Uuid> = sqlx::query_scalar("SELECT * FROM conveyor.enqueue_many($1)")
        .bind(json!([sql_bulk_spec(), sql_bulk_spec()]))
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(many.len(), 2);
    paths.push(("conveyor.enqueue_many() in SQL", many[1]));
    sqlx::raw_sql(
        "CREATE TABLE imports (spec jsonb);
         CREATE FUNCTION imports_enqueue() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             PERFORM FROM conveyor.enqueue_many((SELECT jsonb_agg(n.spec) FROM new_imports n));
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
    let triggered_id = uuid::Uuid::now_v7();
    let mut triggered_spec = sql_bulk_spec();
    triggered_spec["id"] = json!(triggered_id.to_string());
    sqlx::query("INSERT INTO imports VALUES ($1), ($2)")
        .bind(sql_bulk_spec())
        .bind(&triggered_spec)
        .execute(&db.pool)
        .await
        .unwrap();
    paths.push((
        "conveyor.enqueue_many() from a statement trigger",
        triggered_id,
    ));

    // A success callback, inserted by conveyor_internal.after_finish() when its parent
    // succeeds (on another queue, so nothing else runs).
    let callback_id = uuid::Uuid::now_v7();
    let parent = c
        .enqueue(
            NewJob::new("parent", json!({}))
                .queue("parents")
                .on_success_job(spec().id(callback_id)),
        )
        .await
        .unwrap();
    let worker = Worker::builder(c)
        .queues(["parents"])
        .register_fn("parent", |_, _| async { Ok(Value::Null) })
        .start()
        .unwrap();
    parent.wait(WAIT).await.unwrap();
    worker.shutdown(WAIT).await.unwrap();
    eventually(WAIT, "the callback inserted", || async {
        let n: i64 = sqlx::query_scalar("SELECT count(*) FROM conveyor.jobs WHERE id = $1")
            .bind(callback_id)
            .fetch_one(&db.pool)
            .await
            .unwrap();
        (n == 1).then_some(())
    })
    .await;
    paths.push((
        "success callback (conveyor_internal.after_finish)",
        callback_id,
    ));

    let expected = row(&db, paths[0].1).await;
    assert_eq!(expected["args"], spec_args());
    assert_eq!(expected["state"], json!("pending"));
    let mut differ = Vec::new();
    for (path, id) in &paths[1..] {
        let got = row(&db, *id).await;
        for (column, value) in expected.as_object().into_iter().flatten() {
            if got.get(column) != Some(value) {
                differ.push(format!(
                    "{path}: {column} = {} where enqueue stored {value}",
                    got.get(column).unwrap_or(&Value::Null)
                ));
            }
        }
    }
    assert!(differ.is_empty(), "{differ:#?}");

    // Every path put each pending job in the ready ring exactly once, with
    // its claim-order columns, and nothing else is there.
    let ring: (i64, i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM conveyor.jobs WHERE state = 'pending'),
                (SELECT count(*) FROM conveyor.ready),
                (SELECT count(DISTINCT r.job_id) FROM conveyor.ready r
                 JOIN conveyor.jobs j ON j.id = r.job_id AND j.state = 'pending'
                   AND (j.queue, j.task, j.priority, j.run_at) = (r.queue, r.task, r.priority, r.run_at))",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        (ring.1, ring.2),
        (ring.0, ring.0),
        "(pending, ring rows, matching)"
    );

    // Unique keys: both scopes store the default key (a hash of queue, task
    // and args) on the row; the TTL one also holds it in unique_keys.
    let default_key: String = sqlx::query_scalar("SELECT conveyor.unique_key('paths', 'copy', $1)")
        .bind(spec_args())
        .fetch_one(&db.pool)
        .await
        .unwrap();
    for id in [unique.id(), until_finished.id()] {
        let stored: Option<String> =
            sqlx::query_scalar("SELECT unique_key FROM conveyor.jobs WHERE id = $1")
                .bind(id)
                .fetch_one(&db.pool)
                .await
                .unwrap();
        assert_eq!(stored.as_deref(), Some(default_key.as_str()), "job {id}");
    }
    let holder: Option<uuid::Uuid> =
        sqlx::query_scalar("SELECT job_id FROM conveyor.unique_keys WHERE key = $1")
            .bind(&default_key)
            .fetch_optional(&db.pool)
            .await
            .unwrap();
    assert_eq!(holder, Some(unique.id()));
}

/// [`spec`] as an element of `conveyor.enqueue_many()`'s array.
fn sql_bulk_spec() -> Value {
    json!({
        "task": "copy", "args": spec_args(), "queue": "paths", "priority": 3,
        "max_retries": 4, "retry_backoff_base": "2.5 seconds", "timeout": 45,
        "headers": {"tenant": "acme"}
    })
}

fn spec_args() -> Value {
    json!({ "text": "a\tb\\c \"q\" żółw", "n": [1, 2.5, null] })
}

/// The defaults live in three places (the Rust builder, `conveyor.enqueue()`'s
/// parameters, the column defaults a hand-written INSERT gets): they must
/// store the same row. And a future due time makes every way in store a
/// `scheduled` job at that time (the one rule: `conveyor_internal.due_at`
/// and `initial_state`).
#[tokio::test]
async fn defaults_and_the_scheduling_rule_agree_on_every_way_in() {
    let db = TestDb::new().await;
    let c = &db.client;
    let rust = c
        .enqueue(NewJob::new("plain", json!({})))
        .await
        .unwrap()
        .id();
    let sql: uuid::Uuid = sqlx::query_scalar("SELECT conveyor.enqueue('plain')")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let by_hand: uuid::Uuid =
        sqlx::query_scalar("INSERT INTO conveyor.jobs (task) VALUES ('plain') RETURNING id")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    let many: uuid::Uuid =
        sqlx::query_scalar("SELECT * FROM conveyor.enqueue_many('[{\"task\": \"plain\"}]')")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    let many_nulls: uuid::Uuid = sqlx::query_scalar(
        "SELECT * FROM conveyor.enqueue_many(jsonb_build_array(jsonb_build_object(
             'task', 'plain', 'args', NULL, 'queue', NULL, 'priority', NULL, 'run_at', NULL,
             'max_retries', NULL, 'retry_backoff_base', NULL, 'timeout', NULL, 'headers', NULL,
             'id', NULL, 'unique', NULL, 'unique_key', NULL)))",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let each: uuid::Uuid =
        sqlx::query_scalar("SELECT * FROM conveyor.enqueue_each('plain', ARRAY[NULL::jsonb])")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    let expected = row(&db, rust).await;
    assert_eq!(expected["queue"], json!("default"));
    assert_eq!(expected["max_retries"], json!(25));
    for (path, id) in [
        ("conveyor.enqueue()", sql),
        ("INSERT by hand", by_hand),
        ("conveyor.enqueue_many()", many),
        ("conveyor.enqueue_many() with every field null", many_nulls),
        ("conveyor.enqueue_each() with a NULL element", each),
    ] {
        assert_eq!(row(&db, id).await, expected, "{path} with defaults");
    }

    let at = chrono::Utc::now() + chrono::Duration::hours(1);
    let later = |job: NewJob| job.run_at(at);
    let mut ids = vec![
        c.enqueue(later(NewJob::new("later", json!({}))))
            .await
            .unwrap()
            .id(),
    ];
    let many = c
        .enqueue_many(vec![
            later(NewJob::new("later", json!({}))),
            later(NewJob::new("later", json!({}))),
        ])
        .await
        .unwrap();
    ids.push(many[1].id());
    ids.push(
        c.enqueue(later(NewJob::new("later", json!({}))).unique(Unique::UntilFinished))
            .await
            .unwrap()
            .id(),
    );
    let run = c
        .enqueue_workflow(Group::new([later(NewJob::new("later", json!({"m": 1})))]))
        .await
        .unwrap();
    let member: uuid::Uuid =
        sqlx::query_scalar("SELECT id FROM conveyor.jobs WHERE workflow_id = $1")
            .bind(run.id())
            .fetch_one(&db.pool)
            .await
            .unwrap();
    ids.push(member);
    ids.push(
        sqlx::query_scalar("SELECT conveyor.enqueue('later', run_at => $1)")
            .bind(at)
            .fetch_one(&db.pool)
            .await
            .unwrap(),
    );
    ids.push(
        sqlx::query_scalar("SELECT * FROM conveyor.enqueue_many($1)")
            .bind(json!([{"task": "later", "run_at": at}]))
            .fetch_one(&db.pool)
            .await
            .unwrap(),
    );
    ids.push(
        sqlx::query_scalar(
            "SELECT * FROM conveyor.enqueue_each('later', ARRAY['{}'::jsonb], run_at => $1)",
        )
        .bind(at)
        .fetch_one(&db.pool)
        .await
        .unwrap(),
    );
    for id in ids {
        let (state, run_at): (String, chrono::DateTime<chrono::Utc>) =
            sqlx::query_as("SELECT state, run_at FROM conveyor.jobs WHERE id = $1")
                .bind(id)
                .fetch_one(&db.pool)
                .await
                .unwrap();
        assert_eq!(state, "scheduled", "job {id}");
        assert!(
            (run_at - at).num_microseconds().unwrap_or(i64::MAX).abs() <= 1,
            "job {id}: run_at {run_at}, asked {at}"
        );
    }
}
