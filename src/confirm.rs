//! Enqueues that know whether they committed.
//!
//! When the connection fails after an enqueue's statements went out, the
//! commit may or may not have happened: PostgreSQL may have committed and
//! the acknowledgement been lost. Every enqueue that owns its transaction
//! fixes its job ids before the first try, so it can simply try again: an
//! insert skips ids that exist, so a retry after a commit that did happen
//! finds the jobs instead of doubling them. A call therefore returns `Ok`
//! exactly when its jobs exist, and an error when they do not, or
//! [`Error::Unconfirmed`] when the database stayed out of reach for the
//! client's `confirm_for` ([`CONFIRM_FOR`] by default) and nobody can know.

use std::future::Future;
use std::time::Duration;

use backoff::backoff::Backoff;
use sqlx::pool::PoolConnection;
use sqlx::postgres::Postgres;
use sqlx::{Connection, PgPool};

use crate::db::{self, InsertRow, Inserted, Queries};
use crate::error::{Error, Result};
use crate::job::JobId;

/// How long an enqueue keeps trying to reach the database after its
/// connection failed, before it gives up, unless
/// [`crate::ClientBuilder::confirm_for`] says otherwise.
pub(crate) const CONFIRM_FOR: Duration = Duration::from_secs(30);

/// What [`until_answered`] got.
pub(crate) struct Answer<T> {
    pub value: T,
    /// An earlier try may have committed: `value` comes from a later one.
    pub resent: bool,
}

/// Runs `unit` on a connection from `pool` until the database answers it.
/// `unit` gets the connection and whether an earlier try may have committed
/// (so it may find its own writes). A connection that fails is replaced and
/// `unit` runs again, with backoff, for up to `confirm_for`; a refusal by
/// PostgreSQL (the transaction rolled back) is returned at once. `ids` are
/// the jobs at stake, for [`Error::Unconfirmed`].
pub(crate) async fn until_answered<T, F, Fut>(
    pool: &PgPool,
    confirm_for: Duration,
    ids: impl Fn() -> Vec<JobId>,
    mut unit: F,
) -> Result<Answer<T>>
where
    F: FnMut(PoolConnection<Postgres>, bool) -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let deadline = tokio::time::Instant::now() + confirm_for;
    let mut backoff = crate::supervise::reconnect_backoff();
    let mut sent = false;
    loop {
        let error = match pool.acquire().await {
            Ok(conn) => match unit(conn, sent).await {
                Ok(value) => {
                    return Ok(Answer {
                        value,
                        resent: sent,
                    });
                }
                Err(error) if error.is_transient() => {
                    // A read-only server refused the first statement: that
                    // try wrote nothing (an earlier one may have).
                    sent |= !error.is_read_only();
                    error
                }
                Err(error) => return Err(error),
            },
            // Nothing was sent on a connection we could not get.
            Err(error) => Error::from(error),
        };
        let wait = backoff.next_backoff().unwrap_or(Duration::from_secs(5));
        if tokio::time::Instant::now() + wait > deadline {
            return Err(if sent {
                Error::Unconfirmed {
                    ids: ids(),
                    source: Box::new(error),
                }
            } else {
                error
            });
        }
        tracing::warn!(%error, ?wait, "conveyor: enqueue interrupted; trying again with the same job ids");
        tokio::time::sleep(wait).await;
    }
}

/// Inserts plain jobs in a transaction of their own (one autocommit
/// statement when they fit in one), confirming the commit. `resent`: an
/// earlier try (a COPY, say) may have committed them already.
pub(crate) async fn insert(
    pool: &PgPool,
    queries: &'static Queries,
    confirm_for: Duration,
    rows: &[InsertRow],
    resent: bool,
) -> Result<Vec<Inserted>> {
    let ids = || rows.iter().map(|row| row.id).collect();
    let answer = until_answered(pool, confirm_for, ids, |mut conn, sent| async move {
        // After a try that may have committed, the jobs may even have run
        // and finished since: look for their ids among finished jobs too.
        let may_exist = resent || sent;
        if rows.len() <= crate::db::BULK_CHUNK {
            return db::insert_all(&mut conn, queries, rows, may_exist).await;
        }
        let mut tx = conn.begin_with(crate::db::BEGIN).await?;
        let found = db::insert_all(&mut tx, queries, rows, may_exist).await?;
        tx.commit().await?;
        Ok(found)
    })
    .await?;
    let keys = rows.iter().map(|row| (row.id, row.fresh_id));
    Ok(ours(keys, answer.value, resent || answer.resent))
}

/// After a retry that may follow a commit of our own, a job found under an
/// id generated here is ours: it was inserted, not found.
pub(crate) fn ours(
    jobs: impl Iterator<Item = (JobId, bool)>,
    mut found: Vec<Inserted>,
    resent: bool,
) -> Vec<Inserted> {
    if resent {
        for ((id, fresh), found) in jobs.zip(found.iter_mut()) {
            found.inserted |= fresh && found.id == id;
        }
    }
    found
}
