//! Poison rows: a randomized property test. Rows written by hand into
//! `conveyor.jobs` with hostile values (JSON nested hundreds of levels deep,
//! numbers no float holds, long and strange text, extreme integers, times
//! and intervals at and past the edges, nonsense follow-up specs) are
//! inserted beside normal jobs while two workers run. Whatever the database
//! accepts must leave the workers serving and end in a state the README
//! explains; the readers (the client's and the `conveyor` command's) must
//! not panic on it.
//!
//! Replay a run with `CONVEYOR_POISON_SEED=<seed>` (printed at the start);
//! `CONVEYOR_POISON_ROWS=<n>` changes how many poison rows are generated.
//!
//! Layout: a tiny seeded RNG (splitmix64); generators of hostile SQL values
//! (JSON, text, times, intervals, follow-up specs) and of whole rows, plus
//! a fixed set of edge rows every run inserts whatever the seed; the
//! classifier that says what "defined" means, row by row; the property
//! test, which runs the workers, inserts, waits until every row is in a
//! defined state, shuts down and checks the readers; and a small test that
//! reproduces, alone, what the property test found.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use conveyor::{JobFilter, NewJob, TaskError, Worker};
use serde_json::json;
use sqlx::{PgPool, Row};
use uuid::Uuid;

use crate::common::{TestDb, WAIT};

/// Poison rows per run (`CONVEYOR_POISON_ROWS` overrides).
const POISON_ROWS: usize = 150;
/// Jobs of the well-behaved task `normal`, enqueued with the Rust client.
const NORMAL_JOBS: usize = 200;
/// How long every row may take to reach a defined state.
const SETTLE: Duration = Duration::from_secs(60);
/// What the workers serve: any other queue or task waits, as documented.
const SERVED_QUEUES: [&str; 2] = ["default", "other"];
const REGISTERED_TASKS: [&str; 2] = ["normal", "poison"];
/// The workers' ids, which hand-written `started` rows sometimes claim to hold.
const WORKER_IDS: [&str; 2] = ["poison-worker-a", "poison-worker-b"];
/// The lease the workers take: renewed every 10 s, so kept however loaded
/// the machine (a lease lost without an outage is a violation).
const LEASE: Duration = Duration::from_secs(30);
/// A runtime kept busy this long by work on it is a defect (heartbeats,
/// rescues and outcomes all wait meanwhile): see `StallProbe`.
const STALL: Duration = Duration::from_secs(1);

mod judge;
mod rows;
mod values;

use judge::*;
use rows::*;
use values::*;

// ---------------------------------------------------------------------------

