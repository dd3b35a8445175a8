//! Keeps the leases of running jobs alive: one UPDATE for all of them, every
//! third of the lease, and only while the worker runs something. A job's
//! lease is renewed until its outcome is written, not just until its handler
//! returns.

use std::time::Duration;

use crate::client::Client;
use crate::db;
use crate::worker::{RunningJobs, cancel_running};

pub(crate) async fn run(
    client: Client,
    lease: Duration,
    running: RunningJobs,
    unrecorded: crate::worker::completer::Unrecorded,
) {
    let mut tick = tokio::time::interval(lease / 3);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        let jobs: Vec<_> = {
            let running = running.lock().unwrap_or_else(|p| p.into_inner());
            let unrecorded = unrecorded.lock().unwrap_or_else(|p| p.into_inner());
            let mut jobs: Vec<_> = running.values().map(|job| (job.id, job.attempt)).collect();
            jobs.extend(unrecorded.iter().copied());
            jobs.sort_unstable();
            jobs.dedup();
            jobs
        };
        if jobs.is_empty() {
            continue;
        }
        let inner = &client.inner;
        match db::heartbeat(&inner.pool, inner.queries, &jobs, lease.as_secs_f64()).await {
            // Cancellations whose notification this worker may have missed.
            Ok(cancelled) => cancelled
                .into_iter()
                .for_each(|id| cancel_running(&running, id)),
            Err(error) => tracing::warn!(%error, "conveyor: cannot renew leases"),
        }
    }
}
