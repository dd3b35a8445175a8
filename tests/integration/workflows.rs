//! Chains, groups, chords and callbacks.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use conveyor::{
    Chain, Client, Group, JobFailure, JobId, NewJob, Task, TaskContext, TaskError, Worker,
    WorkerBuilder, WorkflowState,
};
use serde_json::{Value, json};

use crate::common::{TestDb, WAIT, count_jobs, eventually};

struct Inc;
impl Task for Inc {
    const NAME: &'static str = "inc";
    type Args = i64;
    type Output = i64;
    async fn run(&self, _: TaskContext, n: i64) -> Result<i64, TaskError> {
        Ok(n + 1)
    }
}

struct Double;
impl Task for Double {
    const NAME: &'static str = "double";
    type Args = i64;
    type Output = i64;
    async fn run(&self, _: TaskContext, n: i64) -> Result<i64, TaskError> {
        Ok(n * 2)
    }
}

struct Square;
impl Task for Square {
    const NAME: &'static str = "square";
    type Args = i64;
    type Output = i64;
    async fn run(&self, _: TaskContext, n: i64) -> Result<i64, TaskError> {
        Ok(n * n)
    }
}

struct Sum;
impl Task for Sum {
    const NAME: &'static str = "sum";
    type Args = Vec<i64>;
    type Output = i64;
    async fn run(&self, _: TaskContext, v: Vec<i64>) -> Result<i64, TaskError> {
        Ok(v.iter().sum())
    }
}

/// A chord callback that counts how often it runs.
#[derive(Clone, Default)]
struct Collect(Arc<Mutex<HashMap<JobId, u32>>>);
impl Task for Collect {
    const NAME: &'static str = "collect";
    type Args = Vec<i64>;
    type Output = Vec<i64>;
    async fn run(&self, ctx: TaskContext, v: Vec<i64>) -> Result<Vec<i64>, TaskError> {
        *self.0.lock().unwrap().entry(ctx.job_id()).or_default() += 1;
        Ok(v)
    }
}

/// Fails for good.
struct Explode;
impl Task for Explode {
    const NAME: &'static str = "explode";
    type Args = i64;
    type Output = i64;
    async fn run(&self, _: TaskContext, n: i64) -> Result<i64, TaskError> {
        Err(TaskError::fail(format!("kaboom at {n}")))
    }
}

/// An error callback: returns what it was given.
struct RecordError;
impl Task for RecordError {
    const NAME: &'static str = "record_error";
    type Args = JobFailure;
    type Output = JobFailure;
    async fn run(&self, _: TaskContext, f: JobFailure) -> Result<JobFailure, TaskError> {
        Ok(f)
    }
}

/// `{"n": i, "fail_attempts": k, "fatal": bool}`: fails the first k attempts,
/// or for good; else returns n.
fn flaky_member(ctx: TaskContext, args: Value) -> Result<Value, TaskError> {
    if args["fatal"] == json!(true) {
        return Err(TaskError::fail(format!("member {} is broken", args["n"])));
    }
    if i64::from(ctx.attempt()) <= args["fail_attempts"].as_i64().unwrap_or(0) {
        return Err(TaskError::retry(format!("flaky attempt {}", ctx.attempt())));
    }
    Ok(args["n"].clone())
}

fn worker(client: &Client) -> WorkerBuilder {
    Worker::builder(client)
        .concurrency(25)
        .register(Inc)
        .register(Double)
        .register(Square)
        .register(Sum)
        .register(Explode)
        .register(RecordError)
        .register_fn("flaky_member", |ctx, args| async move {
            flaky_member(ctx, args)
        })
}

