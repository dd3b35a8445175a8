//! The ready ring (`conveyor.ready`): claims stay cheap while
//! another session holds a snapshot, every change of a pending job keeps its
//! ring row in step, and rotation carries leftovers forward and gives way to
//! readers.

use serde_json::{Value, json};
use sqlx::{Connection, PgConnection, PgPool};

use conveyor::{NewJob, Worker, WorkerHandle};

use crate::common::{
    TestDb, WAIT, claimed_by_hand, claims_ended_long_ago, count_jobs, eventually, hold_snapshot,
    shared_pages,
};

fn start(db: &TestDb) -> WorkerHandle {
    Worker::builder(&db.client)
        .concurrency(50)
        .register_fn("noop", |_ctx, _args| async { Ok(Value::Null) })
        .start()
        .unwrap()
}

/// Bytes in the ring's slot files (0 once every slot was emptied).
async fn ring_bytes(pool: &PgPool) -> i64 {
    sqlx::query_scalar(
        "SELECT coalesce(sum(pg_relation_size(i.inhrelid)), 0)::bigint FROM pg_inherits i
         WHERE i.inhparent = 'conveyor.ready'::regclass",
    )
    .fetch_one(pool)
    .await
    .unwrap()
}

/// The ring's rows: (job id, priority), in claim order.
async fn ring(pool: &PgPool) -> Vec<(uuid::Uuid, i32)> {
    sqlx::query_as(
        "SELECT job_id, priority FROM conveyor.ready ORDER BY priority DESC, run_at, job_id",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

/// Shared buffers the worker's real claim statement for `bank` touches, by
/// `EXPLAIN (ANALYZE, BUFFERS)`, in a transaction rolled back.
async fn claim_buffers(db: &TestDb, bank: usize) -> (u64, String) {
    claim_buffers_limited(db, bank, None).await
}

/// [`claim_buffers`] for a queue whose global concurrency limit is
/// `limit` (the claim's `$6`).
async fn claim_buffers_limited(db: &TestDb, bank: usize, limit: Option<i32>) -> (u64, String) {
    // The body `conveyor_internal.claim_ready()` has while `bank` is
    // current, as the schema's own function builds it
    // (sql/claim/claim_statement.sql), with its parameters $1-$7.
    let claim: String = sqlx::query_scalar("SELECT conveyor_internal.claim_statement($1::integer)")
        .bind(i32::try_from(bank).unwrap())
        .fetch_one(&db.pool)
        .await
        .expect("the claim statement");
    let mut conn = PgConnection::connect(&db.url()).await.unwrap();
    let mut tx = conn.begin().await.unwrap();
    if limit.is_some() {
        // The first call of the limit's count reads the catalogs (about 280
        // pages): a worker's connection pays that once.
        sqlx::query("SELECT conveyor_internal.live_leases('default')")
            .execute(&mut *tx)
            .await
            .unwrap();
    }
    let limit = limit.map_or("NULL".to_string(), |l| l.to_string());
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "PREPARE claim_now(text, text[], bigint, float8, text, int, int) AS {claim}"
    )))
    .execute(&mut *tx)
    .await
    .unwrap();
    let plan: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "EXPLAIN (ANALYZE, BUFFERS) EXECUTE claim_now('default', '{{noop}}', 10, 30, 'w', {limit}, NULL)"
    )))
    .fetch_all(&mut *tx)
    .await
    .unwrap();
    tx.rollback().await.unwrap();
    let plan = plan.join("\n");
    // The top node's line counts every buffer below it.
    let buffers = plan.lines().find_map(shared_pages).unwrap_or(u64::MAX);
    (buffers, plan)
}

/// The pages a claim's plan read in the ready ring alone: the CTE that
/// picks the jobs (`picked` in claim.sql).
fn ring_pages(plan: &str) -> u64 {
    let mut lines = plan.lines().skip_while(|l| l.trim() != "CTE picked");
    lines.find_map(shared_pages).unwrap_or(u64::MAX)
}

