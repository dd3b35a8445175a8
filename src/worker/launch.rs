//! Starting a worker: checks the settings, opens the worker's own pool,
//! builds what its services share, lists the services and starts each under
//! a supervisor that restarts it if it panics (see [`super::service`]).

use std::sync::Arc;
use std::time::Duration;

use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::client::Client;
use crate::db;
use crate::error::{Error, Result};
use crate::failover::{Connector, OwnPool};
use crate::worker::ahead::HoldLimit;
use crate::worker::completer::Completer;
use crate::worker::health::Health;
use crate::worker::lease::RunningJobs;
use crate::worker::producer::{self, Unfinished};
use crate::worker::service::{Hints, RunningService, Service, Shared};
use crate::worker::{
    BOOKKEEPING_CONNECTIONS, ShutdownReport, WorkerBuilder, WorkerHandle, default_worker_id,
    heartbeat, listener, lost, registry, upkeep,
};

impl WorkerBuilder {
    fn check(&self) -> Result<()> {
        if self.handlers.is_empty() {
            return Err(Error::Config("a worker needs at least one handler".into()));
        }
        if self.queues.is_empty() || self.queues.iter().any(String::is_empty) {
            return Err(Error::Config("a worker needs non-empty queue names".into()));
        }
        if self.weights.as_ref().is_some_and(|w| w.contains(&0)) {
            return Err(Error::Config("queue weights must be at least 1".into()));
        }
        if self.concurrency == 0 || self.max_claim == 0 {
            return Err(Error::Config(
                "concurrency and max_claim_batch must be at least 1".into(),
            ));
        }
        if self.lease < Duration::from_millis(300) {
            return Err(Error::Config("the lease must be at least 300 ms".into()));
        }
        // (A time this process adds to its clock must not overflow it.)
        let longest = Duration::from_secs(100 * 365 * 24 * 3600);
        let durations = [
            self.lease,
            self.safety_interval,
            self.prune_interval,
            self.cancel_grace,
            self.rescue_interval.unwrap_or_default(),
        ];
        if durations.iter().any(|d| *d > longest) {
            return Err(Error::Config(
                "the lease, the cancel grace and intervals must be at most 100 years".into(),
            ));
        }
        let too_short = |d: Duration| d < Duration::from_millis(10);
        if too_short(self.safety_interval)
            || too_short(self.prune_interval)
            || self.rescue_interval.is_some_and(too_short)
        {
            return Err(Error::Config(
                "safety, rescue and prune intervals must be at least 10 ms".into(),
            ));
        }
        if self
            .bookkeeping_pool
            .as_ref()
            .is_some_and(|pool| pool.options().get_max_connections() < 2)
        {
            return Err(Error::Config(
                "a worker's bookkeeping pool needs at least 2 connections".into(),
            ));
        }
        Ok(())
    }

    /// Starts the worker on the current tokio runtime.
    ///
    /// Besides its client's pool, which only handlers use, a worker opens
    /// connections of its own: a pool of 4 for
    /// claims, lease renewals, outcomes and maintenance (see
    /// [`WorkerBuilder::bookkeeping_pool`]), one for `LISTEN`, and one more
    /// while it leads periodic schedules.
    pub fn start(mut self) -> Result<WorkerHandle> {
        self.check()?;
        let (pool, own_pool) = self.pool();
        // The worker's statements go through a client of its own, on its own
        // pool, following the same primary (and pooler) as the user's client.
        let client = Client::builder(pool).like(&self.client).build()?;
        let shared = self.shared(client);
        let (completer, outbox) =
            Completer::new(shared.client.clone(), self.lease, shared.health.clone());
        let every = self.rescue_interval.unwrap_or(self.lease / 2);
        // Started in this order, stopped in the reverse order (see `Stop`):
        // the lost-lease recorder after the completer, whose lost outcomes
        // it writes, and the heartbeat after both, renewing the leases of
        // outcomes not yet written.
        let mut services = vec![
            heartbeat::service(&shared, completer.unrecorded()),
            listener::service(&shared),
            registry::service(&shared),
            upkeep::rescuer(&shared, every),
            upkeep::rotator(&shared),
            upkeep::pruner(&shared, self.retention, self.prune_interval),
        ];
        services.extend(upkeep::periodic(&shared, self.periodic));
        services.extend([lost::service(&shared), completer.service()]);
        let hold_limit = HoldLimit::new(self.give_back_held_after, self.hold_ahead_at_least);
        let (grace_tx, grace_rx) = watch::channel(Duration::ZERO);
        let settings = producer::Settings {
            handlers: self.handlers,
            weights: self.weights,
            max_claim: self.max_claim,
            claim_ahead: self.claim_ahead,
            safety_interval: self.safety_interval,
            default_timeout: self.default_timeout,
            cancel_grace: self.cancel_grace,
            hold_limit: hold_limit.clone(),
        };
        // Started last, stopped first.
        let producer = producer::service(&shared, settings, outbox, grace_rx);
        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        let task = spawn_services(&shared, services, producer, shutdown_rx, own_pool);
        tracing::info!(worker_id = %shared.worker_id, "conveyor: worker started");
        Ok(WorkerHandle {
            worker_id: shared.worker_id,
            shutdown: shutdown_tx,
            grace: grace_tx,
            health: shared.health,
            task: Some(task),
            hold_limit,
            wake: shared.hints.wake,
        })
    }