async fn jobs_of(db: &TestDb, workflow: uuid::Uuid) -> Vec<(Option<i32>, String, Value, String)> {
    sqlx::query_as(
        "SELECT workflow_index, task, args, state FROM conveyor.jobs
         WHERE workflow_id = $1 ORDER BY workflow_index NULLS LAST",
    )
    .bind(workflow)
    .fetch_all(&db.pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn a_chain_of_five_passes_results_along() {
    let db = TestDb::new().await;
    let worker = worker(&db.client).start().unwrap();
    let chain = Chain::new(Inc::job(1)) // 2
        .then::<Inc>() // 3
        .then_job(Inc::job(100)) // immutable: 101, the 3 is not passed
        .then::<Double>() // 202
        .then::<Inc>(); // 203
    let handle = db.client.enqueue_workflow(chain).await.unwrap();
    assert_eq!(handle.wait(WAIT).await.unwrap(), 203);

    let jobs = jobs_of(&db, handle.id()).await;
    let args: Vec<Value> = jobs.iter().map(|j| j.2.clone()).collect();
    assert_eq!(
        args,
        [json!(1), json!(2), json!(100), json!(101), json!(202)]
    );
    assert!(jobs.iter().all(|j| j.3 == "success"));
    assert_eq!(
        jobs.iter().map(|j| j.0).collect::<Vec<_>>(),
        [Some(0), Some(1), Some(2), Some(3), Some(4)]
    );
    let progress = handle.progress().await.unwrap();
    assert_eq!(progress.state, WorkflowState::Success);
    assert_eq!(
        (progress.total, progress.succeeded, progress.failed),
        (5, 5, 0)
    );
    assert_eq!(progress.kind, "chain");
    worker.shutdown(WAIT).await.unwrap();
}

#[tokio::test]
async fn a_chain_stops_at_a_final_failure_and_fires_that_steps_error_callback_once() {
    let db = TestDb::new().await;
    let worker = worker(&db.client).start().unwrap();
    let chain =
        Chain::new(Inc::job(1))
            .then::<Inc>()
            .then_step(Chain::<i64>::step::<Explode>().configure(|job| {
                job.on_error_job(NewJob::new("record_error", json!({"tag": "x"})))
            }))
            .then::<Inc>()
            .then::<Inc>()
            .on_error_job(NewJob::new("record_error", json!("chain-level")));
    let handle = db.client.enqueue_workflow(chain).await.unwrap();
    let err = handle.wait(WAIT).await.unwrap_err();
    let conveyor::Error::JobFailed { id: failed, error } = err else {
        panic!("{err:?}")
    };
    assert_eq!(error, "kaboom at 3");

    // Both error callbacks (the step's and the chain's) run, once each.
    let rows: Vec<(Value,)> = eventually(WAIT, "error callbacks ran", || async {
        let rows: Vec<(Value,)> = sqlx::query_as(
            "SELECT result FROM conveyor.jobs WHERE task = 'record_error' AND state = 'success'
             ORDER BY result->>'args'",
        )
        .fetch_all(&db.pool)
        .await
        .ok()?;
        (rows.len() == 2).then_some(rows)
    })
    .await;
    assert_eq!(
        rows[0].0,
        json!({"error": "kaboom at 3", "job_id": failed, "task": "explode", "args": "chain-level"})
    );
    assert_eq!(
        rows[1].0,
        json!({"error": "kaboom at 3", "job_id": failed, "task": "explode", "args": {"tag": "x"}})
    );
    worker.shutdown(WAIT).await.unwrap();
    assert_eq!(count_jobs(&db.pool, "task = 'record_error'").await, 2);
    // Steps 4 and 5 never existed.
    let jobs = jobs_of(&db, handle.id()).await;
    assert_eq!(jobs.len(), 3);
    assert_eq!(jobs[2].3, "failure");
    let progress = handle.progress().await.unwrap();
    assert_eq!(progress.state, WorkflowState::Failure);
    assert_eq!((progress.succeeded, progress.failed), (2, 1));
    assert_eq!(progress.failed_job_id, Some(failed));
}

#[tokio::test]
async fn a_chord_of_200_runs_its_callback_exactly_once_every_time() {
    let db = TestDb::new().await;
    let collect = Collect::default();
    let mut workers = Vec::new();
    for _ in 0..4 {
        workers.push(
            worker(&db.client)
                .register(collect.clone())
                .start()
                .unwrap(),
        );
    }
    let expected: Vec<i64> = (0..200).map(|i| i * i).collect();
    for round in 0..20 {
        let chord = Group::new((0..200).map(Square::job)).then::<Collect>();
        let handle = db.client.enqueue_workflow(chord).await.unwrap();
        let results = handle.wait(WAIT).await.unwrap();
        assert_eq!(results, expected, "round {round}: results in member order");
        let progress = handle.progress().await.unwrap();
        assert_eq!(
            (progress.succeeded, progress.failed, progress.total),
            (200, 0, 200)
        );
        assert_eq!(progress.state, WorkflowState::Success);
    }
    for worker in workers {
        worker.shutdown(WAIT).await.unwrap();
    }
    let runs = collect.0.lock().unwrap().clone();
    assert_eq!(runs.len(), 20, "one callback job per chord");
    assert!(
        runs.values().all(|&n| n == 1),
        "each callback ran once: {runs:?}"
    );
    assert_eq!(count_jobs(&db.pool, "task = 'collect'").await, 20);
}

#[tokio::test]
async fn a_retried_member_counts_once_and_a_failed_member_stops_the_chord() {
    let db = TestDb::new().await;
    let worker = worker(&db.client).start().unwrap();
    let members = |fatal_at: Option<i64>| {
        (0..10).map(move |n| {
            let args = json!({"n": n, "fail_attempts": if n == 3 { 2 } else { 0 }, "fatal": Some(n) == fatal_at});
            NewJob::new("flaky_member", args).retry_backoff_base(Duration::from_millis(10))
        })
    };
    // Member 3 fails twice, then succeeds: one callback with every result.
    let chord = Group::new(members(None)).then_job(NewJob::new("sum", json!([1, 2])));
    let handle = db.client.enqueue_workflow(chord).await.unwrap();
    assert_eq!(handle.wait(WAIT).await.unwrap(), json!(3));
    let progress = handle.progress().await.unwrap();
    assert_eq!((progress.succeeded, progress.failed), (10, 0));
    assert_eq!(count_jobs(&db.pool, "task = 'sum'").await, 1);
    let member3: (i32, i32) = sqlx::query_as(
        "SELECT attempt, jsonb_array_length(errors) FROM conveyor.jobs
         WHERE workflow_id = $1 AND workflow_index = 3",
    )
    .bind(handle.id())
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(member3, (3, 2));

    // Member 5 fails for good: no callback, chord failed, error callback once.
    let chord = Group::new(members(Some(5)))
        .then_job(NewJob::new("sum", json!([100])))
        .on_error::<RecordError>();
    let handle = db.client.enqueue_workflow(chord).await.unwrap();
    let err = handle.wait(WAIT).await.unwrap_err();
    assert!(
        matches!(err, conveyor::Error::JobFailed { ref error, .. } if error == "member 5 is broken"),
        "{err:?}"
    );
    // Let every member finish, then check nothing else happened.
    eventually(WAIT, "all members finished", || async {
        let open = count_jobs(
            &db.pool,
            &format!(
                "workflow_id = '{}' AND state NOT IN ('success', 'failure')",
                handle.id()
            ),
        )
        .await;
        (open == 0).then_some(())
    })
    .await;
    let failure: JobFailure = eventually(WAIT, "error callback ran", || async {
        let value: Value = sqlx::query_scalar(
            "SELECT result FROM conveyor.jobs WHERE task = 'record_error' AND state = 'success'",
        )
        .fetch_optional(&db.pool)
        .await
        .ok()??;
        serde_json::from_value(value).ok()
    })
    .await;
    assert_eq!(failure.error, "member 5 is broken");
    assert_eq!(failure.task, "flaky_member");
    worker.shutdown(WAIT).await.unwrap();
    assert_eq!(count_jobs(&db.pool, "task = 'record_error'").await, 1);
    assert_eq!(
        count_jobs(&db.pool, "task = 'sum'").await,
        1,
        "no second callback"
    );
    let progress = handle.progress().await.unwrap();
    assert_eq!(progress.state, WorkflowState::Failure);
    assert_eq!((progress.succeeded, progress.failed), (9, 1));
    assert_eq!(
        count_jobs(&db.pool, &format!("id = '{}'", handle.result_job_id())).await,
        0
    );
}

#[tokio::test]
async fn a_workflow_enqueued_in_a_rolled_back_transaction_leaves_no_rows() {
    let db = TestDb::new().await;
    let mut tx = db.pool.begin().await.unwrap();
    let c = &db.client;
    c.enqueue_workflow_tx(&mut tx, Chain::new(Inc::job(1)).then::<Inc>())
        .await
        .unwrap();
    c.enqueue_workflow_tx(&mut tx, Group::new((0..5).map(Square::job)))
        .await
        .unwrap();
    let chord = Group::new((0..5).map(Square::job)).then::<Sum>();
    let handle = c.enqueue_workflow_tx(&mut tx, chord).await.unwrap();
    let inside: i64 = sqlx::query_scalar("SELECT count(*) FROM conveyor.workflows")
        .fetch_one(&mut *tx)
        .await
        .unwrap();
    assert_eq!(inside, 3);
    tx.rollback().await.unwrap();
    assert_eq!(count_jobs(&db.pool, "true").await, 0);
    let workflows: i64 = sqlx::query_scalar("SELECT count(*) FROM conveyor.workflows")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(workflows, 0);
    assert!(matches!(
        handle.progress().await,
        Err(conveyor::Error::NotFound(_))
    ));
}

#[tokio::test]
async fn a_chain_with_a_chord_fans_out_joins_and_continues() {
    let db = TestDb::new().await;
    let worker = worker(&db.client).start().unwrap();
    let chain = Chain::new(Inc::job(1))
        .then_chord(Group::new((1..=3).map(Square::job)).then::<Sum>()) // 1 + 4 + 9
        .then::<Inc>() // 15
        .then::<Double>(); // 30
    let handle = db.client.enqueue_workflow(chain).await.unwrap();
    assert_eq!(handle.wait(WAIT).await.unwrap(), 30);
    let progress = handle.progress().await.unwrap();
    assert_eq!(
        (progress.total, progress.succeeded, progress.state),
        (4, 4, WorkflowState::Success)
    );
    // The chord is a child workflow of the chain, visible in SQL.
    let chord: (String, i32, i32, Option<uuid::Uuid>) = sqlx::query_as(
        "SELECT state, total, succeeded, result_job_id FROM conveyor.workflows WHERE parent_id = $1",
    )
    .bind(handle.id())
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!((chord.0.as_str(), chord.1, chord.2), ("success", 3, 3));
    let callback_args: Value = sqlx::query_scalar("SELECT args FROM conveyor.jobs WHERE id = $1")
        .bind(chord.3.unwrap())
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(callback_args, json!([1, 4, 9]));
    worker.shutdown(WAIT).await.unwrap();
}

#[tokio::test]
async fn a_group_reports_progress_and_results_in_member_order() {
    let db = TestDb::new().await;
    let group = Group::new((0..50).rev().map(Square::job));
    let handle = db.client.enqueue_workflow(group).await.unwrap();
    let progress = handle.progress().await.unwrap();
    assert_eq!(
        (progress.total, progress.succeeded, progress.state),
        (50, 0, WorkflowState::Running)
    );
    let worker = worker(&db.client).start().unwrap();
    let results = handle.wait(WAIT).await.unwrap();
    assert_eq!(results, (0..50).rev().map(|i| i * i).collect::<Vec<i64>>());
    assert_eq!(handle.members().len(), 50);
    let progress = handle.progress().await.unwrap();
    assert_eq!(
        (progress.succeeded, progress.state),
        (50, WorkflowState::Success)
    );
    worker.shutdown(WAIT).await.unwrap();
}

#[tokio::test]
async fn success_and_error_callbacks_on_a_single_job() {
    let db = TestDb::new().await;
    let worker = worker(&db.client).start().unwrap();
    // on_success gets the result (41 + 1 = 42, then inc → 43); an immutable one keeps its args.
    let job = Inc::job(41)
        .on_success::<Inc>()
        .on_success_job(Square::job(7));
    let handle = db.client.enqueue(job).await.unwrap();
    assert_eq!(handle.wait(WAIT).await.unwrap(), 42);
    let followers: Vec<(String, Value)> = eventually(WAIT, "callbacks ran", || async {
        let rows: Vec<(String, Value)> = sqlx::query_as(
            "SELECT task, result FROM conveyor.jobs WHERE id <> $1 AND state = 'success' ORDER BY task",
        )
        .bind(handle.id())
        .fetch_all(&db.pool)
        .await
        .ok()?;
        (rows.len() == 2).then_some(rows)
    })
    .await;
    assert_eq!(
        followers,
        [("inc".into(), json!(43)), ("square".into(), json!(49))]
    );

    // on_error runs once, with the error first; on_success does not run.
    let job = Explode::job(9)
        .on_error::<RecordError>()
        .on_success::<Inc>();
    let handle = db.client.enqueue(job).await.unwrap();
    assert!(handle.wait(WAIT).await.is_err());
    let failure: Value = eventually(WAIT, "error callback ran", || async {
        sqlx::query_scalar(
            "SELECT result FROM conveyor.jobs WHERE task = 'record_error' AND state = 'success'",
        )
        .fetch_optional(&db.pool)
        .await
        .ok()?
    })
    .await;
    assert_eq!(
        failure,
        json!({"error": "kaboom at 9", "job_id": handle.id(), "task": "explode", "args": null})
    );
    worker.shutdown(WAIT).await.unwrap();
    assert_eq!(count_jobs(&db.pool, "task = 'inc'").await, 2);
}

#[tokio::test]
async fn a_workflow_whose_job_id_is_taken_or_repeated_is_refused_whole() {
    let db = TestDb::new().await;
    let taken = db.client.enqueue(Inc::job(1)).await.unwrap().id();
    let group = Group::new([Inc::job(2), Inc::job(3).id(taken)]);
    let err = db.client.enqueue_workflow(group).await.unwrap_err();
    assert!(
        matches!(&err, conveyor::Error::InvalidJob(m) if m.contains("is taken")),
        "{err:?}"
    );
    // A later chain step counts too, and so does one id used twice.
    let chain = Chain::new(Inc::job(1)).then_job(Inc::job(5).id(taken));
    let err = db.client.enqueue_workflow(chain).await.unwrap_err();
    assert!(matches!(&err, conveyor::Error::InvalidJob(m) if m.contains("is taken")));
    let fresh = uuid::Uuid::now_v7();
    let twice = Group::new([Inc::job(2).id(fresh), Inc::job(3).id(fresh)]);
    let err = db.client.enqueue_workflow(twice).await.unwrap_err();
    assert!(matches!(&err, conveyor::Error::InvalidJob(m) if m.contains("twice")));
    // Nothing was written: one job, no workflow.
    assert_eq!(count_jobs(&db.pool, "true").await, 1);
    let workflows: i64 = sqlx::query_scalar("SELECT count(*) FROM conveyor.workflows")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(workflows, 0);
}

#[tokio::test]
async fn a_step_requeued_after_its_chain_failed_runs_alone() {
    let db = TestDb::new().await;
    let failed_once = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = failed_once.clone();
    let worker = worker(&db.client)
        .register_fn("fails_first_time", move |_, args| {
            let flag = flag.clone();
            async move {
                if flag.swap(true, std::sync::atomic::Ordering::SeqCst) {
                    Ok(args)
                } else {
                    Err(TaskError::fail("first time"))
                }
            }
        })
        .start()
        .unwrap();
    let chain = Chain::new(NewJob::new("fails_first_time", json!(1))).then_job(Inc::job(5));
    let handle = db.client.enqueue_workflow(chain).await.unwrap();
    let Err(conveyor::Error::JobFailed { id: step, .. }) = handle.wait(WAIT).await else {
        panic!("the chain should fail");
    };
    assert_eq!(db.client.requeue(&[step]).await.unwrap(), 1);
    eventually(WAIT, "the re-queued step succeeded", || async {
        (count_jobs(&db.pool, &format!("id = '{step}' AND state = 'success'")).await == 1)
            .then_some(())
    })
    .await;
    worker.shutdown(WAIT).await.unwrap();
    // Its outcome and follow-ups commit together: had the next step been
    // started, it would be here now.
    let jobs = jobs_of(&db, handle.id()).await;
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    let progress = handle.progress().await.unwrap();
    assert_eq!(progress.state, WorkflowState::Failure);
}

#[tokio::test]
async fn a_cancelled_member_given_back_at_shutdown_ends_its_workflow() {
    let db = TestDb::new().await;
    let started = Arc::new(tokio::sync::Semaphore::new(0));
    let s = started.clone();
    let worker = worker(&db.client)
        .register_fn("hang", move |_, _| {
            let started = s.clone();
            async move {
                started.add_permits(1);
                // Ignores cancellation and never ends.
                std::future::pending::<Result<Value, TaskError>>().await
            }
        })
        .cancel_grace(Duration::from_secs(3600))
        .start()
        .unwrap();
    let group = Group::new([NewJob::<Value>::new("hang", json!({}))]);
    let handle = db.client.enqueue_workflow(group).await.unwrap();
    tokio::time::timeout(WAIT, started.acquire())
        .await
        .unwrap()
        .unwrap()
        .forget();
    let member = handle.members()[0].id();
    assert_eq!(
        db.client.cancel(member).await.unwrap(),
        conveyor::JobState::Started
    );
    // The handler outlives the shutdown's grace period: its job is given back,
    // and as its cancellation was asked for, it ends cancelled.
    let report = worker.shutdown(Duration::from_millis(200)).await.unwrap();
    assert_eq!(report.released, 1);
    assert_eq!(count_jobs(&db.pool, "state = 'cancelled'").await, 1);
    let progress = handle.progress().await.unwrap();
    assert_eq!(progress.state, WorkflowState::Failure);
    assert_eq!(progress.failed_job_id, Some(member));
}

/// `.unique()` is not carried by the specs follow-ups are inserted from, so
/// it is refused there instead of silently dropped.
#[tokio::test]
async fn unique_on_a_callback_step_or_member_is_refused_and_nothing_is_written() {
    let db = TestDb::new().await;
    let unique = || Inc::job(1).unique(conveyor::Unique::UntilFinished);
    let refused = |err: conveyor::Error| {
        assert!(
            matches!(&err, conveyor::Error::InvalidJob(m) if m.contains(".unique()")),
            "{err:?}"
        );
    };
    refused(
        db.client
            .enqueue(Inc::job(1).on_success_job(unique()))
            .await
            .unwrap_err(),
    );
    refused(
        db.client
            .enqueue_workflow(Chain::new(Inc::job(1)).then_job(unique()))
            .await
            .unwrap_err(),
    );
    refused(
        db.client
            .enqueue_workflow(Group::new([Inc::job(1), unique()]))
            .await
            .unwrap_err(),
    );
    refused(
        db.client
            .enqueue_workflow(Group::new([Inc::job(1)]).then_job(unique()))
            .await
            .unwrap_err(),
    );
    assert_eq!(count_jobs(&db.pool, "true").await, 0);
    // Directly, it works.
    db.client.enqueue(unique()).await.unwrap();
}