/// The failure of issue 16: while a session holds the xmin horizon, VACUUM
/// can remove nothing, and a claim that scans from the head of an index of
/// pending jobs walks the dead entry of every job claimed since. Through the
/// ring, the slots those jobs passed through are emptied by TRUNCATE, so a
/// claim after 20,000 jobs reads a handful of pages. (With the claim index
/// on `conveyor.jobs` of before, the same claim read about 20,000.)
#[tokio::test]
async fn claims_stay_cheap_while_a_snapshot_is_held() {
    let db = TestDb::new().await;
    let mut holder = hold_snapshot(&db).await;
    let worker = start(&db);
    for _ in 0..20 {
        let jobs = (0..1_000).map(|_| NewJob::new("noop", json!({})));
        db.client
            .enqueue_many(jobs.collect::<Vec<_>>())
            .await
            .unwrap();
    }
    // (Longer than WAIT: the whole suite shares two cores in CI.)
    eventually(WAIT * 3, "20,000 jobs done", || async {
        (count_jobs(&db.pool, "state = 'success'").await == 20_000).then_some(())
    })
    .await;
    eventually(WAIT, "every ring slot emptied", || async {
        (ring_bytes(&db.pool).await == 0).then_some(())
    })
    .await;
    worker.shutdown(WAIT).await.unwrap();
    db.client
        .enqueue(NewJob::new("noop", json!({})))
        .await
        .unwrap()
        .id();
    let (buffers, plan) = claim_buffers(&db, 0).await;
    assert!(buffers < 300, "the claim touched {buffers} pages:\n{plan}");
    assert!(plan.contains("rows=1 "), "it claimed the one job:\n{plan}");
    // The horizon was held all along: VACUUM could not remove the old
    // versions of the jobs (the outcome leaves one each; the claim, which
    // writes a conveyor.claims row and not the job's, none).
    // (Unfinished jobs live in conveyor.jobs_unfinished.)
    for sql in [
        "CREATE EXTENSION pgstattuple",
        "VACUUM conveyor.jobs_unfinished",
    ] {
        sqlx::raw_sql(sql).execute(&db.pool).await.unwrap();
    }
    let dead: i64 =
        sqlx::query_scalar("SELECT dead_tuple_count FROM pgstattuple('conveyor.jobs_unfinished')")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert!(dead >= 20_000, "{dead} dead versions");
    eprintln!(
        "claim after 20,000 jobs under a held snapshot: {buffers} pages; {dead} dead versions"
    );
    sqlx::raw_sql("ROLLBACK")
        .execute(&mut holder)
        .await
        .unwrap();
}

/// A claim from a queue with a global concurrency limit counts the jobs the
/// queue's claims hold (`conveyor_internal.live_leases`). It once
/// summed every `conveyor.claims` row of the queue, a sequential scan: under
/// a held snapshot each claim and count-down since left a version there,
/// and each limited claim read them all (bench S with a limited queue: pickup
/// p99 past 100 ms after 450 s of hold). It now reads the claims whose lease
/// is live, through an index. Here 50,000 claims made and ended under the
/// hold, their leases run out (made by hand, as if ten minutes ago), cost a
/// few pages; a claim whose lease has expired does not count, a live one
/// does.
#[tokio::test]
async fn a_limited_claim_reads_only_live_claims_while_a_snapshot_is_held() {
    let db = TestDb::new().await;
    let mut holder = hold_snapshot(&db).await;
    claims_ended_long_ago(&db, 50_000).await;
    // Two jobs to run; three held by a live claim; a claim whose lease ran
    // out (its worker gone, the rescuer not yet by) says it holds two more.
    db.client
        .enqueue_many((0..2).map(|_| NewJob::new("noop", json!({}))).collect())
        .await
        .unwrap();
    claimed_by_hand(&db, 3).await;
    sqlx::query(
        "INSERT INTO conveyor.claims
             (lease_token, queue, worker_id, started_at, lease_expires_at, job_ids, jobs_left)
         VALUES (nextval('conveyor.lease_tokens'), 'default', 'gone', now() - interval '2 minutes',
                 now() - interval '1 minute', '{}', 2)",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    // A limit of 4: one more may start (3 live), not none (3 + 2).
    let (buffers, plan) = claim_buffers_limited(&db, 0, Some(4)).await;
    // The top node's actual rows: the jobs claimed.
    let claimed = plan
        .lines()
        .next()
        .and_then(|l| l.split("(actual").nth(1))
        .and_then(|l| l.split("rows=").nth(1))
        .and_then(|l| l.split(' ').next())
        .and_then(|n| n.parse::<u64>().ok());
    assert_eq!(claimed, Some(1), "it claimed one job:\n{plan}");
    assert!(buffers < 100, "the claim touched {buffers} pages:\n{plan}");
    eprintln!("limited claim after 50,000 ended claims under a held snapshot: {buffers} pages");
    sqlx::raw_sql("ROLLBACK")
        .execute(&mut holder)
        .await
        .unwrap();
}

/// Every way a pending job changes outside a claim keeps its ring row right:
/// an UPDATE of its priority by hand, a DELETE, a hand-made state change into
/// and out of pending, a cancel, a re-queue; workers then claim by the new
/// order.
#[tokio::test]
async fn every_change_of_a_pending_job_keeps_its_ring_row() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let a = db
        .client
        .enqueue(NewJob::new("noop", json!({})))
        .await
        .unwrap()
        .id();
    let b = db
        .client
        .enqueue(NewJob::new("noop", json!({})))
        .await
        .unwrap()
        .id();
    let c = db
        .client
        .enqueue(NewJob::new("noop", json!({})))
        .await
        .unwrap()
        .id();
    let exec = |sql: &'static str, id: uuid::Uuid| async move {
        sqlx::query(sql).bind(id).execute(pool).await.unwrap();
    };
    exec("UPDATE conveyor.jobs SET priority = 5 WHERE id = $1", b).await;
    assert_eq!(ring(pool).await, vec![(b, 5), (a, 0), (c, 0)]);
    exec("DELETE FROM conveyor.jobs WHERE id = $1", a).await;
    db.client.cancel(c).await.unwrap();
    assert_eq!(ring(pool).await, vec![(b, 5)]);
    // A scheduled job made pending by hand; a pending one failed by hand.
    let d: uuid::Uuid = sqlx::query_scalar(
        "INSERT INTO conveyor.jobs (task, state, run_at) VALUES ('noop', 'scheduled', now() + interval '1 day')
         RETURNING id",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    assert_eq!(ring(pool).await, vec![(b, 5)]);
    exec(
        "UPDATE conveyor.jobs SET state = 'pending', run_at = now() WHERE id = $1",
        d,
    )
    .await;
    assert_eq!(ring(pool).await, vec![(b, 5), (d, 0)]);
    exec(
        "UPDATE conveyor.jobs SET state = 'failure', finished_at = now() WHERE id = $1",
        b,
    )
    .await;
    assert_eq!(ring(pool).await, vec![(d, 0)]);
    // The cancelled one re-queued.
    db.client.requeue(&[c]).await.unwrap();
    assert_eq!(ring(pool).await.len(), 2);

    let worker = start(&db);
    eventually(WAIT, "d and c run", || async {
        (count_jobs(pool, "state = 'success'").await == 2).then_some(())
    })
    .await;
    worker.shutdown(WAIT).await.unwrap();
    assert!(ring(pool).await.is_empty());
}

