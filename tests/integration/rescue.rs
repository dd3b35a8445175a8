//! The rescuer's floor (`conveyor_internal.rescue_floor`): a pass reads the
//! claims ended recently, not every claim ended since a snapshot was taken,
//! and still finds every expired claim, a lease written in the past by hand
//! included.

use std::time::Duration;

use serde_json::Value;
use sqlx::{Connection, PgConnection};

use conveyor::Worker;

use crate::common::{
    TestDb, WAIT, claimed_by_hand, claims_ended_long_ago, eventually, hold_snapshot,
};

/// Index entries of `conveyor.claims` one rescuer pass returns (counted in
/// the pass's own transaction, rolled back).
async fn entries_one_pass_reads(db: &TestDb) -> i64 {
    let mut conn = PgConnection::connect(&db.url()).await.unwrap();
    sqlx::raw_sql("BEGIN; SELECT conveyor_internal.settle_expired_claims(1000);")
        .execute(&mut conn)
        .await
        .unwrap();
    let read: i64 = sqlx::query_scalar(
        "SELECT sum(pg_stat_get_xact_tuples_returned(indexrelid))::bigint
         FROM pg_index WHERE indrelid = 'conveyor.claims'::regclass",
    )
    .fetch_one(&mut conn)
    .await
    .unwrap();
    sqlx::raw_sql("COMMIT").execute(&mut conn).await.unwrap();
    read
}

/// While a session holds its snapshot, 20,000 claims ended nine minutes ago
/// stay in the index; the first pass walks them (the floor starts at the
/// beginning), the next ones do not: the floor rose past them. (Before the
/// floor, every pass returned all 20,000: `lease_expires_at < now()`.)
#[tokio::test]
async fn a_rescuer_pass_skips_claims_ended_long_ago_while_a_snapshot_is_held() {
    let db = TestDb::new().await;
    let mut holder = hold_snapshot(&db).await;
    claims_ended_long_ago(&db, 20_000).await;
    let first = entries_one_pass_reads(&db).await;
    let second = entries_one_pass_reads(&db).await;
    let third = entries_one_pass_reads(&db).await;
    eprintln!("index entries read by three passes: {first}, {second}, {third}");
    assert!(first >= 20_000, "the first pass read {first}");
    assert!(
        second < 100 && third < 100,
        "later passes read {second}, {third}"
    );
    sqlx::raw_sql("ROLLBACK")
        .execute(&mut holder)
        .await
        .unwrap();
}

/// A claim whose lease is set an hour back by hand, after the floor rose
/// above that hour, is still rescued: the write lowers the floor. The same
/// with the floor's row deleted by hand.
#[tokio::test]
async fn a_lease_written_in_the_past_by_hand_is_rescued() {
    let db = TestDb::new().await;
    let worker = Worker::builder(&db.client)
        .register_fn("noop", |_ctx, _args| async { Ok(Value::Null) })
        .rescue_interval(Duration::from_millis(50))
        .start()
        .unwrap();
    let floor = || async {
        sqlx::query_scalar::<_, Option<chrono::DateTime<chrono::Utc>>>(
            "SELECT (SELECT at FROM conveyor_internal.rescue_floor WHERE at > '-infinity')",
        )
        .fetch_one(&db.pool)
        .await
        .unwrap()
    };
    for by_hand in [
        "UPDATE conveyor.claims SET lease_expires_at = now() - interval '1 hour'",
        "DELETE FROM conveyor_internal.rescue_floor;
         UPDATE conveyor.claims SET lease_expires_at = now() - interval '1 hour'",
    ] {
        eventually(WAIT, "the floor to rise", || async { floor().await }).await;
        // Jobs of a task the worker has no handler for: held by this claim
        // only, and left pending once rescued.
        let (ids, _) = claimed_by_hand(&db, 2).await;
        sqlx::raw_sql(by_hand).execute(&db.pool).await.unwrap();
        eventually(WAIT, "both jobs to be rescued", || async {
            let rescued: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM conveyor.jobs
                 WHERE id = ANY($1) AND state = 'pending' AND last_error = 'lease expired'",
            )
            .bind(&ids)
            .fetch_one(&db.pool)
            .await
            .unwrap();
            (rescued == 2).then_some(())
        })
        .await;
    }
    worker.shutdown(WAIT).await.unwrap();
}
