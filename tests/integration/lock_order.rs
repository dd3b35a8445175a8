//! Deadlocks between statements that lock job rows in batches
//! (docs/decisions/2026-11-25-lock-order.md). A worker renews the leases of
//! every job it holds (`sql/lease/heartbeat.sql`, leases sorted by id) while
//! its completer records the outcomes of some of the same jobs
//! (`sql/outcome/complete.sql`, in the order they finished). Each statement
//! locks its rows in the order its plan meets them: the id order of an
//! index scan, the order of the input array when the planner hashes the
//! table and probes it with the array, or the rows' order on disk. Two
//! statements locking overlapping rows in different orders can each wait
//! for the other, and PostgreSQL ends one with a deadlock (40P01) after
//! `deadlock_timeout` (a second by default). The claim and the outcome
//! batch (the hot path) still lock in their plan's order; every statement
//! that can meet their rows never waits for a row lock (the heartbeat, the
//! dashboard's bulk cancel, `delete_jobs`: SKIP LOCKED), or waits holding
//! no other job row.
//!
//! The statements are replayed from the library's own files, with the
//! parameters the library passes (`src/db/outcome.rs`), on two connections
//! of the test's database.

use sqlx::pool::PoolConnection;
use sqlx::{Connection, PgConnection, PgPool, Postgres, Row};
use uuid::Uuid;

use crate::common::{TestDb, WAIT};

const HEARTBEAT: &str = include_str!("../../sql/lease/heartbeat.sql");
const COMPLETE: &str = include_str!("../../sql/outcome/complete.sql");
const AFTER_FINISH: &str = include_str!("../../sql/workflow/call_after_finish.sql");

/// Rounds at most: each renews the leases of `2 * BATCH` fresh jobs while
/// the outcomes of `BATCH` of them are recorded.
const ROUNDS: usize = 30;
/// Outcomes per batch: past about 200 the planner hashes the jobs and
/// probes them with the outcomes (input order); below, it walks the
/// primary key (id order). Both sizes are tried.
const BATCHES: [usize; 2] = [300, 120];

/// A job held under a claim: id and lease token.
type Lease = (Uuid, i64);

/// Deadlocks PostgreSQL counted in this database (each backend of the test
/// flushes its counters first, see [`flush_stats`]).
async fn deadlocks(pool: &PgPool) -> i64 {
    sqlx::query_scalar(
        "SELECT coalesce(sum(deadlocks), 0)::bigint FROM pg_stat_database
         WHERE datname = current_database()",
    )
    .fetch_one(pool)
    .await
    .expect("pg_stat_database")
}

/// Makes `conn`'s backend write its statistics (deadlocks among them) at
/// the end of this statement instead of within the next second or so.
async fn flush_stats(conn: &mut PgConnection) {
    sqlx::query("SELECT pg_stat_force_next_flush()")
        .execute(conn)
        .await
        .expect("flush statistics");
}

/// `heartbeat.sql` as `db::heartbeat` runs it (the worker sorts its
/// leases, `src/worker/heartbeat.rs`): the leases answered for (renewed or
/// busy), and how many were renewed.
async fn renew(
    conn: &mut PgConnection,
    leases: &[Lease],
) -> Result<(Vec<Lease>, usize), sqlx::Error> {
    let ids: Vec<Uuid> = leases.iter().map(|l| l.0).collect();
    let tokens: Vec<i64> = leases.iter().map(|l| l.1).collect();
    let rows = sqlx::query(HEARTBEAT)
        .persistent(false)
        .bind(&ids)
        .bind(&tokens)
        .bind(30.0_f64)
        .fetch_all(conn)
        .await?;
    let mut answered = Vec::with_capacity(rows.len());
    let mut renewed = 0;
    for row in &rows {
        answered.push((row.try_get("id")?, row.try_get("lease_token")?));
        // (No `busy` column: main's statement, which waited instead.)
        if !row.try_get::<bool, _>("busy").unwrap_or(false) {
            renewed += 1;
        }
    }
    Ok((answered, renewed))
}