/// A job nobody claims (its queue has no worker) does not keep its slot from
/// being emptied: it is carried into the current slot, still pending, and
/// the slot it was in is truncated.
#[tokio::test]
async fn rotation_carries_unclaimed_jobs_forward() {
    let db = TestDb::new().await;
    let id = db
        .client
        .enqueue(NewJob::new("noop", json!({})).queue("nobody"))
        .await
        .unwrap()
        .id();
    let slot_of = || async {
        sqlx::query_scalar::<_, String>(
            "SELECT tableoid::regclass::text FROM conveyor.ready WHERE job_id = $1",
        )
        .bind(id)
        .fetch_one(&db.pool)
        .await
        .unwrap()
    };
    let first = slot_of().await;
    let worker = start(&db);
    eventually(WAIT, "the job carried to another slot", || async {
        let now = slot_of().await;
        (now != first).then_some(())
    })
    .await;
    let size: i64 = sqlx::query_scalar("SELECT pg_relation_size($1::regclass)")
        .bind(&first)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(size, 0, "{first} was truncated");
    worker.shutdown(WAIT).await.unwrap();
    assert_eq!(count_jobs(&db.pool, "state = 'pending'").await, 1);
}

/// Databases made from one template (or restored from one dump) share
/// their tables' oids, and `pg_locks` lists every database's locks: a long
/// transaction holding the ring in one database must not stop rotation in
/// another (it did: the rotator matched locks by oid alone).
#[tokio::test]
async fn a_reader_of_another_database_does_not_hold_this_ring() {
    let (db, other) = (TestDb::new().await, TestDb::new().await);
    let oid = "SELECT 'conveyor.ready_0'::regclass::oid::bigint";
    let (a, b): (i64, i64) = (
        sqlx::query_scalar(oid).fetch_one(&db.pool).await.unwrap(),
        sqlx::query_scalar(oid)
            .fetch_one(&other.pool)
            .await
            .unwrap(),
    );
    assert_eq!(a, b, "both made from the test template");
    let mut reader = PgConnection::connect(&other.url()).await.unwrap();
    sqlx::raw_sql("BEGIN; SELECT count(*) FROM conveyor.ready;")
        .execute(&mut reader)
        .await
        .unwrap();
    // Older than the rotator's one second.
    sqlx::raw_sql("SELECT pg_sleep(1.2)")
        .execute(&db.pool)
        .await
        .unwrap();
    let id = db
        .client
        .enqueue(NewJob::new("noop", json!({})).queue("nobody"))
        .await
        .unwrap()
        .id();
    let slot_of = || async {
        sqlx::query_scalar::<_, String>(
            "SELECT tableoid::regclass::text FROM conveyor.ready WHERE job_id = $1",
        )
        .bind(id)
        .fetch_one(&db.pool)
        .await
        .unwrap()
    };
    let first = slot_of().await;
    let worker = start(&db);
    eventually(WAIT, "the job carried to another slot", || async {
        (slot_of().await != first).then_some(())
    })
    .await;
    worker.shutdown(WAIT).await.unwrap();
    sqlx::raw_sql("ROLLBACK")
        .execute(&mut reader)
        .await
        .unwrap();
}

