//! A worker's background services. Each is defined next to its logic (the
//! heartbeat in `heartbeat.rs`, the listener in `listener.rs`, maintenance
//! in `upkeep.rs`…) as a [`Service`]: which [`WorkerTask`] it is (its name
//! in logs, health and metrics), how it stops at shutdown ([`Stop`]), and
//! how to run it, given its context and its shutdown signal. `launch.rs`
//! lists them, with the context they share ([`Shared`]), and spawns each
//! under the supervisor ([`crate::supervise`]), which restarts it after a
//! panic and counts the restart in the worker's health.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

use crate::client::Client;
use crate::supervise::{AbortOnDrop, Checkpoint, supervise};
use crate::worker::health::{Health, WorkerTask};
use crate::worker::lease::RunningJobs;

/// A service's shutdown signal: turns true when the worker tells it to stop
/// (only a service that stops with [`Stop::Await`] is told).
pub(crate) type Shutdown = watch::Receiver<bool>;

/// How a service stops when the worker shuts down. Services stop in the
/// reverse order of their start, so each may rely on those started before
/// it until it has stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stop {
    /// Its shutdown signal turns true and the worker waits for it to end:
    /// it finishes what it holds (the producer its jobs, the completer
    /// their outcomes, the lost-lease recorder its last losses).
    Await,
    /// Aborted: nothing it holds outlives the worker.
    Abort,
}

/// What the listener tells the producer (through [`Shared`]).
#[derive(Clone)]
pub(crate) struct Hints {
    /// Something may be runnable.
    pub(crate) wake: Arc<Notify>,
    /// A job may have been scheduled; look for due ones.
    pub(crate) promote: Arc<AtomicBool>,
    /// Queue settings changed; reload which are limited.
    pub(crate) refresh_queues: Arc<AtomicBool>,
}

impl Hints {
    /// Hints that ask the producer to look at everything once.
    pub(crate) fn new() -> Hints {
        Hints {
            wake: Arc::new(Notify::new()),
            promote: Arc::new(AtomicBool::new(true)),
            refresh_queues: Arc::new(AtomicBool::new(true)),
        }
    }
}

/// What every service of a worker may use: built once at start, cloned
/// into the services that need it.
#[derive(Clone)]
pub(crate) struct Shared {
    /// The worker's own client, on its bookkeeping pool.
    pub(crate) client: Client,
    /// The worker's id (`worker_id` of the jobs it holds).
    pub(crate) worker_id: Arc<str>,
    /// The queues it serves.
    pub(crate) queues: Vec<String>,
    /// Jobs it runs at once.
    pub(crate) concurrency: usize,
    /// The lease on its claims.
    pub(crate) lease: Duration,
    /// Its health: restarts, losses, the ready ring's bank.
    pub(crate) health: Arc<Health>,
    /// Jobs being run or held ahead (producer, heartbeat, listener, registry).
    pub(crate) running: RunningJobs,
    /// Set by the listener for the producer.
    pub(crate) hints: Hints,
}

impl Shared {
    /// The checkpoint a service calls at the top of each round: a test hook
    /// that panics when a panic was injected into `task`.
    pub(crate) fn checkpoint(&self, task: WorkerTask) -> Checkpoint {
        let health = self.health.clone();
        Arc::new(move || health.checkpoint(task))
    }
}

/// Told when the service panics (with the panic's message).
pub(crate) type OnPanic = Box<dyn FnMut(&str) + Send>;

/// Starts a service's task, given its shutdown signal and what to call when
/// it panics.
type StartFn<T> = Box<dyn FnOnce(Shutdown, OnPanic) -> JoinHandle<T> + Send>;

/// A background task of a worker, not started yet: its name, how it stops,
/// and how to run it. `T` is what it leaves when it ends (the producer's
/// unfinished jobs; nothing for the others).
pub(crate) struct Service<T = ()> {
    task: WorkerTask,
    stop: Stop,
    start: StartFn<T>,
}

impl<T: Send + 'static> Service<T> {
    /// A service that runs `run(context, shutdown)` under the supervisor.
    /// If that panics, the supervisor calls `run` again with a fresh clone
    /// of `context`: state that must outlive a restart lives in what the
    /// clones share (an `Arc`).
    pub(crate) fn new<C, F, Fut>(task: WorkerTask, stop: Stop, context: C, run: F) -> Service<T>
    where
        C: Clone + Send + 'static,
        F: Fn(C, Shutdown) -> Fut + Send + 'static,
        Fut: Future<Output = T> + Send + 'static,
    {
        let start = move |shutdown: Shutdown, on_panic: OnPanic| {
            let make = move || run(context.clone(), shutdown.clone());
            tokio::spawn(supervise(task.as_str(), make, on_panic))
        };
        Service {
            task,
            stop,
            start: Box::new(start),
        }
    }

    /// A service whose task supervises itself: `start(on_panic)` spawns it,
    /// and it restarts itself after a panic, telling `on_panic` (the
    /// listener, which `notify::spawn_listener` supervises, as it does the
    /// waiters'). It hears no shutdown signal: it is aborted.
    pub(crate) fn supervising_itself(
        task: WorkerTask,
        start: impl FnOnce(OnPanic) -> JoinHandle<T> + Send + 'static,
    ) -> Service<T> {
        Service {
            task,
            stop: Stop::Abort,
            start: Box::new(move |_, on_panic| start(on_panic)),
        }
    }

    /// Starts the service; its restarts are counted in `health`.
    pub(crate) fn spawn(self, health: &Arc<Health>) -> RunningService<T> {
        let (signal, shutdown) = watch::channel(false);
        let (task, health) = (self.task, health.clone());
        let on_panic = Box::new(move |message: &str| health.restarted(task, message));
        RunningService {
            stop: self.stop,
            signal,
            handle: AbortOnDrop((self.start)(shutdown, on_panic)),
        }
    }
}

/// A started service. Dropping it aborts it.
pub(crate) struct RunningService<T = ()> {
    stop: Stop,
    signal: watch::Sender<bool>,
    handle: AbortOnDrop<T>,
}

impl<T> RunningService<T> {
    /// Stops the service as its [`Stop`] says; returns what it left if it
    /// was awaited and ended (`None` if it was aborted).
    pub(crate) async fn stop(mut self) -> Option<T> {
        match self.stop {
            Stop::Abort => None,
            Stop::Await => {
                self.signal.send_replace(true);
                (&mut self.handle.0).await.ok()
            }
        }
    }
}