/// `complete.sql` as `db::complete` runs it, outcomes in the order given
/// (success, failure and retry mixed); with `follow_up`, inside a
/// transaction followed by `call_after_finish.sql`, as the completer does for
/// jobs with follow-up work. Returns how many outcomes were written.
async fn record(
    conn: &mut PgConnection,
    outcomes: &[Lease],
    follow_up: bool,
) -> Result<usize, sqlx::Error> {
    let ids: Vec<Uuid> = outcomes.iter().map(|o| o.0).collect();
    let tokens: Vec<i64> = outcomes.iter().map(|o| o.1).collect();
    let states: Vec<&str> = (0..outcomes.len())
        .map(|i| match i % 10 {
            0 => "failure",
            1 => "retry",
            _ => "success",
        })
        .collect();
    let results: Vec<Option<serde_json::Value>> = states
        .iter()
        .map(|s| (*s == "success").then(|| serde_json::json!({"ok": true})))
        .collect();
    let errors: Vec<Option<&str>> = states
        .iter()
        .map(|s| (*s != "success").then_some("boom"))
        .collect();
    let retry_in: Vec<Option<f64>> = states
        .iter()
        .map(|s| (*s == "retry").then_some(60.0))
        .collect();
    let waits: Vec<Option<f64>> = vec![Some(1.0); outcomes.len()];
    let statement = sqlx::query(COMPLETE)
        .persistent(false)
        .bind(&ids)
        .bind(&tokens)
        .bind(&states)
        .bind(&results)
        .bind(&errors)
        .bind(&retry_in)
        .bind(&waits);
    let row = if follow_up {
        let mut tx = conn.begin().await?;
        let row = statement.fetch_one(&mut *tx).await?;
        let follow_ups: Vec<Uuid> = row.try_get("follow_ups")?;
        sqlx::query(AFTER_FINISH)
            .bind(&follow_ups)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        row
    } else {
        statement.fetch_one(conn).await?
    };
    let updated: Vec<Uuid> = row.try_get("updated")?;
    Ok(updated.len())
}

/// Started jobs with distinct lease tokens, inserted in descending id order
/// (so their order on disk is the reverse of their id order); returned in
/// that order.
async fn started_jobs(pool: &PgPool, n: usize) -> Vec<Lease> {
    let mut ids: Vec<Uuid> = (0..n).map(|_| Uuid::new_v4()).collect();
    ids.sort_unstable_by(|a, b| b.cmp(a));
    let leases: Vec<Lease> = ids.into_iter().zip(1_i64..).collect();
    let (ids, tokens): (Vec<Uuid>, Vec<i64>) = leases.iter().copied().unzip();
    sqlx::query(
        "INSERT INTO conveyor.jobs
             (id, queue, task, state, attempt, max_retries, lease_token, lease_expires_at,
              started_at, worker_id)
         SELECT id, 'default', 'work', 'started', 1, 3, token, now() + interval '1 hour',
                now(), 'lock-order'
         FROM unnest($1::uuid[], $2::bigint[]) WITH ORDINALITY AS t(id, token, n)
         ORDER BY n",
    )
    .bind(&ids)
    .bind(&tokens)
    .execute(pool)
    .await
    .expect("insert started jobs");
    // Plans as on a live queue, whose table autovacuum has analysed.
    sqlx::query("ANALYZE conveyor.jobs_unfinished")
        .execute(pool)
        .await
        .expect("analyze");
    leases
}

fn deadlocked(error: &sqlx::Error) -> bool {
    matches!(error, sqlx::Error::Database(e) if e.code().as_deref() == Some("40P01"))
}

