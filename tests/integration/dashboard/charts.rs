//! The charts' endpoint (`GET api/stats`): for a known workload its totals
//! and buckets equal what `conveyor.jobs` shows, before and after the jobs
//! are pruned; rollups written by hand land in the right buckets with the
//! right percentiles; bad parameters are refused; read-only users see it.

use axum::Router;
use axum::http::{Method, StatusCode};
use conveyor::dashboard::{self, DashboardConfig};
use serde_json::{Value, json};

use super::{get, open, send};
use crate::common::TestDb;
use crate::outcomes::{self, Outcomes};

const COUNTS: [&str; 5] = ["succeeded", "failed", "retried", "rescued", "cancelled"];

fn totals(answer: &Value) -> Outcomes {
    let n = |k: &str| answer["totals"][k].as_i64().unwrap();
    Outcomes {
        succeeded: n("succeeded"),
        failed: n("failed"),
        retried: n("retried"),
        rescued: n("rescued"),
        cancelled: n("cancelled"),
    }
}

/// A series, as numbers (0 for none).
fn column(answer: &Value, key: &str) -> Vec<i64> {
    answer["series"][key]
        .as_array()
        .unwrap_or_else(|| panic!("no series {key} in {answer}"))
        .iter()
        .map(|v| v.as_i64().unwrap_or(0))
        .collect()
}

async fn chart(router: &Router, query: &str) -> Value {
    let reply = get(router, &format!("/api/stats?{query}")).await;
    assert_eq!(reply.status, StatusCode::OK, "{query}: {}", reply.text);
    reply.body
}

/// Every window and filter against the table (or against `before`, the
/// same answers taken before the jobs were pruned).
async fn check_all(db: &TestDb, router: &Router, before: Option<&[Value]>) -> Vec<Value> {
    let filters = [
        ("", "true"),
        ("queue=media", "queue = 'media'"),
        ("queue=mail", "queue = 'mail'"),
        ("task=send", "task = 'send'"),
        (
            "queue=mail&task=digest",
            "queue = 'mail' AND task = 'digest'",
        ),
        ("queue=media&task=send", "false"),
    ];
    let mut answers = Vec::new();
    for (window, buckets, step) in [("1h", 60, 60), ("24h", 144, 600), ("7d", 168, 3600)] {
        for (query, sql) in filters {
            let answer = chart(router, &format!("window={window}&{query}")).await;
            let what = format!("window={window}&{query}");
            match before {
                None => {
                    let expected = outcomes::in_jobs_table(&db.pool, sql).await;
                    assert_eq!(totals(&answer), expected, "{what}");
                }
                Some(before) => {
                    let earlier = &before[answers.len()];
                    assert_eq!(totals(&answer), totals(earlier), "{what}, after pruning");
                    assert_eq!(answer["series"], earlier["series"], "{what}");
                }
            }
            // Every bucket is there, one step apart, and they add up.
            let at: Vec<i64> = answer["at"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_i64().unwrap())
                .collect();
            assert_eq!(at.len(), buckets, "{what}");
            assert!(at.windows(2).all(|w| w[1] - w[0] == step), "{what}");
            assert_eq!(answer["step_secs"], step);
            for key in COUNTS {
                let sum: i64 = column(&answer, key).iter().sum();
                assert_eq!(json!(sum), answer["totals"][key], "{what}: {key}");
            }
            // Workers timed every attempt they ended: not the rescued one,
            // nor the jobs cancelled while waiting.
            let t = totals(&answer);
            let timed = t.succeeded + t.failed + t.retried;
            assert_eq!(answer["totals"]["wait_ms"]["count"], json!(timed), "{what}");
            assert_eq!(answer["totals"]["run_ms"]["count"], json!(timed), "{what}");
            assert_eq!(
                answer["totals"]["run_ms"]["p99"].is_null(),
                timed == 0,
                "{what}"
            );
            answers.push(answer);
        }
    }
    answers
}

#[tokio::test]
async fn charts_count_what_the_jobs_table_shows_and_outlive_pruning() {
    let db = TestDb::new().await;
    outcomes::run(&db.client, &db.pool).await;
    let router = open(&db);
    // Every outcome is in the workload.
    let all = outcomes::in_jobs_table(&db.pool, "true").await;
    assert!(
        all.succeeded > 0 && all.failed > 0 && all.retried > 0 && all.rescued > 0,
        "{all:?}"
    );
    assert!(all.cancelled > 0, "{all:?}");
    let before = check_all(&db, &router, None).await;
    let first = &before[0];
    assert_eq!(first["queues"], json!(["mail", "media"]));
    assert_eq!(
        first["tasks"],
        json!(["digest", "render", "send", "thumbnail"])
    );
    assert_eq!(first["queue"], Value::Null);

    outcomes::prune_jobs(&db.client, &db.pool).await;
    check_all(&db, &router, Some(&before)).await;
}

/// Writes a rollup row by hand, `ago` before the current minute.
async fn rollup(db: &TestDb, ago: &str, queue: &str, shard: i16, counts: &str, wait: &str) {
    let sql = format!(
        "INSERT INTO conveyor.stats (minute, queue, task, shard, {counts_cols}, wait_ms, run_ms)
         VALUES (date_trunc('minute', now()) - interval '{ago}', $1, 't', $2, {counts}, $3::bigint[],
                 array_fill(0::bigint, ARRAY[19]))",
        counts_cols = "succeeded, failed, cancelled",
    );
    sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(queue)
        .bind(shard)
        .bind(wait)
        .execute(&db.pool)
        .await
        .unwrap();
}

