//! The maintenance services every worker runs (their logic is in
//! [`crate::maintenance`]; each takes an advisory lock, so that one process
//! at a time does the work): the rescuer, the ready ring's rotator, the
//! pruner, and the periodic scheduler. All are aborted at shutdown.

use std::sync::Arc;
use std::time::Duration;

use crate::maintenance::periodic::{self, Periodic};
use crate::maintenance::pruner::{self, Retention};
use crate::maintenance::rescuer;
use crate::maintenance::rotator::{self, RingWatch};
use crate::worker::health::WorkerTask;
use crate::worker::service::{Service, Shared, Stop};

/// Recovers jobs whose lease expired, every `every`.
pub(crate) fn rescuer(shared: &Shared, every: Duration) -> Service {
    let context = (
        shared.client.clone(),
        shared.checkpoint(WorkerTask::Rescuer),
    );
    Service::new(
        WorkerTask::Rescuer,
        Stop::Abort,
        context,
        move |(client, checkpoint), _| rescuer::run(client, every, checkpoint),
    )
}

/// Empties sealed slots of the ready ring, and reports its state in the
/// worker's health (which the claims read its bank from).
pub(crate) fn rotator(shared: &Shared) -> Service {
    let health: Arc<dyn RingWatch> = shared.health.clone();
    let context = (
        shared.client.clone(),
        health,
        shared.checkpoint(WorkerTask::Rotator),
    );
    Service::new(
        WorkerTask::Rotator,
        Stop::Abort,
        context,
        |(client, health, checkpoint), _| rotator::run(client, health, checkpoint),
    )
}

/// Deletes finished jobs past their `retention`, every `every`.
pub(crate) fn pruner(shared: &Shared, retention: Retention, every: Duration) -> Service {
    let context = (
        shared.client.clone(),
        retention,
        shared.checkpoint(WorkerTask::Pruner),
    );
    Service::new(
        WorkerTask::Pruner,
        Stop::Abort,
        context,
        move |(client, retention, checkpoint), _| pruner::run(client, retention, every, checkpoint),
    )
}

/// Enqueues the periodic jobs of `schedules` while this process leads them;
/// none without schedules.
pub(crate) fn periodic(shared: &Shared, schedules: Vec<Periodic>) -> Option<Service> {
    if schedules.is_empty() {
        return None;
    }
    let context = (
        shared.client.clone(),
        Arc::new(schedules),
        shared.checkpoint(WorkerTask::Periodic),
    );
    Some(Service::new(
        WorkerTask::Periodic,
        Stop::Abort,
        context,
        |(client, schedules, checkpoint), _| periodic::run(client, schedules, checkpoint),
    ))
}