/// A worker's lease renewal and its outcome batch over overlapping jobs, run
/// together round after round: no round may end in a deadlock. Before the
/// fix the first deadlock came within the first rounds (the outcomes arrive
/// out of id order, the renewal is sorted); the rounds stop at the first
/// few, each having cost a `deadlock_timeout`.
#[tokio::test]
async fn lease_renewals_and_outcome_batches_of_the_same_jobs_never_deadlock() {
    let db = TestDb::new().await;
    let sizes: Vec<usize> = (0..ROUNDS).map(|r| BATCHES[r % BATCHES.len()]).collect();
    let jobs = started_jobs(&db.pool, sizes.iter().map(|b| 2 * b).sum()).await;
    let mut renewer: PoolConnection<Postgres> = db.pool.acquire().await.unwrap();
    let mut recorder: PoolConnection<Postgres> = db.pool.acquire().await.unwrap();
    let counted_before = deadlocks(&db.pool).await;

    let (mut errors, mut rounds, mut renewed, mut written) = (Vec::new(), 0, 0, 0);
    let mut rest = &jobs[..];
    for (round, batch) in sizes.iter().enumerate() {
        let (held, next) = rest.split_at(2 * batch);
        rest = next;
        let mut leases = held.to_vec();
        leases.sort_unstable();
        // Every other held job finished, in the order they finished (here
        // the reverse of their ids, as they lie on disk).
        let outcomes: Vec<Lease> = held.iter().step_by(2).copied().collect();
        let (renewal, outcome) = tokio::join!(
            renew(&mut renewer, &leases),
            record(&mut recorder, &outcomes, round % 2 == 1),
        );
        rounds += 1;
        match renewal {
            Ok((answered, n)) => {
                renewed += n;
                // A lease missing from the answer is lost (its handler
                // would be cancelled): only a job whose outcome was just
                // written may be missing, never one merely locked.
                let missing = leases
                    .iter()
                    .filter(|l| !answered.contains(l) && !outcomes.contains(l))
                    .count();
                assert_eq!(missing, 0, "round {round}: leases reported lost");
            }
            Err(e) if deadlocked(&e) => errors.push(format!("round {round}, heartbeat: {e}")),
            Err(e) => panic!("round {round}: heartbeat failed: {e}"),
        }
        match outcome {
            Ok(n) => written += n,
            Err(e) if deadlocked(&e) => errors.push(format!("round {round}, complete: {e}")),
            Err(e) => panic!("round {round}: complete failed: {e}"),
        }
        if errors.len() >= 3 {
            break;
        }
    }
    flush_stats(&mut renewer).await;
    flush_stats(&mut recorder).await;
    let counted = deadlocks(&db.pool).await - counted_before;
    assert!(
        errors.is_empty() && counted == 0,
        "{} deadlock error(s) (40P01) in {rounds} round(s), {counted} counted in \
         pg_stat_database: {errors:#?}",
        errors.len()
    );
    // Each round renewed at least the leases no outcome touched (those of
    // jobs being recorded may be busy) and wrote every outcome.
    let expected: usize = sizes.iter().sum();
    assert_eq!(written, expected, "outcomes written");
    assert!(renewed >= expected, "leases renewed: {renewed}");
}

/// The dashboard's bulk cancel as `db::dashboard::cancel_jobs` runs it:
/// `dashboard_cancel_jobs.sql` over every id, then `call_cancel.sql` on each job
/// it answered busy (one another transaction held). Returns how many ids
/// were answered.
async fn cancel_jobs(conn: &mut PgConnection, ids: &[Uuid]) -> Result<usize, sqlx::Error> {
    const CANCEL_JOBS: &str = include_str!("../../sql/dashboard/dashboard_cancel_jobs.sql");
    const CANCEL: &str = include_str!("../../sql/inspect/call_cancel.sql");
    let rows = sqlx::query(CANCEL_JOBS)
        .persistent(false)
        .bind(ids)
        .fetch_all(&mut *conn)
        .await?;
    for row in &rows {
        // (No `busy` column: main's statement, which waited instead.)
        if row.try_get::<bool, _>("busy").unwrap_or(false) {
            let id: Uuid = row.try_get("id")?;
            sqlx::query(CANCEL).bind(id).execute(&mut *conn).await?;
        }
    }
    Ok(rows.len())
}

/// What an operator does to pending jobs while a worker claims them.
#[derive(Clone, Copy, Debug)]
enum Operator {
    /// The dashboard's bulk cancel ([`cancel_jobs`]).
    Cancel,
    /// `Client::delete_jobs`.
    Delete,
}

