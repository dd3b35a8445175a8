//! A libpq-style host list: a dead first host is skipped, and the client,
//! a worker's own connections, LISTEN and the periodic leader all use the
//! server that qualifies. (Following a promoted standby is `tests/failover`.)

use std::time::Duration;

use conveyor::{Client, Error, NewJob, Periodic, Worker};
use serde_json::{Value, json};

use crate::common::{TestDb, WAIT, eventually, wait_for_listen};

/// `url` with a host nobody listens on put first in its host list.
fn dead_host_first(url: &str, params: &str) -> String {
    let (scheme, rest) = url.split_once("://").expect("a URL");
    let (user, hosts) = rest.rsplit_once('@').map_or(("", rest), |(u, h)| (u, h));
    let at = if user.is_empty() { "" } else { "@" };
    format!("{scheme}://{user}{at}127.0.0.1:1,{hosts}?{params}")
}

#[tokio::test]
async fn a_dead_first_host_is_skipped_by_every_connection() {
    let db = TestDb::new().await;
    let url = dead_host_first(&db.url(), "target_session_attrs=read-write");
    let client = Client::connect(&url)
        .await
        .expect("connect through the host list");
    let primary = client.primary().expect("a host list is followed");
    assert_ne!(primary.host(), "127.0.0.1:1");
    assert_eq!(primary.switches(), 0);

    let worker = Worker::builder(&client)
        .periodic(Periodic::every(
            "tick",
            Duration::from_millis(500),
            |slot| NewJob::new("tick", json!({ "slot": slot })),
        ))
        .register_fn("tick", |_, _| async { Ok(Value::Null) })
        .register_fn("echo", |_, args| async move { Ok(args) })
        .start()
        .unwrap();
    wait_for_listen(&db.pool, 1).await;
    let handle = client.enqueue(NewJob::new("echo", json!(7))).await.unwrap();
    let out: Value = handle.wait(WAIT).await.unwrap();
    assert_eq!(out, json!(7));
    eventually(WAIT, "a periodic slot", || async {
        let n: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM conveyor.jobs WHERE task = 'tick' AND state = 'success'",
        )
        .fetch_one(&db.pool)
        .await
        .ok()?;
        (n > 0).then_some(())
    })
    .await;
    worker.shutdown(WAIT).await.unwrap();
}

#[tokio::test]
async fn session_attributes_a_queue_cannot_use_are_refused() {
    let db = TestDb::new().await;
    for attrs in ["standby", "read-only", "prefer-standby"] {
        let url = dead_host_first(&db.url(), &format!("target_session_attrs={attrs}"));
        let error = Client::connect(&url).await.unwrap_err();
        assert!(matches!(error, Error::Config(_)), "{attrs}: {error}");
    }
}
