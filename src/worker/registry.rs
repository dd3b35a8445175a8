//! The worker's row in `conveyor.workers`: registered at start, a beat with
//! its busy slots every [`beat_interval`], registered again if the row went
//! missing (deleted by hand, or dead for a day after a long cut-off). A
//! clean shutdown deletes the row (`launch.rs`); maintenance marks a silent
//! worker dead (`maintenance/rescuer.rs`).

use std::sync::Arc;
use std::time::Duration;

use crate::client::Client;
use crate::db;
use crate::worker::health::{Health, WorkerTask};
use crate::worker::lease::{RunningJobs, lock};
use crate::worker::service::{Service, Shared, Stop};

/// The longest time between two beats.
pub(crate) const MAX_BEAT: Duration = Duration::from_secs(5);

/// How often a worker with this lease beats: every 5 s, or a third of a
/// shorter lease (so a dead worker shows as dead about when its leases
/// expire), never more often than every 100 ms.
pub(crate) fn beat_interval(lease: Duration) -> Duration {
    (lease / 3).clamp(Duration::from_millis(100), MAX_BEAT)
}

/// The registry service: keeps the worker's row (aborted at shutdown; the
/// row is deleted after the services have stopped).
pub(crate) fn service(shared: &Shared) -> Service {
    let registry = Registry {
        client: shared.client.clone(),
        id: shared.worker_id.clone(),
        queues: shared.queues.clone(),
        concurrency: shared.concurrency,
        beat: beat_interval(shared.lease),
        running: shared.running.clone(),
        health: shared.health.clone(),
    };
    Service::new(
        WorkerTask::Registry,
        Stop::Abort,
        registry,
        |registry, _| registry.run(),
    )
}

/// What the registry task needs.
#[derive(Clone)]
struct Registry {
    client: Client,
    id: Arc<str>,
    queues: Vec<String>,
    concurrency: usize,
    beat: Duration,
    running: RunningJobs,
    health: Arc<Health>,
}

impl Registry {
    async fn run(self) {
        let mut registered = false;
        let mut tick = tokio::time::interval(self.beat);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let host = crate::worker::host_name();
        let pid = i32::try_from(std::process::id()).unwrap_or(i32::MAX);
        let concurrency = i32::try_from(self.concurrency).unwrap_or(i32::MAX);
        loop {
            tick.tick().await;
            self.health.checkpoint(WorkerTask::Registry);
            let inner = &self.client.inner;
            if registered {
                let busy = lock(&self.running).running.len();
                let busy = i32::try_from(busy).unwrap_or(i32::MAX);
                match db::beat_worker(&inner.pool, inner.queries, &self.id, busy).await {
                    Ok(true) => continue,
                    Ok(false) => registered = false,
                    Err(error) => {
                        tracing::warn!(%error, "conveyor: cannot beat in the worker registry");
                        continue;
                    }
                }
            }
            let registration = db::Registration {
                id: &self.id,
                host: &host,
                pid,
                queues: &self.queues,
                concurrency,
                beat_secs: self.beat.as_secs_f64(),
            };
            match db::register_worker(&inner.pool, inner.queries, &registration).await {
                Ok(()) => registered = true,
                Err(error) => {
                    tracing::warn!(%error, "conveyor: cannot register in the worker registry");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_beat_follows_short_leases_within_bounds() {
        assert_eq!(beat_interval(Duration::from_secs(60)), MAX_BEAT);
        assert_eq!(
            beat_interval(Duration::from_secs(3)),
            Duration::from_secs(1)
        );
        assert_eq!(
            beat_interval(Duration::from_millis(30)),
            Duration::from_millis(100)
        );
    }
}
