//! Periodic jobs: fixed intervals, and cron expressions with a time zone
//! (feature `cron`), registered in code. One process at a time schedules (the leader, elected
//! by a session advisory lock); every slot's job gets an id derived from the
//! schedule's name and the slot, so a slot is enqueued once even if two
//! processes briefly both think they lead.

#[cfg(feature = "cron")]
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::{Connection, PgConnection};

use crate::client::Client;
use crate::db;
#[cfg(feature = "cron")]
use crate::error::Error;
use crate::error::Result;
use crate::failover::Connector;
use crate::job::job_id_from_key;
use crate::supervise::Checkpoint;
use crate::task::NewJob;

/// What a new leader does about slots that passed while no process led.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Missed {
    /// Forget them; go on from the next slot.
    Skip,
    /// Enqueue the latest missed slot once, then go on.
    EnqueueOnce,
}

#[derive(Clone)]
enum Schedule {
    #[cfg(feature = "cron")]
    Cron(Box<cron::Schedule>, chrono_tz::Tz),
    Every(Duration),
}

/// A periodic job: a schedule, and the job to enqueue at each slot.
///
/// ```
/// use std::time::Duration;
/// use conveyor::{Missed, NewJob, Periodic};
///
/// // Every 30 seconds, aligned on the Unix epoch; a slot missed while no
/// // worker ran is enqueued once on takeover.
/// let heartbeat = Periodic::every("heartbeat", Duration::from_secs(30), |_| {
///     NewJob::new("ping", serde_json::json!({}))
/// })
/// .missed(Missed::EnqueueOnce);
/// ```
#[derive(Clone)]
pub struct Periodic {
    name: String,
    schedule: Schedule,
    missed: Missed,
    make: Arc<dyn Fn(DateTime<Utc>) -> NewJob<Value> + Send + Sync>,
}

impl std::fmt::Debug for Periodic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Periodic")
            .field("name", &self.name)
            .field("missed", &self.missed)
            .finish_non_exhaustive()
    }
}

impl Periodic {
    /// A cron schedule: `sec min hour day-of-month month day-of-week [year]`
    /// (the `cron` crate's syntax), in the IANA time zone `tz` (`"UTC"`,
    /// `"Europe/Paris"`…). `make` builds the job for each slot. Needs the
    /// `cron` feature.
    ///
    /// ```
    /// use conveyor::{NewJob, Periodic};
    ///
    /// // Weekdays at 09:00 in Paris.
    /// let report = Periodic::cron("daily-report", "0 0 9 * * Mon-Fri", "Europe/Paris", |slot| {
    ///     NewJob::new("report", serde_json::json!({ "for": slot }))
    /// })?;
    /// # Ok::<(), conveyor::Error>(())
    /// ```
    #[cfg(feature = "cron")]
    pub fn cron(
        name: impl Into<String>,
        expression: &str,
        tz: &str,
        make: impl Fn(DateTime<Utc>) -> NewJob<Value> + Send + Sync + 'static,
    ) -> Result<Periodic> {
        let schedule = cron::Schedule::from_str(expression)
            .map_err(|e| Error::Config(format!("cron expression `{expression}`: {e}")))?;
        let tz = chrono_tz::Tz::from_str(tz)
            .map_err(|e| Error::Config(format!("time zone `{tz}`: {e}")))?;
        Ok(Periodic {
            name: name.into(),
            schedule: Schedule::Cron(Box::new(schedule), tz),
            missed: Missed::Skip,
            make: Arc::new(make),
        })
    }

    /// Every `interval`, on slots aligned to the Unix epoch (so every process
    /// computes the same slots).
    pub fn every(
        name: impl Into<String>,
        interval: Duration,
        make: impl Fn(DateTime<Utc>) -> NewJob<Value> + Send + Sync + 'static,
    ) -> Periodic {
        Periodic {
            name: name.into(),
            schedule: Schedule::Every(interval.max(Duration::from_millis(1))),
            missed: Missed::Skip,
            make: Arc::new(make),
        }
    }

    /// What to do about slots missed while no worker ran (default: skip).
    pub fn missed(mut self, missed: Missed) -> Self {
        self.missed = missed;
        self
    }

    /// The schedule's name (`conveyor.periodic.name`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The first slot strictly after `t`.
    pub fn next_after(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match &self.schedule {
            #[cfg(feature = "cron")]
            Schedule::Cron(schedule, tz) => schedule
                .after(&t.with_timezone(tz))
                .next()
                .map(|slot| slot.with_timezone(&Utc)),
            Schedule::Every(interval) => {
                let step = i64::try_from(interval.as_millis()).ok()?.max(1);
                let now = t.timestamp_millis();
                let next = (now.div_euclid(step) + 1) * step;
                DateTime::from_timestamp_millis(next)
            }
        }
    }

