//! Workflows: the list by state and kind, and one workflow's graph (steps,
//! members and callback with their states, steps not created yet), for real
//! workflows run by a worker.

use std::sync::Arc;

use conveyor::{Chain, Group, NewJob, TaskError, Worker};
use serde_json::{Value, json};
use tokio::sync::Semaphore;

use super::{get, open};
use crate::common::{TestDb, WAIT, eventually};

/// `(type, [task:state of each node])` of every step of a graph.
fn shape(graph: &Value) -> Vec<(String, Vec<String>)> {
    let node = |n: &Value| {
        let state = if n["exists"] == true {
            n["state"].as_str().unwrap()
        } else {
            "-"
        };
        format!("{}:{state}", n["task"].as_str().unwrap_or("?"))
    };
    graph["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let kind = s["type"].as_str().unwrap().to_string();
            let nodes = if kind == "job" {
                vec![node(&s["node"])]
            } else {
                let mut v: Vec<String> =
                    s["members"].as_array().unwrap().iter().map(node).collect();
                if !s["callback"].is_null() {
                    v.push(format!("=> {}", node(&s["callback"])));
                }
                v
            };
            (kind, nodes)
        })
        .collect()
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

#[tokio::test]
async fn the_graph_shows_every_step_member_and_state() {
    let db = TestDb::new().await;
    let router = open(&db);
    let gate = Arc::new(Semaphore::new(0));
    let held = gate.clone();
    let worker = Worker::builder(&db.client)
        .register_fn("fetch", |_, args| async move { Ok(args) })
        .register_fn("charge", |_, _| async {
            Err::<Value, _>(TaskError::fail("card declined"))
        })
        .register_fn("publish", move |_, args| {
            let gate = held.clone();
            async move {
                let _permit = gate.acquire().await;
                Ok(args)
            }
        })
        .start()
        .unwrap();
    // fetch → chord(3 × fetch ⇒ fetch) → publish (held) → fetch (not created yet).
    let chord = Group::new((0..3).map(|i| NewJob::new("fetch", json!(i))))
        .then_job(NewJob::new("fetch", json!("sum")));
    let running = Chain::new(NewJob::new("fetch", json!("seed")))
        .then_chord(chord)
        .then_job(NewJob::new("publish", json!({})))
        .then_job(NewJob::new("fetch", json!("notify")));
    let running = db.client.enqueue_workflow(running).await.unwrap().id();
    // fetch → charge (fails) → fetch (never created).
    let failing = Chain::new(NewJob::new("fetch", json!(1)))
        .then_job(NewJob::new("charge", json!({})).max_retries(0))
        .then_job(NewJob::new("fetch", json!(3)));
    let failing = db.client.enqueue_workflow(failing).await.unwrap();
    assert!(failing.wait(WAIT).await.is_err());
    let group = Group::new((0..2).map(|i| NewJob::new("fetch", json!(i))));
    let group = db.client.enqueue_workflow(group).await.unwrap();
    group.wait(WAIT).await.unwrap();

    let graph = eventually(WAIT, "the chain to reach publish", || async {
        let reply = get(&router, &format!("/api/workflows/{running}")).await;
        (reply.body["steps"][2]["node"]["state"] == "started").then_some(reply.body)
    })
    .await;
    assert_eq!(graph["workflow"]["kind"], "chain");
    assert_eq!(graph["workflow"]["state"], "running");
    assert_eq!(
        shape(&graph),
        [
            ("job".into(), strings(&["fetch:success"])),
            (
                "chord".into(),
                strings(&[
                    "fetch:success",
                    "fetch:success",
                    "fetch:success",
                    "=> fetch:success"
                ])
            ),
            ("job".into(), strings(&["publish:started"])),
            ("job".into(), strings(&["fetch:-"])),
        ]
    );
    assert_eq!(graph["steps"][1]["workflow"]["state"], "success");
    assert_eq!(
        graph["result_job_exists"], false,
        "the last step is not created yet"
    );
    // The chord's own id answers with its chain, the chord in focus.
    let chord_id = graph["steps"][1]["id"].as_str().unwrap().to_string();
    let focused = get(&router, &format!("/api/workflows/{chord_id}")).await;
    assert_eq!(focused.body["workflow"]["id"], running.to_string());
    assert_eq!(focused.body["focus"], chord_id);

    let failed = get(&router, &format!("/api/workflows/{}", failing.id()))
        .await
        .body;
    assert_eq!(failed["workflow"]["state"], "failure");
    assert_eq!(failed["workflow"]["error"], "card declined");
    assert_eq!(
        shape(&failed),
        [
            ("job".into(), strings(&["fetch:success"])),
            ("job".into(), strings(&["charge:failure"])),
            ("job".into(), strings(&["fetch:-"])),
        ]
    );
    let grouped = get(&router, &format!("/api/workflows/{}", group.id()))
        .await
        .body;
    assert_eq!(
        shape(&grouped),
        [("group".into(), strings(&["fetch:success", "fetch:success"]))]
    );

    // The list: top-level workflows only, newest first, by state and kind.
    let list = |query: &'static str| {
        let router = router.clone();
        async move {
            let reply = get(&router, &format!("/api/workflows?{query}")).await;
            assert_eq!(reply.status, 200, "{query}: {}", reply.text);
            reply.body["workflows"]
                .as_array()
                .unwrap()
                .iter()
                .map(|w| w["id"].as_str().unwrap().to_string())
                .collect::<Vec<_>>()
        }
    };
    let (r, f, g) = (
        running.to_string(),
        failing.id().to_string(),
        group.id().to_string(),
    );
    assert_eq!(list("").await, [g.clone(), f.clone(), r.clone()]);
    assert_eq!(list("state=running").await, std::slice::from_ref(&r));
    assert_eq!(list("state=failure").await, std::slice::from_ref(&f));
    assert_eq!(list("state=success").await, std::slice::from_ref(&g));
    assert_eq!(list("kind=chain").await, [f.clone(), r.clone()]);
    assert_eq!(
        list("kind=chord").await,
        Vec::<String>::new(),
        "the chord is a step"
    );
    let first = get(&router, "/api/workflows?limit=2").await.body;
    assert_eq!(first["workflows"].as_array().unwrap().len(), 2);
    let next = first["next"].as_str().unwrap();
    let rest = get(&router, &format!("/api/workflows?limit=2&cursor={next}"))
        .await
        .body;
    assert_eq!(rest["workflows"][0]["id"], r);
    assert_eq!(rest["next"], Value::Null);
    assert_eq!(first["workflows"][0]["first_task"], "fetch");

    gate.add_permits(1);
    worker.shutdown(WAIT).await.unwrap();
}

