//! Starting a worker: checks the settings, opens the worker's own pool, and
//! starts every background task under a supervisor that restarts it if it
//! panics.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde::Deserialize;
use sqlx::postgres::PgPoolOptions;
use tokio::sync::{Notify, watch};

use crate::client::Client;
use crate::db;
use crate::error::{Error, Result};
use crate::failover::{Connector, OwnPool};
use crate::notify::{ListenEvent, spawn_listener};
use crate::supervise::{AbortOnDrop, Checkpoint, supervise};
use crate::worker::ahead::{HoldLimit, Pace};
use crate::worker::completer::Completer;
use crate::worker::health::{Health, WorkerTask};
use crate::worker::lease::{RunningJobs, cancel_running};
use crate::worker::plan::QueuePlan;
use crate::worker::registry::{Registry, beat_interval};
use crate::worker::{
    BOOKKEEPING_CONNECTIONS, ShutdownReport, WorkerBuilder, WorkerHandle, default_worker_id,
    executor, heartbeat, lost, producer,
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
    /// connections of its own: a pool of [`BOOKKEEPING_CONNECTIONS`] for
    /// claims, lease renewals, outcomes and maintenance (see
    /// [`WorkerBuilder::bookkeeping_pool`]), one for `LISTEN`, and one more
    /// while it leads periodic schedules.
    pub fn start(mut self) -> Result<WorkerHandle> {
        self.check()?;
        let (pool, own_pool) = match self.bookkeeping_pool.take() {
            Some(pool) => (pool, None),
            None => {
                let own = bookkeeping_pool(&self.client.connector());
                (own.pool.clone(), Some(own))
            }
        };
        // The worker's statements go through a client of its own, on its own
        // pool, following the same primary (and pooler) as the user's client.
        let client = Client::builder(pool.clone()).like(&self.client).build()?;
        let worker_id: Arc<str> = self
            .worker_id
            .take()
            .unwrap_or_else(default_worker_id)
            .into();
        #[cfg(feature = "metrics")]
        let health = Arc::new(Health::new(self.metrics.clone()));
        #[cfg(not(feature = "metrics"))]
        let health = Arc::new(Health::new());
        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        let (grace_tx, grace_rx) = watch::channel(Duration::ZERO);
        let wake = Arc::new(Notify::new());
        let hold_limit = HoldLimit::new(self.give_back_held_after, self.hold_ahead_at_least);
        let promote = Arc::new(AtomicBool::new(true));
        let refresh_queues = Arc::new(AtomicBool::new(true));
        let running = RunningJobs::default();
        let (completer, outbox) = Completer::new(client.clone(), self.lease, health.clone());
        let unrecorded = completer.unrecorded.clone();

        let restarted = |task: WorkerTask| {
            let health = health.clone();
            move |message: &str| health.restarted(task, message)
        };
        let checkpoint = |task: WorkerTask| -> Checkpoint {
            let health = health.clone();
            Arc::new(move || health.checkpoint(task))
        };
        let listener = {
            let queues = self.queues.clone();
            let (wake, promote, running) = (wake.clone(), promote.clone(), running.clone());
            let refresh = refresh_queues.clone();
            let health = health.clone();
            let q = client.inner.queries;
            let channels = vec![
                q.job_ready_channel,
                q.job_cancel_channel,
                q.queue_changed_channel,
                q.ring_channel,
            ];
            let on_event = move |event: ListenEvent<'_>| {
                health.checkpoint(WorkerTask::Listener);
                match event {
                    ListenEvent::Notification { channel, payload }
                        if channel == q.job_cancel_channel =>
                    {
                        if let Ok(id) = payload.parse() {
                            health.cancels_received(cancel_running(&running, id));
                        }
                    }
                    ListenEvent::Notification { channel, .. }
                        if channel == q.queue_changed_channel =>
                    {
                        refresh.store(true, Ordering::Relaxed);
                        wake.notify_one();
                    }
                    // The ready ring moved to another bank: claim from it
                    // now (the rows of the old one were carried there).
                    ListenEvent::Notification { channel, payload } if channel == q.ring_channel => {
                        match payload.parse::<usize>() {
                            Ok(bank) if bank < db::READY_BANKS => {
                                health.set_ring_bank(bank);
                                wake.notify_one();
                            }
                            _ => tracing::debug!(payload, "conveyor: ignoring a ring payload"),
                        }
                    }
                    event => {
                        if matches!(event, ListenEvent::Gap) {
                            refresh.store(true, Ordering::Relaxed);
                        }
                        on_job_ready(event, &queues, &wake, &promote)
                    }
                }
            };
            spawn_listener(
                &client.connector(),
                channels,
                None,
                on_event,
                restarted(WorkerTask::Listener),
            )
            .0
        };
        let heartbeat = {
            let (client, lease, running) = (client.clone(), self.lease, running.clone());
            let (unrecorded, health) = (unrecorded.clone(), health.clone());
            tokio::spawn(supervise(
                "heartbeat",
                move || {
                    heartbeat::run(
                        client.clone(),
                        lease,
                        running.clone(),
                        unrecorded.clone(),
                        health.clone(),
                    )
                },
                restarted(WorkerTask::Heartbeat),
            ))
        };
        let registry = {
            let registry = Registry {
                client: client.clone(),
                id: worker_id.clone(),
                queues: self.queues.clone(),
                concurrency: self.concurrency,
                beat: beat_interval(self.lease),
                running: running.clone(),
                health: health.clone(),
            };
            tokio::spawn(supervise(
                "registry",
                move || registry.clone().run(),
                restarted(WorkerTask::Registry),
            ))
        };
        let rescuer = {
            let client = client.clone();
            let every = self.rescue_interval.unwrap_or(self.lease / 2);
            let checkpoint = checkpoint(WorkerTask::Rescuer);
            tokio::spawn(supervise(
                "rescuer",
                move || crate::maintenance::rescuer::run(client.clone(), every, checkpoint.clone()),
                restarted(WorkerTask::Rescuer),
            ))
        };
        let rotator = {
            let client = client.clone();
            let health: Arc<dyn crate::maintenance::rotator::RingWatch> = health.clone();
            let checkpoint = checkpoint(WorkerTask::Rotator);
            tokio::spawn(supervise(
                "rotator",
                move || {
                    crate::maintenance::rotator::run(
                        client.clone(),
                        health.clone(),
                        checkpoint.clone(),
                    )
                },
                restarted(WorkerTask::Rotator),
            ))
        };
        let pruner = {
            let (client, retention) = (client.clone(), self.retention.clone());
            let every = self.prune_interval;
            let checkpoint = checkpoint(WorkerTask::Pruner);
            tokio::spawn(supervise(
                "pruner",
                move || {
                    crate::maintenance::pruner::run(
                        client.clone(),
                        retention.clone(),
                        every,
                        checkpoint.clone(),
                    )
                },
                restarted(WorkerTask::Pruner),
            ))
        };
        let periodic = (!self.periodic.is_empty()).then(|| {
            let client = client.clone();
            let schedules = Arc::new(std::mem::take(&mut self.periodic));
            let checkpoint = checkpoint(WorkerTask::Periodic);
            tokio::spawn(supervise(
                "periodic",
                move || {
                    crate::maintenance::periodic::run(
                        client.clone(),
                        schedules.clone(),
                        checkpoint.clone(),
                    )
                },
                restarted(WorkerTask::Periodic),
            ))
        });
        // Stopped after the completer, whose lost outcomes it writes.
        let (lost_stop, lost_stopped) = tokio::sync::watch::channel(false);
        let lost_recorder = {
            let (client, health) = (client.clone(), health.clone());
            let checkpoint = checkpoint(WorkerTask::LostLeases);
            tokio::spawn(supervise(
                "lost_leases",
                move || {
                    lost::run(
                        client.clone(),
                        health.clone(),
                        lost_stopped.clone(),
                        checkpoint.clone(),
                    )
                },
                restarted(WorkerTask::LostLeases),
            ))
        };
        let completer = tokio::spawn(supervise(
            "completer",
            move || completer.clone().run(),
            restarted(WorkerTask::Completer),
        ));
        let mut task_names: Vec<String> = self.handlers.keys().cloned().collect();
        task_names.sort();
        let producer = producer::Producer {
            client: client.clone(),
            worker_id: worker_id.clone(),
            queues: self.queues,
            handlers: Arc::new(self.handlers),
            task_names: task_names.into(),
            concurrency: self.concurrency,
            max_claim: self.max_claim,
            lease: self.lease,
            safety_interval: self.safety_interval,
            limits: executor::Limits {
                worker_id: worker_id.clone(),
                default_timeout: self.default_timeout,
                cancel_grace: self.cancel_grace,
                health: health.clone(),
            },
            wake: wake.clone(),
            promote,
            refresh_queues,
            limited: Vec::new(),
            plan: QueuePlan::new(self.weights),
            claim_ahead: self.claim_ahead,
            hold_limit: hold_limit.clone(),
            pace: Pace::new(tokio::time::Instant::now(), self.concurrency),
            started_at: Default::default(),
            running,
            outcomes: outbox,
            shutdown: shutdown_rx,
            grace: grace_rx,
            tasks: Arc::default(),
        };
        let id = worker_id.clone();
        let on_producer_panic = restarted(WorkerTask::Producer);
        let main_health = health.clone();
        let task = tokio::spawn(async move {
            // Aborting this task (dropping the handle) aborts the helpers too.
            let mut helpers = vec![
                AbortOnDrop(heartbeat),
                AbortOnDrop(rescuer),
                AbortOnDrop(rotator),
                AbortOnDrop(pruner),
                AbortOnDrop(listener),
                AbortOnDrop(registry),
            ];
            helpers.extend(periodic.map(AbortOnDrop));
            let completer = AbortOnDrop(completer);
            let mut lost_recorder = AbortOnDrop(lost_recorder);
            let unfinished = supervise(
                "producer",
                move || producer.clone().run(),
                on_producer_panic,
            )
            .await;
            // Every executor is done and every outbox is gone: the completer
            // ends once it has written what is left.
            let _ = (&mut { completer }.0).await;
            // Then the leases lost are written (what is left, one try).
            let _ = lost_stop.send(true);
            let _ = (&mut lost_recorder.0).await;
            drop(helpers);
            let report = release(&client, &unfinished, &id).await;
            let inner = &client.inner;
            if let Err(error) = db::deregister_worker(&inner.pool, inner.queries, &id).await {
                tracing::warn!(%error, "conveyor: cannot leave the worker registry; maintenance will mark this worker dead");
            }
            if let Some(own) = own_pool {
                own.pool.close().await;
            }
            main_health.stopped();
            report
        });
        tracing::info!(worker_id = %worker_id, "conveyor: worker started");
        Ok(WorkerHandle {
            worker_id,
            shutdown: shutdown_tx,
            grace: grace_tx,
            health,
            task: Some(task),
            hold_limit,
            wake,
        })
    }
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
async fn release(client: &Client, unfinished: &producer::Unfinished, id: &str) -> ShutdownReport {
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

#[derive(Deserialize)]
struct JobReady {
    queue: String,
    #[serde(default)]
    scheduled: bool,
}

fn on_job_ready(event: ListenEvent<'_>, queues: &[String], wake: &Notify, promote: &AtomicBool) {
    match event {
        ListenEvent::Notification { payload, .. } => {
            let Ok(ready) = serde_json::from_str::<JobReady>(payload) else {
                tracing::debug!(payload, "conveyor: ignoring malformed job_ready payload");
                return;
            };
            if queues.contains(&ready.queue) {
                if ready.scheduled {
                    promote.store(true, Ordering::Relaxed);
                }
                wake.notify_one();
            }
        }
        ListenEvent::Gap => {
            promote.store(true, Ordering::Relaxed);
            wake.notify_one();
        }
    }
}
