//! The ready ring (`conveyor.ready`, migration V3): claims stay cheap while
//! another session holds a snapshot, every change of a pending job keeps its
//! ring row in step, and rotation carries leftovers forward and gives way to
//! readers.

use serde_json::{Value, json};
use sqlx::{Connection, PgConnection, PgPool};

use conveyor::{NewJob, Worker, WorkerHandle};

use crate::common::{TestDb, WAIT, claimed_by_hand, count_jobs, eventually, shared_pages};

fn start(db: &TestDb) -> WorkerHandle {
    Worker::builder(&db.client)
        .concurrency(50)
        .register_fn("noop", |_ctx, _args| async { Ok(Value::Null) })
        .start()
        .unwrap()
}

/// A session holding the xmin horizon (a transaction with an id, left
/// open), as a forgotten psql session does; `ROLLBACK` on it ends the hold.
async fn hold_snapshot(db: &TestDb) -> PgConnection {
    let mut holder = PgConnection::connect(&db.url()).await.unwrap();
    sqlx::raw_sql("BEGIN; SELECT txid_current();")
        .execute(&mut holder)
        .await
        .unwrap();
    holder
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

/// Shared buffers the worker's real claim statement touches, by `EXPLAIN
/// (ANALYZE, BUFFERS)`, in a transaction rolled back: `claim.sql`, or with
/// `floors` (one key for every slot: `np`, `run_at`, `job_id`, taken in
/// second `second`) `claim_floors.sql`.
async fn claim_buffers(
    db: &TestDb,
    floors: Option<(i64, chrono::DateTime<chrono::Utc>, uuid::Uuid)>,
) -> (u64, String) {
    claim_buffers_limited(db, floors, None).await
}

/// [`claim_buffers`] for a queue whose global concurrency limit is
/// `limit` (the claim's `$6`).
async fn claim_buffers_limited(
    db: &TestDb,
    floors: Option<(i64, chrono::DateTime<chrono::Utc>, uuid::Uuid)>,
    limit: Option<i32>,
) -> (u64, String) {
    let (claim, claim_floors) = conveyor::testing::claim_statements(&db.client);
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
    let plan: Vec<String> = match floors {
        None => {
            sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                "PREPARE claim_now(text, text[], bigint, float8, text, int, int) AS {claim}"
            )))
            .execute(&mut *tx)
            .await
            .unwrap();
            sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                "EXPLAIN (ANALYZE, BUFFERS) EXECUTE claim_now('default', '{{noop}}', 10, 30, 'w', {limit}, NULL)"
            )))
            .fetch_all(&mut *tx)
            .await
            .unwrap()
        }
        Some((np, run_at, job_id)) => {
            let second = "floor(extract(epoch FROM statement_timestamp()))::bigint";
            sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                "PREPARE claim_now(text, text[], bigint, float8, text, int, int,
                                   bigint[], timestamptz[], uuid[], bigint[]) AS {claim_floors}"
            )))
            .execute(&mut *tx)
            .await
            .unwrap();
            sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                "EXPLAIN (ANALYZE, BUFFERS) EXECUTE claim_now('default', '{{noop}}', 10, 30, 'w', {limit}, NULL,
                     array_fill({np}::bigint, ARRAY[8]), array_fill('{run_at}'::timestamptz, ARRAY[8]),
                     array_fill('{job_id}'::uuid, ARRAY[8]),
                     array_fill({second}, ARRAY[8]))"
            )))
            .fetch_all(&mut *tx)
            .await
            .unwrap()
        }
    };
    tx.rollback().await.unwrap();
    let plan = plan.join("\n");
    // The top node's line counts every buffer below it.
    let buffers = plan.lines().find_map(shared_pages).unwrap_or(u64::MAX);
    (buffers, plan)
}

/// The pages a claim's plan read in the ready ring alone: the CTE that
/// picks the jobs (`picked` in claim.sql, `cand` in claim_floors.sql).
fn ring_pages(plan: &str) -> u64 {
    let mut lines = plan
        .lines()
        .skip_while(|l| !matches!(l.trim(), "CTE picked" | "CTE cand"));
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
    let (buffers, plan) = claim_buffers(&db, None).await;
    assert!(buffers < 300, "the claim touched {buffers} pages:\n{plan}");
    assert!(plan.contains("rows=1 "), "it claimed the one job:\n{plan}");
    // The horizon was held all along: VACUUM could not remove the old
    // versions of the jobs (the outcome leaves one each; the claim, which
    // writes a conveyor.claims row and not the job's, none: migration V12).
    // (Unfinished jobs live in conveyor.jobs_unfinished: migration V8.)
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
/// queue's claims hold (`conveyor_internal.live_leases`, migration V14). It
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
    sqlx::raw_sql(
        "INSERT INTO conveyor.claims
             (lease_token, queue, worker_id, started_at, lease_expires_at, job_ids, jobs_left)
         SELECT nextval('conveyor.lease_tokens'), 'default', 'w', now() - interval '10 minutes',
                now() - interval '9 minutes', '{}', 0
         FROM generate_series(1, 50000);
         DELETE FROM conveyor.claims;",
    )
    .execute(&db.pool)
    .await
    .unwrap();
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
    let (buffers, plan) = claim_buffers_limited(&db, None, Some(4)).await;
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
    // The rotator names the holder in a warning (src/db/ring_blocker.sql,
    // asked here for holders older than 0 s instead of 30).
    let reader_pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut reader)
        .await
        .unwrap();
    let blocker: Option<(i32, String, f64)> =
        sqlx::query_as(include_str!("../../src/db/ring_blocker.sql"))
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
    // (Restores and replication write the stored rows: migration V12.)
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

