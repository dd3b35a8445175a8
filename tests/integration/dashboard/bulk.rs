//! Bulk actions: the count first, then every matching job acted on in pages
//! of at most 1,000, with what was skipped; refusals are clear 4xx errors.

use axum::Router;
use serde_json::{Value, json};

use super::search::encoded;
use super::{FAILED_NOW, STARTED, get, insert, open, post};
use crate::common::{TestDb, count_jobs};

/// Runs a bulk action the way the page does: count, then pages until
/// `next` is null or the count is reached. Returns the count and the
/// summed tally, and how many requests it took.
async fn run(router: &Router, action: &str, filter: &str) -> (i64, Value, usize) {
    let count = get(
        router,
        &encoded(&format!("/api/bulk?action={action}&{filter}")),
    )
    .await;
    assert_eq!(count.status, 200, "{}", count.text);
    let n = count.body["matched"].as_i64().unwrap();
    let mut tally = json!({ "listed": 0, "acted": 0, "stopping": 0, "skipped": 0 });
    let mut cursor = String::new();
    let mut requests = 0;
    while tally["listed"].as_i64().unwrap() < n {
        let left = n - tally["listed"].as_i64().unwrap();
        let uri = format!("/api/bulk/{action}?{filter}&max={left}&cursor={cursor}");
        let page = post(router, &encoded(&uri)).await;
        assert_eq!(page.status, 200, "{uri}: {}", page.text);
        requests += 1;
        assert!(
            page.body["listed"].as_i64().unwrap() <= 1000,
            "a page is at most 1,000 jobs"
        );
        for key in ["listed", "acted", "stopping", "skipped"] {
            tally[key] = json!(tally[key].as_i64().unwrap() + page.body[key].as_i64().unwrap());
        }
        match page.body["next"].as_str() {
            Some(next) => cursor = next.to_string(),
            None => break,
        }
    }
    (n, tally, requests)
}

#[tokio::test]
async fn retry_everything_a_filter_matches_in_pages() {
    let db = TestDb::new().await;
    let router = open(&db);
    insert(&db, 2345, "pay", "charge", FAILED_NOW).await;
    insert(&db, 10, "pay", "refund", FAILED_NOW).await;
    let (n, tally, requests) = run(&router, "retry", "state=failure&task=charge").await;
    assert_eq!(n, 2345);
    assert_eq!(
        tally,
        json!({ "listed": 2345, "acted": 2345, "stopping": 0, "skipped": 0 })
    );
    assert_eq!(requests, 3, "1,000 + 1,000 + 345");
    assert_eq!(
        count_jobs(
            &db.pool,
            "task = 'charge' AND state = 'pending' AND attempt = 0"
        )
        .await,
        2345
    );
    assert_eq!(
        count_jobs(&db.pool, "task = 'refund' AND state = 'failure'").await,
        10,
        "not matched"
    );

    // `max` caps a run at what was confirmed.
    let page = post(&router, "/api/bulk/retry?state=failure&max=4").await;
    assert_eq!(
        (page.body["listed"].as_i64(), page.body["acted"].as_i64()),
        (Some(4), Some(4))
    );
    assert!(page.body["next"].is_string(), "six are left");
    assert_eq!(count_jobs(&db.pool, "state = 'failure'").await, 6);
}

