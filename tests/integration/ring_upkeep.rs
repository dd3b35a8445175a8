//! The ready ring's upkeep (`conveyor_internal.rotate_ring()`) under
//! contention: it bounds its own lock waits, so that claims never queue long
//! behind it, and nothing else; a busy slot costs that slot, not the pass.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use sqlx::{Connection, PgConnection};

use crate::common::{TestDb, WAIT, eventually};

/// Whether a session of the cluster holds the lock with which PostgreSQL
/// orders notifying commits (taken at COMMIT by a transaction that sent a
/// notification, across all databases: an object lock on database 0).
const NOTIFY_LOCK_HELD: &str = "SELECT EXISTS (
    SELECT 1 FROM pg_locks
    WHERE locktype = 'object' AND database = 0 AND classid = 'pg_database'::regclass
      AND objid = 0 AND mode = 'AccessExclusiveLock' AND granted)";

/// A pass that switches banks notifies (`conveyor.ring`), so its COMMIT takes
/// the cluster's notify lock, which the notifying commits of every database
/// hold in turn. The pass bounded its lock waits to 5 ms for the rest of its
/// transaction, COMMIT included: while a busy database's commits held that
/// lock, the pass failed at COMMIT ("canceling statement due to lock
/// timeout") and its switch was lost (a CI run of the dump test, right
/// after its dump ended). Here two sessions commit notifications slowly
/// (`commit_delay`, 100 ms, is slept with the lock held) while a pass that
/// switches back to bank 0 commits.
#[tokio::test]
async fn a_pass_commits_while_other_commits_hold_the_notify_lock() {
    let db = TestDb::new().await;
    // Bank 1 by hand: the next pass makes its tables and, finding nobody
    // holding bank 0, switches back to it (and notifies).
    sqlx::query("UPDATE conveyor.ready_bank SET bank = 1")
        .execute(&db.pool)
        .await
        .unwrap();
    let mut pass = PgConnection::connect(&db.url()).await.unwrap();
    sqlx::raw_sql("BEGIN").execute(&mut pass).await.unwrap();
    let bank: i16 = sqlx::query_scalar("SELECT current_bank FROM conveyor_internal.rotate_ring()")
        .fetch_one(&mut pass)
        .await
        .unwrap();
    assert_eq!(bank, 0, "the pass switched back to bank 0");

    sqlx::query("CREATE TABLE slow_commits (n int)")
        .execute(&db.pool)
        .await
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let mut slow = Vec::new();
    for _ in 0..2 {
        let mut conn = PgConnection::connect(&db.url()).await.unwrap();
        let stop = stop.clone();
        slow.push(tokio::spawn(async move {
            // (Slept only when the commit has WAL to flush: hence the insert.)
            sqlx::raw_sql("SET commit_delay = 100000; SET commit_siblings = 0")
                .execute(&mut conn)
                .await
                .unwrap();
            while !stop.load(Ordering::Relaxed) {
                sqlx::raw_sql(
                    "BEGIN; INSERT INTO slow_commits VALUES (1); NOTIFY conveyor_test_slow; COMMIT",
                )
                .execute(&mut conn)
                .await
                .unwrap();
            }
        }));
    }
    eventually(WAIT, "a slow commit holding the notify lock", || async {
        let held: bool = sqlx::query_scalar(NOTIFY_LOCK_HELD)
            .fetch_one(&db.pool)
            .await
            .unwrap();
        held.then_some(())
    })
    .await;
    let committed = sqlx::raw_sql("COMMIT").execute(&mut pass).await;
    stop.store(true, Ordering::Relaxed);
    for task in slow {
        task.await.unwrap();
    }
    committed.expect("the pass commits once the notify lock is free");
    let bank: i16 = sqlx::query_scalar("SELECT bank FROM conveyor.ready_bank")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(bank, 0, "the switch was kept");
}

