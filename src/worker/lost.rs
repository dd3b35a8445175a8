//! Adds the leases this worker lost to the rollups
//! (`conveyor.stats.leases_lost`), so that every process serving metrics
//! sees them (`conveyor_leases_lost_total{queue,task}`), not only this one.
//!
//! Off the path of outcomes: the executor, the completer and the heartbeat
//! count a loss in [`Health`] and go on; this task takes the losses counted
//! so far and writes them in one small upsert (a lost lease is rare). A
//! write that fails never stops the worker: it is logged, and retried with
//! backoff while the worker runs (the losses wait in memory, one count per
//! queue and task); one the database refuses, or still unwritten when the
//! worker stops, is counted in [`crate::WorkerHealth::leases_lost_unrecorded`].
//! (A retried write whose first try committed unheard of counts those
//! losses twice: the counter never goes down, and may run over.)

use std::sync::Arc;
use std::time::Duration;

use backoff::ExponentialBackoff;
use backoff::backoff::Backoff;
use tokio::sync::watch;

use crate::client::Client;
use crate::db;
use crate::supervise::Checkpoint;
use crate::worker::health::{Health, WorkerTask};
use crate::worker::service::{Service, Shared, Stop};

/// The lost-lease recorder service. Stopped after the completer, whose lost
/// outcomes it writes: told to stop, it writes what is left and ends.
pub(crate) fn service(shared: &Shared) -> Service {
    let context = (
        shared.client.clone(),
        shared.health.clone(),
        shared.checkpoint(WorkerTask::LostLeases),
    );
    Service::new(
        WorkerTask::LostLeases,
        Stop::Await,
        context,
        |(client, health, checkpoint), stop| run(client, health, stop, checkpoint),
    )
}

/// Runs until `stop` turns true (or its sender is gone), then writes what is
/// left (one try) and returns. Supervised: restarted if it panics (the
/// losses wait in `health` meanwhile).
async fn run(
    client: Client,
    health: Arc<Health>,
    mut stop: watch::Receiver<bool>,
    checkpoint: Checkpoint,
) {
    let mut backoff = ExponentialBackoff {
        initial_interval: Duration::from_millis(500),
        max_interval: Duration::from_secs(30),
        max_elapsed_time: None,
        ..ExponentialBackoff::default()
    };
    // Losses counted before this task (re)started are written first.
    loop {
        while let Err(retry) = write(&client, &health).await {
            if !retry {
                break;
            }
            let wait = backoff.next_backoff().unwrap_or(backoff.max_interval);
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = stopped(&mut stop) => {
                    finish(&client, &health).await;
                    return;
                }
            }
        }
        backoff.reset();
        tokio::select! {
            () = health.lost_counted() => checkpoint(),
            () = stopped(&mut stop) => break,
        }
    }
    finish(&client, &health).await;
}

/// Returns once `stop` is true or its sender is gone.
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|stop| *stop).await.map(|_| ());
}

/// The last write, at shutdown: what it cannot store is counted unrecorded.
async fn finish(client: &Client, health: &Health) {
    if write(client, health).await.is_err() {
        let left: i64 = health.take_lost().iter().map(|(_, n)| n).sum();
        health.lost_unrecorded(left);
    }
}

/// Writes the losses counted so far. `Err(true)`: a failure worth retrying,
/// the losses were put back; `Err(false)`: refused, they were dropped.
async fn write(client: &Client, health: &Health) -> Result<(), bool> {
    let lost = health.take_lost();
    if lost.is_empty() {
        return Ok(());
    }
    let inner = &client.inner;
    match db::count_leases_lost(&inner.pool, inner.queries, &lost).await {
        Ok(()) => Ok(()),
        Err(error) if error.is_refusal() => {
            let n: i64 = lost.iter().map(|(_, n)| n).sum();
            tracing::error!(%error, leases = n, "conveyor: cannot add lost leases to the rollups; they are not counted in conveyor_leases_lost_total");
            health.lost_unrecorded(n);
            Err(false)
        }
        Err(error) => {
            tracing::warn!(%error, "conveyor: cannot add lost leases to the rollups yet; retrying");
            health.put_back_lost(lost);
            Err(true)
        }
    }
}
