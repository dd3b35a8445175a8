//! Searches: in args (JSON containment) and error text, within a window of
//! finished jobs, bounded by a statement timeout; jobs by id prefix.

use axum::Router;
use serde_json::Value;
use uuid::Uuid;

use super::{FAILED_NOW, get, insert, open};
use crate::common::{TestDb, WAIT};

/// `query` with what a URI cannot hold (JSON's braces, quotes, spaces…)
/// percent-encoded; `=`, `&` and `%` stay.
pub(super) fn encoded(query: &str) -> String {
    query
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z'
            | b'a'..=b'z'
            | b'0'..=b'9'
            | b'-'
            | b'_'
            | b'.'
            | b'~'
            | b'='
            | b'&'
            | b'%'
            | b'/'
            | b'?' => (b as char).to_string(),
            other => format!("%{other:02X}"),
        })
        .collect()
}

/// The ids a search answers, on one page of 200.
async fn ids(router: &Router, query: &str) -> Vec<String> {
    let reply = get(router, &format!("/api/jobs?{}&limit=200", encoded(query))).await;
    assert_eq!(reply.status, 200, "{query}: {}", reply.text);
    reply.body["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap().to_string())
        .collect()
}

fn strings(ids: &[Uuid]) -> Vec<String> {
    let mut out: Vec<String> = ids.iter().map(Uuid::to_string).collect();
    out.sort();
    out.reverse();
    out
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v.reverse();
    v
}

#[tokio::test]
async fn search_args_and_error_text_within_a_window() {
    let db = TestDb::new().await;
    let router = open(&db);
    let failed = |customer: i64, error: &str, age: &str| {
        format!(
            ", state, attempt, finished_at, last_error, args|, 'failure', 1, now() - interval '{age}', \
             '{error}', jsonb_build_object('customer', {customer}, 'items', jsonb_build_array(1, 2))"
        )
    };
    let seven_declined = insert(
        &db,
        3,
        "pay",
        "charge",
        &failed(7, "Card DECLINED by bank", "1 minute"),
    )
    .await;
    let seven_timeout = insert(
        &db,
        2,
        "pay",
        "charge",
        &failed(7, "gateway timeout", "2 hours"),
    )
    .await;
    let eight = insert(
        &db,
        2,
        "pay",
        "charge",
        &failed(8, "card declined", "5 minutes"),
    )
    .await;
    let old_seven = insert(
        &db,
        1,
        "pay",
        "charge",
        &failed(7, "card declined", "3 days"),
    )
    .await;

    // Args contain {"customer": 7}: within the last 24 h by default.
    let search = get(
        &router,
        &encoded(r#"/api/jobs?state=failure&args={"customer":7}"#),
    )
    .await;
    assert_eq!(search.body["search"]["finished_within_secs"], 86400.0);
    assert_eq!(search.body["search"]["reads_rows"], true);
    assert_eq!(search.body["search"]["timeout_secs"], 5);
    let mut seven = seven_declined.clone();
    seven.extend(&seven_timeout);
    assert_eq!(
        sorted(ids(&router, r#"state=failure&args={"customer":7}"#).await),
        strings(&seven)
    );
    // A wider window reaches the older one; nested containment works.
    let mut all_seven = seven.clone();
    all_seven.extend(&old_seven);
    assert_eq!(
        sorted(
            ids(
                &router,
                r#"state=failure&args={"customer":7,"items":[2]}&finished_within=604800"#
            )
            .await
        ),
        strings(&all_seven)
    );
    // Error text, in any case; and both together.
    let mut declined = seven_declined.clone();
    declined.extend(&eight);
    assert_eq!(
        sorted(ids(&router, "state=failure&error=declined").await),
        strings(&declined)
    );
    assert_eq!(
        sorted(
            ids(
                &router,
                r#"state=failure&error=DeClInEd&args={"customer":7}"#
            )
            .await
        ),
        strings(&seven_declined)
    );
    assert!(
        ids(&router, "state=failure&error=declined&queue=other")
            .await
            .is_empty()
    );
    assert!(
        ids(&router, "state=success&error=declined")
            .await
            .is_empty()
    );
    // A window alone narrows a plain list too (an index range).
    assert_eq!(
        ids(&router, "state=failure&finished_within=120")
            .await
            .len(),
        3
    );

    // A search pages like a list: no job twice, none missed.
    let mut seen = Vec::new();
    let mut cursor = String::new();
    loop {
        let uri = format!("/api/jobs?state=failure&error=declined&limit=2&cursor={cursor}");
        let page = get(&router, &uri).await;
        assert_eq!(page.status, 200, "{}", page.text);
        seen.extend(
            page.body["jobs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|j| j["id"].as_str().unwrap().to_string()),
        );
        match page.body["next"].as_str() {
            Some(next) => cursor = next.to_string(),
            None => break,
        }
    }
    assert_eq!(sorted(seen), strings(&declined));

    // Unfinished states: pending jobs (through the ready ring) and waiting ones.
    let pending = insert(&db, 2, "pay", "refund", ", args|, '{\"customer\": 7}'").await;
    insert(&db, 3, "pay", "refund", ", args|, '{\"customer\": 9}'").await;
    let waiting = insert(
        &db,
        1,
        "pay",
        "refund",
        ", args, state, run_at|, '{\"customer\": 7}', 'scheduled', now() + interval '1 hour'",
    )
    .await;
    assert_eq!(
        sorted(ids(&router, r#"state=pending&args={"customer":7}"#).await),
        strings(&pending)
    );
    assert_eq!(
        ids(
            &router,
            r#"state=pending&args={"customer":7}&task=refund&queue=pay"#
        )
        .await
        .len(),
        2
    );
    assert_eq!(
        ids(&router, r#"state=scheduled&args={"customer":7}"#).await,
        strings(&waiting)
    );
    let reply = get(
        &router,
        &encoded(r#"/api/jobs?state=pending&args={"customer":7}&finished_within=60"#),
    )
    .await;
    assert_eq!(
        reply.body["search"]["finished_within_secs"],
        Value::Null,
        "no window for unfinished jobs"
    );
}

#[tokio::test]
async fn a_bad_search_is_a_clear_400() {
    let db = TestDb::new().await;
    let router = open(&db);
    let long = "x".repeat(1001);
    for (query, says) in [
        ("state=failure&args={not json", "args: not JSON"),
        ("state=failure&args=%7B%22a%22", "args: not JSON"),
        ("state=failure&error=x&finished_within=0", "finished_within"),
        (
            "state=failure&error=x&finished_within=-5",
            "finished_within",
        ),
        (
            "state=failure&error=x&finished_within=abc",
            "finished_within",
        ),
        (
            "state=failure&error=x&finished_within=1e300",
            "finished_within",
        ),
        (
            "state=failure&error=x&finished_within=NaN",
            "finished_within",
        ),
        (&format!("state=failure&error={long}"), "at most 1000"),
        (
            &format!("state=failure&queue={}", "q".repeat(129)),
            "at most 128",
        ),
        ("args={}", "give a state"),
    ] {
        let reply = get(&router, &format!("/api/jobs?{}", encoded(query))).await;
        assert_eq!(reply.status, 400, "{query}: {}", reply.text);
        let error = reply.body["error"].as_str().unwrap_or_default();
        assert!(error.contains(says), "{query}: {error}");
    }
}

/// A search that cannot finish within the statement timeout is stopped and
/// says so (here it waits for a lock another session holds).
#[tokio::test]
async fn a_search_past_its_time_limit_is_stopped_with_a_422() {
    let db = TestDb::new().await;
    let router = open(&db);
    insert(&db, 3, "pay", "charge", FAILED_NOW).await;
    let mut blocker = db.pool.begin().await.unwrap();
    sqlx::query("LOCK TABLE conveyor.jobs IN ACCESS EXCLUSIVE MODE")
        .execute(&mut *blocker)
        .await
        .unwrap();
    let started = std::time::Instant::now();
    // (Without its limit the search would wait for the lock for good.)
    let reply = tokio::time::timeout(WAIT * 3, get(&router, "/api/jobs?state=failure&error=boom"))
        .await
        .expect("the search was stopped");
    assert_eq!(reply.status, 422, "{}", reply.text);
    let error = reply.body["error"].as_str().unwrap();
    assert!(
        error.contains("stopped after 5 s") && error.contains("narrow it"),
        "{error}"
    );
    // Stopped by its 5 s limit, not sooner.
    assert!(started.elapsed() >= std::time::Duration::from_secs(5));
    blocker.rollback().await.unwrap();
    // The limit is the search's own: the pool's connections carry no timeout on.
    let after = get(&router, "/api/jobs?state=failure&error=boom").await;
    assert_eq!(
        after.body["jobs"].as_array().map(Vec::len),
        Some(3),
        "{}",
        after.text
    );
    let timeout: String = sqlx::query_scalar("SHOW statement_timeout")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(timeout, "0");
}

#[tokio::test]
async fn jobs_by_id_prefix() {
    let db = TestDb::new().await;
    let router = open(&db);
    let mine: Vec<Uuid> = (0..3)
        .map(|i| {
            format!("0123abcd-0000-4000-8000-00000000000{i}")
                .parse()
                .unwrap()
        })
        .collect();
    for id in &mine {
        sqlx::query("INSERT INTO conveyor.jobs (id, task) VALUES ($1, 'x')")
            .bind(id)
            .execute(&db.pool)
            .await
            .unwrap();
    }
    insert(&db, 30, "q", "other", "").await;
    let found = |query: &'static str| {
        let router = router.clone();
        async move {
            let reply = get(&router, &format!("/api/search?id={query}")).await;
            assert_eq!(reply.status, 200, "{query}: {}", reply.text);
            let ids: Vec<String> = reply.body["jobs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|j| j["id"].as_str().unwrap().to_string())
                .collect();
            (ids, reply.body["more"].as_bool().unwrap())
        }
    };
    let expected: Vec<String> = mine.iter().map(Uuid::to_string).collect();
    assert_eq!(found("0123ab").await, (expected.clone(), false));
    assert_eq!(
        found("0123ABCD-0000").await,
        (expected.clone(), false),
        "dashes and case"
    );
    assert_eq!(
        found("0123abcd-0000-4000-8000-000000000001").await.0,
        [expected[1].clone()]
    );
    assert_eq!(found("0123abce").await, (vec![], false));
    // Many matches (the other 30 ids are UUIDv7s of now: 0…): the first
    // 20 in id order, and `more`.
    let (first, more) = found("0").await;
    assert_eq!((first.len(), more), (20, true));
    assert_eq!(first[..3], expected[..], "id order");
    for bad in [
        "",
        "xyz",
        "0123abcd-0000-4000-8000-0000000000011",
        "01%2023",
    ] {
        let reply = get(&router, &format!("/api/search?id={}", encoded(bad))).await;
        assert_eq!(reply.status, 400, "{bad}: {}", reply.text);
        assert!(
            reply.body["error"].as_str().unwrap().contains("hex digits"),
            "{bad}"
        );
    }
}
