//! Failover with nothing lost: a pg_auto_failover formation (a monitor, a
//! primary and a synchronous standby; see `formation.rs`), producers and
//! workers on one `Client` built from the formation's host list
//! (`target_session_attrs=read-write`), the primary's node killed mid-run
//! (its keeper, then its postmaster, with SIGKILL), the standby promoted by
//! the monitor; the same client and workers carry on without a restart.
//!
//! Checked: every enqueue that returned `Ok` exists; every outcome that was
//! recorded before the kill is still there; every job reaches a final
//! state; no job ran twice at the same time (from the handlers' own log in
//! this process's memory, with their fencing tokens); `LISTEN` and the
//! periodic leader follow the new primary.

mod book;
mod formation;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use book::{Book, overlaps};
use chrono::{DateTime, Utc};
use conveyor::{Client, Error, JobId, NewJob, Periodic, TaskError, Worker, WorkerHandle};
use formation::{Formation, wait_connect};
use serde_json::{Value, json};
use sqlx::PgPool;

/// Prints a result line even under the test harness's output capture.
macro_rules! report {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

/// Long enough to ride out the failover: a lease that lapses during it
/// makes the job run again (correctly, but not what this test looks at).
const LEASE: Duration = Duration::from_secs(15);
const OUTCOMES: &str = "SELECT id, state, lease_token, result FROM conveyor.jobs \
     WHERE state IN ('success', 'failure', 'cancelled')";
const DONE: &str = "SELECT count(*) FROM conveyor.jobs \
     WHERE task = 'work' AND state IN ('success', 'failure', 'cancelled')";
const UNFINISHED: &str = "SELECT count(*) FROM conveyor.jobs \
     WHERE state NOT IN ('success', 'failure', 'cancelled')";

fn start_worker(client: &Client, book: &Arc<Book>) -> WorkerHandle {
    let book = book.clone();
    Worker::builder(client)
        .concurrency(6)
        .lease(LEASE)
        .rescue_interval(Duration::from_secs(1))
        // An hour: a wake-up within the test after the failover proves LISTEN
        // followed.
        .safety_interval(Duration::from_secs(3600))
        .periodic(Periodic::every("tick", Duration::from_secs(1), |slot| {
            NewJob::new("tick", json!({ "slot": slot }))
        }))
        .register_fn("tick", |_, _| async { Ok(Value::Null) })
        .register_fn("work", move |ctx, args| {
            let book = book.clone();
            async move {
                let mut run = book.start(ctx.job_id(), ctx.lease_token(), ctx.attempt());
                let ms = args["ms"].as_u64().unwrap_or(20);
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_millis(ms)) => {}
                    () = ctx.cancelled() => return Err(TaskError::retry("told to stop")),
                }
                run.ok = true;
                Ok(json!({ "token": ctx.lease_token() }))
            }
        })
        .start()
        .expect("worker")
}

