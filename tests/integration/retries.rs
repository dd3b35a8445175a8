//! Retry policy: Fibonacci backoff, retry-after, fail now, panics, bad arguments.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use conveyor::{Job, JobState, NewJob, Task, TaskContext, TaskError, Worker};
use serde_json::{Value, json};

use crate::common::{TestDb, WAIT};
use crate::enqueue::{Add, AddArgs};

fn millis(d: chrono::TimeDelta) -> i64 {
    d.num_milliseconds()
}

#[tokio::test]
async fn retries_follow_fibonacci_backoff() {
    let db = TestDb::new().await;
    // Record the job row as each attempt starts.
    let rows: Arc<Mutex<Vec<Job>>> = Arc::default();
    let (seen, client) = (rows.clone(), db.client.clone());
    let worker = Worker::builder(&db.client)
        .register_fn("flaky", move |ctx, _| {
            let (seen, client) = (seen.clone(), client.clone());
            async move {
                let job = client
                    .job(ctx.job_id())
                    .await?
                    .ok_or(TaskError::fail("gone"))?;
                seen.lock().unwrap().push(job);
                Err::<Value, _>(TaskError::retry(format!("boom {}", ctx.attempt())))
            }
        })
        .start()
        .unwrap();
    let base = Duration::from_millis(40);
    let handle = db
        .client
        .enqueue(
            NewJob::new("flaky", json!({}))
                .max_retries(6)
                .retry_backoff_base(base),
        )
        .await
        .unwrap();
    let err = handle.wait(WAIT).await.unwrap_err();
    assert!(
        matches!(err, conveyor::Error::JobFailed { ref error, .. } if error == "boom 7"),
        "{err}"
    );

    let last = handle.job().await.unwrap();
    assert_eq!(last.state, JobState::Failure);
    assert_eq!(last.attempt, 7);
    assert_eq!(last.errors.len(), 7);
    assert_eq!(
        last.errors.iter().map(|e| e.attempt).collect::<Vec<_>>(),
        [1, 2, 3, 4, 5, 6, 7]
    );
    let rows = rows.lock().unwrap().clone();
    assert_eq!(rows.len(), 7);
    // Attempt k+1 was scheduled at (failure of attempt k) + fib(k) × base.
    let fib = [1, 1, 2, 3, 5, 8];
    for k in 0..6 {
        let delay = rows[k + 1].run_at - last.errors[k].at;
        assert_eq!(millis(delay), fib[k] * 40, "retry {} delay", k + 1);
        assert_eq!(
            rows[k + 1].retry_backoff,
            Some(Duration::from_millis(fib[k] as u64 * 40)),
        );
        // ...and did not start before that.
        assert!(rows[k + 1].started_at.unwrap() >= rows[k + 1].run_at);
    }
    worker.shutdown(WAIT).await.unwrap();
}

#[tokio::test]
async fn retry_after_overrides_the_policy_and_fail_now_stops_it() {
    let db = TestDb::new().await;
    let worker = Worker::builder(&db.client)
        .register_fn("later", |ctx, _| async move {
            if ctx.attempt() == 1 {
                Err(TaskError::retry_after(
                    Duration::from_millis(300),
                    "rate limited",
                ))
            } else {
                Ok(json!(ctx.attempt()))
            }
        })
        .register_fn("hopeless", |_, _| async move {
            Err::<Value, _>(TaskError::fail("card declined"))
        })
        .start()
        .unwrap();
    // A base of an hour: only retry-after can make this finish in time.
    let later = db
        .client
        .enqueue(NewJob::new("later", json!({})).retry_backoff_base(Duration::from_secs(3600)))
        .await
        .unwrap();
    assert_eq!(later.wait(WAIT).await.unwrap(), json!(2));
    let job = later.job().await.unwrap();
    assert_eq!(job.retry_backoff, Some(Duration::from_millis(300)));
    assert_eq!(job.errors.len(), 1);
    assert_eq!(job.errors[0].error, "rate limited");
    assert!(job.started_at.unwrap() - job.errors[0].at >= chrono::TimeDelta::milliseconds(300));

    let hopeless = db
        .client
        .enqueue(NewJob::new("hopeless", json!({})))
        .await
        .unwrap();
    let err = hopeless.wait(WAIT).await.unwrap_err();
    assert!(matches!(err, conveyor::Error::JobFailed { .. }));
    let job = hopeless.job().await.unwrap();
    assert_eq!(
        (job.state, job.attempt, job.max_retries),
        (JobState::Failure, 1, 25)
    );
    assert_eq!(job.last_error.as_deref(), Some("card declined"));
    worker.shutdown(WAIT).await.unwrap();
}

