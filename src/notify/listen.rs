//! LISTEN on a dedicated session connection (LISTEN needs a session; a
//! pooled connection could be handed to someone else), rebuilt with
//! exponential backoff when the database goes away, and at once when the
//! client follows a new primary. Behind a transaction-mode pooler with no
//! session URL there is no session to listen on: the listener then reports
//! a [`ListenEvent::Gap`] at every poll interval instead, and whoever relies
//! on notifications looks at the database.

use std::sync::Arc;
use std::time::Duration;

use backoff::backoff::Backoff;
use sqlx::PgPool;
use sqlx::postgres::{PgListener, PgPoolOptions};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::failover::{Connector, Listen, OwnPool};
use crate::supervise::reconnect_backoff;

/// What a listener reports.
pub(crate) enum ListenEvent<'a> {
    /// A notification arrived.
    Notification { channel: &'a str, payload: &'a str },
    /// Listening (re)started: notifications sent while it was down are lost,
    /// so whoever relies on them should look at the database again.
    Gap,
}

/// A pool of one connection with the client's connect options (or
/// following its primary, or the pooler's session URL), kept for LISTEN;
/// or, with no session to be had, how often to poll.
fn dedicated_pool(connector: &Connector) -> Listen {
    connector.listen(
        PgPoolOptions::new()
            .max_connections(1)
            .min_connections(0)
            .acquire_timeout(Duration::from_secs(10))
            .idle_timeout(None)
            .max_lifetime(None),
    )
}

async fn connect(
    pool: &PgPool,
    channels: &[&str],
    hold: Option<&'static str>,
) -> Result<PgListener, sqlx::Error> {
    let mut listener = PgListener::connect_with(pool).await?;
    listener.ignore_pool_close_event(true);
    listener.listen_all(channels.iter().copied()).await?;
    if let Some(hold) = hold {
        sqlx::query(hold).execute(&mut listener).await?;
    }
    Ok(listener)
}

/// Listens on `channels` until the returned task is aborted; `hold`, if
/// given, runs on the listening session after each LISTEN (a session lock
/// that tells senders someone listens). `ready` turns true once the first
/// LISTEN is in place. Errors never end the task: it
/// reconnects with backoff and reports a [`ListenEvent::Gap`]. If `on_event`
/// panics, the listener is restarted (`on_panic` hears of it) with a fresh
/// clone of `on_event`, and reports a gap.
pub(crate) fn spawn_listener<E>(
    connector: &Connector,
    channels: Vec<&'static str>,
    hold: Option<&'static str>,
    on_event: E,
    on_panic: impl FnMut(&str) + Send + 'static,
) -> (JoinHandle<()>, watch::Receiver<bool>)
where
    E: FnMut(ListenEvent<'_>) + Clone + Send + 'static,
{
    let (ready_tx, ready_rx) = watch::channel(false);
    let pool = match dedicated_pool(connector) {
        Listen::Session(pool) => pool,
        Listen::Poll(every) => {
            ready_tx.send_replace(true);
            let task = tokio::spawn(crate::supervise::supervise(
                "listener",
                move || poll(every, on_event.clone()),
                on_panic,
            ));
            return (task, ready_rx);
        }
    };
    let connector = connector.clone();
    let ready_tx = Arc::new(ready_tx);
    let task = tokio::spawn(crate::supervise::supervise(
        "listener",
        move || {
            listen(
                pool.clone(),
                connector.clone(),
                channels.clone(),
                hold,
                on_event.clone(),
                ready_tx.clone(),
            )
        },
        on_panic,
    ));
    (task, ready_rx)
}

/// Reports a gap every `every`, for ever.
async fn poll(every: Duration, mut on_event: impl FnMut(ListenEvent<'_>)) {
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        on_event(ListenEvent::Gap);
    }
}

async fn listen(
    pool: OwnPool,
    connector: Connector,
    channels: Vec<&'static str>,
    hold: Option<&'static str>,
    mut on_event: impl FnMut(ListenEvent<'_>),
    ready: Arc<watch::Sender<bool>>,
) {
    let mut backoff = reconnect_backoff();
    loop {
        // Subscribed before connecting: a switch during the connect counts.
        let mut switched = std::pin::pin!(connector.switched());
        let mut listener = match connect(&pool.pool, &channels, hold).await {
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
        let moved = loop {
            let received = tokio::select! {
                received = listener.try_recv() => received,
                () = &mut switched => break true,
            };
            match received {
                Ok(Some(notification)) => {
                    backoff.reset();
                    on_event(ListenEvent::Notification {
                        channel: notification.channel(),
                        payload: notification.payload(),
                    });
                }
                // The connection dropped and was re-established (LISTEN included).
                Ok(None) => {
                    // The connection was lost, and the listener connects
                    // again on its next use; a session lock is not taken
                    // again with it, so take it (reconnecting) before the
                    // gap is reported and waiters look again.
                    if let Some(hold) = hold
                        && let Err(error) = sqlx::query(hold).execute(&mut listener).await
                    {
                        tracing::warn!(%error, "conveyor: LISTEN connection lost");
                        break false;
                    }
                    on_event(ListenEvent::Gap)
                }
                Err(error) => {
                    tracing::warn!(%error, "conveyor: LISTEN connection lost");
                    break false;
                }
            }
        };
        drop(listener);
        if moved {
            // The old server may still be up (demoted): listen on the new one now.
            tracing::info!("conveyor: the primary changed; listening on the new one");
            continue;
        }
        tokio::time::sleep(backoff.next_backoff().unwrap_or(Duration::from_secs(5))).await;
    }
}
