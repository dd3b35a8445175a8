//! The per-minute outcome rollups (`conveyor.stats`): they
//! count what the jobs table shows for a known workload, and still do after
//! the jobs are pruned.

use std::time::Duration;

use chrono::Utc;
use conveyor::{NewJob, Retention, StatsQuery, TaskError, Worker};
use serde_json::{Value, json};

use crate::common::{TestDb, WAIT, count_jobs, eventually};

fn whole_hour() -> StatsQuery {
    StatsQuery {
        since: Utc::now() - chrono::Duration::hours(1),
        until: Utc::now() + chrono::Duration::minutes(5),
        step: Duration::from_secs(3 * 3600),
        queue: None,
        task: None,
    }
}

/// The points summed (the workload may straddle two buckets).
fn sum(points: &[conveyor::StatsPoint]) -> conveyor::StatsPoint {
    let mut total = points.first().cloned().unwrap_or_default();
    for p in points.iter().skip(1) {
        total.succeeded += p.succeeded;
        total.failed += p.failed;
        total.retried += p.retried;
        total.rescued += p.rescued;
        total.cancelled += p.cancelled;
        total.leases_lost += p.leases_lost;
        for (a, b) in total.wait_ms.counts.iter_mut().zip(&p.wait_ms.counts) {
            *a += b;
        }
        for (a, b) in total.run_ms.counts.iter_mut().zip(&p.run_ms.counts) {
            *a += b;
        }
    }
    total
}