/// Round after round, a worker's claim (`conveyor_internal.claim_ready()`,
/// as the worker sends it) takes pending jobs while an operator cancels or deletes half of them.
/// On a small table the claim's UPDATE reads the jobs in disk order (a
/// sequential scan), here the reverse of their id order. No round may end
/// in a deadlock, and the operator's answer is what it was: every job asked
/// to be cancelled ends cancelled, or marked if the claim took it; every
/// job asked to be deleted is gone unless the claim took it, and the count
/// returned says how many are gone.
async fn claims_meeting(operator: Operator) {
    const JOBS: usize = 200;
    let db = TestDb::new().await;
    let mut claimer: PoolConnection<Postgres> = db.pool.acquire().await.unwrap();
    let mut canceller: PoolConnection<Postgres> = db.pool.acquire().await.unwrap();
    let counted_before = deadlocks(&db.pool).await;
    let (mut errors, mut rounds, mut claimed, mut acted) = (Vec::new(), 0, 0, 0);
    for round in 0..ROUNDS {
        // Pending jobs, on disk in the reverse of their id order; the
        // claimed ones of the round before are gone, so the table stays
        // small.
        let mut ids: Vec<Uuid> = (0..JOBS).map(|_| Uuid::new_v4()).collect();
        ids.sort_unstable_by(|a, b| b.cmp(a));
        sqlx::query(
            "INSERT INTO conveyor.jobs (id, queue, task)
             SELECT id, 'default', 'work' FROM unnest($1::uuid[]) WITH ORDINALITY AS t(id, n)
             ORDER BY n",
        )
        .bind(&ids)
        .execute(&db.pool)
        .await
        .expect("insert pending jobs");
        if round == 0 {
            sqlx::query("ANALYZE conveyor.jobs_unfinished")
                .execute(&db.pool)
                .await
                .expect("analyze");
        }
        let to_act: Vec<Uuid> = ids.iter().step_by(2).copied().collect();
        let tasks = vec!["work".to_string()];
        // What the worker sends (sql/claim/claim.sql).
        let claiming =
            sqlx::query("SELECT * FROM conveyor_internal.claim_ready($1, $2, $3, $4, $5, $6, $7)")
                .bind("default")
                .bind(&tasks)
                .bind(JOBS as i64)
                .bind(30.0_f64)
                .bind("lock-order")
                .bind(None::<i32>)
                .bind(None::<i32>)
                .fetch_all(&mut *claimer);
        let acting = async {
            match operator {
                Operator::Cancel => cancel_jobs(&mut canceller, &to_act).await,
                Operator::Delete => match db.client.delete_jobs(&to_act).await {
                    Ok(n) => Ok(usize::try_from(n).unwrap()),
                    Err(conveyor::Error::Database(e)) => Err(e),
                    Err(e) => panic!("round {round}: delete_jobs failed: {e}"),
                },
            }
        };
        let (claim_result, operator_result) = tokio::join!(claiming, acting);
        rounds += 1;
        match claim_result {
            Ok(rows) => claimed += rows.len(),
            Err(e) if deadlocked(&e) => errors.push(format!("round {round}, claim: {e}")),
            Err(e) => panic!("round {round}: claim failed: {e}"),
        }
        let answered = match operator_result {
            Ok(n) => Some(n),
            Err(e) if deadlocked(&e) => {
                errors.push(format!("round {round}, {operator:?}: {e}"));
                None
            }
            Err(e) => panic!("round {round}: {operator:?} failed: {e}"),
        };
        if errors.is_empty() {
            let (left, present): (i64, i64) = sqlx::query_as(
                "SELECT count(*) FILTER (WHERE NOT (state = 'cancelled' OR state = 'started'
                                                    AND cancel_requested_at IS NOT NULL)),
                        count(*)
                 FROM conveyor.jobs WHERE id = ANY($1)",
            )
            .bind(&to_act)
            .fetch_one(&db.pool)
            .await
            .expect("count the jobs acted on");
            let answered = answered.unwrap();
            match operator {
                Operator::Cancel => {
                    assert_eq!(left, 0, "round {round}: jobs neither cancelled nor marked");
                    assert_eq!(
                        answered,
                        to_act.len(),
                        "round {round}: every cancel answered"
                    );
                }
                Operator::Delete => {
                    let started: i64 = sqlx::query_scalar(
                        "SELECT count(*) FROM conveyor.jobs WHERE id = ANY($1) AND state = 'started'",
                    )
                    .bind(&to_act)
                    .fetch_one(&db.pool)
                    .await
                    .expect("count started jobs");
                    assert_eq!(
                        present, started,
                        "round {round}: jobs neither deleted nor claimed"
                    );
                    assert_eq!(
                        answered as i64,
                        to_act.len() as i64 - present,
                        "round {round}: the count deleted"
                    );
                }
            }
            acted += answered;
        }
        sqlx::query("DELETE FROM conveyor.jobs WHERE id = ANY($1)")
            .bind(&ids)
            .execute(&db.pool)
            .await
            .expect("clear the round's jobs");
        if errors.len() >= 3 {
            break;
        }
    }
    flush_stats(&mut claimer).await;
    flush_stats(&mut canceller).await;
    let counted = deadlocks(&db.pool).await - counted_before;
    assert!(
        errors.is_empty() && counted == 0,
        "{} deadlock error(s) (40P01) in {rounds} round(s), {counted} counted in \
         pg_stat_database: {errors:#?}",
        errors.len()
    );
    // (A round whose claim took every job first deletes nothing.)
    assert!(claimed > 0, "no claim took anything");
    if let Operator::Cancel = operator {
        assert!(acted > 0, "no cancel answered");
    }
}