/// The Unix time of the minute `ago` before the current one.
async fn minute_of(db: &TestDb, ago: &str) -> i64 {
    let sql = format!(
        "SELECT extract(epoch FROM date_trunc('minute', now()) - interval '{ago}')::bigint"
    );
    sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

/// 19 buckets: `n` in bucket `i` for each pair.
fn histogram(pairs: &[(usize, i64)]) -> String {
    let mut counts = [0i64; 19];
    for (i, n) in pairs {
        counts[*i] = *n;
    }
    let text: Vec<String> = counts.iter().map(i64::to_string).collect();
    format!("{{{}}}", text.join(","))
}

#[tokio::test]
async fn rollups_land_in_their_buckets_with_their_percentiles() {
    let db = TestDb::new().await;
    // Three minutes ago, two shards: 100 waits, 90 of 5-10 ms, 8 of 50-100
    // ms, 2 of 1-2 s: p50 <= 10 ms, p95 <= 100 ms, p99 <= 2 s.
    let waits = histogram(&[(3, 90), (6, 8), (10, 2)]);
    rollup(&db, "3 minutes", "q", 0, "5, 1, 0", &waits).await;
    rollup(&db, "3 minutes", "q", 3, "2, 0, 0", &histogram(&[])).await;
    // Two hours ago (24 h and 7 d only), three days ago (7 d only), eight
    // days ago (none).
    rollup(&db, "2 hours", "q2", 0, "7, 0, 0", &histogram(&[])).await;
    rollup(&db, "3 days", "q", 0, "0, 0, 4", &histogram(&[])).await;
    rollup(&db, "8 days", "q", 0, "100, 0, 0", &histogram(&[])).await;
    let router = open(&db);

    let hour = chart(&router, "window=1h").await;
    let at = minute_of(&db, "3 minutes").await;
    let i = hour["at"]
        .as_array()
        .unwrap()
        .iter()
        .position(|v| v.as_i64() == Some(at))
        .expect("a bucket for the minute");
    let mut expected = vec![0; 60];
    expected[i] = 7;
    assert_eq!(column(&hour, "succeeded"), expected, "summed over shards");
    expected[i] = 1;
    assert_eq!(column(&hour, "failed"), expected);
    let wait = &hour["series"];
    assert_eq!(
        (
            &wait["wait_p50_ms"][i],
            &wait["wait_p95_ms"][i],
            &wait["wait_p99_ms"][i]
        ),
        (&json!(10.0), &json!(100.0), &json!(2000.0))
    );
    assert_eq!(wait["wait_p50_ms"][(i + 1) % 60], Value::Null);
    assert_eq!(
        hour["totals"]["wait_ms"],
        json!({"count": 100, "p50": 10.0, "p95": 100.0, "p99": 2000.0})
    );
    assert_eq!(hour["totals"]["run_ms"]["p50"], Value::Null);
    // The last bucket holds the database's now.
    let now = chrono::DateTime::parse_from_rfc3339(hour["now"].as_str().unwrap()).unwrap();
    let last = hour["at"][59].as_i64().unwrap();
    assert!((last..last + 60).contains(&now.timestamp()), "{hour}");

    let day = chart(&router, "window=24h").await;
    assert_eq!(totals(&day).succeeded, 14);
    let at = minute_of(&db, "2 hours").await;
    let ten = day["at"]
        .as_array()
        .unwrap()
        .iter()
        .position(|v| v.as_i64() == Some(at - at.rem_euclid(600)))
        .expect("a 10-minute bucket holding the row");
    assert_eq!(column(&day, "succeeded")[ten], 7);
    let week = chart(&router, "window=7d").await;
    assert_eq!(
        (totals(&week).succeeded, totals(&week).cancelled),
        (14, 4),
        "eight days ago is out"
    );
    // Narrowed.
    let q2 = chart(&router, "window=1h&queue=q2").await;
    assert_eq!(totals(&q2).succeeded, 0);
    let q2 = chart(&router, "window=24h&queue=q2&task=t").await;
    assert_eq!(totals(&q2).succeeded, 7);
    assert_eq!(q2["queues"], json!(["q", "q2"]), "the filters' choices");
}

#[tokio::test]
async fn bad_parameters_are_refused_and_read_only_users_see_charts() {
    let db = TestDb::new().await;
    let router = open(&db);
    let long = "x".repeat(256);
    for (query, says) in [
        ("window=2h", "1h, 24h or 7d"),
        ("window=", ""),
        (&format!("queue={}", &long[..129]) as &str, "at most 128"),
        (&format!("task={long}"), "at most 255"),
    ] {
        let reply = get(&router, &format!("/api/stats?{query}")).await;
        if query == "window=" {
            assert_eq!(
                reply.status,
                StatusCode::OK,
                "an empty window is the default"
            );
            assert_eq!(reply.body["window"], "1h");
            continue;
        }
        assert_eq!(
            reply.status,
            StatusCode::BAD_REQUEST,
            "{query}: {}",
            reply.text
        );
        assert!(
            reply.body["error"].as_str().unwrap().contains(says),
            "{query}: {}",
            reply.text
        );
    }
    // An empty database: every bucket, nothing in them.
    let empty = chart(&router, "").await;
    assert_eq!(column(&empty, "succeeded"), vec![0; 60]);
    assert_eq!(empty["totals"]["wait_ms"]["p50"], Value::Null);

    let read_only = dashboard::router(
        db.client.clone(),
        DashboardConfig::new().token("s3cret").read_only(true),
    );
    let reply = send(
        &read_only,
        Method::GET,
        "/api/stats?window=7d",
        &[("authorization", "Bearer s3cret")],
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.body["window"], "7d");
    let reply = send(&read_only, Method::GET, "/api/stats", &[]).await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
}
