//! Periodic jobs: slots, leadership, missed slots.

use std::time::Duration;

use chrono::{TimeZone, Utc};
use conveyor::{Missed, NewJob, Periodic, Worker};
use serde_json::{Value, json};

use crate::common::{TestDb, WAIT, count_jobs, eventually};

fn tick(slot: chrono::DateTime<Utc>) -> NewJob<Value> {
    NewJob::new("tick", json!({ "slot": slot }))
}

#[test]
fn interval_slots_are_aligned_on_the_epoch() {
    let every = Periodic::every("e", Duration::from_secs(15), tick);
    let t = Utc.with_ymd_and_hms(2026, 11, 22, 10, 0, 7).unwrap();
    assert_eq!(
        every.next_after(t),
        Some(Utc.with_ymd_and_hms(2026, 11, 22, 10, 0, 15).unwrap())
    );
    let at_slot = Utc.with_ymd_and_hms(2026, 11, 22, 10, 0, 15).unwrap();
    assert_eq!(
        every.next_after(at_slot),
        Some(Utc.with_ymd_and_hms(2026, 11, 22, 10, 0, 30).unwrap())
    );
}

#[cfg(feature = "cron")]
#[test]
fn cron_slots_follow_the_time_zone() {
    let t = Utc.with_ymd_and_hms(2026, 11, 22, 10, 0, 7).unwrap();
    // 09:00 in Paris is 08:00 UTC in November.
    let cron = Periodic::cron("c", "0 0 9 * * *", "Europe/Paris", tick).unwrap();
    assert_eq!(
        cron.next_after(t),
        Some(Utc.with_ymd_and_hms(2026, 11, 23, 8, 0, 0).unwrap())
    );
    assert!(Periodic::cron("bad", "not cron", "UTC", tick).is_err());
    assert!(Periodic::cron("bad", "0 0 9 * * *", "Mars/Olympus", tick).is_err());
}