/// `pg_dump` locks every slot of the ring for its whole run, so none can be
/// emptied and the claims' dead entries stay. While such a holder is seen,
/// workers claim from each sealed slot after where they stopped
/// (`claim_floors.sql`): after 20,000 jobs, a claim that starts at the
/// heads walks every dead entry, one with floors reads a few pages.
#[tokio::test]
async fn while_a_dump_holds_the_ring_claims_start_after_their_floors() {
    let db = TestDb::new().await;
    let mut dump = PgConnection::connect(&db.url()).await.unwrap();
    sqlx::raw_sql(
        "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM conveyor.jobs; SELECT count(*) FROM conveyor.ready;",
    )
    .execute(&mut dump)
    .await
    .unwrap();
    let worker = start(&db);
    eventually(WAIT, "the worker sees the ring held", || async {
        worker.health().ring_held.then_some(())
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
    assert!(ring_bytes(&db.pool).await > 0, "no slot could be emptied");
    worker.shutdown(WAIT).await.unwrap();
    db.client
        .enqueue(NewJob::new("noop", json!({})))
        .await
        .unwrap();
    // Floors where the worker's would be: past every job done, in every
    // slot (the new job is in the current slot, which is always read from
    // its head).
    let (np, run_at, job_id): (i64, chrono::DateTime<chrono::Utc>, uuid::Uuid) = sqlx::query_as(
        "SELECT -(priority::bigint), run_at, id
             FROM conveyor.jobs WHERE state = 'success'
             ORDER BY -(priority::bigint) DESC, run_at DESC, id DESC LIMIT 1",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    // The current slot is always read from its head, and while the ring is
    // held it keeps the dead entries of every round it was current in (about
    // an eighth of them: storage.md, "Open points"). So measure both claims
    // in statements that begin while the smallest slot is current (each
    // claim's slot is its statement's start, in whole seconds: however long
    // the claim then takes): what is left is what the floors save on the
    // sealed slots.
    let smallest: i16 = sqlx::query_scalar(
        "SELECT substr(c.relname, 7)::smallint FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
         WHERE i.inhparent = 'conveyor.ready'::regclass
         ORDER BY pg_relation_size(i.inhrelid), c.relname LIMIT 1",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let (claim, claim_floors) = conveyor::testing::claim_statements(&db.client);
    let mut conn = PgConnection::connect(&db.url()).await.unwrap();
    for sql in [
        format!("PREPARE claim_now(text, text[], bigint, float8, text, int, int) AS {claim}"),
        format!(
            "PREPARE claim_floored(text, text[], bigint, float8, text, int, int,
                                   bigint[], timestamptz[], uuid[], bigint[]) AS {claim_floors}"
        ),
        // The plan of `statement` if this statement began in second `slot`
        // of the ring (conveyor_internal.ready_slot() reads the statement's
        // start), else nothing.
        "CREATE FUNCTION pg_temp.explain_in_slot(slot smallint, statement text)
         RETURNS SETOF text LANGUAGE plpgsql AS $$
         DECLARE line text;
         BEGIN
             IF conveyor_internal.ready_slot() <> slot THEN
                 RETURN;
             END IF;
             FOR line IN EXECUTE 'EXPLAIN (ANALYZE, BUFFERS) ' || statement LOOP
                 RETURN NEXT line;
             END LOOP;
         END $$"
            .to_string(),
    ] {
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
            .execute(&mut conn)
            .await
            .unwrap();
    }
    let heads = explain_in_slot(
        &mut conn,
        smallest,
        "EXECUTE claim_now('default', '{noop}', 10, 30, 'w', NULL, NULL)".to_string(),
    )
    .await;
    let second = "floor(extract(epoch FROM statement_timestamp()))::bigint";
    let plan = explain_in_slot(
        &mut conn,
        smallest,
        format!(
            "EXECUTE claim_floored('default', '{{noop}}', 10, 30, 'w', NULL, NULL,
                 array_fill({np}::bigint, ARRAY[8]), array_fill('{run_at}'::timestamptz, ARRAY[8]),
                 array_fill('{job_id}'::uuid, ARRAY[8]), array_fill({second}, ARRAY[8]))"
        ),
    )
    .await;
    let (heads, floored) = (ring_pages(&heads), ring_pages(&plan));
    eprintln!(
        "claim after 20,000 jobs with the ring held: {heads} ring pages from the heads, {floored} with floors"
    );
    assert!(plan.contains("rows=1 "), "it claimed the one job:\n{plan}");
    assert!(
        floored * 4 < heads,
        "with floors {floored} pages, from the heads {heads}:\n{plan}"
    );
    sqlx::raw_sql("ROLLBACK").execute(&mut dump).await.unwrap();
}

/// The plan of the prepared `statement` (`EXECUTE …`), run in a transaction
/// rolled back, by a statement that began while ring slot `slot` was current
/// (tried until one does: every 8 s, a slot is current for one second).
async fn explain_in_slot(conn: &mut PgConnection, slot: i16, statement: String) -> String {
    let deadline = tokio::time::Instant::now() + WAIT * 3;
    loop {
        let mut tx = conn.begin().await.unwrap();
        let plan: Vec<String> = sqlx::query_scalar("SELECT * FROM pg_temp.explain_in_slot($1, $2)")
            .bind(slot)
            .bind(&statement)
            .fetch_all(&mut *tx)
            .await
            .unwrap();
        tx.rollback().await.unwrap();
        if !plan.is_empty() {
            return plan.join("\n");
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no statement began in slot {slot}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
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
