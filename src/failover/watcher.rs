//! The watch of a [`super::Primary`]: checks the followed server every
//! [`CHECK_EVERY`] on a probe connection of its own; when the check fails,
//! walks the host list in order until a server qualifies and switches to it.

use std::sync::{Arc, Weak};
use std::time::Duration;

use backoff::ExponentialBackoff;
use backoff::backoff::Backoff;
use sqlx::{ConnectOptions, PgConnection};
use tokio::time::{Instant, timeout};

use super::{CHECK_EVERY, Shared, qualifies};
use crate::error::{Error, Result};

/// Pause between two walks of the host list while none qualifies.
fn find_backoff() -> ExponentialBackoff {
    ExponentialBackoff {
        initial_interval: Duration::from_millis(50),
        max_interval: Duration::from_millis(500),
        max_elapsed_time: None,
        ..ExponentialBackoff::default()
    }
}

/// Starts the watch (supervised: a panic restarts it, with no probe, so it
/// walks the list again). It ends once the [`super::Primary`] is dropped.
pub(super) fn spawn(shared: Weak<Shared>, probe: PgConnection) {
    let first = Arc::new(std::sync::Mutex::new(Some(probe)));
    tokio::spawn(crate::supervise::supervise(
        "primary watch",
        move || {
            let probe = first.lock().unwrap_or_else(|p| p.into_inner()).take();
            watch(shared.clone(), probe)
        },
        |_| {},
    ));
}

async fn watch(shared: Weak<Shared>, mut probe: Option<PgConnection>) {
    let mut backoff = find_backoff();
    let mut lost_since: Option<Instant> = None;
    loop {
        let Some(s) = shared.upgrade() else { return };
        let fine = match probe.as_mut() {
            Some(conn) => matches!(
                timeout(s.host_timeout, qualifies(conn, s.list.attrs)).await,
                Ok(Ok(true))
            ),
            None => false,
        };
        let wait = if fine {
            CHECK_EVERY
        } else {
            if probe.take().is_some() {
                tracing::warn!(
                    host = %s.list.hosts[s.lock().current].0,
                    "conveyor: the followed server stopped answering or qualifying; walking the host list"
                );
                lost_since.get_or_insert_with(Instant::now);
            }
            match find(&s).await {
                Ok((index, conn)) => {
                    s.switch_to(index);
                    if let Some(since) = lost_since.take() {
                        tracing::info!(
                            host = %s.list.hosts[index].0,
                            after = ?since.elapsed(),
                            "conveyor: a server qualifies again"
                        );
                    }
                    probe = Some(conn);
                    backoff.reset();
                    CHECK_EVERY
                }
                Err(NoneQualifies { why, answered }) => {
                    tracing::debug!(%why, "conveyor: no server of the host list qualifies yet");
                    if let Some(index) = answered {
                        s.wait_on(index);
                    }
                    lost_since.get_or_insert_with(Instant::now);
                    backoff.next_backoff().unwrap_or(Duration::from_millis(500))
                }
            }
        };
        let suspect = s.suspect.clone();
        drop(s);
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = suspect.notified() => {}
        }
    }
}

/// Why no host qualified, and the first that answered (a standby, say).
struct NoneQualifies {
    why: String,
    answered: Option<usize>,
}

/// The first host, in the list's order, that accepts a connection and
/// qualifies, with that connection.
async fn find(s: &Shared) -> std::result::Result<(usize, PgConnection), NoneQualifies> {
    let mut why = Vec::new();
    let mut answered = None;
    for (index, (label, options)) in s.list.hosts.iter().enumerate() {
        let failure = match timeout(s.host_timeout, options.connect()).await {
            Ok(Ok(mut conn)) => {
                match timeout(s.host_timeout, qualifies(&mut conn, s.list.attrs)).await {
                    Ok(Ok(true)) => return Ok((index, conn)),
                    Ok(Ok(false)) => {
                        answered.get_or_insert(index);
                        format!("not {}", s.list.attrs.name())
                    }
                    Ok(Err(error)) => error.to_string(),
                    Err(_) => format!("no answer within {:?}", s.host_timeout),
                }
            }
            Ok(Err(error)) => error.to_string(),
            Err(_) => format!("no answer within {:?}", s.host_timeout),
        };
        why.push(format!("{label}: {failure}"));
    }
    Err(NoneQualifies {
        why: why.join("; "),
        answered,
    })
}

/// Looks for a qualifying server for up to `within`.
pub(super) async fn find_within(s: &Shared, within: Duration) -> Result<(usize, PgConnection)> {
    let deadline = Instant::now() + within;
    let mut backoff = find_backoff();
    loop {
        let why = match find(s).await {
            Ok(found) => return Ok(found),
            Err(none) => none.why,
        };
        let wait = backoff.next_backoff().unwrap_or(Duration::from_millis(500));
        if Instant::now() + wait > deadline {
            let message = format!(
                "no server of the host list qualified as target_session_attrs={} within {within:?} ({why})",
                s.list.attrs.name()
            );
            return Err(Error::Database(sqlx::Error::Io(std::io::Error::other(
                message,
            ))));
        }
        tokio::time::sleep(wait).await;
    }
}