#[tokio::test]
async fn rollups_count_what_the_jobs_table_shows_and_outlive_pruning() {
    let db = TestDb::new().await;
    let c = &db.client;
    let fast = Duration::from_millis(10);
    let mut jobs: Vec<NewJob> = (0..20).map(|_| NewJob::new("ok", json!({}))).collect();
    // Fails its first attempt, then succeeds: one retry each.
    jobs.extend((0..5).map(|_| NewJob::new("flaky", json!({})).retry_backoff_base(fast)));
    jobs.extend((0..3).map(|_| NewJob::new("bad", json!({})).max_retries(0)));
    c.enqueue_many(jobs).await.unwrap();
    // Two cancelled while waiting, one rescued after its "worker" vanished.
    for _ in 0..2 {
        let h = c
            .enqueue(NewJob::new("ok", json!({})).delay(Duration::from_secs(3600)))
            .await
            .unwrap();
        c.cancel(h.id()).await.unwrap();
    }
    sqlx::query(
        "INSERT INTO conveyor.jobs (task, state, attempt, started_at, lease_expires_at, worker_id, lease_token)
         VALUES ('ok', 'started', 1, now(), now() - interval '1 second', 'gone', nextval('conveyor.lease_tokens'))",
    )
    .execute(&db.pool)
    .await
    .unwrap();

    let worker = Worker::builder(c)
        .rescue_interval(Duration::from_millis(200))
        .register_fn("ok", |_ctx, _args| async { Ok(Value::Null) })
        .register_fn("flaky", |ctx, _args| async move {
            if ctx.attempt() == 1 {
                return Err(TaskError::retry("not yet"));
            }
            Ok(Value::Null)
        })
        .register_fn("bad", |_ctx, _args| async { Err(TaskError::fail("no")) })
        .start()
        .unwrap();
    eventually(WAIT, "every job final", || async {
        (count_jobs(&db.pool, "state IN ('success', 'failure', 'cancelled')").await == 31)
            .then_some(())
    })
    .await;
    worker.shutdown(WAIT).await.unwrap();

    // What conveyor.jobs says, in the rollups' terms.
    let (succeeded, failed, cancelled, retried): (i64, i64, i64, i64) = sqlx::query_as(
        "SELECT count(*) FILTER (WHERE state = 'success'),
                count(*) FILTER (WHERE state = 'failure'),
                count(*) FILTER (WHERE state = 'cancelled'),
                coalesce(sum(jsonb_array_length(errors)) FILTER (WHERE task = 'flaky'), 0)::bigint
         FROM conveyor.jobs",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!((succeeded, failed, cancelled, retried), (26, 3, 2, 5));
    let expected = |p: &conveyor::StatsPoint| {
        (p.succeeded, p.failed, p.cancelled, p.retried, p.rescued)
            == (succeeded, failed, cancelled, retried, 1)
    };
    let points = c.stats(&whole_hour()).await.unwrap();
    let point = &sum(&points);
    assert!(expected(point), "{points:?}");
    // Every attempt a worker ended is timed: 26 successes, 3 failures, 5 retries.
    assert_eq!(point.wait_ms.total(), 34);
    assert_eq!(point.run_ms.total(), 34);
    assert!(point.run_ms.quantile_ms(0.99).is_some());
    // Narrowed to one task.
    let flaky = c
        .stats(&StatsQuery {
            task: Some("flaky".into()),
            ..whole_hour()
        })
        .await
        .unwrap();
    let flaky = sum(&flaky);
    assert_eq!((flaky.succeeded, flaky.retried), (5, 5));

    // Pruning every job leaves the rollups; their own retention removes them.
    let jobs_only = Retention {
        success: Some(Duration::ZERO),
        failure: Some(Duration::ZERO),
        cancelled: Some(Duration::ZERO),
        stats: None,
    };
    assert_eq!(c.prune(&jobs_only).await.unwrap().deleted, 31);
    assert_eq!(count_jobs(&db.pool, "true").await, 0);
    let after = c.stats(&whole_hour()).await.unwrap();
    assert_eq!(after, points, "rollups outlive the jobs");
    let everything = Retention {
        stats: Some(Duration::ZERO),
        ..jobs_only
    };
    c.prune(&everything).await.unwrap();
    assert!(c.stats(&whole_hour()).await.unwrap().is_empty());
}

/// The workers' maintenance folds the shards of minutes more than 10
/// minutes old into shard 0, keeping every sum; the current minute's
/// shards (its writers' spread) are left alone.
#[tokio::test]
async fn past_minutes_shards_are_folded_into_one_row_with_the_same_sums() {
    let db = TestDb::new().await;
    let c = &db.client;
    // 8 shards of two queue-task pairs, now and 20 minutes, 3 hours and 3
    // days ago, each shard with different counts and histograms.
    sqlx::query(
        "INSERT INTO conveyor.stats
             (minute, queue, task, shard, succeeded, failed, retried, rescued, cancelled, wait_ms, run_ms)
         SELECT date_trunc('minute', now()) - m * interval '1 minute', q, 't', s, s + 1, s % 2, 1, 0, s,
                array_fill((s + 1)::bigint, ARRAY[19]),
                (SELECT array_agg(i * s + m) FROM generate_series(1, 19) i)
         FROM unnest(ARRAY[0, 20, 180, 4320]) m, unnest(ARRAY['a', 'b']) q, generate_series(0, 7) s",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let pool = &db.pool;
    let rows = move |filter: &'static str| async move {
        sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(format!(
            "SELECT count(*) FROM conveyor.stats WHERE {filter}"
        )))
        .fetch_one(pool)
        .await
        .unwrap()
    };
    let every_minute = StatsQuery {
        since: Utc::now() - chrono::Duration::days(4),
        until: Utc::now() + chrono::Duration::minutes(5),
        step: Duration::from_secs(60),
        queue: None,
        task: None,
    };
    let before = c.stats(&every_minute).await.unwrap();
    assert_eq!(before.len(), 4);

    let worker = Worker::builder(c)
        .prune_interval(Duration::from_millis(50))
        .register_fn("noop", |_ctx, _args| async { Ok(Value::Null) })
        .start()
        .unwrap();
    let past = "minute < date_trunc('minute', now()) - interval '10 minutes'";
    eventually(WAIT, "the past minutes' shards folded", || async {
        (rows(past).await == 6).then_some(())
    })
    .await;
    worker.shutdown(WAIT).await.unwrap();
    assert_eq!(
        rows("shard <> 0").await,
        14,
        "the current minute is left alone"
    );
    assert_eq!(c.stats(&every_minute).await.unwrap(), before, "same sums");
}