/// Whether a slot is empty is asked with `pg_relation_size()`, which takes
/// a lock as well. Asked outside the pass's per-slot error handling, a slot
/// someone held in ACCESS EXCLUSIVE mode (autovacuum truncating a slot's
/// end, a `LOCK TABLE` typed in psql) failed the whole pass after 5 ms, and
/// no other slot was emptied. Here, with bank 0 current, slot 8 (bank 1)
/// holds a row and slot 9 is locked: the pass carries the row into bank 0
/// and skips the locked slot. (Slots of another bank never take inserts, so
/// nothing here depends on the clock; `hold_age` keeps the locker from
/// counting as a long transaction on a slow machine.)
#[tokio::test]
async fn a_slot_locked_by_someone_else_costs_that_slot_not_the_pass() {
    let db = TestDb::new().await;
    sqlx::query("SELECT conveyor_internal.ready_bank_tables(1::int2)")
        .execute(&db.pool)
        .await
        .unwrap();
    let job = uuid::Uuid::now_v7();
    sqlx::query(
        "INSERT INTO conveyor.ready (slot, queue, priority, run_at, job_id, task)
         VALUES (8, 'default', 0, now(), $1, 'noop')",
    )
    .bind(job)
    .execute(&db.pool)
    .await
    .unwrap();
    let mut locker = PgConnection::connect(&db.url()).await.unwrap();
    sqlx::raw_sql("BEGIN; LOCK TABLE conveyor.ready_9 IN ACCESS EXCLUSIVE MODE")
        .execute(&mut locker)
        .await
        .unwrap();

    let (bank, emptied): (i16, i32) = sqlx::query_as(
        "SELECT current_bank, emptied FROM conveyor_internal.rotate_ring(hold_age => '1 hour')",
    )
    .fetch_one(&db.pool)
    .await
    .expect("the pass ends despite the locked slot");
    assert_eq!(bank, 0);
    assert!(emptied >= 1, "slot 8 was emptied ({emptied})");
    sqlx::raw_sql("ROLLBACK")
        .execute(&mut locker)
        .await
        .unwrap();
    let slot: i16 = sqlx::query_scalar("SELECT slot FROM conveyor.ready WHERE job_id = $1")
        .bind(job)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(slot / 8, 0, "the row was carried into bank 0 (slot {slot})");
}

/// A worker's claim that waited for its turn began its transaction before
/// it touched the ring (`src/db/claim.rs`): however old that transaction,
/// it holds a claim turn and ends with its claim, so the pass does not
/// take it for a holder that keeps slots from being emptied and switch
/// banks. In a fleet of 50 processes such claims made the ring switch
/// banks and carry the whole backlog from bank to bank, over and over. A
/// transaction with no turn holding a slot still counts, and so does one
/// that reads the turn tables, as a `pg_dump` does.
#[tokio::test]
async fn a_claim_that_waited_for_its_turn_is_not_a_holder() {
    let db = TestDb::new().await;
    let pass = || async {
        // hold_age 0: any transaction holding a slot is old enough.
        sqlx::query_as::<_, (i16, bool)>(
            "SELECT current_bank, held FROM conveyor_internal.rotate_ring(hold_age => '0')",
        )
        .fetch_one(&db.pool)
        .await
        .unwrap()
    };
    let mut claim = PgConnection::connect(&db.url()).await.unwrap();
    sqlx::raw_sql(
        "BEGIN;
         LOCK TABLE conveyor_internal.claim_turn_0 IN SHARE UPDATE EXCLUSIVE MODE;
         LOCK TABLE conveyor.ready_3 IN ROW EXCLUSIVE MODE",
    )
    .execute(&mut claim)
    .await
    .unwrap();
    assert_eq!(
        pass().await,
        (0, false),
        "a claim holding its turn is no holder"
    );
    sqlx::raw_sql("ROLLBACK").execute(&mut claim).await.unwrap();

    sqlx::raw_sql("BEGIN; LOCK TABLE conveyor.ready_3 IN ROW EXCLUSIVE MODE")
        .execute(&mut claim)
        .await
        .unwrap();
    assert_eq!(
        pass().await,
        (1, true),
        "a transaction without a turn is a holder"
    );
    sqlx::raw_sql("ROLLBACK").execute(&mut claim).await.unwrap();

    // A pg_dump locks every table it dumps, the turns too, in ACCESS SHARE
    // mode: it is still a holder.
    sqlx::raw_sql(
        "BEGIN;
         LOCK TABLE conveyor_internal.claim_turn_0 IN ACCESS SHARE MODE;
         LOCK TABLE conveyor.ready_11 IN ACCESS SHARE MODE",
    )
    .execute(&mut claim)
    .await
    .unwrap();
    let (bank, held) = pass().await;
    assert!(held, "a dump reading the turns is a holder");
    assert_ne!(bank, 1, "the ring left the bank the dump holds");
    sqlx::raw_sql("ROLLBACK").execute(&mut claim).await.unwrap();
}