/// The dashboard's bulk cancel (`conveyor.cancel()` on each id, every job
/// locked until the statement ends) against claims of the same jobs.
#[tokio::test]
async fn claims_and_bulk_cancels_of_the_same_jobs_never_deadlock() {
    claims_meeting(Operator::Cancel).await;
}

/// `Client::delete_jobs` (one DELETE over the ids) against claims of the
/// same jobs.
#[tokio::test]
async fn claims_and_deletes_of_the_same_jobs_never_deadlock() {
    claims_meeting(Operator::Delete).await;
}

/// The heartbeat never waits for a row lock: a job whose row another
/// transaction holds (here a `SELECT ... FOR UPDATE` left open on a second
/// connection; in a worker, its own outcome batch or an operator's cancel)
/// is skipped and answered as busy, not lost, while the other leases are
/// renewed at once. After the lock is gone the next beat renews it.
#[tokio::test]
async fn a_lease_renewal_skips_a_locked_job_and_answers_it_busy() {
    let db = TestDb::new().await;
    let mut leases = started_jobs(&db.pool, 3).await;
    leases.sort_unstable();
    let locked = leases[1];
    let expiry = |id: Uuid| {
        sqlx::query_scalar::<_, chrono::DateTime<chrono::Utc>>(
            "SELECT lease_expires_at FROM conveyor.jobs WHERE id = $1",
        )
        .bind(id)
        .fetch_one(&db.pool)
    };
    let before = [
        expiry(leases[0].0).await.unwrap(),
        expiry(locked.0).await.unwrap(),
        expiry(leases[2].0).await.unwrap(),
    ];

    let mut holder = PgConnection::connect(&db.url()).await.unwrap();
    let mut tx = holder.begin().await.unwrap();
    // As conveyor.cancel() does: the job's claim settled (its row now says
    // started), then its row locked.
    sqlx::query("SELECT conveyor_internal.settle_claims(ARRAY[$1])")
        .bind(locked.0)
        .execute(&mut *tx)
        .await
        .unwrap();
    sqlx::query("SELECT 1 FROM conveyor.job_rows WHERE id = $1 FOR UPDATE")
        .bind(locked.0)
        .execute(&mut *tx)
        .await
        .unwrap();

    // (A lease of two hours, so that a renewal moves every expiry.)
    let beat = |leases: Vec<Lease>| {
        let pool = db.pool.clone();
        async move {
            let ids: Vec<Uuid> = leases.iter().map(|l| l.0).collect();
            let tokens: Vec<i64> = leases.iter().map(|l| l.1).collect();
            let rows = sqlx::query(HEARTBEAT)
                .persistent(false)
                .bind(&ids)
                .bind(&tokens)
                .bind(7_200.0_f64)
                .fetch_all(&pool)
                .await
                .expect("heartbeat");
            let mut answer: Vec<(Uuid, i64, bool, bool)> = rows
                .iter()
                .map(|r| {
                    (
                        r.get("id"),
                        r.get("lease_token"),
                        r.get("busy"),
                        r.get("cancel"),
                    )
                })
                .collect();
            answer.sort_unstable();
            answer
        }
    };
    // (The lock is held until after this answer: a renewal that waited for
    // it would never answer, whatever the time allowed.)
    let answer = tokio::time::timeout(WAIT, beat(leases.clone()))
        .await
        .expect("the heartbeat waited for the locked row");
    assert_eq!(
        answer,
        leases
            .iter()
            .map(|&(id, token)| (id, token, id == locked.0, false))
            .collect::<Vec<_>>(),
        "two renewed, the locked one busy (none lost)"
    );
    assert!(expiry(leases[0].0).await.unwrap() > before[0], "renewed");
    assert!(expiry(leases[2].0).await.unwrap() > before[2], "renewed");
    tx.rollback().await.unwrap();
    assert_eq!(
        expiry(locked.0).await.unwrap(),
        before[1],
        "busy: not renewed"
    );

    // A lease that is gone is still lost, busy or not: the next beat, with
    // the lock released, renews the three and says nothing of a fourth.
    let mut asked = leases.clone();
    asked.push((Uuid::new_v4(), 99));
    let answer = beat(asked).await;
    assert_eq!(
        answer,
        leases
            .iter()
            .map(|&(id, token)| (id, token, false, false))
            .collect::<Vec<_>>()
    );
    assert!(expiry(locked.0).await.unwrap() > before[1], "renewed now");
}
