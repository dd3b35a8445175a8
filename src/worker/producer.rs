//! The claim loop: claims as many jobs as there are free slots, in one
//! statement per queue, starts them, and sleeps when there is nothing to do
//! until a notification, the next known `run_at`, or the safety interval.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use backoff::backoff::Backoff;
use tokio::sync::mpsc::UnboundedSender;
use tokio::sync::{Notify, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::client::Client;
use crate::db::{self, OutcomeRow};
use crate::job::JobId;
use crate::notify::reconnect_backoff;
use crate::worker::executor;
use crate::worker::handler::Handler;
use crate::worker::{RunningJob, RunningJobs};

/// Most scheduled jobs promoted to pending per statement.
const PROMOTE_BATCH: i64 = 1_000;

pub(crate) struct Producer {
    pub client: Client,
    pub worker_id: Arc<str>,
    pub queues: Vec<String>,
    pub handlers: Arc<HashMap<String, Arc<dyn Handler>>>,
    pub task_names: Vec<String>,
    pub concurrency: usize,
    pub max_claim: usize,
    pub lease: Duration,
    pub safety_interval: Duration,
    pub default_timeout: Option<Duration>,
    pub cancel_grace: Duration,
    /// Set by the listener: something may be runnable.
    pub wake: Arc<Notify>,
    /// Set by the listener: a job may have been scheduled; look for due ones.
    pub promote: Arc<AtomicBool>,
    /// Jobs being run, shared with the heartbeat.
    pub running: RunningJobs,
    pub outcomes: UnboundedSender<OutcomeRow>,
    pub shutdown: watch::Receiver<bool>,
    pub grace: watch::Receiver<Duration>,
}

/// Jobs still running when the grace period ended: (id, attempt).
pub(crate) type Unfinished = Vec<(JobId, i32)>;

impl Producer {
    pub(crate) async fn run(mut self) -> Unfinished {
        let mut tasks: JoinSet<()> = JoinSet::new();
        let mut maybe_work = true;
        self.promote.store(true, Ordering::Relaxed);
        let mut next_due: Option<Instant> = None;
        let mut errors = reconnect_backoff();
        let mut error_wait: Option<Instant> = None;

        while !*self.shutdown.borrow() {
            if error_wait.is_none() {
                match self
                    .fill_slots(&mut tasks, &mut maybe_work, &mut next_due)
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
            let timer = [next_due, error_wait, Some(safety)]
                .into_iter()
                .flatten()
                .min()
                .unwrap_or(safety);
            tokio::select! {
                _ = self.shutdown.changed() => {}
                Some(joined) = tasks.join_next_with_id(), if !tasks.is_empty() => {
                    // Collect every job that has finished, then claim for all free slots at once.
                    let mut joined = Some(joined);
                    while let Some(result) = joined {
                        self.finished(result);
                        joined = tasks.try_join_next_with_id();
                    }
                }
                _ = self.wake.notified() => maybe_work = true,
                _ = tokio::time::sleep_until(timer) => {
                    let now = Instant::now();
                    if error_wait.is_some_and(|at| at <= now) {
                        error_wait = None;
                    }
                    if next_due.is_some_and(|at| at <= now) || safety <= now {
                        self.promote.store(true, Ordering::Relaxed);
                        maybe_work = true;
                        next_due = None;
                    }
                }
            }
        }
        self.drain(tasks).await
    }

    /// Promotes due jobs if asked to, then claims while slots are free and
    /// full batches come back.
    async fn fill_slots(
        &mut self,
        tasks: &mut JoinSet<()>,
        maybe_work: &mut bool,
        next_due: &mut Option<Instant>,
    ) -> crate::Result<()> {
        let inner = &self.client.inner;
        if self.promote.swap(false, Ordering::Relaxed) {
            let promoted = db::promote(&inner.pool, inner.queries, &self.queues, PROMOTE_BATCH)
                .await
                .inspect_err(|_| self.promote.store(true, Ordering::Relaxed))?;
            *next_due = promoted.next_run_at.map(|at| {
                // Capped: a run_at years away must not overflow the timer.
                let wait = (at - promoted.db_now)
                    .to_std()
                    .unwrap_or_default()
                    .min(Duration::from_secs(24 * 3600));
                Instant::now() + wait + Duration::from_millis(1)
            });
            if promoted.promoted > 0 {
                *maybe_work = true;
                if promoted.promoted >= PROMOTE_BATCH {
                    self.promote.store(true, Ordering::Relaxed);
                }
            }
        }
        while *maybe_work && tasks.len() < self.concurrency {
            let mut want = (self.concurrency - tasks.len()).min(self.max_claim);
            let asked = want;
            for queue in &self.queues {
                if want == 0 {
                    break;
                }
                let jobs = db::claim(
                    &inner.pool,
                    inner.queries,
                    queue,
                    &self.task_names,
                    want as i64,
                    self.lease.as_secs_f64(),
                    &self.worker_id,
                )
                .await?;
                want -= jobs.len().min(want);
                for job in jobs {
                    let Some(handler) = self.handlers.get(&job.task).cloned() else {
                        // Cannot happen: the claim filters on registered names.
                        continue;
                    };
                    let running = RunningJob {
                        id: job.id,
                        attempt: job.attempt,
                        cancel: tokio_util::sync::CancellationToken::new(),
                    };
                    let abort = tasks.spawn(executor::execute(
                        job,
                        handler,
                        executor::Limits {
                            worker_id: self.worker_id.clone(),
                            default_timeout: self.default_timeout,
                            cancel_grace: self.cancel_grace,
                            cancel: running.cancel.clone(),
                        },
                        self.outcomes.clone(),
                    ));
                    self.lock_running().insert(abort.id(), running);
                }
            }
            if want > 0 || asked == 0 {
                // A short batch: the queues are drained for now.
                *maybe_work = false;
            }
        }
        Ok(())
    }

    fn lock_running(&self) -> std::sync::MutexGuard<'_, HashMap<tokio::task::Id, RunningJob>> {
        self.running.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Forgets an executor that ended (its outcome is with the completer).
    fn finished(&self, joined: Result<(tokio::task::Id, ()), tokio::task::JoinError>) {
        let id = match joined {
            Ok((id, ())) => id,
            Err(e) => e.id(),
        };
        self.lock_running().remove(&id);
    }

    /// Stops claiming, waits up to the grace period for running jobs, aborts
    /// the rest and returns them.
    async fn drain(mut self, mut tasks: JoinSet<()>) -> Unfinished {
        let deadline = Instant::now() + *self.grace.borrow_and_update();
        while !tasks.is_empty() {
            tokio::select! {
                Some(joined) = tasks.join_next_with_id() => self.finished(joined),
                _ = tokio::time::sleep_until(deadline) => break,
            }
        }
        tasks.shutdown().await;
        let unfinished: Unfinished = self
            .lock_running()
            .drain()
            .map(|(_, job)| (job.id, job.attempt))
            .collect();
        unfinished
    }
}