    /// The schedule in words, as the dashboard shows it: `every 30s`, or
    /// `cron 0 0 9 * * Mon-Fri (Europe/Paris)`.
    pub(crate) fn describe(&self) -> String {
        match &self.schedule {
            #[cfg(feature = "cron")]
            Schedule::Cron(schedule, tz) => format!("cron {} ({tz})", schedule.source()),
            Schedule::Every(interval) => format!("every {}", words(*interval)),
        }
    }

    /// The job for `slot`, with its slot-derived id.
    fn job(&self, slot: DateTime<Utc>) -> NewJob<Value> {
        let key = format!(
            "conveyor.periodic:{}:{}",
            self.name,
            slot.timestamp_millis()
        );
        (self.make)(slot).id(job_id_from_key(&key))
    }
}

/// An interval in the largest unit that divides it: `30s`, `5m`, `1h`,
/// `1d`, `250ms`.
fn words(interval: Duration) -> String {
    let ms = interval.as_millis();
    let units = [
        (86_400_000, "d"),
        (3_600_000, "h"),
        (60_000, "m"),
        (1_000, "s"),
    ];
    match units
        .iter()
        .find(|(size, _)| ms >= *size && ms.is_multiple_of(*size))
    {
        Some((size, unit)) => format!("{}{unit}", ms / size),
        None => format!("{ms}ms"),
    }
}

/// How often a follower tries to become leader, and the leader checks it still is.
const LEADER_CHECK: Duration = Duration::from_secs(2);

pub(crate) async fn run(client: Client, schedules: Arc<Vec<Periodic>>, checkpoint: Checkpoint) {
    loop {
        checkpoint();
        // Its own session (the lock lives as long as it), to the followed primary.
        let connector = client.connector();
        let (mut conn, switches) = match connector.connect().await {
            Ok(connected) => connected,
            Err(error) => {
                tracing::debug!(%error, "conveyor: periodic scheduler cannot connect");
                tokio::time::sleep(LEADER_CHECK).await;
                continue;
            }
        };
        let in_transaction = connector.pooled_session();
        match db::try_lead_periodic(&mut conn, client.inner.queries, in_transaction).await {
            Ok(true) => {
                tracing::info!("conveyor: leading the periodic scheduler");
                let session = Session {
                    conn: &mut conn,
                    connector: &connector,
                    switches,
                    in_transaction,
                };
                if let Err(error) = lead(&client, session, &schedules).await {
                    tracing::warn!(%error, "conveyor: periodic scheduler stepped down");
                }
            }
            Ok(false) => {}
            Err(error) => tracing::debug!(%error, "conveyor: periodic leadership check failed"),
        }
        // Closing the connection releases the lock, if held (dropped if the
        // server does not answer: it ends the session itself, see
        // `db::try_lead_periodic`).
        let _ = tokio::time::timeout(LEADER_CHECK, conn.close()).await;
        tokio::time::sleep(LEADER_CHECK).await;
    }
}

/// The leader's session, and the primary it was opened on.
struct Session<'a> {
    conn: &'a mut PgConnection,
    connector: &'a Connector,
    /// The connector's switch count when the session was opened.
    switches: u64,
    /// The lock is held in a transaction of `conn` (see `db::try_lead_periodic`).
    in_transaction: bool,
}

/// Enqueues slots as they come, until the leadership connection fails or
/// the primary changes.
async fn lead(client: &Client, mut session: Session<'_>, schedules: &[Periodic]) -> Result<()> {
    let inner = &client.inner;
    let names: Vec<String> = schedules.iter().map(|p| p.name.clone()).collect();
    let last = db::periodic_last_slots(&inner.pool, inner.queries, &names).await?;
    let now = Utc::now();
    let mut next = Vec::with_capacity(schedules.len());
    for periodic in schedules {
        if let (Missed::EnqueueOnce, Some(last)) = (periodic.missed, last.get(&periodic.name))
            && let Some(missed) = latest_slot_between(periodic, *last, now)
        {
            enqueue(client, periodic, missed, periodic.next_after(now)).await?;
        }
        next.push(periodic.next_after(now));
    }
    announce(&mut session, client, schedules, &next).await;
    let mut pinged = tokio::time::Instant::now();
    loop {
        let Some((index, slot)) = next
            .iter()
            .enumerate()
            .filter_map(|(i, slot)| slot.map(|s| (i, s)))
            .min_by_key(|(_, slot)| *slot)
        else {
            return Ok(()); // no schedule has a future slot
        };
        let wait = (slot - Utc::now()).to_std().unwrap_or_default();
        if wait > LEADER_CHECK {
            tokio::time::sleep(LEADER_CHECK).await;
            still_leading(&mut session, &mut pinged).await?;
            continue;
        }
        tokio::time::sleep(wait).await;
        // Frequent slots too: the session must not sit idle (the server
        // ends it after 8 s) and a lost one must stop us enqueueing.
        if pinged.elapsed() >= LEADER_CHECK {
            still_leading(&mut session, &mut pinged).await?;
        }
        next[index] = schedules[index].next_after(slot);
        enqueue(client, &schedules[index], slot, next[index]).await?;
    }
}