/// A session that read the ring and left its transaction open holds a lock
/// that TRUNCATE must wait for: the rotator gives up after 5 ms each time
/// (so claims never queue behind it for longer), jobs keep running, and the
/// slots are emptied once the reader lets go.
#[tokio::test]
async fn a_reader_holding_the_ring_delays_rotation_but_not_claims() {
    let db = TestDb::new().await;
    let mut reader = PgConnection::connect(&db.url()).await.unwrap();
    sqlx::raw_sql("BEGIN; SELECT count(*) FROM conveyor.ready;")
        .execute(&mut reader)
        .await
        .unwrap();
    let worker = start(&db);
    for _ in 0..5 {
        let jobs = (0..500).map(|_| NewJob::new("noop", json!({})));
        db.client
            .enqueue_many(jobs.collect::<Vec<_>>())
            .await
            .unwrap();
    }
    eventually(WAIT, "2,500 jobs done with the ring locked", || async {
        (count_jobs(&db.pool, "state = 'success'").await == 2_500).then_some(())
    })
    .await;
    assert!(ring_bytes(&db.pool).await > 0, "nothing could be truncated");
    // The rotator names the holder in a warning (sql/ring/ring_blocker.sql,
    // asked here for holders older than 0 s instead of 30).
    let reader_pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut reader)
        .await
        .unwrap();
    let blocker: Option<(i32, String, f64)> =
        sqlx::query_as(include_str!("../../sql/ring/ring_blocker.sql"))
            .bind(0.0_f64)
            .fetch_optional(&db.pool)
            .await
            .unwrap();
    assert_eq!(blocker.map(|b| b.0), Some(reader_pid));
    sqlx::raw_sql("ROLLBACK")
        .execute(&mut reader)
        .await
        .unwrap();
    eventually(WAIT, "every ring slot emptied", || async {
        (ring_bytes(&db.pool).await == 0).then_some(())
    })
    .await;
    worker.shutdown(WAIT).await.unwrap();
}