/// Poison rows beside normal jobs while two workers run: normal jobs run
/// exactly once, every accepted row ends in a defined state, no worker task
/// panics or stalls, and the readers do not panic.
#[tokio::test]
async fn poison_rows_end_in_defined_states_and_workers_keep_serving() {
    let began = Instant::now();
    let seed = seed();
    let rows: usize = std::env::var("CONVEYOR_POISON_ROWS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(POISON_ROWS);
    eprintln!("poison: CONVEYOR_POISON_SEED={seed} ({rows} random rows)");
    let mut rng = Rng(seed);
    let mut poison = edge_rows(&mut rng);
    poison.extend((0..rows).map(|_| generate(&mut rng)));
    let rows = poison.len();
    let by_id: HashMap<Uuid, usize> = poison.iter().enumerate().map(|(i, p)| (p.id, i)).collect();

    let db = TestDb::new().await;
    let normal_runs: Arc<Mutex<HashMap<Uuid, u32>>> = Arc::default();
    let poison_runs: Arc<Mutex<HashMap<Uuid, u32>>> = Arc::default();
    // When each poison handler call returned, and with which attempt: to
    // name the row behind a stall.
    let calls: Arc<Mutex<Vec<(Instant, Uuid, u32)>>> = Arc::default();
    let behaviours: Arc<HashMap<Uuid, Behaviour>> =
        Arc::new(poison.iter().map(|p| (p.id, p.behaviour)).collect());

    let probe = StallProbe::start();

    let mut workers = Vec::new();
    for worker_id in WORKER_IDS {
        let (normal_runs, poison_runs) = (normal_runs.clone(), poison_runs.clone());
        let (calls, behaviours) = (calls.clone(), behaviours.clone());
        let worker = Worker::builder(&db.client)
            .id(worker_id)
            .queues(SERVED_QUEUES)
            .rescue_interval(Duration::from_millis(100))
            .lease(LEASE)
            .default_timeout(Duration::from_secs(5))
            .cancel_grace(Duration::from_millis(200))
            // The pruner too meets the rows (those finished long ago go).
            .prune_interval(Duration::from_millis(500))
            .register_fn("normal", move |ctx, _args| {
                let runs = normal_runs.clone();
                async move {
                    *runs.lock().unwrap().entry(ctx.job_id()).or_default() += 1;
                    Ok(json!("normal"))
                }
            })
            .register_fn("poison", move |ctx, args| {
                let (runs, calls) = (poison_runs.clone(), calls.clone());
                let behaviour = behaviours
                    .get(&ctx.job_id())
                    .copied()
                    .unwrap_or_else(|| behaviour_of(ctx.job_id()));
                async move {
                    let run = {
                        let mut runs = runs.lock().unwrap();
                        let run = runs.entry(ctx.job_id()).or_default();
                        *run += 1;
                        *run
                    };
                    calls
                        .lock()
                        .unwrap()
                        .push((Instant::now(), ctx.job_id(), ctx.attempt()));
                    match behaviour {
                        Behaviour::Fail => Err(TaskError::fail("poison says no")),
                        Behaviour::RetryOnce if run == 1 => {
                            Err(TaskError::retry("poison asks to retry"))
                        }
                        _ => Ok(args),
                    }
                }
            })
            .start()
            .expect("start a worker");
        workers.push(worker);
    }

    // Poison arrives among normal jobs, in a seeded order.
    let mut accepted: BTreeMap<Uuid, (String, bool)> = BTreeMap::new();
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    let mut normal_ids = Vec::new();
    let mut next_poison = poison.iter();
    let (mut poison_left, mut normal_left) = (rows, NORMAL_JOBS);
    while poison_left + normal_left > 0 {
        if rng.below((poison_left + normal_left) as u64) < poison_left as u64 {
            poison_left -= 1;
            let row = next_poison.next().expect("a row left");
            match sqlx::raw_sql(sqlx::AssertSqlSafe(format!("{} {RETURNING}", row.sql)))
                .fetch_one(&db.pool)
                .await
            {
                Ok(inserted) => {
                    accepted.insert(row.id, (inserted.get("state"), inserted.get("prunable")));
                }
                Err(error) => bump(&mut counts, refusal(&error, &row.sql)),
            }
        } else {
            normal_left -= 1;
            let n = normal_ids.len();
            let job = NewJob::new("normal", json!({ "n": n }));
            normal_ids.push(db.client.enqueue(job).await.expect("enqueue").id());
        }
    }
    let inserted_at = began.elapsed();
    let normal: HashSet<Uuid> = normal_ids.iter().copied().collect();
    let mut violations: Vec<String> = Vec::new();
    let sql_of = |id: &Uuid| -> String {
        by_id
            .get(id)
            .map_or("(a job spawned by a follow-up)".to_string(), |i| {
                poison[*i].short_sql()
            })
    };

    // Property 1 and 2: wait until every normal job succeeded and every
    // other row is in a defined state (like common::eventually, but on
    // timeout the rows still undefined are reported and the other
    // properties are still checked).
    let deadline = tokio::time::Instant::now() + SETTLE;
    let mut report_at = tokio::time::Instant::now() + Duration::from_secs(10);
    let verdicts = loop {
        let seen = snapshot(&db.pool).await;
        let normal_done = normal_ids
            .iter()
            .all(|id| seen.get(id).is_some_and(|s| s.state == "success"));
        let verdicts = judge(&seen, &accepted, &normal);
        let settled = verdicts.values().all(Result::is_ok);
        if normal_done && settled {
            break verdicts;
        }
        if tokio::time::Instant::now() >= report_at {
            report_at += Duration::from_secs(10);
            let waiting: Vec<String> = verdicts
                .iter()
                .filter_map(|(id, v)| {
                    let why = v.as_ref().err()?;
                    Some(format!("{id}: {why}: {}", sql_of(id)))
                })
                .collect();
            eprintln!(
                "poison: after {:.0?}, still waiting for {} rows (normal jobs done: \
                 {normal_done}): {waiting:?}",
                began.elapsed(),
                waiting.len()
            );
        }
        if tokio::time::Instant::now() >= deadline {
            if !normal_done {
                let stuck: Vec<String> = normal_ids
                    .iter()
                    .filter_map(|id| {
                        let state = seen.get(id).map_or("gone", |s| s.state.as_str());
                        (state != "success").then(|| format!("{id} {state}"))
                    })
                    .collect();
                violations.push(format!(
                    "after {SETTLE:?}, {} normal jobs have not succeeded: {:?}",
                    stuck.len(),
                    &stuck[..stuck.len().min(10)]
                ));
            }
            for (id, verdict) in &verdicts {
                if let Err(why) = verdict {
                    let runs = poison_runs.lock().unwrap().get(id).copied().unwrap_or(0);
                    violations.push(format!(
                        "after {SETTLE:?}, row {id} is not in a defined state ({why}; the poison \
                         handler ran it {runs} times): {}",
                        sql_of(id)
                    ));
                }
            }
            break verdicts;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let settled_at = began.elapsed();
    for verdict in verdicts.values() {
        match verdict {
            Ok(class) => bump(&mut counts, class.clone()),
            Err(why) => bump(&mut counts, format!("UNDEFINED: {why}")),
        }
    }

    // Property 3: no background task panicked, the workers run, and they
    // shut down cleanly.
    let mut undecodable = 0;
    let mut leases_lost = 0;
    for worker in workers {
        let health = worker.health();
        let id = worker.id().to_string();
        if !health.running {
            violations.push(format!("worker {id} is not running before shutdown"));
        }
        if !health.restarts.is_empty() {
            violations.push(format!(
                "worker {id} restarted background tasks {:?} after a panic: {:?}",
                health.restarts, health.last_panic
            ));
        }
        undecodable += health.undecodable_jobs;
        leases_lost += health.leases_lost;
        if let Err(error) = worker.shutdown(WAIT).await {
            violations.push(format!("worker {id} did not shut down cleanly: {error}"));
        }
    }
    let (stalls, longest_tick) = probe.stop();
    // No outage here: a worker that keeps its leases renewed loses none
    // (README, "Never concurrently with itself").
    if leases_lost > 0 {
        violations.push(format!(
            "the workers lost {leases_lost} leases without any outage"
        ));
    }
    for (from, gap) in &stalls {
        // Nothing runs while the runtime is blocked, and the probe ticks
        // every 20 ms: the block began right after one of the handler
        // calls that returned around `from` (most suspicious first).
        let mut near: Vec<(Instant, Uuid, u32)> = calls
            .lock()
            .unwrap()
            .iter()
            .filter(|(at, _, _)| {
                *at + Duration::from_millis(100) >= *from
                    && *at <= *from + Duration::from_millis(100)
            })
            .copied()
            .collect();
        near.sort_by_key(|(_, _, attempt)| std::cmp::Reverse(*attempt));
        let near: Vec<String> = near
            .iter()
            .take(5)
            .map(|(_, id, attempt)| format!("{id} (attempt {attempt}): {}", sql_of(id)))
            .collect();
        violations.push(format!(
            "the runtime the workers run on was busy for {gap:.1?} without a break (a lease is \
             {LEASE:?}); poison handler calls that returned just before: {near:#?}"
        ));
    }
    let started: Vec<(Uuid, String)> =
        sqlx::query_as("SELECT id, task FROM conveyor.jobs WHERE state = 'started'")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    for (id, task) in &started {
        violations.push(format!(
            "{task} job {id} is still started after a graceful shutdown: {}",
            if normal.contains(id) {
                "(a normal job)".to_string()
            } else {
                sql_of(id)
            }
        ));
    }

    // Property 1, after the fact: each normal job succeeded on its first
    // attempt and its handler ran once.
    let states: Vec<(Uuid, String, i32)> =
        sqlx::query_as("SELECT id, state, attempt FROM conveyor.jobs WHERE id = ANY($1)")
            .bind(&normal_ids)
            .fetch_all(&db.pool)
            .await
            .unwrap();
    let normal_rows: HashMap<Uuid, (String, i32)> =
        states.into_iter().map(|(id, s, a)| (id, (s, a))).collect();
    let twice: Vec<String> = {
        let runs = normal_runs.lock().unwrap();
        normal_ids
            .iter()
            .filter_map(|id| {
                let row = normal_rows.get(id);
                let ran = runs.get(id).copied().unwrap_or(0);
                (row.map(|(s, a)| (s.as_str(), *a)) != Some(("success", 1)) || ran != 1)
                    .then(|| format!("{id}: (state, attempt) {row:?}, ran {ran} times"))
            })
            .collect()
    };
    if !twice.is_empty() {
        violations.push(format!(
            "{} normal jobs did not succeed on attempt 1 with their handler run once: {:#?}",
            twice.len(),
            &twice[..twice.len().min(5)]
        ));
    }

    // Property 4: the readers do not panic on what was accepted. A row
    // whose JSON is nested deeper than serde_json's limit (128) or holds a
    // number no f64 holds (1e400) cannot be decoded: list_jobs then fails
    // as a whole and job(id) for that row fails, with Err. That is
    // acceptable; a panic is not.
    let client = db.client.clone();
    match no_panic(async move {
        let listed = client
            .list_jobs(&JobFilter {
                limit: 1000,
                ..Default::default()
            })
            .await?;
        for job in &listed {
            serde_json::to_string_pretty(&job.to_json()).expect("a job's JSON prints");
        }
        Ok::<usize, conveyor::Error>(listed.len())
    })
    .await
    {
        Ok(Ok(n)) => bump(&mut counts, format!("readers: list_jobs Ok ({n} jobs)")),
        Ok(Err(_)) => bump(
            &mut counts,
            "readers: list_jobs Err (a row cannot be decoded)",
        ),
        Err(panic) => violations.push(format!("list_jobs panicked: {panic}")),
    }
    let client = db.client.clone();
    if let Err(panic) = no_panic(async move { client.queue_stats().await.map(|s| s.len()) }).await {
        violations.push(format!("queue_stats panicked: {panic}"));
    }
    for id in accepted.keys() {
        let (client, id) = (db.client.clone(), *id);
        match no_panic(async move {
            let job = client.job(id).await?;
            if let Some(job) = &job {
                serde_json::to_string_pretty(&job.to_json()).expect("a job's JSON prints");
            }
            Ok::<bool, conveyor::Error>(job.is_some())
        })
        .await
        {
            Ok(Ok(true)) => bump(&mut counts, "readers: job(id) Ok"),
            Ok(Ok(false)) => bump(&mut counts, "readers: job(id) Ok(None) (pruned)"),
            Ok(Err(_)) => bump(&mut counts, "readers: job(id) Err (cannot be decoded)"),
            Err(panic) => violations.push(format!(
                "client.job({id}) panicked: {panic}: {}",
                sql_of(&id)
            )),
        }
    }

    // The dashboard's API (what its pages read) and a metrics scrape, over
    // the same rows: an answer for every request (an error status for a row
    // that cannot be decoded is acceptable), never a panic.
    let router = conveyor::dashboard::router(
        db.client.clone(),
        conveyor::dashboard::DashboardConfig::new(),
    );
    let mut uris: Vec<(Option<Uuid>, String)> = [
        "/api/overview",
        "/api/stats",
        "/api/workers",
        "/api/workflows",
        "/api/periodic",
    ]
    .iter()
    .map(|uri| (None, uri.to_string()))
    .collect();
    for state in [
        "scheduled",
        "pending",
        "started",
        "retry",
        "success",
        "failure",
        "cancelled",
    ] {
        uris.push((None, format!("/api/jobs?state={state}&limit=1000")));
    }
    for id in accepted.keys() {
        uris.push((Some(*id), format!("/api/jobs/{id}")));
        let prefix = &id.to_string()[..8];
        uris.push((Some(*id), format!("/api/search?id={prefix}")));
    }
    for (id, uri) in uris {
        let router = router.clone();
        let request = axum::http::Request::get(&uri)
            .body(axum::body::Body::empty())
            .unwrap();
        match no_panic(async move { tower::ServiceExt::oneshot(router, request).await }).await {
            Ok(Ok(reply)) if reply.status().is_success() => {
                bump(&mut counts, "readers: dashboard API 2xx")
            }
            Ok(Ok(reply)) => bump(
                &mut counts,
                format!("readers: dashboard API {}", reply.status().as_u16()),
            ),
            Ok(Err(never)) => match never {},
            Err(panic) => violations.push(format!(
                "dashboard GET {uri} panicked: {panic}: {}",
                id.map_or_else(|| "(any row)".to_string(), |id| sql_of(&id))
            )),
        }
    }
    let client = db.client.clone();
    match no_panic(async move { conveyor::Metrics::new()?.render(&client).await }).await {
        Ok(Ok(_)) => bump(&mut counts, "readers: metrics scrape Ok"),
        Ok(Err(e)) => violations.push(format!("the metrics scrape failed: {e}")),
        Err(panic) => violations.push(format!("the metrics scrape panicked: {panic}")),
    }

    // The `conveyor` command, which prints what those readers return (a
    // table for people, JSON for scripts): it must not panic either.
    let url = db.url();
    // Each row alone through `jobs list` too (the table of many jobs): the
    // page that ends just below the next id holds only it.
    let all_ids: Vec<Uuid> = sqlx::query_scalar("SELECT id FROM conveyor.jobs ORDER BY id")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    let strings = |args: &[&str]| -> Vec<String> { args.iter().map(|a| a.to_string()).collect() };
    let mut commands: Vec<(Option<Uuid>, String, Vec<String>)> = Vec::new();
    for args in [
        &["stats"][..],
        &["jobs", "list", "--limit", "1000"],
        &["--json", "jobs", "list", "--limit", "1000"],
    ] {
        commands.push((None, args.join(" "), strings(args)));
    }
    for id in accepted.keys() {
        let id_text = id.to_string();
        for args in [
            &["jobs", "show", &id_text][..],
            &["--json", "jobs", "show", &id_text],
        ] {
            let label = args.join(" ").replace(&id_text, "<id>");
            commands.push((Some(*id), label, strings(args)));
        }
        if all_ids.binary_search(id).is_ok() {
            let mut args = strings(&["jobs", "list", "--limit", "1"]);
            if let Some(next) = all_ids.iter().find(|other| *other > id) {
                args.extend(strings(&["--before", &next.to_string()]));
            }
            let label = "jobs list --limit 1 --before <the next id>".to_string();
            commands.push((Some(*id), label, args));
        }
    }
    // Panics by command and message: the rows behind each.
    let mut cli_panics: BTreeMap<(String, String), Vec<Option<Uuid>>> = BTreeMap::new();
    let mut running = tokio::task::JoinSet::new();
    let mut commands = commands.into_iter();
    loop {
        while running.len() < 8 {
            let Some((id, label, args)) = commands.next() else {
                break;
            };
            let url = url.clone();
            running.spawn_blocking(move || {
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                (id, label, cli(&url, &args))
            });
        }
        let Some(joined) = running.join_next().await else {
            break;
        };
        let (id, label, outcome) = joined.expect("run the command");
        match outcome {
            Ok(()) => bump(&mut counts, "readers: conveyor command did not panic"),
            Err(panic) => {
                bump(&mut counts, "readers: conveyor command PANICKED");
                cli_panics.entry((label, panic)).or_default().push(id);
            }
        }
    }
    for ((command, panic), ids) in &cli_panics {
        // The shortest row that makes it panic is the best reproduction.
        let mut rows: Vec<String> = ids.iter().flatten().map(&sql_of).collect();
        rows.sort_by_key(String::len);
        violations.push(format!(
            "`conveyor {command}` panicked {} times at {panic}; the shortest row: {}",
            ids.len(),
            rows.first().map_or("(any)", String::as_str)
        ));
    }

    let total_runs: u32 = poison_runs.lock().unwrap().values().sum();
    let most = poison_runs
        .lock()
        .unwrap()
        .values()
        .copied()
        .max()
        .unwrap_or(0);
    eprintln!(
        "poison: seed {seed}: {rows} rows, {} accepted, {} normal jobs; inserted in {inserted_at:.1?}, \
         settled in {settled_at:.1?}, all checked in {:.1?}; poison handler ran {total_runs} times \
         (at most {most} for one job); {undecodable} undecodable claimed rows failed; \
         longest the runtime ran between two 20 ms ticks: {:.1?}",
        accepted.len(),
        normal_ids.len(),
        began.elapsed(),
        longest_tick
    );
    for (class, n) in &counts {
        eprintln!("poison: {n:>5}  {class}");
    }
    assert!(
        violations.is_empty(),
        "seed {seed} (replay: CONVEYOR_POISON_SEED={seed}): {} violations:\n- {}",
        violations.len(),
        violations.join("\n- ")
    );
}

/// The smallest reproduction of the two defects the property test above
/// finds on every run: a row written with a huge attempt count. Its retry
/// backoff (`conveyor::fibonacci_backoff`) loops once per attempt, on the
/// worker's runtime (2^31 rounds: about 18 s in a debug build, 0.5 s in a
/// release one), so heartbeats, rescues and every other job wait, leases
/// lapse and other jobs run twice; and `conveyor jobs show` overflows on
/// `max_retries + 1`.
#[tokio::test]
async fn a_row_with_a_huge_attempt_count_neither_blocks_the_worker_nor_breaks_the_cli() {
    let db = TestDb::new().await;
    let probe = StallProbe::start();
    let runs = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let r = runs.clone();
    let worker = Worker::builder(&db.client)
        .lease(LEASE)
        .register_fn("poison", move |_, _| {
            r.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            async move { Err::<serde_json::Value, _>(TaskError::retry("poison asks to retry")) }
        })
        .start()
        .unwrap();
    let id: Uuid = sqlx::query_scalar(
        "INSERT INTO conveyor.jobs (task, attempt, max_retries)
         VALUES ('poison', 2147483646, 2147483647) RETURNING id",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    // The retry is recorded (its backoff saturates: a week); or, if the
    // worker lost the lease meanwhile, the job ran again.
    crate::common::eventually(SETTLE, "the retry recorded, or a second run", || async {
        let state: String = sqlx::query_scalar("SELECT state FROM conveyor.jobs WHERE id = $1")
            .bind(id)
            .fetch_one(&db.pool)
            .await
            .unwrap();
        (state == "retry" || runs.load(std::sync::atomic::Ordering::SeqCst) > 1).then_some(())
    })
    .await;
    let (_, longest) = probe.stop();
    let shown = cli(&db.url(), &["jobs", "show", &id.to_string()]);
    assert!(worker.health().restarts.is_empty());
    worker.shutdown(WAIT).await.unwrap();
    let mut failures = Vec::new();
    if longest >= STALL {
        failures.push(format!(
            "the retry of attempt 2147483647 kept the worker's runtime busy for {longest:.1?} \
             without a break (a lease is {LEASE:?})"
        ));
    }
    if let Err(panic) = shown {
        failures.push(format!("`conveyor jobs show {id}` panicked at {panic}"));
    }
    assert!(failures.is_empty(), "{failures:#?}");
}
