//! The dashboard's router, driven in-process: its numbers match the table,
//! lists page without gaps, and actions change the database. Authentication,
//! read-only mode and CSRF protection are in `security`; searches, bulk
//! actions, charts, queue settings, workflows and periodic schedules each
//! have a module.

mod bulk;
mod charts;
mod periodic;
mod reads;
mod search;
mod security;
mod settings;
mod workflows;

use std::collections::HashSet;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Method, Request, StatusCode};
use conveyor::dashboard::{self, DashboardConfig};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;
use uuid::Uuid;

use crate::common::{TestDb, count_jobs};

struct Reply {
    status: StatusCode,
    headers: HeaderMap,
    body: Value,
    text: String,
}

async fn send(router: &Router, method: Method, uri: &str, headers: &[(&str, &str)]) -> Reply {
    let mut request = Request::builder().method(method).uri(uri);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = router
        .clone()
        .oneshot(request.body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let text = String::from_utf8_lossy(&bytes).to_string();
    let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    Reply {
        status,
        headers,
        body,
        text,
    }
}

async fn get(router: &Router, uri: &str) -> Reply {
    send(router, Method::GET, uri, &[]).await
}

/// A POST as the page's script sends it.
async fn post(router: &Router, uri: &str) -> Reply {
    send(router, Method::POST, uri, &[("x-conveyor-csrf", "1")]).await
}

fn open(db: &TestDb) -> Router {
    dashboard::router(db.client.clone(), DashboardConfig::new())
}

/// Inserts `n` jobs by SQL; `extra` sets the state and its columns.
async fn insert(db: &TestDb, n: i64, queue: &str, task: &str, extra: &str) -> Vec<Uuid> {
    let (columns, values) = extra.split_once('|').unwrap_or(("", ""));
    sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "INSERT INTO conveyor.jobs (queue, task{columns})
         SELECT $1, $2{values} FROM generate_series(1, $3) i RETURNING id"
    )))
    .bind(queue)
    .bind(task)
    .bind(n)
    .fetch_all(&db.pool)
    .await
    .unwrap()
}

const FAILED_NOW: &str = ", state, attempt, finished_at, last_error|, 'failure', 1, now() - i * interval '1 second', 'boom ' || i";
const SUCCEEDED_NOW: &str =
    ", state, attempt, finished_at|, 'success', 1, now() - i * interval '1 second'";
const STARTED: &str = ", state, attempt, lease_expires_at, worker_id, started_at, lease_token|, 'started', 1, now() + interval '1 minute', 'w1', now(), nextval('conveyor.lease_tokens')";