#[tokio::test]
async fn cancel_and_delete_by_search_and_count_what_they_skip() {
    let db = TestDb::new().await;
    let router = open(&db);
    insert(&db, 5, "mail", "send", ", args|, '{\"tenant\": \"acme\"}'").await;
    insert(&db, 3, "mail", "send", ", args|, '{\"tenant\": \"other\"}'").await;
    insert(&db, 2, "mail", "send", STARTED).await;
    // Pending jobs of one tenant (args containment), through the ring.
    let (n, tally, _) = run(&router, "cancel", r#"state=pending&args={"tenant":"acme"}"#).await;
    assert_eq!((n, tally["acted"].as_i64()), (5, Some(5)));
    assert_eq!(count_jobs(&db.pool, "state = 'cancelled'").await, 5);
    assert_eq!(count_jobs(&db.pool, "state = 'pending'").await, 3);
    // Running jobs are asked to stop: counted apart.
    let (_, tally, _) = run(&router, "cancel", "state=started").await;
    assert_eq!(
        tally,
        json!({ "listed": 2, "acted": 0, "stopping": 2, "skipped": 0 })
    );
    assert_eq!(
        count_jobs(
            &db.pool,
            "state = 'started' AND cancel_requested_at IS NOT NULL"
        )
        .await,
        2
    );

    // A re-queue that would give a unique key a second active job skips it.
    sqlx::raw_sql(
        "INSERT INTO conveyor.jobs (task, unique_key) VALUES ('sync', 'k');
         INSERT INTO conveyor.jobs (task, unique_key, state, finished_at) VALUES ('sync', 'k', 'cancelled', now())",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let (n, tally, _) = run(&router, "retry", "state=cancelled").await;
    assert_eq!(n, 6);
    assert_eq!(
        tally,
        json!({ "listed": 6, "acted": 5, "stopping": 0, "skipped": 1 })
    );

    // Delete by error text among failures.
    insert(&db, 4, "mail", "send", FAILED_NOW).await;
    insert(
        &db,
        2,
        "mail",
        "send",
        ", state, attempt, finished_at, last_error|, 'failure', 1, now(), 'quota'",
    )
    .await;
    let (n, tally, _) = run(&router, "delete", "state=failure&error=BOOM").await;
    assert_eq!((n, tally["acted"].as_i64()), (4, Some(4)));
    assert_eq!(
        count_jobs(&db.pool, "state = 'failure'").await,
        2,
        "the quota ones stay"
    );
    // Nothing matches: a count of 0, and a run that does nothing.
    let none = get(
        &router,
        "/api/bulk?action=delete&state=failure&task=nothing",
    )
    .await;
    assert_eq!(none.body["matched"], 0);
}

#[tokio::test]
async fn refused_bulk_actions_are_clear_4xx() {
    let db = TestDb::new().await;
    let router = open(&db);
    insert(&db, 2, "mail", "send", FAILED_NOW).await;
    for (uri, status, says) in [
        (
            "/api/bulk?action=retry&state=pending",
            409,
            "only failed or cancelled",
        ),
        (
            "/api/bulk?action=cancel&state=success",
            409,
            "finished jobs cannot be cancelled",
        ),
        (
            "/api/bulk?action=delete&state=started",
            409,
            "cancel them first",
        ),
        (
            "/api/bulk?action=explode&state=failure",
            400,
            "unknown bulk action",
        ),
        ("/api/bulk?state=failure", 400, "unknown bulk action"),
        ("/api/bulk?action=retry", 400, "give a state"),
        (
            "/api/bulk?action=retry&state=failure&args=%7B",
            400,
            "args: not JSON",
        ),
    ] {
        let reply = get(&router, uri).await;
        assert_eq!(reply.status, status, "{uri}: {}", reply.text);
        assert!(
            reply.body["error"].as_str().unwrap().contains(says),
            "{uri}: {}",
            reply.text
        );
    }
    for (uri, status, says) in [
        (
            "/api/bulk/retry?state=pending&max=5",
            409,
            "only failed or cancelled",
        ),
        (
            "/api/bulk/delete?state=started&max=5",
            409,
            "cancel them first",
        ),
        (
            "/api/bulk/explode?state=failure&max=5",
            404,
            "unknown bulk action",
        ),
        ("/api/bulk/retry?state=failure", 400, "give max"),
        ("/api/bulk/retry?state=failure&max=0", 400, "give max"),
        (
            "/api/bulk/retry?state=failure&max=lots",
            400,
            "not a number",
        ),
        (
            "/api/bulk/retry?state=failure&max=5&cursor=nope",
            400,
            "not a page cursor",
        ),
    ] {
        let reply = post(&router, uri).await;
        assert_eq!(reply.status, status, "{uri}: {}", reply.text);
        assert!(
            reply.body["error"].as_str().unwrap().contains(says),
            "{uri}: {}",
            reply.text
        );
    }
    assert_eq!(
        count_jobs(&db.pool, "state = 'failure'").await,
        2,
        "nothing changed"
    );
}