#[tokio::test]
async fn many_workers_enqueue_each_slot_once() {
    let db = TestDb::new().await;
    let mut workers = Vec::new();
    for _ in 0..3 {
        workers.push(
            Worker::builder(&db.client)
                .periodic(Periodic::every("fast", Duration::from_millis(200), tick))
                .register_fn("tick", |_, _| async move { Ok(Value::Null) })
                .start()
                .unwrap(),
        );
    }
    eventually(WAIT, "ten slots ran", || async {
        (count_jobs(&db.pool, "task = 'tick' AND state = 'success'").await >= 10).then_some(())
    })
    .await;
    for worker in workers {
        worker.shutdown(WAIT).await.unwrap();
    }
    let (jobs, slots): (i64, i64) = sqlx::query_as(
        "SELECT count(*), count(DISTINCT args->>'slot') FROM conveyor.jobs WHERE task = 'tick'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(jobs, slots, "no slot twice");
    // Consecutive slots, 200 ms apart: none skipped while a leader ran.
    let gaps: Vec<f64> = sqlx::query_scalar(
        "SELECT extract(epoch FROM s - lag(s) OVER (ORDER BY s))::float8 FROM
           (SELECT (args->>'slot')::timestamptz AS s FROM conveyor.jobs WHERE task = 'tick') t
         OFFSET 1",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert!(gaps.iter().all(|g| (g - 0.2).abs() < 1e-6), "{gaps:?}");
}

#[tokio::test]
async fn a_missed_slot_is_enqueued_once_or_skipped_as_configured() {
    let db = TestDb::new().await;
    // Slots about two days apart, the latest less than 10 s ago (slots are
    // multiples of the interval since the epoch): no slot comes while the
    // test runs, however long it takes, and the missed one is known.
    let now = Utc::now().timestamp_millis();
    let interval = now / 10_000;
    let latest = Utc.timestamp_millis_opt(interval * 10_000).unwrap();
    let interval = Duration::from_millis(interval as u64);
    // Both schedules last ran three slots ago.
    let last = latest - chrono::TimeDelta::from_std(interval * 3).unwrap();
    sqlx::query(
        "INSERT INTO conveyor.periodic (name, last_slot) VALUES ('catch-up', $1), ('skip', $1)",
    )
    .bind(last)
    .execute(&db.pool)
    .await
    .unwrap();
    let every = |name: &'static str| {
        Periodic::every(name, interval, move |slot| {
            NewJob::new("tick", json!({ "schedule": name, "slot": slot }))
        })
    };
    let worker = Worker::builder(&db.client)
        .periodic(every("catch-up").missed(Missed::EnqueueOnce))
        .periodic(every("skip").missed(Missed::Skip))
        .register_fn("tick", |_, _| async move { Ok(Value::Null) })
        .start()
        .unwrap();
    let slot: String = eventually(WAIT, "the missed slot", || async {
        sqlx::query_scalar(
            "SELECT args->>'slot' FROM conveyor.jobs WHERE args->>'schedule' = 'catch-up'",
        )
        .fetch_optional(&db.pool)
        .await
        .ok()?
    })
    .await;
    let slot: chrono::DateTime<Utc> = slot.parse().unwrap();
    // The latest slot that passed, of the two missed since.
    assert_eq!(slot, latest);
    worker.shutdown(WAIT).await.unwrap();
    assert_eq!(
        count_jobs(&db.pool, "args->>'schedule' = 'catch-up'").await,
        1,
        "once, not three times"
    );
    assert_eq!(count_jobs(&db.pool, "args->>'schedule' = 'skip'").await, 0);
}

/// A leader cut off from the database (its TCP connection open, so the
/// server cannot tell) loses the leadership within seconds and another
/// process schedules: without a bound on its idle session the lock stayed
/// taken for as long as the cut lasted, and no slot was enqueued.
#[tokio::test]
async fn a_leader_cut_off_from_the_database_hands_over() {
    let db = TestDb::new().await;
    let proxy = crate::proxy::Proxy::start(&db.queue_target()).await;
    // A takes the lock, then its leadership connection hears nothing more.
    // (Through PgBouncer A leads in a transaction, through the proxy too.)
    proxy.freeze_after(b"conveyor.periodic:", 1);
    let pool_a = conveyor::pool_options()
        .connect_lazy(&proxy.url(&db.url()))
        .unwrap();
    let client_a = db.client_on(pool_a, false);
    let schedule = || Periodic::every("cut", Duration::from_millis(500), tick);
    let a = Worker::builder(&client_a)
        .periodic(schedule())
        .register_fn("tick", |_, _| async move { Ok(Value::Null) })
        .start()
        .unwrap();
    eventually(WAIT, "A to take the lock and be cut off", || async {
        proxy.fired().then_some(())
    })
    .await;
    let b = Worker::builder(&db.client)
        .periodic(schedule())
        .register_fn("tick", |_, _| async move { Ok(Value::Null) })
        .start()
        .unwrap();
    // (The server ends A's leading transaction after 8 s idle, and B tries
    // to lead every 2 s: allowed far longer on a loaded machine.)
    eventually(WAIT * 3, "B to lead and enqueue a slot", || async {
        (count_jobs(&db.pool, "task = 'tick'").await >= 1).then_some(())
    })
    .await;
    b.shutdown(WAIT).await.unwrap();
    // (Through the proxy, still up: A's frozen leadership connection is
    // given up after a 2 s ping timeout, its other connections work.)
    a.shutdown(WAIT).await.unwrap();
}

/// The leading process records who it is and the schedules it runs (for
/// the dashboard): schedule text, task, queue, next slot, the last slot's
/// job; a schedule it lacks is marked as not on the leader; a new leader
/// takes the record over.
#[tokio::test]
async fn the_leader_records_itself_and_its_schedules() {
    let db = TestDb::new().await;
    // Left by an earlier leader: a schedule no process registers now.
    sqlx::query(
        "INSERT INTO conveyor.periodic (name, last_slot, on_leader)
         VALUES ('retired', now() - interval '1 day', true)",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let a = Worker::builder(&db.client)
        .periodic(Periodic::every("fast", Duration::from_millis(200), tick))
        .periodic(Periodic::every("hourly", Duration::from_secs(3600), |_| {
            NewJob::new("report", json!({})).queue("reports")
        }))
        .register_fn("tick", |_, _| async move { Ok(Value::Null) })
        .start()
        .unwrap();
    type Row = (
        String,
        Option<String>,
        Option<String>,
        Option<String>,
        Option<String>,
        bool,
    );
    let rows = || async {
        sqlx::query_as::<_, Row>(
            "SELECT name, schedule, task, queue, missed, on_leader FROM conveyor.periodic ORDER BY name",
        )
        .fetch_all(&db.pool)
        .await
        .unwrap()
    };
    let slot_job = || async {
        sqlx::query_as::<_, (chrono::DateTime<Utc>, chrono::DateTime<Utc>, Value)>(
            "SELECT p.last_slot, p.next_slot, j.args FROM conveyor.periodic p
             JOIN conveyor.jobs j ON j.id = p.last_job_id WHERE p.name = 'fast'",
        )
        .fetch_optional(&db.pool)
        .await
        .unwrap()
    };
    let (last, next, args) = eventually(WAIT, "a slot of `fast` recorded", slot_job).await;
    assert_eq!(
        args["slot"],
        json!(last),
        "last_job_id is the last slot's job"
    );
    assert!(next > last, "{next} after {last}");
    let some = |s: &str| Some(s.to_string());
    assert_eq!(
        rows().await,
        [
            (
                "fast".into(),
                some("every 200ms"),
                some("tick"),
                some("default"),
                some("skip"),
                true
            ),
            (
                "hourly".into(),
                some("every 1h"),
                some("report"),
                some("reports"),
                some("skip"),
                true
            ),
            ("retired".into(), None, None, None, None, false),
        ]
    );
    let hourly_next: Option<chrono::DateTime<Utc>> =
        sqlx::query_scalar("SELECT next_slot FROM conveyor.periodic WHERE name = 'hourly'")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(hourly_next.map(|t| t.timestamp() % 3600), Some(0));
    let leader = || async {
        sqlx::query_as::<_, (String, i32, i32, bool)>(
            "SELECT l.host, l.pid, l.backend_pid,
                    EXISTS (SELECT FROM pg_locks k WHERE k.pid = l.backend_pid
                            AND k.locktype = 'advisory' AND k.granted)
             FROM conveyor.periodic_leader l",
        )
        .fetch_one(&db.pool)
        .await
        .unwrap()
    };
    let (host, pid, first_backend, holds) = leader().await;
    assert!(!host.is_empty());
    assert_eq!(pid, std::process::id() as i32);
    assert!(holds, "the recorded backend holds the scheduler's lock");

    // B registers another schedule; once A stops, B leads and says so.
    let b = Worker::builder(&db.client)
        .periodic(Periodic::every("other", Duration::from_secs(60), tick))
        .register_fn("tick", |_, _| async move { Ok(Value::Null) })
        .start()
        .unwrap();
    a.shutdown(WAIT).await.unwrap();
    eventually(WAIT, "B to take the lead", || async {
        let (.., backend, holds) = leader().await;
        (backend != first_backend && holds).then_some(())
    })
    .await;
    let led: Vec<(String, bool)> = rows().await.into_iter().map(|r| (r.0, r.5)).collect();
    assert_eq!(
        led,
        [
            ("fast".to_string(), false),
            ("hourly".to_string(), false),
            ("other".to_string(), true),
            ("retired".to_string(), false),
        ]
    );
    b.shutdown(WAIT).await.unwrap();
}