/// Enqueues one job at a time, and every tenth call ten at once, until told to stop.
async fn produce(client: Client, book: Arc<Book>, stop: Arc<AtomicBool>, producer: u64) {
    let mut call = 0u64;
    while !stop.load(Ordering::Relaxed) {
        call += 1;
        let job = |k: u64| {
            let ms = 5 + (call * 7 + producer * 13 + k) % 40;
            NewJob::new(
                "work",
                json!({ "ms": ms, "p": producer, "call": call, "k": k }),
            )
        };
        let answer = if call.is_multiple_of(10) {
            let jobs = (0..10).map(job).collect();
            client
                .enqueue_many(jobs)
                .await
                .map(|handles| handles.iter().map(|h| h.id()).collect::<Vec<_>>())
        } else {
            client.enqueue(job(0)).await.map(|handle| vec![handle.id()])
        };
        match answer {
            Ok(ids) => book.acknowledge(ids),
            Err(Error::Unconfirmed { ids, source }) => book.unconfirmed(ids, source.to_string()),
            Err(error) => book.error(error.to_string()),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Calls `check` until it returns something, for up to `within`.
async fn wait_for<T, F, Fut>(what: &str, within: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + within;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

type Outcomes = HashMap<JobId, (String, Option<i64>, Option<Value>)>;

async fn outcomes(pool: &PgPool) -> Outcomes {
    let rows: Vec<(JobId, String, Option<i64>, Option<Value>)> = sqlx::query_as(OUTCOMES)
        .fetch_all(pool)
        .await
        .expect("read outcomes");
    rows.into_iter()
        .map(|(id, state, token, result)| (id, (state, token, result)))
        .collect()
}

async fn count(pool: &PgPool, sql: &'static str) -> Option<i64> {
    sqlx::query_scalar(sql).fetch_one(pool).await.ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_killed_mid_run_loses_nothing() {
    // Conveyor's own account of the failover (shown with --nocapture or on failure).
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "conveyor=info".into()),
        )
        .with_test_writer()
        .try_init();
    let began = Instant::now();
    let mut formation = Formation::start().await;
    let set_up = began.elapsed();
    let mut monitor = wait_connect(&formation.monitor_url(), Duration::from_secs(10)).await;
    let mut first = wait_connect(
        &formation.node_url(&formation.nodes[0]),
        Duration::from_secs(10),
    )
    .await;
    let sync: Vec<String> = sqlx::query_scalar("SELECT sync_state FROM pg_stat_replication")
        .fetch_all(&mut first)
        .await
        .unwrap();
    assert!(
        sync.iter().any(|s| s == "sync" || s == "quorum"),
        "the standby is synchronous: {sync:?}"
    );
    drop(first);

    let client = Client::connect(&formation.url())
        .await
        .expect("client on the host list");
    let primary = client.primary().expect("a host list is followed").clone();
    assert_eq!(
        primary.host(),
        format!("127.0.0.1:{}", formation.nodes[0].port)
    );
    conveyor::migrate(client.pool()).await.expect("migrate");
    let pool = client.pool().clone();
    let book = Arc::new(Book::default());
    let workers: Vec<WorkerHandle> = (0..2).map(|_| start_worker(&client, &book)).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let producers: Vec<_> = (0..3)
        .map(|p| tokio::spawn(produce(client.clone(), book.clone(), stop.clone(), p)))
        .collect();

    // Mid-run: jobs have finished, handlers are running, producers enqueue.
    wait_for(
        "300 jobs done before the kill",
        Duration::from_secs(60),
        || async {
            let done = count(&pool, DONE).await?;
            (done >= 300 && book.running() >= 3).then_some(())
        },
    )
    .await;
    let recorded = outcomes(&pool).await;
    let old = formation.primary(&mut monitor).await.expect("a primary");
    let new = 1 - old;
    // Kill while handlers run (they last 5-45 ms: look often).
    let deadline = Instant::now() + Duration::from_secs(60);
    while book.running() < 3 {
        assert!(
            Instant::now() < deadline,
            "no 3 handlers running at once within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let running_at_kill = book.running();
    let acknowledged_at_kill = book.acknowledged().len();
    let killed_wall: DateTime<Utc> = Utc::now();
    let killed = Instant::now();
    formation.kill_node(old);

    let new_name = formation.nodes[new].name.clone();
    formation
        .wait_state(
            &mut monitor,
            &new_name,
            &["wait_primary", "primary"],
            Duration::from_secs(90),
        )
        .await;
    let promoted = killed.elapsed();
    // Work resumed: a job claimed after the kill has finished (on the new primary).
    let resumed: DateTime<Utc> = wait_for("a job claimed after the kill finishes", Duration::from_secs(120), || async {
        sqlx::query_scalar("SELECT min(finished_at) FROM conveyor.jobs WHERE task = 'work' AND started_at > $1")
            .bind(killed_wall)
            .fetch_one(&pool)
            .await
            .ok()
            .flatten()
    })
    .await;
    let resume_secs = (resumed - killed_wall).num_milliseconds() as f64 / 1000.0;
    // Keep producing until as many more jobs were acknowledged after it.
    let more = book.acknowledged().len() + 300;
    wait_for(
        "300 more enqueues after resuming",
        Duration::from_secs(60),
        || async { (book.acknowledged().len() >= more).then_some(()) },
    )
    .await;
    stop.store(true, Ordering::Relaxed);
    for producer in producers {
        producer.await.expect("producer");
    }

    // Every job reaches a final state (one whose claim was acknowledged by
    // the old primary to nobody is rescued after its lease).
    wait_for("every job final", LEASE * 4, || async {
        (count(&pool, UNFINISHED).await? == 0).then_some(())
    })
    .await;
    // LISTEN followed: idle workers (safety interval an hour) take a new
    // job when notified.
    let woken = Instant::now();
    let handle = client
        .enqueue(NewJob::new("work", json!({ "ms": 1 })))
        .await
        .expect("enqueue after the failover");
    book.acknowledge([handle.id()]);
    handle
        .wait(Duration::from_secs(60))
        .await
        .expect("the job runs: LISTEN followed");
    let wake = woken.elapsed();
    // The periodic leader followed: slots keep coming after the failover.
    wait_for("a periodic slot after resuming", Duration::from_secs(60), || async {
        let n: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM conveyor.jobs WHERE task = 'tick' AND state = 'success' AND created_at > $1",
        )
        .bind(resumed)
        .fetch_one(&pool)
        .await
        .ok()?;
        (n > 0).then_some(())
    })
    .await;
    for worker in workers {
        let report = worker
            .shutdown(Duration::from_secs(10))
            .await
            .expect("shutdown");
        assert!(report.unreleased.is_empty(), "{report:?}");
    }

    // The checks.
    let acknowledged = book.acknowledged();
    let existing: Vec<JobId> =
        sqlx::query_scalar("SELECT id FROM conveyor.jobs WHERE id = ANY($1)")
            .bind(&acknowledged)
            .fetch_all(&pool)
            .await
            .unwrap();
    let lost = acknowledged.len() - existing.len();
    let now = outcomes(&pool).await;
    let outcomes_lost = recorded
        .iter()
        .filter(|(id, o)| now.get(*id) != Some(*o))
        .count();
    let runs = book.runs();
    let (concurrent, unfenced) = overlaps(&runs);
    // Every stored success came from a run that returned Ok under the stored token.
    let ok_runs: std::collections::HashSet<(JobId, i64)> = runs
        .iter()
        .filter(|r| r.end.is_some_and(|(_, ok)| ok))
        .map(|r| (r.job, r.token))
        .collect();
    let foreign = now
        .iter()
        .filter(|(id, (state, token, result))| {
            let Some(stored) = result.as_ref().and_then(|r| r.get("token")) else {
                return false; // not a `work` job
            };
            state == "success"
                && (stored.as_i64() != *token
                    || !token.is_some_and(|t| ok_runs.contains(&(**id, t))))
        })
        .count();
    let errors = book.errors();
    let reruns = runs.iter().filter(|r| r.attempt > 1).count();
    report!(
        "failover: set-up {:.1}s, {} jobs done and {running_at_kill} running at the kill, {acknowledged_at_kill} acknowledged; \
         standby promoted after {:.1}s; {} runs ({reruns} retries); {} enqueue errors {:?}; an idle worker woke for a new job in {:.0} ms; primary switches {}; total {:.1}s",
        set_up.as_secs_f64(),
        recorded.len(),
        promoted.as_secs_f64(),
        runs.len(),
        errors.len(),
        errors.iter().take(3).collect::<Vec<_>>(),
        wake.as_secs_f64() * 1000.0,
        primary.switches(),
        began.elapsed().as_secs_f64(),
    );
    report!(
        "jobs acknowledged {}, jobs lost {lost}, outcomes lost {outcomes_lost}, concurrent double-runs {}, seconds to resume {resume_secs:.1}",
        acknowledged.len(),
        concurrent.len()
    );
    assert_eq!(lost, 0, "acknowledged jobs missing after the failover");
    assert_eq!(
        outcomes_lost, 0,
        "outcomes recorded before the kill changed or vanished"
    );
    assert!(
        concurrent.is_empty(),
        "runs of one job overlapped: {:?}",
        &concurrent[..concurrent.len().min(3)]
    );
    assert!(
        unfenced.is_empty(),
        "a later run held an older token: {:?}",
        &unfenced[..unfenced.len().min(3)]
    );
    assert_eq!(foreign, 0, "successes stored under a token no Ok run held");
    assert!(primary.switches() >= 1);
    assert_eq!(
        primary.host(),
        format!("127.0.0.1:{}", formation.nodes[new].port)
    );
}
