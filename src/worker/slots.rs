//! The worker's slots and the jobs it holds ahead of them: held jobs start
//! in free slots, oldest first; an executor that ends frees its slot; a job
//! held too long for a slot is given back. How many jobs to hold, and for
//! how long, is [`ahead`](super::ahead)'s business; when to claim, the
//! [`producer`](super::producer)'s.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::client::Client;
use crate::db;
use crate::job::{Job, JobState};
use crate::worker::ahead::{HoldLimit, Pace};
use crate::worker::completer::Outbox;
use crate::worker::executor;
use crate::worker::handler::Handler;
use crate::worker::lease::{Ahead, Lease, RunningJobs, lock};
use crate::worker::service::Shared;

/// An executor that ended: its task's id (and its panic, ignored here).
type Joined = Result<(tokio::task::Id, ()), tokio::task::JoinError>;

/// The slots of a worker and the jobs held ahead of them; cloned with the
/// producer to start it again after a panic (the claims live on in
/// `running`).
#[derive(Clone)]
pub(crate) struct Slots {
    /// Gives held jobs back.
    client: Client,
    worker_id: Arc<str>,
    /// Jobs run at once.
    concurrency: usize,
    /// Most jobs held claimed ahead of free slots (see [`super::ahead`]).
    claim_ahead: usize,
    handlers: Arc<HashMap<String, Arc<dyn Handler>>>,
    /// What every executor is given.
    limits: executor::Limits,
    outcomes: Outbox,
    /// Jobs being run or held ahead, shared with the heartbeat.
    running: RunningJobs,
    /// When each running executor was started (for [`Pace::finished_in`]).
    started_at: HashMap<tokio::task::Id, Instant>,
    /// The pace at which jobs were started lately.
    pace: Pace,
    /// How long a held job waits for a slot before it is given back.
    hold_limit: HoldLimit,
}

impl Slots {
    /// The slots of the worker `shared` describes, running `handlers`.
    pub(crate) fn new(
        shared: &Shared,
        handlers: Arc<HashMap<String, Arc<dyn Handler>>>,
        claim_ahead: usize,
        limits: executor::Limits,
        outcomes: Outbox,
        hold_limit: HoldLimit,
    ) -> Slots {
        Slots {
            client: shared.client.clone(),
            worker_id: shared.worker_id.clone(),
            concurrency: shared.concurrency,
            claim_ahead,
            handlers,
            limits,
            outcomes,
            running: shared.running.clone(),
            started_at: HashMap::new(),
            pace: Pace::new(Instant::now(), shared.concurrency),
            hold_limit,
        }
    }

    /// Slots not taken by one of `tasks`.
    pub(crate) fn free(&self, tasks: &JoinSet<()>) -> usize {
        self.concurrency - tasks.len().min(self.concurrency)
    }

    /// Jobs held ahead.
    pub(crate) fn held(&self) -> usize {
        lock(&self.running).ahead.len()
    }

    /// How many jobs to hold ahead at `now`: what the pace starts within
    /// the horizon (see [`Pace::target`]), at least what a test asked for,
    /// at most `claim_ahead`.
    pub(crate) fn hold_target(&mut self, now: Instant) -> usize {
        let at_least = self.hold_limit.at_least().min(self.claim_ahead);
        (self.pace.target(self.claim_ahead, now)).max(at_least)
    }

    /// Counts a claim that took `took` (see [`Pace::claimed_in`]).
    pub(crate) fn claimed_in(&mut self, took: Duration) {
        self.pace.claimed_in(took);
    }

    /// Holds claimed jobs (each with its claim's token) until a slot frees
    /// up, under leases that lapse at `deadline` unless renewed.
    pub(crate) fn hold(&self, jobs: impl IntoIterator<Item = (Job, i64)>, deadline: Instant) {
        // A held job's wait for a slot counts from its arrival: a claim
        // that took long (a pool or a pooler busy) is no reason to give
        // its jobs back.
        let arrived = Instant::now();
        let mut claims = lock(&self.running);
        for (job, token) in jobs {
            let lease = Lease::new(job.id, token, deadline);
            claims.ahead.push_back(Ahead {
                job,
                lease,
                since: arrived,
            });
        }
    }

    /// Fails claimed jobs whose row cannot be decoded, each with its reason:
    /// they never run (their arguments cannot be read), and no retry would
    /// read them better.
    pub(crate) fn fail_undecodable(&self, jobs: Vec<db::Undecodable>) {
        if jobs.is_empty() {
            return;
        }
        self.limits.health.undecodable(jobs.len());
        for job in jobs {
            tracing::error!(job.id = %job.id, error = %job.error, "conveyor: failing a job whose row cannot be decoded");
            self.outcomes.send(db::OutcomeRow {
                id: job.id,
                lease_token: job.lease_token,
                queue: job.queue,
                task: job.task,
                state: JobState::Failure,
                result: None,
                error: Some(job.error),
                retry_in_secs: None,
                wait_ms: None,
                // Its callbacks and workflow, if any, learn of the failure.
                follow_up: true,
            });
        }
    }

