//! The claim loop: claims as many jobs as there are free slots (and, for
//! short jobs, some ahead of them: see [`super::ahead`]), in one statement per
//! queue, starts them, and sleeps when there is nothing to do until a
//! notification, the next known `run_at`, or the safety interval.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use backoff::backoff::Backoff;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::db;
use crate::supervise::reconnect_backoff;
use crate::worker::ahead::HoldLimit;
use crate::worker::completer::Outbox;
use crate::worker::executor;
use crate::worker::handler::Handler;
use crate::worker::health::WorkerTask;
use crate::worker::plan::QueuePlan;
use crate::worker::service::{Service, Shared, Shutdown, Stop};
use crate::worker::slots::Slots;

/// Most scheduled jobs promoted to pending per statement.
const PROMOTE_BATCH: i64 = 1_000;

/// While jobs are running, a claim for fewer than half a batch of free slots
/// waits up to this long for more slots to free up, so that a busy worker
/// claims (and commits) in batches rather than one job at a time.
const COALESCE: Duration = Duration::from_millis(2);

/// What the producer takes from the worker's settings.
pub(crate) struct Settings {
    /// The handlers, by task name.
    pub(crate) handlers: HashMap<String, Arc<dyn Handler>>,
    /// One weight per queue; `None`: strict order.
    pub(crate) weights: Option<Vec<u32>>,
    /// Most jobs claimed by one statement.
    pub(crate) max_claim: usize,
    /// Most jobs held claimed ahead of free slots (see [`crate::worker::ahead`]).
    pub(crate) claim_ahead: usize,
    /// Longest sleep without a notification.
    pub(crate) safety_interval: Duration,
    /// Time limit of an attempt whose job and task set none.
    pub(crate) default_timeout: Option<Duration>,
    /// How long a cancelled handler may take to stop.
    pub(crate) cancel_grace: Duration,
    /// How long a held job waits for a slot before it is given back.
    pub(crate) hold_limit: HoldLimit,
}

/// The producer service: claims jobs and starts them until the shutdown,
/// then drains (see [`Producer::run`]); stopped first, and awaited. `grace`
/// is the shutdown's grace period, set before the producer is told to stop.
pub(crate) fn service(
    shared: &Shared,
    settings: Settings,
    outcomes: Outbox,
    grace: watch::Receiver<Duration>,
) -> Service<Unfinished> {
    let mut task_names: Vec<String> = settings.handlers.keys().cloned().collect();
    task_names.sort();
    let limits = executor::Limits {
        worker_id: shared.worker_id.clone(),
        default_timeout: settings.default_timeout,
        cancel_grace: settings.cancel_grace,
        health: shared.health.clone(),
    };
    let slots = Slots::new(
        shared,
        Arc::new(settings.handlers),
        settings.claim_ahead,
        limits,
        outcomes,
        settings.hold_limit,
    );
    let producer = Producer {
        shared: shared.clone(),
        task_names: task_names.into(),
        max_claim: settings.max_claim,
        safety_interval: settings.safety_interval,
        limited: Vec::new(),
        plan: QueuePlan::new(settings.weights),
        slots,
        grace,
        tasks: Arc::default(),
    };
    Service::new(WorkerTask::Producer, Stop::Await, producer, Producer::run)
}

/// The producer's settings and state; cloned to start it again after a
/// panic (the executors it started live on in `tasks`, its claims in the
/// worker's running jobs).
#[derive(Clone)]
pub(crate) struct Producer {
    /// The worker's client, id, queues, lease and health, and the hints the
    /// listener leaves.
    shared: Shared,
    /// The tasks its claims ask for (those with a handler), sorted.
    task_names: Arc<[String]>,
    /// Most jobs claimed by one statement.
    max_claim: usize,
    /// Longest sleep without a notification.
    safety_interval: Duration,
    /// Queues with a global concurrency limit (claimed under the queue's lock).
    limited: Vec<String>,
    /// Which queue to ask first.
    plan: QueuePlan,
    /// The slots, and the jobs held ahead of them.
    slots: Slots,
    /// The grace period of the shutdown.
    grace: watch::Receiver<Duration>,
    /// The executors, kept across restarts of the producer.
    tasks: Arc<tokio::sync::Mutex<JoinSet<()>>>,
}

/// What the producer leaves for the shutdown to settle.
#[derive(Debug, Default)]
pub(crate) struct Unfinished {
    /// Jobs still running when the grace period ended, and jobs held ahead
    /// that could not be given back when it began.
    pub(crate) leases: Vec<db::Lease>,
    /// Jobs held ahead, never started, given back when the shutdown began.
    pub(crate) given_back: usize,
}

