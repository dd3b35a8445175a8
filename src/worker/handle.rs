//! [`WorkerHandle`]: a running worker, its health, and its graceful
//! shutdown.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

use super::ahead::HoldLimit;
use super::health::{Health, WorkerHealth, WorkerTask};
use crate::error::{Error, Result};

/// What a graceful shutdown did with the jobs it held: those claimed ahead
/// and never started, and those still running at its deadline.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct ShutdownReport {
    /// Jobs given back as pending (no attempt spent) at the end of the grace
    /// period.
    pub released: usize,
    /// Jobs claimed ahead of a free slot and never started, given back as
    /// pending (no attempt spent) as soon as the shutdown began.
    pub given_back_unstarted: usize,
    /// Jobs that could not be given back (database unreachable); they run
    /// again when their leases expire.
    pub unreleased: Vec<crate::JobId>,
}

/// A running worker. Dropping it without [`WorkerHandle::shutdown`] stops
/// the worker abruptly (jobs return when their leases expire).
#[derive(Debug)]
pub struct WorkerHandle {
    pub(super) worker_id: Arc<str>,
    pub(super) shutdown: watch::Sender<bool>,
    pub(super) grace: watch::Sender<Duration>,
    pub(super) health: Arc<Health>,
    pub(super) task: Option<JoinHandle<ShutdownReport>>,
    pub(super) hold_limit: HoldLimit,
    pub(super) wake: Arc<Notify>,
}

impl WorkerHandle {
    /// The worker's id (`worker_id` of the jobs it holds).
    pub fn id(&self) -> &str {
        &self.worker_id
    }

    /// How the worker's background tasks are doing: restarts after a panic,
    /// leases lost, jobs that could not be decoded.
    pub fn health(&self) -> WorkerHealth {
        self.health.snapshot()
    }

    /// Test hook: makes background task `task` panic at its next round, to
    /// check that it is restarted. Not for production use.
    #[doc(hidden)]
    pub fn inject_panic(&self, task: WorkerTask) {
        self.health.inject_panic(task);
    }

    /// Test hook: changes how long a job held ahead waits for a slot before
    /// it is given back (see `WorkerBuilder::give_back_held_after`), from
    /// now on. Not for production use.
    #[doc(hidden)]
    pub fn give_back_held_after(&self, wait: Duration) {
        self.hold_limit.set(wait);
        // The producer sleeps until the oldest held job's old deadline.
        self.wake.notify_one();
    }

    /// Test hook: changes how many jobs are held ahead whatever the pace
    /// (see `WorkerBuilder::hold_ahead_at_least`), from now on. Not for
    /// production use.
    #[doc(hidden)]
    pub fn hold_ahead_at_least(&self, jobs: usize) {
        self.hold_limit.set_at_least(jobs);
    }

    /// Stops claiming, lets running jobs finish for up to `grace`, then aborts
    /// the rest and puts them back as pending without spending an attempt.
    /// Outcomes already produced are written before this returns.
    pub async fn shutdown(mut self, grace: Duration) -> Result<ShutdownReport> {
        self.grace.send_replace(grace);
        self.shutdown.send_replace(true);
        match self.task.take() {
            Some(task) => task
                .await
                .map_err(|e| Error::Config(format!("worker task failed: {e}"))),
            None => Ok(ShutdownReport::default()),
        }
    }

    /// Runs until SIGINT (Ctrl-C) or SIGTERM, then shuts down with `grace`.
    pub async fn run_until_signal(self, grace: Duration) -> Result<ShutdownReport> {
        shutdown_signal().await;
        tracing::info!("conveyor: shutting down on signal");
        self.shutdown(grace).await
    }
}

impl Drop for WorkerHandle {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            self.shutdown.send_replace(true);
            task.abort();
        }
    }
}

/// Resolves on SIGINT or SIGTERM.
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
