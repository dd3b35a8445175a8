//! Queue settings from the dashboard: pause, concurrency limit, rate limit,
//! through the SQL functions; the overview shows them; bad values are 400s.

use super::{get, open, post};
use crate::common::TestDb;

type Settings = (Option<i32>, Option<i32>, Option<f64>, bool);

async fn settings(db: &TestDb, queue: &str) -> Option<Settings> {
    sqlx::query_as(
        "SELECT concurrency_limit, rate_limit, extract(epoch FROM rate_period)::float8,
                paused_at IS NOT NULL
         FROM conveyor.queues WHERE name = $1",
    )
    .bind(queue)
    .fetch_optional(&db.pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn limits_and_rates_are_set_and_shown() {
    let db = TestDb::new().await;
    let router = open(&db);
    let reply = post(&router, "/api/queues/api/limit?limit=3").await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.body["concurrency_limit"], 3);
    assert_eq!(
        settings(&db, "api").await,
        Some((Some(3), None, None, false))
    );
    let reply = post(&router, "/api/queues/api/rate?limit=100&period=60").await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(
        settings(&db, "api").await,
        Some((Some(3), Some(100), Some(60.0), false))
    );
    post(&router, "/api/queues/api/pause").await;

    let overview = get(&router, "/api/overview").await;
    let api = overview.body["queues"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["queue"] == "api")
        .cloned()
        .expect("a queue with settings is listed");
    assert_eq!(api["concurrency_limit"], 3);
    assert_eq!(api["rate_limit"], 100);
    assert_eq!(api["rate_period_secs"], 60.0);
    assert_eq!(api["rate_window_count"], 0);
    assert_eq!(api["paused"], true);

    // `none` removes each; a fraction of a second is a period too.
    post(&router, "/api/queues/api/limit?limit=none").await;
    let reply = post(&router, "/api/queues/api/rate?limit=5&period=0.5").await;
    assert_eq!(reply.body["rate_period_secs"], 0.5, "{}", reply.text);
    assert_eq!(
        settings(&db, "api").await,
        Some((None, Some(5), Some(0.5), true))
    );
    post(&router, "/api/queues/api/rate?limit=NONE").await;
    assert_eq!(settings(&db, "api").await, Some((None, None, None, true)));
}

#[tokio::test]
async fn bad_settings_are_a_clear_400() {
    let db = TestDb::new().await;
    let router = open(&db);
    let long = "q".repeat(129);
    for (uri, status, says) in [
        ("/api/queues/api/limit", 400, "give limit"),
        ("/api/queues/api/limit?limit=0", 400, "from 1 to 2147483647"),
        (
            "/api/queues/api/limit?limit=-3",
            400,
            "from 1 to 2147483647",
        ),
        (
            "/api/queues/api/limit?limit=2147483648",
            400,
            "from 1 to 2147483647",
        ),
        (
            "/api/queues/api/limit?limit=many",
            400,
            "from 1 to 2147483647",
        ),
        ("/api/queues/api/rate?limit=10", 400, "give period"),
        ("/api/queues/api/rate?limit=10&period=0", 400, "from 0.001"),
        ("/api/queues/api/rate?limit=10&period=-1", 400, "from 0.001"),
        (
            "/api/queues/api/rate?limit=10&period=1e12",
            400,
            "100 years",
        ),
        (
            "/api/queues/api/rate?limit=10&period=NaN",
            400,
            "from 0.001",
        ),
        ("/api/queues/api/rate?limit=0&period=1", 400, "from 1 to"),
        (
            "/api/queues/api/rate?limit=none&period=1",
            400,
            "give no period",
        ),
        ("/api/queues/api/explode", 404, "unknown queue action"),
    ] {
        let reply = post(&router, uri).await;
        assert_eq!(reply.status, status, "{uri}: {}", reply.text);
        assert!(
            reply.body["error"].as_str().unwrap().contains(says),
            "{uri}: {}",
            reply.text
        );
    }
    let reply = post(&router, &format!("/api/queues/{long}/limit?limit=1")).await;
    assert_eq!(reply.status, 400);
    assert_eq!(settings(&db, "api").await, None, "nothing was written");
}