impl Producer {
    /// Claims and starts jobs until `shutdown` turns true, then drains
    /// (see [`Producer::drain`]).
    pub(crate) async fn run(mut self, mut shutdown: Shutdown) -> Unfinished {
        let tasks = self.tasks.clone();
        let mut tasks = tasks.lock().await;
        let tasks = &mut *tasks;
        let mut maybe_work = true;
        let hints = self.shared.hints.clone();
        hints.promote.store(true, Ordering::Relaxed);
        let mut next_due: Option<Instant> = None;
        let mut errors = reconnect_backoff();
        let mut error_wait: Option<Instant> = None;
        let mut claim_at: Option<Instant> = None;

        while !*shutdown.borrow() {
            self.shared.health.checkpoint(WorkerTask::Producer);
            if error_wait.is_none() {
                match self
                    .fill_slots(tasks, &mut maybe_work, &mut next_due, &mut claim_at)
                    .await
                {
                    Ok(()) => errors.reset(),
                    Err(error) => {
                        let wait = errors.next_backoff().unwrap_or(Duration::from_secs(5));
                        tracing::warn!(%error, ?wait, "conveyor: cannot claim jobs");
                        error_wait = Some(Instant::now() + wait);
                    }
                }
            }
            let safety = Instant::now() + self.safety_interval;
            let give_back = self.slots.give_back_at();
            let timer = [next_due, error_wait, claim_at, give_back, Some(safety)]
                .into_iter()
                .flatten()
                .min()
                .unwrap_or(safety);
            tokio::select! {
                _ = shutdown.changed() => {}
                Some(joined) = tasks.join_next_with_id(), if !tasks.is_empty() => {
                    // Every job that has finished, then a claim for all free slots at once.
                    self.slots.finished_all(joined, tasks);
                }
                _ = hints.wake.notified() => maybe_work = true,
                _ = tokio::time::sleep_until(timer) => {
                    let now = Instant::now();
                    if error_wait.is_some_and(|at| at <= now) {
                        error_wait = None;
                    }
                    if claim_at.is_some_and(|at| at <= now) {
                        claim_at = Some(now);
                    }
                    if safety <= now {
                        hints.refresh_queues.store(true, Ordering::Relaxed);
                    }
                    if next_due.is_some_and(|at| at <= now) || safety <= now {
                        hints.promote.store(true, Ordering::Relaxed);
                        maybe_work = true;
                        next_due = None;
                    }
                }
            }
        }
        self.drain(tasks).await
    }

