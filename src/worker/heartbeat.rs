//! Keeps the leases of running jobs alive: one UPDATE for all of them, every
//! third of the lease, and only while the worker runs something. A job's
//! lease is renewed until its outcome is written, not just until its handler
//! returns.
//!
//! A lease the database neither renewed nor found still held is lost (the
//! job was rescued, re-queued or claimed again): its handler is told at
//! once, through its cancellation signal, and its outcome will not be
//! written. A lease whose row another transaction held at that moment (the
//! heartbeat never waits for a row lock) is busy, not lost: it is renewed at
//! the next beat. A lease that
//! cannot be renewed because the database is out of reach lapses by this
//! process's clock: the executor stops the handler at that deadline.

use std::collections::HashMap;
use std::sync::Arc;

use crate::db;
use crate::worker::completer::Unrecorded;
use crate::worker::health::WorkerTask;
use crate::worker::lease::{Lease, snapshot};
use crate::worker::service::{Service, Shared, Stop};

/// The heartbeat service: renews the leases of the jobs running or held
/// ahead, and of those whose outcome is `unrecorded` yet (aborted at
/// shutdown, once the completer has written what was left).
pub(crate) fn service(shared: &Shared, unrecorded: Unrecorded) -> Service {
    let context = (shared.clone(), unrecorded);
    Service::new(
        WorkerTask::Heartbeat,
        Stop::Abort,
        context,
        |(shared, unrecorded), _| run(shared, unrecorded),
    )
}

async fn run(shared: Shared, unrecorded: Unrecorded) {
    let Shared {
        client,
        lease,
        running,
        health,
        ..
    } = shared;
    let mut tick = tokio::time::interval(lease / 3);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        health.checkpoint(WorkerTask::Heartbeat);
        let held: Vec<Arc<Lease>> = snapshot(&running)
            .into_iter()
            .filter(|l| !l.is_lost())
            .collect();
        let mut leases: Vec<db::Lease> = held.iter().map(|l| l.key()).collect();
        leases.extend(
            unrecorded
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
                .copied(),
        );
        leases.sort_unstable();
        leases.dedup();
        if leases.is_empty() {
            continue;
        }
        let sent = tokio::time::Instant::now();
        let inner = &client.inner;
        let renewed =
            match db::heartbeat(&inner.pool, inner.queries, &leases, lease.as_secs_f64()).await {
                Ok(renewed) => renewed,
                Err(error) => {
                    tracing::warn!(%error, "conveyor: cannot renew leases");
                    continue;
                }
            };
        let renewed: HashMap<db::Lease, (bool, bool)> = renewed
            .into_iter()
            .map(|r| (r.lease, (r.cancel, r.busy)))
            .collect();
        for held in held {
            match renewed.get(&held.key()) {
                Some(&(cancel, busy)) => {
                    // A busy lease is still held but was not extended: its
                    // deadline stays (the next beat renews it).
                    if !busy {
                        held.renewed(sent, lease);
                    }
                    if cancel && !held.cancel.is_cancelled() {
                        // A cancellation whose notification this worker missed.
                        held.cancel.cancel();
                        health.cancels_received(1);
                    }
                }
                // Handed over since the snapshot: the completer settles it.
                None if !held.is_running() => {}
                None => {
                    if held.mark_lost() {
                        tracing::warn!(
                            job.id = %held.id,
                            "conveyor: lost the lease of a running job (it was rescued, re-queued or claimed again); telling its handler to stop"
                        );
                    }
                }
            }
        }
    }
}