#[tokio::test]
async fn the_overview_counts_what_the_table_holds() {
    let db = TestDb::new().await;
    insert(&db, 4, "media", "resize", "").await;
    insert(
        &db,
        2,
        "media",
        "resize",
        ", state, run_at|, 'scheduled', now() + interval '1 hour'",
    )
    .await;
    insert(
        &db,
        1,
        "media",
        "resize",
        ", state, attempt, run_at, last_error|, 'retry', 1, now() + interval '1 minute', 'x'",
    )
    .await;
    insert(&db, 3, "media", "resize", STARTED).await;
    insert(&db, 5, "media", "resize", SUCCEEDED_NOW).await;
    insert(
        &db,
        2,
        "media",
        "resize",
        ", state, attempt, finished_at|, 'success', 1, now() - interval '2 hours'",
    )
    .await;
    insert(&db, 2, "mail", "send", FAILED_NOW).await;
    // Failed two days ago: kept, but outside the 24-hour window.
    insert(
        &db,
        1,
        "mail",
        "send",
        ", state, attempt, finished_at|, 'failure', 1, now() - interval '2 days'",
    )
    .await;
    insert(
        &db,
        1,
        "mail",
        "send",
        ", state, finished_at|, 'cancelled', now()",
    )
    .await;
    db.client.pause_queue("idle").await.unwrap();
    sqlx::query("ANALYZE conveyor.job_rows")
        .execute(&db.pool)
        .await
        .unwrap();

    let reply = get(&open(&db), "/api/overview").await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let queues = reply.body["queues"].as_array().unwrap();
    let names: Vec<&str> = queues
        .iter()
        .map(|q| q["queue"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["idle", "mail", "media"]);
    let row = |name: &str| queues.iter().find(|q| q["queue"] == name).unwrap().clone();
    let media = row("media");
    for state in ["scheduled", "pending", "started", "retry"] {
        let n = count_jobs(&db.pool, &format!("queue = 'media' AND state = '{state}'")).await;
        assert_eq!(media[state].as_i64(), Some(n), "media {state}");
    }
    assert_eq!(media["succeeded_1m"], 5);
    assert_eq!(
        media["succeeded_1h"], 5,
        "the two-hour-old ones are outside"
    );
    assert!(media["oldest_pending_secs"].as_f64().unwrap() >= 0.0);
    let mail = row("mail");
    assert_eq!(
        (mail["failed_1m"].as_i64(), mail["failed_1h"].as_i64()),
        (Some(2), Some(2))
    );
    assert_eq!(mail["failed_24h"], 2);
    assert_eq!(mail["cancelled_24h"], 1);
    assert_eq!(mail["pending"], 0);
    assert_eq!(row("idle")["paused"], true);
    assert_eq!(media["paused"], false);

    let totals = &reply.body["totals"];
    assert_eq!(totals["failure"], 3);
    assert_eq!(totals["success"], 7);
    assert_eq!(totals["cancelled"], 1);
    assert_eq!(totals["estimated_jobs"], count_jobs(&db.pool, "true").await);
    assert_eq!(reply.body["read_only"], false);
}

/// Walks every page of a list; returns the ids in order.
async fn walk(router: &Router, query: &str, limit: usize) -> Vec<String> {
    let mut ids = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..100 {
        let mut uri = format!("/api/jobs?{query}&limit={limit}");
        if let Some(c) = &cursor {
            uri.push_str(&format!("&cursor={c}"));
        }
        let reply = get(router, &uri).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        let page = reply.body["jobs"].as_array().unwrap();
        assert!(page.len() <= limit);
        ids.extend(page.iter().map(|j| j["id"].as_str().unwrap().to_string()));
        match reply.body["next"].as_str() {
            Some(next) => cursor = Some(next.to_string()),
            None => return ids,
        }
    }
    panic!("more than 100 pages");
}

#[tokio::test]
async fn lists_page_by_keyset_without_overlap_or_gaps_and_search() {
    let db = TestDb::new().await;
    let router = open(&db);
    let mut failed = insert(&db, 70, "mail", "send", FAILED_NOW).await;
    // Ties on finished_at: the id breaks them.
    failed.extend(insert(&db, 30, "mail", "charge", ", state, attempt, finished_at, last_error|, 'failure', 1, now() - interval '1 hour', 'declined'").await);
    insert(&db, 5, "mail", "send", SUCCEEDED_NOW).await;

    let first = get(&router, "/api/jobs?state=failure&limit=40").await;
    assert_eq!(first.body["jobs"].as_array().unwrap().len(), 40);
    assert!(first.body["next"].is_string());
    let ids = walk(&router, "state=failure", 40).await;
    assert_eq!(ids.len(), 100, "three pages: 40 + 40 + 20");
    let unique: HashSet<&String> = ids.iter().collect();
    assert_eq!(unique.len(), 100, "no job on two pages");
    let expected: HashSet<String> = failed.iter().map(Uuid::to_string).collect();
    assert_eq!(
        unique.into_iter().cloned().collect::<HashSet<_>>(),
        expected
    );
    // Most recently finished first.
    let newest = &first.body["jobs"][0];
    assert_eq!(newest["last_error"], "boom 1");

    // Unfinished states page by id, newest first.
    let pending = insert(&db, 7, "media", "resize", "").await;
    let ids = walk(&router, "state=pending", 3).await;
    let mut expected: Vec<String> = pending.iter().map(Uuid::to_string).collect();
    expected.sort();
    expected.reverse();
    assert_eq!(ids, expected);

    // Search by task and by queue.
    let charged = walk(&router, "state=failure&task=charge", 50).await;
    assert_eq!(charged.len(), 30);
    let reply = get(&router, "/api/jobs?state=failure&task=charge&limit=5").await;
    assert!(
        reply.body["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .all(|j| j["task"] == "charge")
    );
    assert_eq!(
        walk(&router, "state=failure&queue=media", 50).await.len(),
        0
    );
    assert_eq!(
        walk(&router, "state=pending&queue=media&task=resize", 50)
            .await
            .len(),
        7
    );
    assert_eq!(walk(&router, "state=success&task=send", 2).await.len(), 5);
}

#[tokio::test]
async fn job_detail_shows_every_error_and_the_workflow() {
    let db = TestDb::new().await;
    let workflow = Uuid::now_v7();
    sqlx::query(
        "INSERT INTO conveyor.workflows (id, kind, total, succeeded, failed) VALUES ($1, 'chord', 3, 1, 0)",
    )
    .bind(workflow)
    .execute(&db.pool)
    .await
    .unwrap();
    let id: Uuid = sqlx::query_scalar(
        "INSERT INTO conveyor.jobs (queue, task, args, headers, state, attempt, max_retries, run_at,
                                    last_error, errors, workflow_id, workflow_index)
         VALUES ('media', 'resize', '{\"w\": 64}', '{\"tenant\": \"acme\"}', 'retry', 2, 5,
                 now() + interval '1 minute', 'disk full',
                 '[{\"attempt\": 1, \"at\": \"2026-01-01T00:00:00Z\", \"error\": \"timeout\", \"worker_id\": \"w1\"},
                   {\"attempt\": 2, \"at\": \"2026-01-01T00:01:00Z\", \"error\": \"disk full\", \"worker_id\": \"w2\"}]',
                 $1, 1)
         RETURNING id",
    )
    .bind(workflow)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    insert(
        &db,
        1,
        "media",
        "resize",
        &format!(
            ", state, finished_at, workflow_id, workflow_index|, 'success', now(), '{workflow}', 0"
        ),
    )
    .await;
    let router = open(&db);

    let reply = get(&router, &format!("/api/jobs/{id}")).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let job = &reply.body["job"];
    assert_eq!(job["args"], json!({"w": 64}));
    assert_eq!(job["headers"], json!({"tenant": "acme"}));
    assert_eq!(job["state"], "retry");
    assert_eq!(
        (job["attempt"].as_i64(), job["max_retries"].as_i64()),
        (Some(2), Some(5))
    );
    let errors: Vec<&str> = job["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["error"].as_str().unwrap())
        .collect();
    assert_eq!(errors, ["timeout", "disk full"]);
    assert_eq!(job["errors"][1]["worker_id"], "w2");
    assert_eq!(job["last_error"], "disk full");
    let w = &reply.body["workflow"];
    assert_eq!(
        (w["kind"].as_str(), w["state"].as_str()),
        (Some("chord"), Some("running"))
    );
    assert_eq!(
        (
            w["total"].as_i64(),
            w["succeeded"].as_i64(),
            w["failed"].as_i64()
        ),
        (Some(3), Some(1), Some(0))
    );
    let members = reply.body["workflow_jobs"].as_array().unwrap();
    assert_eq!(members.len(), 2);
    assert_eq!(members[1]["id"], id.to_string(), "in member order");

    let missing = get(&router, &format!("/api/jobs/{}", Uuid::now_v7())).await;
    assert_eq!(missing.status, 404);
    assert!(missing.body["error"].as_str().unwrap().contains("no job"));
    for bad in ["/api/jobs/42", "/api/jobs/not-a-uuid/retry"] {
        let reply = if bad.ends_with("retry") {
            post(&router, bad).await
        } else {
            get(&router, bad).await
        };
        assert_eq!(reply.status, 400, "{bad}");
        assert!(
            reply.body["error"]
                .as_str()
                .unwrap()
                .contains("not a job id"),
            "{bad}"
        );
    }
    for bad in [
        "/api/jobs",
        "/api/jobs?state=running",
        "/api/jobs?state=failure&cursor=x",
        "/api/jobs?state=pending&cursor=1_2",
        "/api/jobs?state=failure&limit=ten",
    ] {
        let reply = get(&router, bad).await;
        assert_eq!(reply.status, 400, "{bad}: {}", reply.text);
        assert!(reply.body["error"].is_string(), "{bad}");
    }
    assert_eq!(get(&router, "/api/nothing").await.status, 404);
}

#[tokio::test]
async fn actions_change_the_database() {
    let db = TestDb::new().await;
    let router = open(&db);
    let failed = insert(&db, 1, "mail", "send", FAILED_NOW).await[0];
    let pending = insert(&db, 1, "mail", "send", "").await[0];
    let started = insert(&db, 1, "mail", "send", STARTED).await[0];

    let reply = post(&router, &format!("/api/jobs/{failed}/retry")).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(
        count_jobs(
            &db.pool,
            &format!("id = '{failed}' AND state = 'pending' AND attempt = 0")
        )
        .await,
        1
    );
    let again = post(&router, &format!("/api/jobs/{pending}/retry")).await;
    assert_eq!(
        again.status, 409,
        "only failed or cancelled jobs: {}",
        again.text
    );

    let reply = post(&router, &format!("/api/jobs/{pending}/cancel")).await;
    assert_eq!(
        (reply.status, reply.body["state"].as_str()),
        (StatusCode::OK, Some("cancelled"))
    );
    assert_eq!(
        count_jobs(
            &db.pool,
            &format!("id = '{pending}' AND state = 'cancelled'")
        )
        .await,
        1
    );

    let reply = post(&router, &format!("/api/jobs/{pending}/delete")).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(count_jobs(&db.pool, &format!("id = '{pending}'")).await, 0);
    let reply = post(&router, &format!("/api/jobs/{started}/delete")).await;
    assert_eq!(
        reply.status, 409,
        "running jobs are cancelled first: {}",
        reply.text
    );
    assert_eq!(count_jobs(&db.pool, &format!("id = '{started}'")).await, 1);
    let gone = Uuid::now_v7();
    for action in ["retry", "cancel", "delete"] {
        assert_eq!(
            post(&router, &format!("/api/jobs/{gone}/{action}"))
                .await
                .status,
            404,
            "{action}"
        );
    }
    assert_eq!(
        post(&router, &format!("/api/jobs/{failed}/explode"))
            .await
            .status,
        404
    );

    let paused = || async {
        sqlx::query_scalar::<_, bool>(
            "SELECT paused_at IS NOT NULL FROM conveyor.queues WHERE name = 'mail'",
        )
        .fetch_optional(&db.pool)
        .await
        .unwrap()
    };
    let reply = post(&router, "/api/queues/mail/pause").await;
    assert_eq!(
        (reply.status, reply.body["paused"].as_bool()),
        (StatusCode::OK, Some(true))
    );
    assert_eq!(paused().await, Some(true));
    let overview = get(&router, "/api/overview").await;
    let mail = overview.body["queues"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["queue"] == "mail")
        .unwrap()
        .clone();
    assert_eq!(mail["paused"], true);
    assert_eq!(post(&router, "/api/queues/mail/resume").await.status, 200);
    assert_eq!(paused().await, Some(false));
    // A queue name with a slash, percent-encoded in the path.
    assert_eq!(
        post(&router, "/api/queues/a%2Fb/pause").await.body["queue"],
        "a/b"
    );
}

/// The overview says which queues have pending jobs and no live worker, and
/// the workers page lists the registry; a clean stop shows at once.
#[tokio::test]
async fn the_overview_says_when_no_live_worker_serves_a_queue() {
    let db = TestDb::new().await;
    insert(&db, 3, "media", "resize", "").await;
    insert(&db, 2, "mail", "send", "").await;
    let router = open(&db);
    let live_workers = |body: &Value, queue: &str| {
        body["queues"]
            .as_array()
            .unwrap()
            .iter()
            .find(|q| q["queue"] == queue)
            .map(|q| {
                (
                    q["pending"].as_i64().unwrap(),
                    q["live_workers"].as_i64().unwrap(),
                )
            })
    };
    let o = get(&router, "/api/overview").await.body;
    assert_eq!(o["workers"], json!({"live": 0, "dead": 0}));
    assert_eq!(live_workers(&o, "media"), Some((3, 0)));

    let gate = std::sync::Arc::new(tokio::sync::Semaphore::new(0));
    let held = gate.clone();
    let worker = conveyor::Worker::builder(&db.client)
        .id("media-1")
        .queues(["media"])
        .register_fn("resize", move |_, _| {
            let gate = held.clone();
            async move {
                let _permit = gate.acquire().await;
                Ok(Value::Null)
            }
        })
        .start()
        .unwrap();
    let o = crate::common::eventually(crate::common::WAIT, "the worker registered", || async {
        let o = get(&router, "/api/overview").await.body;
        (o["workers"]["live"] == 1).then_some(o)
    })
    .await;
    assert_eq!(live_workers(&o, "media").map(|q| q.1), Some(1));
    assert_eq!(live_workers(&o, "mail"), Some((2, 0)), "nobody serves mail");
    let listed = get(&router, "/api/workers").await;
    assert_eq!(listed.status, 200);
    assert_eq!(listed.body["workers"][0]["id"], "media-1");
    assert_eq!(listed.body["workers"][0]["queues"], json!(["media"]));

    gate.add_permits(3);
    worker.shutdown(crate::common::WAIT).await.unwrap();
    insert(&db, 1, "media", "resize", "").await;
    let o = get(&router, "/api/overview").await.body;
    assert_eq!(
        o["workers"],
        json!({"live": 0, "dead": 0}),
        "a clean stop leaves at once"
    );
    assert_eq!(live_workers(&o, "media"), Some((1, 0)));
    assert_eq!(
        get(&router, "/api/workers").await.body["workers"],
        json!([])
    );
}

/// A chord that failed never created its callback: the job page says so
/// instead of linking to a job that is not there (it led to a 404).
#[tokio::test]
async fn a_failed_chords_result_job_is_not_linked() {
    use conveyor::{Group, NewJob, TaskError, Worker};
    let db = TestDb::new().await;
    let worker = Worker::builder(&db.client)
        .register_fn("member", |_, args: Value| async move {
            if args == json!(1) {
                Err(TaskError::fail("member 1 is broken"))
            } else {
                Ok(args)
            }
        })
        .register_fn("sum", |_, _| async { Ok(Value::Null) })
        .start()
        .unwrap();
    let chord = Group::new((0..3).map(|n| NewJob::new("member", json!(n)).max_retries(0)))
        .then_job(NewJob::new("sum", json!([])));
    let handle = db.client.enqueue_workflow(chord).await.unwrap();
    assert!(handle.wait(crate::common::WAIT).await.is_err());
    let member: Uuid = sqlx::query_scalar(
        "SELECT id FROM conveyor.jobs WHERE workflow_id = $1 AND workflow_index = 1",
    )
    .bind(handle.id())
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let reply = get(&open(&db), &format!("/api/jobs/{member}")).await;
    let w = &reply.body["workflow"];
    assert_eq!(w["state"], "failure");
    assert!(w["result_job_id"].is_string());
    assert_eq!(w["result_job_exists"], false);
    assert_eq!(count_jobs(&db.pool, "task = 'sum'").await, 0);
    worker.shutdown(crate::common::WAIT).await.unwrap();
}