#[tokio::test]
async fn bad_workflow_requests_are_clear_4xx() {
    let db = TestDb::new().await;
    let router = open(&db);
    for (uri, status, says) in [
        ("/api/workflows?state=done", 400, "unknown workflow state"),
        ("/api/workflows?kind=dag", 400, "unknown workflow kind"),
        ("/api/workflows?cursor=12", 400, "not a workflow id"),
        ("/api/workflows/12", 400, "not a workflow id"),
        (
            "/api/workflows/01a20ca7-3e92-7620-8b3c-eb164a315773",
            404,
            "no workflow",
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
}

/// Rows written by hand that no workflow would make (a step whose spec
/// leads back to itself, specs of the wrong shape, a chord without its
/// members) still draw, without a panic.
#[tokio::test]
async fn hand_written_workflow_rows_draw_without_a_panic() {
    let db = TestDb::new().await;
    let router = open(&db);
    let (chain, chord) = (uuid::Uuid::now_v7(), uuid::Uuid::now_v7());
    let (step, ghost) = (uuid::Uuid::now_v7(), uuid::Uuid::now_v7());
    sqlx::query("INSERT INTO conveyor.workflows (id, kind, total) VALUES ($1, 'chain', 9)")
        .bind(chain)
        .execute(&db.pool)
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO conveyor.workflows (id, kind, total, parent_id, on_complete, result_job_id)
         VALUES ($1, 'chord', 1000, $2, '\"not a spec\"', $3)",
    )
    .bind(chord)
    .bind(chain)
    .bind(ghost)
    .execute(&db.pool)
    .await
    .unwrap();
    // Step 0 names itself as its next step, then a chord spec, then garbage.
    let on_success = json!([
        42,
        { "kind": "job", "id": step, "workflow_id": chain },
        { "kind": "workflow", "id": "not a uuid", "parent_id": chain },
    ]);
    sqlx::query(
        "INSERT INTO conveyor.jobs (id, task, workflow_id, workflow_index, on_success)
         VALUES ($1, 'loop', $2, 0, $3)",
    )
    .bind(step)
    .bind(chain)
    .bind(on_success)
    .execute(&db.pool)
    .await
    .unwrap();
    for id in [chain, chord] {
        let reply = get(&router, &format!("/api/workflows/{id}")).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        assert_eq!(
            shape(&reply.body),
            [("job".into(), strings(&["loop:pending"]))],
            "the loop is walked once"
        );
    }
    // A chord whose members are not there: drawn empty, its total counted.
    sqlx::query("UPDATE conveyor.workflows SET parent_id = NULL WHERE id = $1")
        .bind(chord)
        .execute(&db.pool)
        .await
        .unwrap();
    let reply = get(&router, &format!("/api/workflows/{chord}")).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(
        reply.body["steps"][0]["more"], 1000,
        "none drawn, all counted"
    );
    assert_eq!(reply.body["steps"][0]["members"], json!([]));
    assert_eq!(reply.body["steps"][0]["callback"]["exists"], false);
    // 150 of its members there: the first 100 drawn, in order.
    sqlx::query(
        "INSERT INTO conveyor.jobs (task, workflow_id, workflow_index)
         SELECT 'member', $1, i FROM generate_series(0, 149) i",
    )
    .bind(chord)
    .execute(&db.pool)
    .await
    .unwrap();
    let reply = get(&router, &format!("/api/workflows/{chord}")).await;
    let members = reply.body["steps"][0]["members"].as_array().unwrap();
    assert_eq!(
        (members.len(), members[99]["index"].as_i64()),
        (100, Some(99))
    );
    assert_eq!(reply.body["steps"][0]["more"], 900);
}
