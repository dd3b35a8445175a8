//! What every pool that follows a [`super::Primary`] does with its
//! connections: checks each new one (`after_connect`), parking it while its
//! server does not qualify yet, and closes, when next taken, those opened
//! before a switch (`before_acquire`).

use std::sync::Weak;
use std::time::Duration;

use sqlx::PgConnection;
use sqlx::postgres::PgPoolOptions;

use super::{Attrs, Shared};

/// How often a parked connection asks its server again.
const PARKED_CHECK: Duration = Duration::from_millis(100);

/// Whether the server on `conn` qualifies as `attrs` asks.
pub(crate) async fn qualifies(conn: &mut PgConnection, attrs: Attrs) -> sqlx::Result<bool> {
    if attrs == Attrs::Any {
        return Ok(true);
    }
    let (in_recovery, read_only): (bool, bool) = sqlx::query_as(
        "SELECT pg_is_in_recovery(), current_setting('transaction_read_only') = 'on'",
    )
    .persistent(false)
    .fetch_one(conn)
    .await?;
    Ok(attrs.accepts(in_recovery, read_only))
}

/// `options` with the checks of a following pool.
pub(super) fn hooked(options: PgPoolOptions, shared: Weak<Shared>) -> PgPoolOptions {
    let on_connect = shared.clone();
    options
        .after_connect(move |conn, _| {
            let shared = on_connect.upgrade();
            Box::pin(async move {
                match shared {
                    Some(shared) => admit(&shared, conn).await,
                    None => Ok(()),
                }
            })
        })
        .before_acquire(move |_, meta| {
            let fresh = !shared
                .upgrade()
                .is_some_and(|shared| shared.predates_switch(meta.age));
            Box::pin(async move { Ok(fresh) })
        })
}

/// Lets a new connection into its pool once its server qualifies. One that
/// does not (a standby, a primary being demoted) wakes the watcher and
/// waits: if its server qualifies first (the standby was promoted), it is
/// used at once; if the pools are pointed elsewhere, it is refused, and
/// sqlx connects again, there. Its pool's acquire timeout bounds the wait.
async fn admit(shared: &Shared, conn: &mut PgConnection) -> sqlx::Result<()> {
    let attrs = shared.list.attrs;
    let mut retarget = shared.retarget.subscribe();
    if qualifies(conn, attrs).await? {
        return Ok(());
    }
    shared.suspect.notify_one();
    loop {
        let moved = tokio::select! {
            changed = retarget.changed() => changed.is_ok(),
            () = tokio::time::sleep(PARKED_CHECK) => false,
        };
        if qualifies(conn, attrs).await? {
            return Ok(());
        }
        if moved || retarget.has_changed().is_err() {
            return Err(sqlx::Error::Configuration(
                format!(
                    "the server does not qualify as target_session_attrs={}",
                    attrs.name()
                )
                .into(),
            ));
        }
    }
}
