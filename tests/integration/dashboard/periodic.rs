//! Periodic schedules on the dashboard: the leader (from the lock it holds),
//! each schedule's text, task, queue, last slot's job and next slot.

use std::time::Duration;

use conveyor::{NewJob, Periodic, Worker};
use serde_json::{Value, json};

use super::{get, open};
use crate::common::{TestDb, WAIT, eventually};

#[tokio::test]
async fn schedules_and_who_leads_them() {
    let db = TestDb::new().await;
    let router = open(&db);
    let none = get(&router, "/api/periodic").await;
    assert_eq!(none.status, 200, "{}", none.text);
    assert_eq!(
        (
            none.body["leading"].as_bool(),
            none.body["unknown_leader"].as_bool()
        ),
        (Some(false), Some(false))
    );
    assert_eq!(none.body["schedules"], json!([]));

    let worker = Worker::builder(&db.client)
        .id("leader-1")
        .periodic(Periodic::every(
            "tick",
            Duration::from_millis(300),
            |slot| NewJob::new("tick", json!({ "slot": slot })).queue("clock"),
        ))
        .register_fn("tick", |_, _| async { Ok(Value::Null) })
        .queues(["clock"])
        .start()
        .unwrap();
    let d = eventually(WAIT, "a slot run and the leader known", || async {
        let d = get(&router, "/api/periodic").await.body;
        let ran = d["schedules"][0]["last_job_state"] == "success";
        let registered = d["leader"]["workers"] == json!(["leader-1"]);
        (d["leading"] == true && ran && registered).then_some(d)
    })
    .await;
    assert_eq!(d["leader"]["pid"], std::process::id());
    let tick = &d["schedules"][0];
    assert_eq!(
        (
            &tick["name"],
            &tick["schedule"],
            &tick["task"],
            &tick["queue"],
            &tick["on_leader"]
        ),
        (
            &json!("tick"),
            &json!("every 300ms"),
            &json!("tick"),
            &json!("clock"),
            &json!(true)
        )
    );
    // As times, not strings: RFC 3339 drops a zero fraction, and
    // "…:45.300Z" sorts before "…:45Z" as text.
    let at = |key: &str| {
        let text = tick[key].as_str().unwrap_or_default();
        chrono::DateTime::parse_from_rfc3339(text).unwrap_or_else(|e| panic!("{key}: {e}: {tick}"))
    };
    assert!(at("next_slot") > at("last_slot"), "{tick}");

    // Stopped: no process leads; the schedule is still known.
    worker.shutdown(WAIT).await.unwrap();
    let d = eventually(WAIT, "the lock released", || async {
        let d = get(&router, "/api/periodic").await.body;
        (d["leading"] == false).then_some(d)
    })
    .await;
    assert_eq!(d["unknown_leader"], false);
    assert_eq!(d["leader"]["lock_holder"], Value::Null);
    assert_eq!(d["schedules"][0]["name"], "tick");

    // A process that holds the lock without saying who it is (an older
    // version): someone leads, unknown.
    let mut session = db.pool.acquire().await.unwrap();
    sqlx::query("SELECT pg_advisory_lock(hashtextextended('conveyor.periodic:conveyor', 0))")
        .execute(&mut *session)
        .await
        .unwrap();
    let d = get(&router, "/api/periodic").await.body;
    assert_eq!(
        (d["leading"].as_bool(), d["unknown_leader"].as_bool()),
        (Some(false), Some(true))
    );
    sqlx::query("SELECT pg_advisory_unlock_all()")
        .execute(&mut *session)
        .await
        .unwrap();
}
