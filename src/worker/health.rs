//! What a worker's background tasks have been through: restarts after a
//! panic, leases lost, jobs that could not be decoded. Read with
//! [`crate::WorkerHandle::health`].

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use tokio::sync::Notify;

/// A worker's background tasks, each supervised (restarted if it panics).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum WorkerTask {
    /// Claims jobs and starts them.
    Producer,
    /// Writes outcomes.
    Completer,
    /// Renews leases.
    Heartbeat,
    /// Listens for notifications (new jobs, cancellations, queue changes).
    Listener,
    /// Recovers jobs whose lease expired.
    Rescuer,
    /// Empties sealed slots of the ready ring (`conveyor.ready`).
    Rotator,
    /// Deletes finished jobs past their retention.
    Pruner,
    /// Enqueues periodic jobs (when this process leads).
    Periodic,
    /// Keeps the worker's row in the registry (`conveyor.workers`).
    Registry,
    /// Adds the leases this worker lost to the rollups (`conveyor.stats`).
    LostLeases,
}

impl WorkerTask {
    /// Every task, in this order.
    pub const ALL: [WorkerTask; 10] = [
        WorkerTask::Producer,
        WorkerTask::Completer,
        WorkerTask::Heartbeat,
        WorkerTask::Listener,
        WorkerTask::Rescuer,
        WorkerTask::Rotator,
        WorkerTask::Pruner,
        WorkerTask::Periodic,
        WorkerTask::Registry,
        WorkerTask::LostLeases,
    ];

    /// Its name, as logs and metrics give it.
    pub fn as_str(self) -> &'static str {
        match self {
            WorkerTask::Producer => "producer",
            WorkerTask::Completer => "completer",
            WorkerTask::Heartbeat => "heartbeat",
            WorkerTask::Listener => "listener",
            WorkerTask::Rescuer => "rescuer",
            WorkerTask::Rotator => "rotator",
            WorkerTask::Pruner => "pruner",
            WorkerTask::Periodic => "periodic",
            WorkerTask::Registry => "registry",
            WorkerTask::LostLeases => "lost_leases",
        }
    }

    fn index(self) -> usize {
        WorkerTask::ALL
            .iter()
            .position(|t| *t == self)
            .unwrap_or_default()
    }
}

impl std::fmt::Display for WorkerTask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A snapshot of a worker's health (see [`crate::WorkerHandle::health`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkerHealth {
    /// Whether the worker still runs (false once it has shut down).
    pub running: bool,
    /// Background tasks restarted after a panic, and how many times.
    pub restarts: BTreeMap<WorkerTask, u64>,
    /// The latest panic of a background task: which, and its message.
    pub last_panic: Option<(WorkerTask, String)>,
    /// Jobs whose lease this worker lost before their outcome was written
    /// (their handler was told to stop; the outcome was not recorded).
    /// Each is also added to the rollups (`conveyor_leases_lost_total`,
    /// served by every metrics process), unless counted in
    /// `leases_lost_unrecorded`.
    pub leases_lost: u64,
    /// Of `leases_lost`, those that could not be added to the rollups (the
    /// database refused the write, or was out of reach until the worker
    /// stopped); each failure is logged.
    pub leases_lost_unrecorded: u64,
    /// Claimed jobs whose row could not be decoded (each was failed with the
    /// reason, without running).
    pub undecodable_jobs: u64,
    /// Cancellation requests this worker received for a job it was running
    /// or holding ahead, and passed on (the handler's `ctx.cancelled()`
    /// resolved, or the held job ended cancelled without starting).
    pub cancels_received: u64,
    /// A transaction has held slots of the ready ring for more than a
    /// second (a `pg_dump`?): they cannot be emptied, so the ring moved to
    /// another bank of slots (`conveyor.ready_bank`) while it lasts.
    pub ring_held: bool,
    /// It holds the ring's current bank too: no other bank was free, and
    /// claims slow down until it ends (docs/operations.md, "Backups and long transactions").
    pub ring_stuck: bool,
    /// The bank of the ready ring this worker's claims read.
    pub ring_bank: usize,
}

/// The live counters behind [`WorkerHealth`], shared by the worker's tasks.
#[derive(Debug, Default)]
pub(crate) struct Health {
    stopped: AtomicBool,
    restarts: [AtomicU64; WorkerTask::ALL.len()],
    last_panic: Mutex<Option<(WorkerTask, String)>>,
    leases_lost: AtomicU64,
    /// Leases lost not yet added to the rollups, by (queue, task): taken and
    /// written by the lost-lease recorder (`worker::lost`).
    lost_unwritten: Mutex<BTreeMap<(String, String), i64>>,
    /// Wakes the recorder when a loss is counted.
    lost_wake: Notify,
    leases_lost_unrecorded: AtomicU64,
    undecodable: AtomicU64,
    cancels: AtomicU64,
    ring_held: AtomicBool,
    ring_stuck: AtomicBool,
    ring_bank: AtomicUsize,
    /// Tasks told to panic at their next checkpoint (a test hook).
    faults: Mutex<Vec<WorkerTask>>,
    #[cfg(feature = "metrics")]
    metrics: Option<crate::Metrics>,
}