/// Tells the database who leads and what it runs (`conveyor.periodic_leader`,
/// `conveyor.periodic`), for the dashboard. A failure is logged, not fatal:
/// enqueueing does not depend on it.
async fn announce(
    session: &mut Session<'_>,
    client: &Client,
    schedules: &[Periodic],
    next: &[Option<DateTime<Utc>>],
) {
    let mut seen = std::collections::HashSet::new();
    let announced: Vec<db::AnnouncedSchedule> = schedules
        .iter()
        .zip(next)
        .filter(|(periodic, _)| seen.insert(periodic.name.as_str()))
        .map(|(periodic, next)| {
            // The job a slot makes, for its task and queue (`make` is
            // called once more here).
            let sample = (periodic.make)(next.unwrap_or_else(Utc::now));
            db::AnnouncedSchedule {
                name: periodic.name.clone(),
                schedule: periodic.describe(),
                task: sample.task,
                queue: sample.queue,
                missed: match periodic.missed {
                    Missed::Skip => "skip",
                    Missed::EnqueueOnce => "enqueue_once",
                },
                next_slot: *next,
            }
        })
        .collect();
    let pid = i32::try_from(std::process::id()).unwrap_or(i32::MAX);
    let (queries, host) = (client.inner.queries, host_name());
    let announced = if session.in_transaction {
        // Not in the leader's transaction, which must not write.
        match db::backend_pid(session.conn).await {
            Ok(holder) => {
                let who = (host.as_str(), pid, Some(holder));
                db::announce_periodic(&client.inner.pool, queries, who, &announced).await
            }
            Err(error) => Err(error),
        }
    } else {
        let who = (host.as_str(), pid, None);
        db::announce_periodic(&mut *session.conn, queries, who, &announced).await
    };
    if let Err(error) = announced {
        tracing::warn!(%error, "conveyor: cannot record the periodic leader and its schedules");
    }
}

/// This machine's host name (`HOSTNAME`, else the kernel's, else
/// `localhost`), as the periodic leader's record and the worker registry
/// (`conveyor.workers.host`) give it.
pub(crate) fn host_name() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_string())
}

/// Checks the leadership connection answers within [`LEADER_CHECK`] and
/// the primary has not changed; an error (or silence: a network cut), or a
/// new primary (the old one, demoted, may keep the session and its lock),
/// ends the leadership.
async fn still_leading(session: &mut Session<'_>, pinged: &mut tokio::time::Instant) -> Result<()> {
    if session.connector.switches() != session.switches {
        return Err(crate::Error::Config(
            "the primary changed: electing a leader on the new one".into(),
        ));
    }
    match tokio::time::timeout(LEADER_CHECK, db::ping(session.conn)).await {
        Ok(answer) => answer?,
        Err(_) => {
            let silent = std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the leadership connection did not answer within 2 s",
            );
            return Err(crate::Error::Database(sqlx::Error::Io(silent)));
        }
    }
    *pinged = tokio::time::Instant::now();
    Ok(())
}

/// The latest slot in `(after, until]`, if any (bounded search).
fn latest_slot_between(
    periodic: &Periodic,
    after: DateTime<Utc>,
    until: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    let mut latest = None;
    let mut t = after;
    for _ in 0..100_000 {
        match periodic.next_after(t) {
            Some(slot) if slot <= until => {
                latest = Some(slot);
                t = slot;
            }
            _ => break,
        }
    }
    latest
}

/// Enqueues `slot`'s job and records the slot (and the `next` one).
async fn enqueue(
    client: &Client,
    periodic: &Periodic,
    slot: DateTime<Utc>,
    next: Option<DateTime<Utc>>,
) -> Result<()> {
    let handle = client.enqueue(periodic.job(slot)).await?;
    let inner = &client.inner;
    let (pool, q) = (&inner.pool, inner.queries);
    db::periodic_record_slot(pool, q, &periodic.name, slot, handle.id(), next).await?;
    if !handle.is_duplicate() {
        tracing::debug!(schedule = %periodic.name, %slot, "conveyor: enqueued periodic job");
    }
    Ok(())
}