/// `conveyor_internal.count_outcomes()` adds what a plain count gives
/// (`conveyor_internal.histogram()` for the histograms), for random batches:
/// several queues and tasks per batch, every state, NULL queues, tasks and
/// times, times on bucket bounds, below the first and far above the last,
/// and batches that upsert rows earlier ones made. Times are multiples of
/// 0.25 ms, so their sums are exact in any order.
#[tokio::test]
async fn rollups_of_random_batches_match_a_plain_count() {
    let db = TestDb::new().await;
    let mut conn = db.pool.acquire().await.unwrap();
    sqlx::raw_sql(
        "SELECT setseed(0.16);
         CREATE TEMP TABLE fed AS
         SELECT b AS batch, b % 5 = 0 AS rescued,
                CASE WHEN random() < 0.03 THEN NULL
                     ELSE (ARRAY['q1', 'q2', 'q3'])[1 + floor(random() * 3)::int] END AS queue,
                CASE WHEN random() < 0.03 THEN NULL
                     ELSE (ARRAY['t1', 't2'])[1 + floor(random() * 2)::int] END AS task,
                (ARRAY['success', 'failure', 'retry', 'cancelled'])[1 + floor(random() * 4)::int] AS state,
                m.wait_ms, n.run_ms
         FROM generate_series(1, 40) AS b,
              generate_series(1, 1 + (b * 37) % 300) AS i,
              LATERAL (SELECT CASE WHEN random() < 0.1 THEN NULL
                                   WHEN random() < 0.2 THEN (conveyor.stats_buckets_ms())[1 + floor(random() * 18)::int]
                                   WHEN random() < 0.05 THEN -4
                                   ELSE floor(power(10, random() * 8)) * 0.25 END AS wait_ms
                       WHERE i > 0) AS m,
              LATERAL (SELECT CASE WHEN random() < 0.1 THEN NULL
                                   WHEN random() < 0.2 THEN (conveyor.stats_buckets_ms())[1 + floor(random() * 18)::int]
                                   ELSE floor(power(10, random() * 8)) * 0.25 END AS run_ms
                       WHERE i > 0) AS n;",
    )
    .execute(&mut *conn)
    .await
    .unwrap();
    for batch in 1..=40 {
        sqlx::query(
            "SELECT conveyor_internal.count_outcomes(array_agg(queue), array_agg(task), array_agg(state),
                        array_agg(wait_ms), array_agg(run_ms), bool_or(rescued))
             FROM fed WHERE batch = $1",
        )
        .bind(batch)
        .execute(&mut *conn)
        .await
        .unwrap();
    }
    let sums = |a: &str| {
        format!(
            "(SELECT array_agg(v ORDER BY k) FROM (SELECT k, sum(v)::bigint AS v
                  FROM conveyor.stats x, unnest(x.{a}) WITH ORDINALITY AS u(v, k)
                  WHERE x.queue = s.queue AND x.task = s.task GROUP BY k) AS h)::text"
        )
    };
    let rollups: Vec<(String, String, String)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT queue, task,
                concat_ws(' ', sum(succeeded), sum(failed), sum(retried), sum(rescued), sum(cancelled),
                          sum(wait_ms_sum), sum(run_ms_sum), {wait}, {run})
         FROM conveyor.stats s GROUP BY queue, task ORDER BY queue, task",
        wait = sums("wait_ms"),
        run = sums("run_ms"),
    )))
    .fetch_all(&mut *conn)
    .await
    .unwrap();
    let expected: Vec<(String, String, String)> = sqlx::query_as(
        "SELECT queue, task,
                concat_ws(' ', count(*) FILTER (WHERE state = 'success'), count(*) FILTER (WHERE state = 'failure'),
                          count(*) FILTER (WHERE state = 'retry'), count(*) FILTER (WHERE rescued),
                          count(*) FILTER (WHERE state = 'cancelled'),
                          coalesce(sum(wait_ms), 0), coalesce(sum(run_ms), 0),
                          conveyor_internal.histogram(array_agg(wait_ms))::text,
                          conveyor_internal.histogram(array_agg(run_ms))::text)
         FROM fed WHERE queue IS NOT NULL AND task IS NOT NULL
         GROUP BY queue, task ORDER BY queue, task",
    )
    .fetch_all(&mut *conn)
    .await
    .unwrap();
    assert_eq!(rollups.len(), 6, "{rollups:?}");
    assert_eq!(rollups, expected);
}