struct Panicky;

impl Task for Panicky {
    const NAME: &'static str = "panicky";
    type Args = ();
    type Output = String;

    async fn run(&self, ctx: TaskContext, _: ()) -> Result<String, TaskError> {
        if ctx.attempt() == 1 {
            panic!("index out of bounds in attempt {}", ctx.attempt());
        }
        Ok("recovered".into())
    }
}

#[tokio::test]
async fn a_panic_is_recorded_and_retried_and_the_worker_keeps_running() {
    let db = TestDb::new().await;
    let worker = Worker::builder(&db.client)
        .register(Panicky)
        .register(Add)
        .start()
        .unwrap();
    let handle = db
        .client
        .enqueue(Panicky::job(()).retry_backoff_base(Duration::from_millis(10)))
        .await
        .unwrap();
    assert_eq!(handle.wait(WAIT).await.unwrap(), "recovered");
    let job = handle.job().await.unwrap();
    assert_eq!(job.attempt, 2);
    assert_eq!(job.errors.len(), 1);
    assert!(
        job.errors[0].error.contains("panicked")
            && job.errors[0]
                .error
                .contains("index out of bounds in attempt 1"),
        "{}",
        job.errors[0].error
    );
    // The same worker still serves other jobs.
    let add = db
        .client
        .enqueue(Add::job(AddArgs { a: 1, b: 1 }))
        .await
        .unwrap();
    assert_eq!(add.wait(WAIT).await.unwrap(), 2);
    worker.shutdown(WAIT).await.unwrap();
}

#[tokio::test]
async fn undecodable_args_fail_at_once_naming_the_task_and_the_problem() {
    let db = TestDb::new().await;
    let worker = Worker::builder(&db.client).register(Add).start().unwrap();
    let bad = db
        .client
        .enqueue(NewJob::new("add", json!({"a": "one", "b": 2})))
        .await
        .unwrap();
    let missing: uuid::Uuid = sqlx::query_scalar("SELECT conveyor.enqueue('add', '{\"a\": 1}')")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    for id in [bad.id(), missing] {
        let job = db.client.handle::<i64>(id).wait_job(WAIT).await.unwrap();
        assert_eq!(job.state, JobState::Failure);
        assert_eq!(job.attempt, 1, "an args-decode error is not retried");
        let error = job.last_error.unwrap();
        assert!(
            error.contains("task `add`") && error.contains("cannot decode args"),
            "{error}"
        );
        assert!(
            error.contains("invalid type") || error.contains("missing field `b`"),
            "{error}"
        );
    }
    // The worker is still serving.
    let good = db
        .client
        .enqueue(Add::job(AddArgs { a: 2, b: 2 }))
        .await
        .unwrap();
    assert_eq!(good.wait(WAIT).await.unwrap(), 4);
    worker.shutdown(WAIT).await.unwrap();
}

#[tokio::test]
async fn a_timed_out_attempt_fails_and_follows_the_retry_policy() {
    let db = TestDb::new().await;
    let worker = Worker::builder(&db.client)
        .register_fn("slow_once", |ctx, _| async move {
            if ctx.attempt() == 1 {
                tokio::time::sleep(Duration::from_secs(3600)).await;
            }
            Ok(json!("done"))
        })
        .start()
        .unwrap();
    let handle = db
        .client
        .enqueue(
            NewJob::new("slow_once", json!({}))
                .timeout(Duration::from_millis(200))
                .retry_backoff_base(Duration::from_millis(10)),
        )
        .await
        .unwrap();
    assert_eq!(handle.wait(WAIT).await.unwrap(), json!("done"));
    // The first attempt timed out and was retried; a later one finished.
    // (Every attempt has 200 ms: on a loaded machine even one that returns
    // at once may run out, and be retried again.)
    let job = handle.job().await.unwrap();
    assert!(job.attempt >= 2, "attempt {}", job.attempt);
    assert_eq!(job.errors.len(), job.attempt as usize - 1);
    assert!(
        job.errors.iter().all(|e| e.error.contains("timed out")),
        "{:?}",
        job.errors
    );
    worker.shutdown(WAIT).await.unwrap();
}