/// Rows written with triggers off (a restore with `--disable-triggers`,
/// logical replication) leave the ring out of step: `conveyor.rebuild_ready()`
/// adds the missing rows and drops those of jobs that are not pending.
#[tokio::test]
async fn rebuild_ready_repairs_rows_written_with_triggers_off() {
    let db = TestDb::new().await;
    let mut conn = PgConnection::connect(&db.url()).await.unwrap();
    sqlx::raw_sql("SET session_replication_role = replica")
        .execute(&mut conn)
        .await
        .unwrap();
    // (Restores and replication write the stored rows, conveyor.job_rows.)
    let restored: uuid::Uuid =
        sqlx::query_scalar("INSERT INTO conveyor.job_rows (task) VALUES ('noop') RETURNING id")
            .fetch_one(&mut conn)
            .await
            .unwrap();
    sqlx::query(
        "INSERT INTO conveyor.ready (slot, queue, priority, run_at, job_id, task)
         VALUES (0, 'default', 0, now(), gen_random_uuid(), 'noop')",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    assert_eq!(ring(&db.pool).await.len(), 1, "only the stray row");
    let added: i64 = sqlx::query_scalar("SELECT conveyor.rebuild_ready()")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(added, 1);
    assert_eq!(ring(&db.pool).await, vec![(restored, 0)]);
    let again: i64 = sqlx::query_scalar("SELECT conveyor.rebuild_ready()")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(again, 0, "nothing left to repair");
}

/// The ring's current bank (`conveyor.ready_bank`).
async fn bank(pool: &PgPool) -> i16 {
    sqlx::query_scalar("SELECT bank FROM conveyor.ready_bank")
        .fetch_one(pool)
        .await
        .unwrap()
}

/// `pg_dump` locks every slot of the ring for its whole run, so none could
/// be emptied: every claim walked the dead entries of every job claimed
/// since the dump began, and at 1,500 jobs/s the queue collapsed about 150 s
/// into a real dump (issue 31). A lock covers only the tables there when it
/// was taken: the ring moves to a new bank of slots, which the holder does
/// not hold and which is emptied as usual. After 20,000 jobs a claim reads
/// a handful of ring pages (on one bank, it walked the dead entries of all
/// 20,000), and once the holder is gone the ring goes back to bank 0 and
/// the other bank is dropped.
#[tokio::test]
async fn while_a_dump_holds_the_ring_claims_use_another_bank() {
    let db = TestDb::new().await;
    let mut dump = PgConnection::connect(&db.url()).await.unwrap();
    sqlx::raw_sql(
        "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM conveyor.jobs; SELECT count(*) FROM conveyor.ready;",
    )
    .execute(&mut dump)
    .await
    .unwrap();
    let worker = start(&db);
    eventually(WAIT, "the ring on another bank", || async {
        (bank(&db.pool).await != 0).then_some(())
    })
    .await;
    let held_by: Option<String> = sqlx::query_scalar("SELECT held_by FROM conveyor.ready_bank")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let dump_pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut dump)
        .await
        .unwrap();
    assert!(
        held_by
            .as_deref()
            .is_some_and(|h| h.starts_with(&format!("pid {dump_pid} "))),
        "held_by {held_by:?}, the dump is pid {dump_pid}"
    );
    eventually(WAIT, "the worker on the new bank", || async {
        let health = worker.health();
        (health.ring_bank == 1 && health.ring_held && !health.ring_stuck).then_some(())
    })
    .await;
    for _ in 0..20 {
        let jobs = (0..1_000).map(|_| NewJob::new("noop", json!({})));
        db.client
            .enqueue_many(jobs.collect::<Vec<_>>())
            .await
            .unwrap();
    }
    eventually(WAIT * 3, "20,000 jobs done", || async {
        (count_jobs(&db.pool, "state = 'success'").await == 20_000).then_some(())
    })
    .await;
    eventually(WAIT, "the new bank's slots emptied", || async {
        let bytes: i64 = sqlx::query_scalar(
            "SELECT coalesce(sum(pg_relation_size(i.inhrelid)), 0)::bigint FROM pg_inherits i
             JOIN pg_class c ON c.oid = i.inhrelid
             WHERE i.inhparent = 'conveyor.ready'::regclass AND c.relname IN
                 ('ready_8', 'ready_9', 'ready_10', 'ready_11', 'ready_12', 'ready_13', 'ready_14', 'ready_15')",
        )
        .fetch_one(&db.pool)
        .await
        .unwrap();
        (bytes == 0).then_some(())
    })
    .await;
    worker.shutdown(WAIT).await.unwrap();
    db.client
        .enqueue(NewJob::new("noop", json!({})))
        .await
        .unwrap();
    let (buffers, plan) = claim_buffers(&db, 1).await;
    assert!(plan.contains("rows=1 "), "it claimed the one job:\n{plan}");
    let pages = ring_pages(&plan);
    assert!(pages < 30, "the claim read {pages} ring pages:\n{plan}");
    eprintln!("claim after 20,000 jobs with the ring held: {pages} ring pages ({buffers} in all)");
    sqlx::raw_sql("ROLLBACK").execute(&mut dump).await.unwrap();
    // Back to bank 0 once nobody holds it; the other bank dropped once the
    // ring has left it (here at once, instead of after a minute).
    let (back, _): (i16, i32) = sqlx::query_as(
        "SELECT current_bank, emptied FROM conveyor_internal.rotate_ring(retire_after => '0')",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(back, 0);
    let slots: Vec<String> = eventually(WAIT, "the other bank dropped", || async {
        let _ = sqlx::query("SELECT FROM conveyor_internal.rotate_ring(retire_after => '0')")
            .execute(&db.pool)
            .await;
        let slots: Vec<String> = sqlx::query_scalar(
            "SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
             WHERE i.inhparent = 'conveyor.ready'::regclass ORDER BY 1",
        )
        .fetch_all(&db.pool)
        .await
        .unwrap();
        (slots.len() == 8).then_some(slots)
    })
    .await;
    assert_eq!(
        slots,
        (0..8).map(|k| format!("ready_{k}")).collect::<Vec<_>>()
    );
    let ids: Vec<uuid::Uuid> = sqlx::query_scalar("SELECT job_id FROM conveyor.ready")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(ids.len(), 1, "the job enqueued last is still runnable");
}

/// The bank of the ring row of the job enqueued now (its slot / 8).
async fn bank_of_new_job(db: &TestDb) -> i16 {
    let job = db
        .client
        .enqueue(NewJob::new("noop", json!({})))
        .await
        .unwrap();
    sqlx::query_scalar("SELECT (slot / 8)::int2 FROM conveyor.ready WHERE job_id = $1")
        .bind(job.id())
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

/// One pass of the ring's upkeep that counts any lock as a holder (no
/// one-second grace); returns the bank current after it.
async fn rotate_now(pool: &PgPool) -> i16 {
    sqlx::query_scalar("SELECT current_bank FROM conveyor_internal.rotate_ring(hold_age => '0')")
        .fetch_one(pool)
        .await
        .unwrap()
}

/// The current bank is a constant in `ready_slot()`'s body, so that an
/// insert pays no lookup (`define_ready_slot.sql`): it is rewritten when the
/// ring switches banks, kept across a migration run during a switch, and
/// put back in step with `conveyor.ready_bank` written by hand.
#[tokio::test]
async fn inserts_go_to_the_current_bank_across_switches_migrations_and_hand_edits() {
    let db = TestDb::new().await;
    assert_eq!(bank_of_new_job(&db).await, 0);
    let mut dump = PgConnection::connect(&db.url()).await.unwrap();
    sqlx::raw_sql("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM conveyor.ready;")
        .execute(&mut dump)
        .await
        .unwrap();
    assert_eq!(rotate_now(&db.pool).await, 1);
    assert_eq!(bank_of_new_job(&db).await, 1, "after the switch");
    conveyor::migrate(&db.pool).await.unwrap();
    assert_eq!(bank_of_new_job(&db).await, 1, "after a migration");

    // By hand, with banks 0 and 1 held (else the next pass would move to a
    // lower bank): the next pass makes bank 2's tables and sends inserts
    // there.
    sqlx::raw_sql("SELECT count(*) FROM conveyor.ready")
        .execute(&mut dump)
        .await
        .unwrap();
    sqlx::query("UPDATE conveyor.ready_bank SET bank = 2")
        .execute(&db.pool)
        .await
        .unwrap();
    assert_eq!(rotate_now(&db.pool).await, 2);
    assert_eq!(bank_of_new_job(&db).await, 2, "after a hand edit");

    sqlx::raw_sql("ROLLBACK").execute(&mut dump).await.unwrap();
    assert_eq!(rotate_now(&db.pool).await, 0);
    assert_eq!(bank_of_new_job(&db).await, 0, "back on bank 0");
    let pending: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM conveyor.ready r JOIN conveyor.jobs j ON j.id = r.job_id",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(pending, 5, "every job enqueued has its ring row");
}

/// Ring tuples read so far (index entries and sequential reads of every
/// slot), as this connection's flushed statistics show them.
async fn ring_reads(conn: &mut PgConnection) -> (i64, i64) {
    sqlx::query("SELECT pg_stat_force_next_flush()")
        .execute(&mut *conn)
        .await
        .unwrap();
    sqlx::query("SELECT pg_stat_clear_snapshot()")
        .execute(&mut *conn)
        .await
        .unwrap();
    sqlx::query_as(
        "SELECT coalesce(sum(coalesce(idx_scan, 0) + seq_scan), 0)::bigint,
                coalesce(sum(coalesce(idx_tup_fetch, 0) + seq_tup_read), 0)::bigint
         FROM pg_stat_user_tables WHERE relid IN (
             SELECT inhrelid FROM pg_inherits WHERE inhparent = 'conveyor.ready'::regclass)",
    )
    .fetch_one(&mut *conn)
    .await
    .unwrap()
}

/// Cancelling or deleting one pending job finds its ring row through the
/// claim index (one entry read), not by reading its queue's whole backlog:
/// the index is on `-(priority::bigint)`, and a lookup by `priority` could
/// not use it past the queue (2,000 entries read here for one job).
#[tokio::test]
async fn a_pending_job_leaves_the_ring_without_reading_its_backlog() {
    let db = TestDb::new().await;
    let jobs: Vec<NewJob> = (0..2_000).map(|i| NewJob::new("noop", json!(i))).collect();
    let ids = db.client.enqueue_many(jobs).await.unwrap();
    sqlx::query("ANALYZE conveyor.ready")
        .execute(&db.pool)
        .await
        .unwrap();
    let mut conn = PgConnection::connect(&db.url()).await.unwrap();
    let (scans, read) = ring_reads(&mut conn).await;
    sqlx::query("DELETE FROM conveyor.jobs WHERE id = $1")
        .bind(ids[1_000].id())
        .execute(&mut conn)
        .await
        .unwrap();
    // Statistics reach the shared view asynchronously: wait for the scan.
    let deadline = tokio::time::Instant::now() + WAIT;
    let (scans_after, read_after) = loop {
        let now = ring_reads(&mut conn).await;
        if now.0 > scans {
            break now;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no ring scan counted"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert!(scans_after > scans);
    assert!(
        read_after - read <= 10,
        "deleting one pending job read {} ring entries",
        read_after - read
    );
    assert_eq!(ring(&db.pool).await.len(), 1_999);
}

/// A row left in a bank the ring has moved away from (a straggler: an
/// enqueue that computed its slot before the switch and committed after) is
/// out of the claims' sight until the rotation carries it into the current
/// bank; it then wakes the workers of its queue, as an enqueue does. Without
/// that, an idle worker saw it only after its safety interval (90 s).
#[tokio::test]
async fn a_row_carried_from_another_bank_wakes_its_queue() {
    let db = TestDb::new().await;
    let rotate = "SELECT current_bank, emptied FROM conveyor_internal.rotate_ring(hold_age => '0')";
    let mut reader = PgConnection::connect(&db.url()).await.unwrap();
    sqlx::raw_sql("BEGIN; SELECT count(*) FROM conveyor.ready;")
        .execute(&mut reader)
        .await
        .unwrap();
    let (now, _): (i16, i32) = sqlx::query_as(rotate).fetch_one(&db.pool).await.unwrap();
    assert_eq!(now, 1, "the ring left the held bank");
    let id = db
        .client
        .enqueue(NewJob::new("noop", json!({})).queue("late"))
        .await
        .unwrap()
        .id();
    // Its ring row, put back in the held bank by hand.
    sqlx::query(
        "WITH gone AS (DELETE FROM conveyor.ready WHERE job_id = $1 RETURNING *)
         INSERT INTO conveyor.ready (slot, queue, priority, run_at, job_id, task)
         SELECT 3, queue, priority, run_at, job_id, task FROM gone",
    )
    .bind(id)
    .execute(&db.pool)
    .await
    .unwrap();
    let mut listener = sqlx::postgres::PgListener::connect(&db.url())
        .await
        .unwrap();
    listener.listen("conveyor.job_ready").await.unwrap();
    sqlx::query(rotate).execute(&db.pool).await.unwrap();
    let note = tokio::time::timeout(WAIT, listener.recv())
        .await
        .expect("a job_ready notification")
        .unwrap();
    let payload: Value = serde_json::from_str(note.payload()).unwrap();
    assert_eq!(payload["queue"], "late");
    let slot: i16 = sqlx::query_scalar("SELECT slot FROM conveyor.ready WHERE job_id = $1")
        .bind(id)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(slot / 8, 1, "carried into the current bank");
    sqlx::raw_sql("ROLLBACK")
        .execute(&mut reader)
        .await
        .unwrap();
}

/// Every worker process calls the ring's upkeep a few times a second; a
/// fleet of them shares one pass per `min_gap`, timed by the sequence the
/// pass sets (`conveyor_internal.ring_pass_at_ms`). A last pass "in the
/// future" (a clock set back, a restore on another machine) does not stop
/// the upkeep.
#[tokio::test]
async fn the_ring_upkeep_runs_once_per_gap_whoever_calls_it() {
    let db = TestDb::new().await;
    // `held` is NULL when the call did no pass.
    let pass = |gap: &'static str| {
        let pool = db.pool.clone();
        async move {
            let held: Option<bool> = sqlx::query_scalar(
                "SELECT held FROM conveyor_internal.rotate_ring(min_gap => $1::interval)",
            )
            .bind(gap)
            .fetch_one(&pool)
            .await
            .unwrap();
            held.is_some()
        }
    };
    assert!(pass("1 hour").await, "the first call passes");
    assert!(
        !pass("1 hour").await,
        "a call within the gap returns at once"
    );
    assert!(pass("0").await, "no gap: every call passes");
    sqlx::query(
        "SELECT setval('conveyor_internal.ring_pass_at_ms',
                       (extract(epoch FROM now() + interval '1 hour') * 1000)::bigint)",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    assert!(pass("1 hour").await, "a pass in the future does not count");
    assert!(!pass("1 hour").await);
    // The workers' own call asks for the gap.
    let statement = include_str!("../../sql/ring/call_rotate_ring.sql");
    assert!(statement.contains("min_gap => '200 milliseconds'"));
}

/// Claims of a queue take turns, two at a time, on two empty tables they
/// lock (`conveyor_internal.define_ready_slot()` says why): while a session
/// holds both, a worker's claim waits for its turn and its job does not
/// start; once they are free it runs. A queue with a concurrency limit,
/// whose claims already take turns on its row, does not wait for them.
#[tokio::test]
async fn claims_of_a_queue_take_turns() {
    let db = TestDb::new().await;
    db.client.set_queue_limit("limited", Some(5)).await.unwrap();
    let mut turns = PgConnection::connect(&db.url()).await.unwrap();
    sqlx::raw_sql(
        "BEGIN;
         DO $$
         DECLARE
             q text;
         BEGIN
             FOREACH q IN ARRAY ARRAY['default', 'limited'] LOOP
                 EXECUTE format('LOCK TABLE conveyor_internal.claim_turn_%s,
                                            conveyor_internal.claim_turn_%s
                                 IN SHARE UPDATE EXCLUSIVE MODE',
                                (hashtext(q) & 15) * 2, (hashtext(q) & 15) * 2 + 1);
             END LOOP;
         END
         $$",
    )
    .execute(&mut turns)
    .await
    .unwrap();
    let waiting = db
        .client
        .enqueue(NewJob::new("noop", json!({})))
        .await
        .unwrap();
    let limited = db
        .client
        .enqueue(NewJob::new("noop", json!({})).queue("limited"))
        .await
        .unwrap();
    let worker = Worker::builder(&db.client)
        .queues(["limited", "default"])
        .concurrency(2)
        .register_fn("noop", |_ctx, _args| async { Ok(Value::Null) })
        .start()
        .unwrap();
    limited.wait(WAIT).await.unwrap();
    eventually(WAIT, "a claim waiting for its turn", || async {
        let waits: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
             WHERE l.locktype = 'relation' AND NOT l.granted
               AND c.relname LIKE 'claim\\_turn\\_%'",
        )
        .fetch_one(&db.pool)
        .await
        .unwrap();
        (waits > 0).then_some(())
    })
    .await;
    assert_eq!(
        waiting.job().await.unwrap().state,
        conveyor::JobState::Pending,
        "not claimed while both turns are taken"
    );
    sqlx::raw_sql("ROLLBACK").execute(&mut turns).await.unwrap();
    waiting.wait(WAIT).await.unwrap();
    worker.shutdown(WAIT).await.unwrap();
}

/// A claim waiting for its turn holds no snapshot: waiting inside the claim
/// statement, it kept the rows every other claim deleted meanwhile from
/// being removed, and with dozens of worker processes in line, claims
/// stepped over a growing heap of dead ring rows
/// (docs/decisions/2026-11-29-claim-turns-without-a-snapshot.md). Here
/// claims hold their turns while they wait on a lock this test holds on
/// `conveyor.claims`, and a third worker's claim waits for a turn.
#[tokio::test]
async fn a_claim_waiting_for_its_turn_holds_no_snapshot() {
    let db = TestDb::new().await;
    let jobs: Vec<NewJob> = (0..30)
        .map(|i| NewJob::new("noop", json!({ "i": i })))
        .collect();
    let handles = db.client.enqueue_many(jobs).await.unwrap();
    let mut blocker = PgConnection::connect(&db.url()).await.unwrap();
    sqlx::raw_sql("BEGIN; LOCK TABLE conveyor.claims IN SHARE MODE")
        .execute(&mut blocker)
        .await
        .unwrap();
    let blocker_pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut blocker)
        .await
        .unwrap();
    let workers: Vec<_> = (0..3)
        .map(|_| {
            Worker::builder(&db.client)
                .concurrency(2)
                .register_fn("noop", |_ctx, _args| async { Ok(Value::Null) })
                .start()
                .unwrap()
        })
        .collect();
    // Sessions waiting for a turn (a turn's table, or the advisory lock a
    // turn was before) that other sessions, not the blocker, hold: claims
    // waiting for a turn that blocked claims hold.
    let waiting_for_a_turn = eventually(WAIT, "a claim waiting for its turn", || async {
        let waiting: Vec<(Option<String>, String)> = sqlx::query_as(
            "SELECT a.backend_xmin::text, a.wait_event || ': ' || left(a.query, 120)
             FROM pg_stat_activity a
             WHERE a.datname = current_database()
               AND NOT $1 = ANY(pg_blocking_pids(a.pid))
               AND EXISTS (SELECT 1 FROM pg_locks l LEFT JOIN pg_class c ON c.oid = l.relation
                           WHERE l.pid = a.pid AND NOT l.granted
                             AND (l.locktype = 'advisory' OR c.relname LIKE 'claim\\_turn\\_%'))",
        )
        .bind(blocker_pid)
        .fetch_all(&db.pool)
        .await
        .unwrap();
        (!waiting.is_empty()).then_some(waiting)
    })
    .await;
    assert!(
        waiting_for_a_turn.iter().all(|(xmin, _)| xmin.is_none()),
        "a claim waiting for its turn holds a snapshot (backend_xmin, what it waits in): \
         {waiting_for_a_turn:?}"
    );
    sqlx::raw_sql("ROLLBACK")
        .execute(&mut blocker)
        .await
        .unwrap();
    for handle in handles {
        handle.wait(WAIT).await.unwrap();
    }
    for worker in workers {
        worker.shutdown(WAIT).await.unwrap();
    }
}
