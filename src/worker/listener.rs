//! The worker's listener: `LISTEN`s on a session of its own for new jobs,
//! cancellations, queue changes and moves of the ready ring, and passes
//! them on: hints that wake the producer, cancellations to the running
//! jobs, the ring's bank to the health the claims read it from. A gap in
//! listening (a reconnection) makes the producer look at the database.

use std::sync::atomic::{AtomicBool, Ordering};

use serde::Deserialize;
use tokio::sync::Notify;

use crate::db;
use crate::notify::{ListenEvent, spawn_listener};
use crate::worker::health::WorkerTask;
use crate::worker::lease::cancel_running;
use crate::worker::service::{Service, Shared};

/// The listener service (aborted at shutdown). `notify::spawn_listener`
/// supervises it: an event that panics restarts it, with a gap.
pub(crate) fn service(shared: &Shared) -> Service {
    let connector = shared.client.connector();
    let q = shared.client.inner.queries;
    let channels = vec![
        q.job_ready_channel,
        q.job_cancel_channel,
        q.queue_changed_channel,
        q.ring_channel,
    ];
    let shared = shared.clone();
    let on_event = move |event: ListenEvent<'_>| {
        let (health, hints) = (&shared.health, &shared.hints);
        health.checkpoint(WorkerTask::Listener);
        match event {
            ListenEvent::Notification { channel, payload } if channel == q.job_cancel_channel => {
                if let Ok(id) = payload.parse() {
                    health.cancels_received(cancel_running(&shared.running, id));
                }
            }
            ListenEvent::Notification { channel, .. } if channel == q.queue_changed_channel => {
                hints.refresh_queues.store(true, Ordering::Relaxed);
                hints.wake.notify_one();
            }
            // The ready ring moved to another bank: claim from it
            // now (the rows of the old one were carried there).
            ListenEvent::Notification { channel, payload } if channel == q.ring_channel => {
                match payload.parse::<usize>() {
                    Ok(bank) if bank < db::READY_BANKS => {
                        health.set_ring_bank(bank);
                        hints.wake.notify_one();
                    }
                    _ => tracing::debug!(payload, "conveyor: ignoring a ring payload"),
                }
            }
            event => {
                if matches!(event, ListenEvent::Gap) {
                    hints.refresh_queues.store(true, Ordering::Relaxed);
                }
                on_job_ready(event, &shared.queues, &hints.wake, &hints.promote)
            }
        }
    };
    Service::supervising_itself(WorkerTask::Listener, move |on_panic| {
        spawn_listener(&connector, channels, None, on_event, on_panic).0
    })
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
