//! Writes outcomes in batches: whatever has arrived while the previous batch
//! was being written goes in the next statement (up to [`MAX_BATCH`]).
//!
//! A batch that PostgreSQL refuses is split until the refused outcome is
//! alone, so every other outcome is stored; the refused one is then stored
//! as a failure that says why. A write whose acknowledgement was lost is
//! retried, and outcomes that the first try did commit are recognised by
//! their claim's token.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use backoff::ExponentialBackoff;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

use crate::client::Client;
use crate::db::{self, OutcomeRow};
use crate::error::Error;
use crate::job::JobState;
use crate::worker::health::{Health, WorkerTask};
use crate::worker::service::{Service, Stop};

/// Outcomes per statement.
pub(crate) const MAX_BATCH: usize = 1_000;

/// Claims whose outcome is handed over but not yet written: the heartbeat
/// keeps renewing their leases, so a slow or unreachable database does not
/// let another worker run a job that has in fact finished.
pub(crate) type Unrecorded = Arc<Mutex<HashSet<db::Lease>>>;

/// Where executors hand outcomes to the completer.
#[derive(Clone)]
pub(crate) struct Outbox {
    tx: UnboundedSender<OutcomeRow>,
    unrecorded: Unrecorded,
}

impl Outbox {
    /// Hands an outcome over (before the executor ends, so the job is never
    /// in neither the running set nor this one).
    pub(crate) fn send(&self, outcome: OutcomeRow) {
        lock(&self.unrecorded).insert((outcome.id, outcome.lease_token));
        // The completer is gone only when the worker is being torn down; the
        // job then stays started until its lease runs out.
        let _ = self.tx.send(outcome);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The completer: its state outlives a restart after a panic (the queue of
/// outcomes, and the batch being written, which the next run writes first).
#[derive(Clone)]
pub(crate) struct Completer {
    client: Client,
    outcomes: Arc<tokio::sync::Mutex<UnboundedReceiver<OutcomeRow>>>,
    in_flight: Arc<Mutex<Option<Arc<Vec<OutcomeRow>>>>>,
    unrecorded: Unrecorded,
    give_up_after: Duration,
    health: Arc<Health>,
}

impl Completer {
    /// A completer writing with `client` (giving up on a batch after
    /// `give_up_after`: the jobs then stay started until their leases
    /// expire), and the outbox executors send to.
    pub(crate) fn new(
        client: Client,
        give_up_after: Duration,
        health: Arc<Health>,
    ) -> (Completer, Outbox) {
        let (tx, rx) = unbounded_channel();
        let unrecorded = Unrecorded::default();
        let outbox = Outbox {
            tx,
            unrecorded: unrecorded.clone(),
        };
        let completer = Completer {
            client,
            outcomes: Arc::new(tokio::sync::Mutex::new(rx)),
            in_flight: Arc::default(),
            unrecorded,
            give_up_after,
            health,
        };
        (completer, outbox)
    }

    /// The claims whose outcome is handed over but not yet written.
    pub(crate) fn unrecorded(&self) -> Unrecorded {
        self.unrecorded.clone()
    }

    /// The completer service. Stopped after the producer, and awaited: it
    /// needs no signal, and ends once every outbox is gone (the producer and
    /// its executors have stopped) and every outcome is written.
    pub(crate) fn service(self) -> Service {
        Service::new(WorkerTask::Completer, Stop::Await, self, |completer, _| {
            completer.run()
        })
    }

    /// Runs until every sender is dropped and every outcome is written.
    async fn run(self) {
        let mut outcomes = self.outcomes.lock().await;
        let mut announced = None;
        loop {
            // A batch left by a run that panicked goes first (it may be
            // partly written already).
            let left = lock(&self.in_flight).clone();
            let resent = left.is_some();
            let batch = match left {
                Some(batch) => batch,
                None => {
                    let mut batch = Vec::with_capacity(MAX_BATCH);
                    if outcomes.recv_many(&mut batch, MAX_BATCH).await == 0 {
                        break;
                    }
                    let batch = Arc::new(batch);
                    *lock(&self.in_flight) = Some(batch.clone());
                    batch
                }
            };
            self.health.checkpoint(WorkerTask::Completer);
            announced = Some(self.write(&batch, resent).await);
            let mut unrecorded = lock(&self.unrecorded);
            for outcome in batch.iter() {
                unrecorded.remove(&(outcome.id, outcome.lease_token));
            }
            *lock(&self.in_flight) = None;
        }
        // Announcements are sent in order: once the last is out, all are.
        if let Some(announced) = announced {
            let _ = announced.await;
        }
    }

    /// Writes a batch (`resent`: an earlier try may have stored some of
    /// it); the receiver completes once its announcements are out.
    async fn write(
        &self,
        batch: &[OutcomeRow],
        resent: bool,
    ) -> tokio::sync::oneshot::Receiver<()> {
        let mut notes = Vec::new();
        let mut lost = Vec::new();
        let mut parts = vec![batch];
        while let Some(part) = parts.pop() {
            match self.write_retrying(part, resent).await {
                Ok(mut written) => {
                    notes.append(&mut written.notes);
                    lost.extend(
                        part.iter()
                            .filter(|o| !written.ids.contains(&o.id))
                            .cloned(),
                    );
                }
                Err(error) if refused(&error) && part.len() > 1 => {
                    // Find the outcome PostgreSQL refuses: the rest are stored.
                    let (first, second) = part.split_at(part.len() / 2);
                    parts.push(second);
                    parts.push(first);
                }
                Err(error) if refused(&error) => {
                    let outcome = &part[0];
                    tracing::error!(%error, job.id = %outcome.id, "conveyor: cannot record this outcome; recording a failure instead");
                    let failed = OutcomeRow {
                        state: JobState::Failure,
                        result: None,
                        retry_in_secs: None,
                        error: Some(format!(
                            "conveyor could not record this job's outcome: {error}"
                        )),
                        ..outcome.clone()
                    };
                    match self
                        .write_retrying(std::slice::from_ref(&failed), resent)
                        .await
                    {
                        Ok(mut written) => notes.append(&mut written.notes),
                        Err(error) => {
                            tracing::error!(%error, job.id = %outcome.id, "conveyor: cannot record this job's failure either; it stays started until its lease expires")
                        }
                    }
                }
                Err(error) => tracing::error!(
                    %error,
                    jobs = part.len(),
                    "conveyor: gave up recording outcomes; the jobs will be retried when their leases expire"
                ),
            }
        }
        for outcome in &lost {
            tracing::warn!(job.id = %outcome.id, job.task = %outcome.task, "conveyor: outcome not recorded: this worker no longer holds the job's lease");
            self.health.lease_lost(&outcome.queue, &outcome.task);
        }
        self.client.inner.notifier.send(notes)
    }

    /// Writes `batch`, retrying connection failures with backoff for up to
    /// `give_up_after`; a refusal is returned at once. After a retry (or if
    /// `resent`), outcomes an earlier try stored count as written.
    async fn write_retrying(&self, batch: &[OutcomeRow], resent: bool) -> crate::Result<Written> {
        let policy = ExponentialBackoff {
            initial_interval: Duration::from_millis(50),
            max_interval: Duration::from_secs(2),
            max_elapsed_time: Some(self.give_up_after),
            ..ExponentialBackoff::default()
        };
        let retried = std::sync::atomic::AtomicBool::new(false);
        let mut written = backoff::future::retry_notify(
            policy,
            || async {
                write_once(&self.client, batch).await.map_err(|error| {
                    if refused(&error) {
                        backoff::Error::permanent(error)
                    } else {
                        backoff::Error::transient(error)
                    }
                })
            },
            |error, wait| {
                retried.store(true, std::sync::atomic::Ordering::Relaxed);
                tracing::warn!(%error, ?wait, "conveyor: cannot record outcomes, retrying");
            },
        )
        .await?;
        if (resent || retried.into_inner()) && written.ids.len() < batch.len() {
            // An earlier try may have committed without our hearing of it.
            self.recover_lost_acks(batch, &mut written).await;
        }
        Ok(written)
    }

    /// Counts as written the outcomes of `batch` that an earlier try
    /// committed (their claim's token is still on the finished row).
    async fn recover_lost_acks(&self, batch: &[OutcomeRow], written: &mut Written) {
        let missing: Vec<db::Lease> = batch
            .iter()
            .filter(|o| !written.ids.contains(&o.id))
            .map(|o| (o.id, o.lease_token))
            .collect();
        let inner = &self.client.inner;
        match db::recorded(&inner.pool, inner.queries, &missing).await {
            Ok(ids) => {
                for outcome in batch.iter().filter(|o| ids.contains(&o.id)) {
                    written.notes.push(announcement(inner.queries, outcome));
                }
                written.ids.extend(ids);
            }
            Err(error) => {
                tracing::warn!(%error, "conveyor: cannot tell which outcomes an interrupted write stored")
            }
        }
    }
}

/// What one write stored.
struct Written {
    /// Jobs whose outcome was written.
    ids: HashSet<crate::JobId>,
    /// Notifications to send now that it has committed.
    notes: Vec<(&'static str, String)>,
}

/// The notification an outcome's commit owes its listeners.
fn announcement(q: &db::Queries, outcome: &OutcomeRow) -> (&'static str, String) {
    if outcome.state == JobState::Retry {
        let payload = serde_json::json!({"queue": outcome.queue, "scheduled": true});
        (q.job_ready_channel, payload.to_string())
    } else {
        (q.job_finished_channel, outcome.id.to_string())
    }
}

fn refused(error: &Error) -> bool {
    error.is_refusal()
}

/// One attempt at writing a batch. Plain jobs: one statement. Jobs with
/// follow-ups: the same statement plus `conveyor_internal.after_finish()`, in one
/// transaction, so next steps and callbacks exist exactly when the outcome does.
/// Announcements (finished ids, retries) go out after the commit, without
/// waiting for them: see [`crate::notify::Notifier`].
async fn write_once(client: &Client, batch: &[OutcomeRow]) -> crate::Result<Written> {
    let inner = &client.inner;
    let completed = if !batch.iter().any(|o| o.follow_up) {
        db::complete(&inner.pool, inner.queries, batch).await?
    } else {
        let mut tx = inner.pool.begin_with(db::BEGIN).await?;
        let completed = db::complete(&mut *tx, inner.queries, batch).await?;
        db::after_finish(&mut tx, inner.queries, &completed.follow_ups).await?;
        tx.commit().await?;
        completed
    };
    Ok(Written {
        ids: completed.updated.into_iter().collect(),
        notes: completed.notes,
    })
}
