//! LISTEN/NOTIFY: one dedicated session connection per listener (LISTEN needs
//! a session; a pooled connection could be handed to someone else), rebuilt
//! with exponential backoff when the database goes away, and the
//! [`WaiterHub`] that wakes [`crate::JobHandle::wait`] callers.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use backoff::ExponentialBackoff;
use backoff::backoff::Backoff;
use sqlx::PgPool;
use sqlx::postgres::{PgListener, PgPoolOptions};
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

use crate::db::Queries;
use crate::job::JobId;

/// What a listener reports.
pub(crate) enum ListenEvent<'a> {
    /// A notification arrived.
    Notification { channel: &'a str, payload: &'a str },
    /// Listening (re)started: notifications sent while it was down are lost,
    /// so whoever relies on them should look at the database again.
    Gap,
}

/// Backoff between reconnection attempts: 50 ms doubling to 5 s, forever.
pub(crate) fn reconnect_backoff() -> ExponentialBackoff {
    ExponentialBackoff {
        initial_interval: Duration::from_millis(50),
        max_interval: Duration::from_secs(5),
        max_elapsed_time: None,
        ..ExponentialBackoff::default()
    }
}

/// A pool of one connection with the same settings as `pool`, kept for LISTEN.
fn dedicated_pool(pool: &PgPool) -> PgPool {
    PgPoolOptions::new()
        .max_connections(1)
        .min_connections(0)
        .acquire_timeout(Duration::from_secs(10))
        .idle_timeout(None)
        .max_lifetime(None)
        .connect_lazy_with((*pool.connect_options()).clone())
}

async fn connect(pool: &PgPool, channels: &[&str]) -> Result<PgListener, sqlx::Error> {
    let mut listener = PgListener::connect_with(pool).await?;
    listener.ignore_pool_close_event(true);
    listener.listen_all(channels.iter().copied()).await?;
    Ok(listener)
}

