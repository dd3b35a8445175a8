//! The claims a worker holds on the jobs it runs: shared by the producer
//! (which claims), the executor (which runs the job) and the heartbeat
//! (which renews the lease), so that a lease lost for any reason stops the
//! handler and keeps its outcome out of the database.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::db;
use crate::job::{Job, JobId};

/// Where a claim stands, from the worker's side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    /// The handler runs.
    Running,
    /// The executor handed the outcome to the completer.
    HandedOver,
    /// The lease is gone: the outcome must not be written.
    Lost,
}

/// One claim: the job, its fencing token, and the local view of its lease.
#[derive(Debug)]
pub(crate) struct Lease {
    pub id: JobId,
    /// The claim's fencing token (`conveyor.jobs.lease_token`).
    pub token: i64,
    /// Tells the handler to stop: its cancellation was asked for, or the
    /// lease was lost.
    pub cancel: CancellationToken,
    /// Shared with the handler's `TaskContext::lease_lost`.
    pub lost: Arc<AtomicBool>,
    stage: Mutex<Stage>,
    /// When the lease lapses unless renewed, by this process's clock:
    /// measured from before the claim or renewal was sent, so never later
    /// than the database's `lease_expires_at`.
    deadline: Mutex<Instant>,
}

impl Lease {
    pub(crate) fn new(id: JobId, token: i64, deadline: Instant) -> Arc<Lease> {
        Arc::new(Lease {
            id,
            token,
            cancel: CancellationToken::new(),
            lost: Arc::default(),
            stage: Mutex::new(Stage::Running),
            deadline: Mutex::new(deadline),
        })
    }

    /// The pair that fences this claim's writes.
    pub(crate) fn key(&self) -> db::Lease {
        (self.id, self.token)
    }

    fn stage(&self) -> std::sync::MutexGuard<'_, Stage> {
        self.stage.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn deadline_now(&self) -> Instant {
        *self.deadline.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The database renewed the lease with a statement sent at `sent`.
    pub(crate) fn renewed(&self, sent: Instant, lease: std::time::Duration) {
        let mut deadline = self.deadline.lock().unwrap_or_else(|p| p.into_inner());
        *deadline = (*deadline).max(sent + lease);
    }

    /// Resolves once the local deadline passes without a renewal.
    pub(crate) async fn expired(&self) {
        loop {
            let deadline = self.deadline_now();
            tokio::time::sleep_until(deadline).await;
            if self.deadline_now() <= Instant::now() {
                return;
            }
        }
    }

    /// Marks the lease lost and tells the handler (its cancellation fires).
    /// False if it was lost already or its outcome was handed over.
    pub(crate) fn mark_lost(&self) -> bool {
        let mut stage = self.stage();
        if *stage != Stage::Running {
            return false;
        }
        *stage = Stage::Lost;
        self.lost.store(true, Ordering::SeqCst);
        self.cancel.cancel();
        true
    }

    /// Whether the lease was lost.
    pub(crate) fn is_lost(&self) -> bool {
        *self.stage() == Stage::Lost
    }

    /// Claims the right to hand the outcome over; false if the lease was lost.
    pub(crate) fn hand_over(&self) -> bool {
        let mut stage = self.stage();
        if *stage != Stage::Running {
            return false;
        }
        *stage = Stage::HandedOver;
        true
    }

    /// Whether the handler still runs under this lease.
    pub(crate) fn is_running(&self) -> bool {
        *self.stage() == Stage::Running
    }

    /// Whether the local deadline has passed: the database may have given
    /// the job to another worker.
    pub(crate) fn lapsed(&self) -> bool {
        self.deadline_now() <= Instant::now()
    }
}

/// A job claimed ahead of a free slot: held under its lease (renewed by the
/// heartbeat) until a slot frees up, or given back.
#[derive(Debug)]
pub(crate) struct Ahead {
    pub job: Job,
    pub lease: Arc<Lease>,
    /// When its claim's rows arrived, by this process's clock.
    pub since: Instant,
}

/// Every claim a worker holds: jobs it runs and jobs it claimed ahead.
#[derive(Debug, Default)]
pub(crate) struct Claims {
    /// Jobs whose executor runs, by executor task.
    pub running: HashMap<tokio::task::Id, Arc<Lease>>,
    /// Jobs claimed ahead of a free slot, oldest first.
    pub ahead: VecDeque<Ahead>,
}

/// The claims of one worker, shared by producer, heartbeat and listener.
pub(crate) type RunningJobs = Arc<Mutex<Claims>>;

/// Locks the claims (a panic elsewhere does not poison them for good).
pub(crate) fn lock(running: &RunningJobs) -> std::sync::MutexGuard<'_, Claims> {
    running.lock().unwrap_or_else(|p| p.into_inner())
}

/// The leases of running and claimed-ahead jobs, as they are now.
pub(crate) fn snapshot(running: &RunningJobs) -> Vec<Arc<Lease>> {
    let claims = lock(running);
    let ahead = claims.ahead.iter().map(|a| &a.lease);
    claims.running.values().chain(ahead).cloned().collect()
}

/// Signals cancellation to the job `id`, if this worker runs it or holds it
/// ahead (then it ends cancelled as soon as it is started). Returns how many
/// claims it newly reached (0 or 1).
pub(crate) fn cancel_running(running: &RunningJobs, id: JobId) -> usize {
    let leases: Vec<_> = snapshot(running)
        .into_iter()
        .filter(|lease| lease.id == id && !lease.cancel.is_cancelled())
        .collect();
    for lease in &leases {
        tracing::info!(job.id = %id, "conveyor: cancelling running job");
        lease.cancel.cancel();
    }
    leases.len()
}
