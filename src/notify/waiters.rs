//! The [`WaiterHub`]: wakes [`crate::JobHandle::wait`] callers when
//! `job_finished` notifications name their jobs.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

use super::listen::{ListenEvent, spawn_listener};
use crate::db::Queries;
use crate::failover::Connector;
use crate::job::JobId;

/// Wakes waiters on job ids when `job_finished` notifications name them.
pub(crate) struct WaiterHub {
    connector: Connector,
    queries: &'static Queries,
    state: Arc<Mutex<HubState>>,
}

#[derive(Default)]
struct HubState {
    waiters: HashMap<JobId, Arc<Notify>>,
    listener: Option<(JoinHandle<()>, watch::Receiver<bool>)>,
}

impl Drop for WaiterHub {
    fn drop(&mut self) {
        if let Ok(state) = self.state.lock()
            && let Some((task, _)) = &state.listener
        {
            task.abort();
        }
    }
}

/// Interest in one job's completion; dropping it unsubscribes.
pub(crate) struct Subscription {
    pub(crate) notify: Arc<Notify>,
    id: JobId,
    state: Arc<Mutex<HubState>>,
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        // Two references: the map's and ours.
        if Arc::strong_count(&self.notify) <= 2 {
            state.waiters.remove(&self.id);
        }
    }
}

impl WaiterHub {
    pub(crate) fn new(connector: Connector, queries: &'static Queries) -> Self {
        WaiterHub {
            connector,
            queries,
            state: Arc::default(),
        }
    }

    /// Registers interest in `id`, starting the listener on first use, and
    /// returns once it listens (or `None` if that did not happen by `deadline`).
    pub(crate) async fn subscribe(
        &self,
        id: JobId,
        deadline: tokio::time::Instant,
    ) -> Option<Subscription> {
        let mut ready = {
            let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
            if state.listener.is_none() {
                let hub = Arc::downgrade(&self.state);
                let listener = spawn_listener(
                    &self.connector,
                    vec![self.queries.job_finished_channel],
                    // Outcomes are announced only while someone holds this
                    // (sql/enqueue/notify.sql).
                    Some(self.queries.finished_listener_lock),
                    move |event| {
                        let Some(hub) = hub.upgrade() else { return };
                        let state = hub.lock().unwrap_or_else(|p| p.into_inner());
                        match event {
                            ListenEvent::Notification { payload, .. } => {
                                for id in payload.split(',') {
                                    if let Ok(id) = id.parse::<JobId>()
                                        && let Some(notify) = state.waiters.get(&id)
                                    {
                                        notify.notify_waiters();
                                    }
                                }
                            }
                            ListenEvent::Gap => {
                                for notify in state.waiters.values() {
                                    notify.notify_waiters();
                                }
                            }
                        }
                    },
                    |_| {},
                );
                state.listener = Some(listener);
            }
            state.listener.as_ref().map(|(_, ready)| ready.clone())?
        };
        let subscription = {
            let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
            let notify = state.waiters.entry(id).or_default().clone();
            Subscription {
                notify,
                id,
                state: self.state.clone(),
            }
        };
        match tokio::time::timeout_at(deadline, ready.wait_for(|ready| *ready)).await {
            Ok(Ok(_)) => Some(subscription),
            _ => None,
        }
    }
}