/// Listens on `channels` until the returned task is aborted. `ready` turns
/// true once the first LISTEN is in place. Errors never end the task: it
/// reconnects with backoff and reports a [`ListenEvent::Gap`]. If `on_event`
/// panics, the listener is restarted (`on_panic` hears of it) with a fresh
/// clone of `on_event`, and reports a gap.
pub(crate) fn spawn_listener<E>(
    pool: &PgPool,
    channels: Vec<&'static str>,
    on_event: E,
    on_panic: impl FnMut(&str) + Send + 'static,
) -> (JoinHandle<()>, watch::Receiver<bool>)
where
    E: FnMut(ListenEvent<'_>) + Clone + Send + 'static,
{
    let pool = dedicated_pool(pool);
    let (ready_tx, ready_rx) = watch::channel(false);
    let ready_tx = Arc::new(ready_tx);
    let task = tokio::spawn(crate::supervise::supervise(
        "listener",
        move || {
            listen(
                pool.clone(),
                channels.clone(),
                on_event.clone(),
                ready_tx.clone(),
            )
        },
        on_panic,
    ));
    (task, ready_rx)
}

async fn listen(
    pool: PgPool,
    channels: Vec<&'static str>,
    mut on_event: impl FnMut(ListenEvent<'_>),
    ready: Arc<watch::Sender<bool>>,
) {
    let mut backoff = reconnect_backoff();
    loop {
        let mut listener = match connect(&pool, &channels).await {
            Ok(listener) => listener,
            Err(error) => {
                let wait = backoff.next_backoff().unwrap_or(Duration::from_secs(5));
                tracing::warn!(%error, ?wait, "conveyor: cannot LISTEN, retrying");
                tokio::time::sleep(wait).await;
                continue;
            }
        };
        ready.send_replace(true);
        on_event(ListenEvent::Gap);
        loop {
            match listener.try_recv().await {
                Ok(Some(notification)) => {
                    backoff.reset();
                    on_event(ListenEvent::Notification {
                        channel: notification.channel(),
                        payload: notification.payload(),
                    });
                }
                // The connection dropped and was re-established (LISTEN included).
                Ok(None) => on_event(ListenEvent::Gap),
                Err(error) => {
                    tracing::warn!(%error, "conveyor: LISTEN connection lost");
                    break;
                }
            }
        }
        drop(listener);
        tokio::time::sleep(backoff.next_backoff().unwrap_or(Duration::from_secs(5))).await;
    }
}

/// Wakes waiters on job ids when `job_finished` notifications name them.
pub(crate) struct WaiterHub {
    pool: PgPool,
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
    pub(crate) fn new(pool: PgPool, queries: &'static Queries) -> Self {
        WaiterHub {
            pool,
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
                    &self.pool,
                    vec![self.queries.job_finished_channel],
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

/// Notifications to send, and who to tell once they are sent.
type Outbox = (
    Vec<(&'static str, String)>,
    tokio::sync::oneshot::Sender<()>,
);

/// Sends notifications after their transaction committed, from a background
/// task, in one statement per batch (duplicates merged), so concurrent
/// callers share a statement. Used where the library owns the commit
/// (bulk enqueues by COPY, recorded outcomes): a NOTIFY inside a writing
/// transaction would make commits queue behind each other (see migration V8).
///
/// A failing statement is retried with backoff for up to 10 s; if the
/// process dies before sending, idle workers find the jobs at their next
/// wake-up (at most their safety interval).
pub(crate) struct Notifier {
    pool: PgPool,
    queries: &'static Queries,
    sender: std::sync::OnceLock<tokio::sync::mpsc::UnboundedSender<Outbox>>,
}

impl Notifier {
    pub(crate) fn new(pool: PgPool, queries: &'static Queries) -> Self {
        Notifier {
            pool,
            queries,
            sender: std::sync::OnceLock::new(),
        }
    }

    /// Queues notifications and returns a receiver that completes once they
    /// were sent (or given up on). Must be called within a tokio runtime: the
    /// sending task starts on first use and ends with the client.
    pub(crate) fn send(
        &self,
        notes: Vec<(&'static str, String)>,
    ) -> tokio::sync::oneshot::Receiver<()> {
        let (done, sent) = tokio::sync::oneshot::channel();
        if notes.is_empty() {
            let _ = done.send(());
            return sent;
        }
        let sender = self.sender.get_or_init(|| {
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
            let (pool, queries) = (self.pool.clone(), self.queries);
            let rx = Arc::new(tokio::sync::Mutex::new(rx));
            tokio::spawn(crate::supervise::supervise(
                "notifier",
                move || send_loop(pool.clone(), queries, rx.clone()),
                |_| {},
            ));
            tx
        });
        // Fails only if the task has ended; the receiver then reports at once.
        let _ = sender.send((notes, done));
        sent
    }
}

async fn send_loop(
    pool: PgPool,
    queries: &'static Queries,
    outbox: Arc<tokio::sync::Mutex<tokio::sync::mpsc::UnboundedReceiver<Outbox>>>,
) {
    let mut outbox = outbox.lock().await;
    let mut batch: Vec<Outbox> = Vec::new();
    while outbox.recv_many(&mut batch, 256).await > 0 {
        let mut notes: Vec<(&'static str, String)> =
            batch.iter_mut().flat_map(|(n, _)| n.drain(..)).collect();
        notes.sort_unstable();
        notes.dedup();
        let policy = ExponentialBackoff {
            initial_interval: Duration::from_millis(20),
            max_interval: Duration::from_secs(1),
            max_elapsed_time: Some(Duration::from_secs(10)),
            ..ExponentialBackoff::default()
        };
        let sent = backoff::future::retry(policy, || async {
            crate::db::notify(&pool, queries, &notes)
                .await
                .map_err(backoff::Error::transient)
        })
        .await;
        if let Err(error) = sent {
            tracing::warn!(
                %error,
                notifications = notes.len(),
                "conveyor: could not send notifications; idle workers find the jobs at their next wake-up"
            );
        }
        for (_, done) in batch.drain(..) {
            let _ = done.send(());
        }
    }
}
