//! Writes outcomes in batches: whatever has arrived while the previous batch
//! was being written goes in the next statement (up to [`MAX_BATCH`]).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use backoff::ExponentialBackoff;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

use crate::client::Client;
use crate::db::{self, OutcomeRow};
use crate::job::JobId;

/// Outcomes per statement.
pub(crate) const MAX_BATCH: usize = 1_000;

/// Attempts whose outcome is handed over but not yet written: the heartbeat
/// keeps renewing their leases, so a slow or unreachable database does not
/// let another worker run a job that has in fact finished.
pub(crate) type Unrecorded = Arc<Mutex<HashSet<(JobId, i32)>>>;

/// Where executors hand outcomes to the completer.
#[derive(Clone)]
pub(crate) struct Outbox {
    tx: UnboundedSender<OutcomeRow>,
    unrecorded: Unrecorded,
}

impl Outbox {
    /// A new outbox, the completer's end of it, and the shared set of
    /// attempts not yet written.
    pub(crate) fn new() -> (Outbox, UnboundedReceiver<OutcomeRow>, Unrecorded) {
        let (tx, rx) = unbounded_channel();
        let unrecorded = Unrecorded::default();
        let outbox = Outbox {
            tx,
            unrecorded: unrecorded.clone(),
        };
        (outbox, rx, unrecorded)
    }

    /// Hands an outcome over (before the executor ends, so the job is never
    /// in neither the running set nor this one).
    pub(crate) fn send(&self, outcome: OutcomeRow) {
        lock(&self.unrecorded).insert((outcome.id, outcome.attempt));
        // The completer is gone only when the worker is being torn down; the
        // job then stays started until its lease runs out.
        let _ = self.tx.send(outcome);
    }
}

fn lock(set: &Unrecorded) -> std::sync::MutexGuard<'_, HashSet<(JobId, i32)>> {
    set.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs until every sender is dropped and every outcome is written (or given
/// up on after `give_up_after`: the job then stays started until its lease
/// expires).
pub(crate) async fn run(
    client: Client,
    mut outcomes: UnboundedReceiver<OutcomeRow>,
    unrecorded: Unrecorded,
    give_up_after: Duration,
) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    let mut announced = None;
    while outcomes.recv_many(&mut batch, MAX_BATCH).await > 0 {
        announced = Some(write(&client, &batch, give_up_after).await);
        let mut set = lock(&unrecorded);
        for outcome in batch.drain(..) {
            set.remove(&(outcome.id, outcome.attempt));
        }
    }
    // Announcements are sent in order: once the last is out, all are.
    if let Some(announced) = announced {
        let _ = announced.await;
    }
}

/// Writes a batch; the receiver completes once its announcements are out.
async fn write(
    client: &Client,
    batch: &[OutcomeRow],
    give_up_after: Duration,
) -> tokio::sync::oneshot::Receiver<()> {
    let policy = ExponentialBackoff {
        initial_interval: Duration::from_millis(50),
        max_interval: Duration::from_secs(2),
        max_elapsed_time: Some(give_up_after),
        ..ExponentialBackoff::default()
    };
    let written = backoff::future::retry_notify(
        policy,
        || async {
            write_once(client, batch)
                .await
                .map_err(backoff::Error::transient)
        },
        |error, wait| tracing::warn!(%error, ?wait, "conveyor: cannot record outcomes, retrying"),
    )
    .await;
    let (updated, announced) = match written {
        Ok((updated, announced)) => (Ok(updated), announced),
        Err(error) => (Err(error), tokio::sync::oneshot::channel().1),
    };
    match updated {
        Ok(updated) if updated < batch.len() as i64 => tracing::warn!(
            lost = batch.len() as i64 - updated,
            "conveyor: some outcomes were not recorded: those jobs are no longer held by this attempt"
        ),
        Ok(_) => {}
        Err(error) => tracing::error!(
            %error,
            jobs = batch.len(),
            "conveyor: gave up recording outcomes; the jobs will be retried when their leases expire"
        ),
    }
    announced
}

/// One attempt at writing a batch. Plain jobs: one statement. Jobs with
/// follow-ups: the same statement plus `conveyor.after_finish()`, in one
/// transaction, so next steps and callbacks exist exactly when the outcome does.
/// Announcements (finished ids, retries) go out after the commit, without
/// waiting for them: see [`crate::notify::Notifier`].
async fn write_once(
    client: &Client,
    batch: &[OutcomeRow],
) -> crate::Result<(i64, tokio::sync::oneshot::Receiver<()>)> {
    let inner = &client.inner;
    let completed = if !batch.iter().any(|o| o.follow_up) {
        db::complete(&inner.pool, inner.queries, batch).await?
    } else {
        let mut tx = inner.pool.begin().await?;
        let completed = db::complete(&mut *tx, inner.queries, batch).await?;
        db::after_finish(&mut tx, inner.queries, &completed.follow_ups).await?;
        tx.commit().await?;
        completed
    };
    let announced = inner.notifier.send(completed.notes);
    Ok((completed.updated, announced))
}