impl Health {
    #[cfg(feature = "metrics")]
    pub(crate) fn new(metrics: Option<crate::Metrics>) -> Health {
        Health {
            metrics,
            ..Health::default()
        }
    }

    #[cfg(not(feature = "metrics"))]
    pub(crate) fn new() -> Health {
        Health::default()
    }

    pub(crate) fn snapshot(&self) -> WorkerHealth {
        let restarts = WorkerTask::ALL
            .into_iter()
            .map(|task| (task, self.restarts[task.index()].load(Ordering::Relaxed)))
            .filter(|(_, n)| *n > 0)
            .collect();
        WorkerHealth {
            running: !self.stopped.load(Ordering::Relaxed),
            restarts,
            last_panic: self
                .last_panic
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
            leases_lost: self.leases_lost.load(Ordering::Relaxed),
            leases_lost_unrecorded: self.leases_lost_unrecorded.load(Ordering::Relaxed),
            undecodable_jobs: self.undecodable.load(Ordering::Relaxed),
            cancels_received: self.cancels.load(Ordering::Relaxed),
            ring_held: self.ring_held.load(Ordering::Relaxed),
            ring_stuck: self.ring_stuck.load(Ordering::Relaxed),
            ring_bank: self.ring_bank(),
        }
    }

    pub(crate) fn stopped(&self) {
        self.stopped.store(true, Ordering::Relaxed);
    }

    /// `task` panicked with `message` and is being restarted.
    pub(crate) fn restarted(&self, task: WorkerTask, message: &str) {
        self.restarts[task.index()].fetch_add(1, Ordering::Relaxed);
        *self.last_panic.lock().unwrap_or_else(|p| p.into_inner()) =
            Some((task, message.to_string()));
        #[cfg(feature = "metrics")]
        if let Some(metrics) = &self.metrics {
            metrics.task_restarted(task.as_str());
        }
    }

    /// A lease of a job of `queue` and `task` was lost: counted here, and
    /// handed to the lost-lease recorder for the rollups (never waits for
    /// the database).
    pub(crate) fn lease_lost(&self, queue: &str, task: &str) {
        self.leases_lost.fetch_add(1, Ordering::Relaxed);
        *lock(&self.lost_unwritten)
            .entry((queue.to_string(), task.to_string()))
            .or_default() += 1;
        self.lost_wake.notify_one();
    }

    /// Resolves once a loss was counted since the last call (at once if
    /// one was counted before this call and not waited for yet).
    pub(crate) async fn lost_counted(&self) {
        self.lost_wake.notified().await;
    }

    /// Takes the losses not yet added to the rollups.
    pub(crate) fn take_lost(&self) -> Vec<((String, String), i64)> {
        std::mem::take(&mut *lock(&self.lost_unwritten))
            .into_iter()
            .collect()
    }

    /// Puts back losses whose write failed, to be written with the next.
    pub(crate) fn put_back_lost(&self, lost: Vec<((String, String), i64)>) {
        let mut unwritten = lock(&self.lost_unwritten);
        for (key, n) in lost {
            *unwritten.entry(key).or_default() += n;
        }
    }

    /// `n` losses will never be in the rollups.
    pub(crate) fn lost_unrecorded(&self, n: i64) {
        self.leases_lost_unrecorded
            .fetch_add(n.max(0).unsigned_abs(), Ordering::Relaxed);
    }

    pub(crate) fn undecodable(&self, n: usize) {
        self.undecodable.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Whether a long transaction holds slots of the ready ring, and slots
    /// of its current bank (set by the rotator).
    pub(crate) fn set_ring_held(&self, held: bool, stuck: bool) {
        self.ring_held.store(held, Ordering::Relaxed);
        self.ring_stuck.store(stuck, Ordering::Relaxed);
    }

    /// The bank of the ready ring to claim from (set by the rotator, and by
    /// the listener when the ring announces a change).
    pub(crate) fn ring_bank(&self) -> usize {
        self.ring_bank.load(Ordering::Relaxed)
    }

    pub(crate) fn set_ring_bank(&self, bank: usize) {
        self.ring_bank.store(bank, Ordering::Relaxed);
    }

    /// A cancellation request reached `n` of this worker's claims.
    pub(crate) fn cancels_received(&self, n: usize) {
        self.cancels.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Arms a panic at `task`'s next checkpoint (test hook).
    pub(crate) fn inject_panic(&self, task: WorkerTask) {
        self.faults
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(task);
    }

    /// Panics if a panic was injected into `task` (see [`Health::inject_panic`]).
    pub(crate) fn checkpoint(&self, task: WorkerTask) {
        let armed = {
            let mut faults = self.faults.lock().unwrap_or_else(|p| p.into_inner());
            match faults.iter().position(|t| *t == task) {
                Some(i) => {
                    faults.remove(i);
                    true
                }
                None => false,
            }
        };
        if armed {
            panic!("conveyor: panic injected into the {task} task (test hook)");
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

impl crate::maintenance::rotator::RingWatch for Health {
    fn bank(&self) -> usize {
        self.ring_bank()
    }

    fn set_bank(&self, bank: usize) {
        self.set_ring_bank(bank);
    }

    fn set_held(&self, held: bool, stuck: bool) {
        self.set_ring_held(held, stuck);
    }
}