    /// The bookkeeping pool: the one given, or one of the worker's own
    /// (then returned too, to be closed at shutdown).
    fn pool(&mut self) -> (PgPool, Option<OwnPool>) {
        match self.bookkeeping_pool.take() {
            Some(pool) => (pool, None),
            None => {
                let own = bookkeeping_pool(&self.client.connector());
                (own.pool.clone(), Some(own))
            }
        }
    }

    /// What the services share, around the worker's own `client`.
    fn shared(&mut self, client: Client) -> Shared {
        #[cfg(feature = "metrics")]
        let health = Health::new(self.metrics.clone());
        #[cfg(not(feature = "metrics"))]
        let health = Health::new();
        Shared {
            client,
            worker_id: self
                .worker_id
                .take()
                .unwrap_or_else(default_worker_id)
                .into(),
            queues: self.queues.clone(),
            concurrency: self.concurrency,
            lease: self.lease,
            health: Arc::new(health),
            running: RunningJobs::default(),
            hints: Hints::new(),
        }
    }
}

/// Starts each service under its supervisor, in order, then the producer,
/// and returns the worker's own task. That task waits for the handle's
/// `shutdown`, then stops the producer (which drains its jobs), then the
/// services in the reverse order of their start, then settles what the
/// producer left: see [`settle`]. Aborting the task (dropping the handle)
/// aborts every service.
fn spawn_services(
    shared: &Shared,
    services: Vec<Service>,
    producer: Service<Unfinished>,
    mut shutdown: watch::Receiver<bool>,
    own_pool: Option<OwnPool>,
) -> JoinHandle<ShutdownReport> {
    let health = &shared.health;
    let mut services: Vec<RunningService> = services.into_iter().map(|s| s.spawn(health)).collect();
    let producer = producer.spawn(health);
    let shared = shared.clone();
    tokio::spawn(async move {
        // (An error: the handle is gone, and this task is being aborted.)
        let _ = shutdown.wait_for(|stop| *stop).await;
        let unfinished = producer.stop().await.unwrap_or_default();
        while let Some(service) = services.pop() {
            service.stop().await;
        }
        settle(&shared, &unfinished, own_pool).await
    })
}

/// After the services have stopped: gives back the jobs the producer left,
/// leaves the worker registry, closes the worker's own pool, and reports.
async fn settle(
    shared: &Shared,
    unfinished: &Unfinished,
    own_pool: Option<OwnPool>,
) -> ShutdownReport {
    let (client, id) = (&shared.client, &shared.worker_id);
    let report = release(client, unfinished, id).await;
    let inner = &client.inner;
    if let Err(error) = db::deregister_worker(&inner.pool, inner.queries, id).await {
        tracing::warn!(%error, "conveyor: cannot leave the worker registry; maintenance will mark this worker dead");
    }
    if let Some(own) = own_pool {
        own.pool.close().await;
    }
    shared.health.stopped();
    report
}

/// The worker's own pool, with the client pool's connect options (or
/// following its primary). No test before each acquire: a broken connection
/// fails its statement, which the caller retries, instead of costing every
/// statement a round trip.
fn bookkeeping_pool(connector: &Connector) -> OwnPool {
    connector.pool(
        PgPoolOptions::new()
            .max_connections(BOOKKEEPING_CONNECTIONS)
            .min_connections(0)
            .test_before_acquire(false)
            .acquire_timeout(Duration::from_secs(30)),
    )
}

/// Gives the jobs still running at the end of the grace period back.
async fn release(client: &Client, unfinished: &Unfinished, id: &str) -> ShutdownReport {
    let mut report = ShutdownReport {
        given_back_unstarted: unfinished.given_back,
        ..ShutdownReport::default()
    };
    let unfinished = &unfinished.leases;
    if unfinished.is_empty() {
        return report;
    }
    let inner = &client.inner;
    match db::release(&inner.pool, inner.queries, unfinished, id).await {
        Ok(released) => report.released = released as usize,
        Err(error) => {
            tracing::error!(%error, "conveyor: cannot give back unfinished jobs; their leases will expire");
            report.unreleased = unfinished.iter().map(|(id, _)| *id).collect();
        }
    }
    report
}