    /// Starts held jobs in the free slots, oldest first. A job whose lease
    /// was lost or lapsed while it waited is dropped: the database no longer
    /// holds it for this worker.
    pub(crate) fn start_ahead(&mut self, tasks: &mut JoinSet<()>) {
        let mut claims = lock(&self.running);
        while tasks.len() < self.concurrency {
            let Some(Ahead { job, lease, .. }) = claims.ahead.pop_front() else {
                return;
            };
            if lease.is_lost() || lease.lapsed() {
                continue;
            }
            if lease.cancel.is_cancelled() {
                // Cancelled while held: it ends cancelled without running.
                if lease.hand_over() {
                    self.outcomes
                        .send(db::OutcomeRow::cancelled(&job, lease.token));
                }
                continue;
            }
            let Some(handler) = self.handlers.get(&job.task).cloned() else {
                // Cannot happen: the claim filters on registered names.
                continue;
            };
            let abort = tasks.spawn(executor::execute(
                job,
                lease.clone(),
                handler,
                self.limits.clone(),
                self.outcomes.clone(),
            ));
            claims.running.insert(abort.id(), lease);
            self.started_at.insert(abort.id(), Instant::now());
            self.pace.started(1);
        }
    }

    /// Forgets `first` and every other executor that has ended.
    pub(crate) fn finished_all(&mut self, first: Joined, tasks: &mut JoinSet<()>) {
        let mut joined = Some(first);
        while let Some(result) = joined {
            self.finished(result);
            joined = tasks.try_join_next_with_id();
        }
    }

    /// Forgets an executor that ended (its outcome is with the completer).
    pub(crate) fn finished(&mut self, joined: Joined) {
        let id = match joined {
            Ok((id, ())) => id,
            Err(e) => e.id(),
        };
        lock(&self.running).running.remove(&id);
        if let Some(at) = self.started_at.remove(&id) {
            self.pace.finished_in(at.elapsed());
        }
    }

    /// Gives back the held jobs that have waited longer than the hold limit
    /// ([`super::ahead::MAX_WAIT`] unless a test set another) for a slot.
    pub(crate) async fn give_back_stale(&mut self) -> crate::Result<usize> {
        self.give_back_waiting(self.hold_limit.get()).await
    }

    /// Gives back every held job (the shutdown begins).
    pub(crate) async fn give_back_all(&mut self) -> crate::Result<usize> {
        self.give_back_waiting(Duration::ZERO).await
    }

    /// Gives back the held jobs that have waited `longer` than this for a
    /// slot (all of them for `Duration::ZERO`): pending again, their attempt
    /// not spent, and idle workers woken. On error they stay held.
    async fn give_back_waiting(&mut self, longer: Duration) -> crate::Result<usize> {
        let now = Instant::now();
        let stale: Vec<Ahead> = {
            let mut claims = lock(&self.running);
            let waited = |a: &Ahead| now.duration_since(a.since) >= longer;
            let n = claims.ahead.iter().take_while(|a| waited(a)).count();
            claims.ahead.drain(..n).collect()
        };
        let leases: Vec<db::Lease> = stale
            .iter()
            .filter(|a| !a.lease.is_lost())
            .map(|a| a.lease.key())
            .collect();
        if leases.is_empty() {
            return Ok(0);
        }
        let inner = &self.client.inner;
        match db::release(&inner.pool, inner.queries, &leases, &self.worker_id).await {
            Ok(released) => {
                tracing::debug!(
                    released,
                    "conveyor: gave back jobs held ahead of a free slot"
                );
                Ok(usize::try_from(released).unwrap_or_default())
            }
            Err(error) => {
                let mut claims = lock(&self.running);
                for held in stale.into_iter().rev() {
                    claims.ahead.push_front(held);
                }
                Err(error)
            }
        }
    }

    /// When the oldest held job is due to be given back.
    pub(crate) fn give_back_at(&self) -> Option<Instant> {
        let claims = lock(&self.running);
        let wait = self.hold_limit.get();
        claims.ahead.front().and_then(|a| a.since.checked_add(wait))
    }

    /// Takes every claim left, running or held, whose lease was not lost
    /// (the executors are gone: the grace period is over).
    pub(crate) fn take_unfinished(&self) -> Vec<db::Lease> {
        let claims = std::mem::take(&mut *lock(&self.running));
        let held = claims.ahead.into_iter().map(|a| a.lease);
        claims
            .running
            .into_values()
            .chain(held)
            .filter(|lease| !lease.is_lost())
            .map(|lease| lease.key())
            .collect()
    }
}