/// A transaction that enqueues in many statements (`conveyor.enqueue()` per
/// row of a SELECT, or once per statement) counts its jobs exactly,
/// savepoints and rollbacks included, without writing its rollup row once
/// per statement: a statement that finds the row already written by its
/// transaction tallies its counts, written at commit (the trigger
/// enqueue_tally_flush), which leaves no row of its table behind. Written once per
/// statement, the row's versions (none can be pruned before the transaction
/// ends) filled a page every 37 statements, and each upsert walked all of
/// them.
#[tokio::test]
async fn enqueue_counts_of_a_transaction_of_many_statements_add_up() {
    let db = TestDb::new().await;
    let mut tx = db.pool.begin().await.unwrap();
    for _ in 0..30 {
        sqlx::query("SELECT conveyor.enqueue('t1', queue => 'a')")
            .execute(&mut *tx)
            .await
            .unwrap();
    }
    sqlx::query("SAVEPOINT s").execute(&mut *tx).await.unwrap();
    for _ in 0..20 {
        sqlx::query("SELECT conveyor.enqueue('t2', queue => 'b')")
            .execute(&mut *tx)
            .await
            .unwrap();
    }
    sqlx::query("ROLLBACK TO SAVEPOINT s")
        .execute(&mut *tx)
        .await
        .unwrap();
    sqlx::query(
        "SELECT count(conveyor.enqueue('t3', jsonb_build_object('n', g), queue => 'a'))
         FROM generate_series(1, 3000) g",
    )
    .execute(&mut *tx)
    .await
    .unwrap();
    // An early flush: later statements arm it again.
    sqlx::query("SET CONSTRAINTS ALL IMMEDIATE")
        .execute(&mut *tx)
        .await
        .unwrap();
    sqlx::query("SET CONSTRAINTS ALL DEFERRED")
        .execute(&mut *tx)
        .await
        .unwrap();
    db.client
        .enqueue_many_tx(
            &mut tx,
            (0..crate::common::COPY_MIN + 3)
                .map(|_| NewJob::new("t4", json!({})).queue("b"))
                .collect(),
        )
        .await
        .unwrap();
    for _ in 0..12 {
        sqlx::query("INSERT INTO conveyor.jobs (task, queue) VALUES ('t1', 'a'), ('t2', 'b')")
            .execute(&mut *tx)
            .await
            .unwrap();
    }
    let pages: i64 = sqlx::query_scalar("SELECT pg_relation_size('conveyor.stats') / 8192")
        .fetch_one(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    // A rolled-back transaction of many statements counts nothing.
    let mut tx = db.pool.begin().await.unwrap();
    sqlx::query("SELECT count(conveyor.enqueue('t1', queue => 'a')) FROM generate_series(1, 50)")
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.rollback().await.unwrap();

    let counted: Vec<(String, String, i64)> = sqlx::query_as(
        "SELECT queue, task, sum(enqueued)::bigint FROM conveyor.stats
         GROUP BY 1, 2 HAVING sum(enqueued) > 0 ORDER BY 1, 2",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let stored: Vec<(String, String, i64)> = sqlx::query_as(
        "SELECT queue, task, count(*) FROM conveyor.jobs GROUP BY 1, 2 ORDER BY 1, 2",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let t4 = crate::common::COPY_MIN as i64 + 3;
    assert_eq!(
        stored,
        [
            ("a".to_string(), "t1".to_string(), 42),
            ("a".to_string(), "t3".to_string(), 3000),
            ("b".to_string(), "t2".to_string(), 12),
            ("b".to_string(), "t4".to_string(), t4),
        ]
    );
    assert_eq!(counted, stored);
    let left: i64 =
        sqlx::query_scalar("SELECT count(*) FROM conveyor_internal.enqueue_tally_flush")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(
        left, 0,
        "every tallying transaction's flush row is deleted at its end"
    );
    assert!(
        pages <= 2,
        "conveyor.stats took {pages} pages during a transaction of 3,000 enqueue statements"
    );
}