    /// Promotes due jobs if asked to, gives back jobs held ahead too long,
    /// starts held jobs in free slots, then claims while there is room (free
    /// slots, and the claim-ahead buffer below its target) and full batches
    /// come back.
    async fn fill_slots(
        &mut self,
        tasks: &mut JoinSet<()>,
        maybe_work: &mut bool,
        next_due: &mut Option<Instant>,
        claim_at: &mut Option<Instant>,
    ) -> crate::Result<()> {
        let client = self.shared.client.clone();
        let inner = &client.inner;
        let (hints, queues) = (&self.shared.hints, &self.shared.queues);
        if hints.promote.swap(false, Ordering::Relaxed) {
            let promoted = db::promote(&inner.pool, inner.queries, queues, PROMOTE_BATCH)
                .await
                .inspect_err(|_| hints.promote.store(true, Ordering::Relaxed))?;
            let next_run = promoted.next_run_at.map(|at| {
                // Capped: a run_at years away must not overflow the timer.
                let wait = (at - promoted.db_now)
                    .to_std()
                    .unwrap_or_default()
                    .min(Duration::from_secs(24 * 3600));
                Instant::now() + wait + Duration::from_millis(1)
            });
            // Keep an earlier wake-up still ahead (a rate window reopening).
            let pending = next_due.filter(|at| *at > Instant::now());
            *next_due = [next_run, pending].into_iter().flatten().min();
            if promoted.promoted > 0 {
                *maybe_work = true;
                if promoted.promoted >= PROMOTE_BATCH {
                    hints.promote.store(true, Ordering::Relaxed);
                }
            }
        }
        if hints.refresh_queues.swap(false, Ordering::Relaxed) {
            self.limited = db::queue_limits(&inner.pool, inner.queries, queues)
                .await
                .inspect_err(|_| hints.refresh_queues.store(true, Ordering::Relaxed))?;
        }
        self.slots.give_back_stale().await?;
        loop {
            self.slots.start_ahead(tasks);
            if !*maybe_work {
                return Ok(());
            }
            let free = self.slots.free(tasks);
            let held = self.slots.held();
            // A queue with a global concurrency or rate limit counts held jobs
            // as running: holding them ahead would take them from others.
            let target = if self.limited.is_empty() {
                self.slots.hold_target(Instant::now())
            } else {
                0
            };
            let room = target.saturating_sub(held);
            if free + room == 0 || (free == 0 && held * 2 >= target) {
                // Busy, with enough held to go on with.
                return Ok(());
            }
            let half_batch = (self.shared.concurrency + target)
                .min(self.max_claim)
                .div_ceil(2);
            if free + room < half_batch && !tasks.is_empty() {
                // Little room: give others a moment to free up (see COALESCE).
                let at = *claim_at.get_or_insert_with(|| Instant::now() + COALESCE);
                if at > Instant::now() {
                    return Ok(());
                }
            }
            *claim_at = None;
            let mut want = (free + room).min(self.max_claim);
            let asked = want;
            for (queue, share) in self.plan.plan(self.shared.queues.len(), want) {
                let take = share.min(want);
                if take == 0 {
                    continue;
                }
                // (Owned here: the claim runs while `self` starts held jobs.)
                let queue = self.shared.queues[queue].clone();
                let (task_names, worker_id) =
                    (self.task_names.clone(), self.shared.worker_id.clone());
                let lease = self.shared.lease;
                let claim = db::Claim {
                    queue: &queue,
                    tasks: &task_names,
                    limit: take as i64,
                    lease_secs: lease.as_secs_f64(),
                    worker_id: &worker_id,
                    limited: self.limited.contains(&queue),
                };
                // The leases run from before the claim was sent: never
                // later, by this process's clock, than in the database.
                let sent = Instant::now();
                let claim = db::claim(&inner.pool, inner.queries, &claim);
                let claimed = self.while_claiming(tasks, claim).await?;
                self.slots.claimed_in(sent.elapsed());
                if let Some(until) = claimed.rate_limited_until {
                    // Come back when the rate window reopens.
                    // At least 10 ms: clocks of worker and database may differ.
                    let wait = (until - chrono::Utc::now())
                        .to_std()
                        .unwrap_or_default()
                        .max(Duration::from_millis(10));
                    let at = Instant::now() + wait.min(self.safety_interval);
                    *next_due = Some(next_due.map_or(at, |due| due.min(at)));
                }
                want -= (claimed.jobs.len() + claimed.undecodable.len()).min(want);
                self.slots.fail_undecodable(claimed.undecodable);
                let jobs = claimed.jobs.into_iter().map(|c| (c.job, c.lease_token));
                self.slots.hold(jobs, sent + lease);
            }
            if want > 0 || asked == 0 {
                // A short batch: the queues are drained for now.
                *maybe_work = false;
            }
        }
    }

    /// Awaits `claim`, starting held jobs meanwhile in the slots that free
    /// up: on a busy server a claim took about 100 ms (a fleet of small
    /// worker processes), and the slots sat idle with jobs in hand until
    /// held jobs were given back for having waited too long.
    async fn while_claiming<T>(
        &mut self,
        tasks: &mut JoinSet<()>,
        claim: impl std::future::Future<Output = T>,
    ) -> T {
        // What the previous queue's claim of this round brought starts now,
        // not when this one returns (it may wait for its turn).
        self.slots.start_ahead(tasks);
        tokio::pin!(claim);
        loop {
            tokio::select! {
                biased;
                done = &mut claim => return done,
                Some(joined) = tasks.join_next_with_id(), if !tasks.is_empty() => {
                    self.slots.finished_all(joined, tasks);
                    self.slots.start_ahead(tasks);
                }
            }
        }
    }

    /// Stops claiming, gives back the jobs held ahead, waits up to the grace
    /// period for running jobs, aborts the rest and returns them (with any
    /// held job that could not be given back).
    async fn drain(mut self, tasks: &mut JoinSet<()>) -> Unfinished {
        let given_back = self
            .slots
            .give_back_all()
            .await
            .inspect_err(|error| {
                tracing::warn!(%error, "conveyor: cannot give back jobs held ahead yet");
            })
            .unwrap_or_default();
        let deadline = Instant::now() + *self.grace.borrow_and_update();
        while !tasks.is_empty() {
            tokio::select! {
                Some(joined) = tasks.join_next_with_id() => self.slots.finished(joined),
                _ = tokio::time::sleep_until(deadline) => break,
            }
        }
        tasks.shutdown().await;
        let leases = self.slots.take_unfinished();
        Unfinished { leases, given_back }
    }
}
