//! Group commit for concurrent enqueues: autocommit enqueues that overlap on
//! one [`crate::Client`] share a transaction.
//!
//! Each call still returns only once its own jobs are committed, and each
//! call's jobs commit together or not at all, as if it had its own
//! transaction. What is shared is the statement, the commit and its disk
//! flush: eight tasks enqueueing one job each cost one multi-row insert
//! rather than eight. A merged transaction that fails (a bad row, a lost
//! connection) is retried call by call, each on its own, so one call's bad job
//! never fails another's; job ids are chosen before the first try, so a retry
//! after a commit whose outcome was lost finds the jobs instead of doubling
//! them.
//!
//! A call arriving while no other insert of its client is in flight does not
//! come here: it runs at once, alone (see `Client::insert_autocommit`), so a
//! lone enqueue waits for no batch.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use sqlx::PgPool;
use tokio::sync::{mpsc, oneshot};

use crate::db::{InsertRow, Inserted, Queries};
use crate::error::{Error, Result};

/// One enqueue call's rows and where its answer goes.
struct Call {
    rows: Vec<InsertRow>,
    answer: oneshot::Sender<Result<Vec<Inserted>>>,
}

/// The merging queue of one client. Its task starts on first use and ends
/// once the client is dropped and the calls already queued are answered.
pub(crate) struct GroupCommit {
    pool: PgPool,
    queries: &'static Queries,
    /// The client's `confirm_for` (see `crate::confirm`).
    confirm_for: Duration,
    calls: OnceLock<mpsc::UnboundedSender<Call>>,
}

impl GroupCommit {
    pub(crate) fn new(pool: PgPool, queries: &'static Queries, confirm_for: Duration) -> Self {
        GroupCommit {
            pool,
            queries,
            confirm_for,
            calls: OnceLock::new(),
        }
    }

    /// Inserts `rows` atomically, possibly in one transaction with other
    /// calls'. Must be called within a tokio runtime.
    pub(crate) async fn insert(&self, rows: Vec<InsertRow>) -> Result<Vec<Inserted>> {
        let calls = self.calls.get_or_init(|| {
            let (tx, rx) = mpsc::unbounded_channel();
            let (pool, queries, confirm_for) = (self.pool.clone(), self.queries, self.confirm_for);
            // Restarted if it ever panicked (the calls of the batch it held
            // would get an error; later calls go on).
            let rx = Arc::new(tokio::sync::Mutex::new(rx));
            tokio::spawn(crate::supervise::supervise(
                "group commit",
                move || merge_loop(pool.clone(), queries, confirm_for, rx.clone()),
                |_| {},
            ));
            tx
        });
        let (answer, answered) = oneshot::channel();
        if let Err(mpsc::error::SendError(call)) = calls.send(Call { rows, answer }) {
            // The merging task is gone (its runtime shut down): go alone.
            return insert_alone(&self.pool, self.queries, self.confirm_for, &call.rows).await;
        }
        answered.await.unwrap_or_else(|_| {
            Err(Error::Database(sqlx::Error::Protocol(
                "conveyor: the enqueue was dropped before it was answered (runtime shutting down)"
                    .into(),
            )))
        })
    }
}

/// One merged transaction at a time: it takes every call queued by then and
/// commits them together. Overlapping merged transactions measured slower:
/// each notifies in its transaction (the insert trigger), and PostgreSQL
/// commits notifying transactions one after another.
async fn merge_loop(
    pool: PgPool,
    queries: &'static Queries,
    confirm_for: Duration,
    calls: Arc<tokio::sync::Mutex<mpsc::UnboundedReceiver<Call>>>,
) {
    let mut calls = calls.lock().await;
    while let Some(first) = calls.recv().await {
        let mut rows = first.rows.len();
        let mut batch = vec![first];
        // Let the callers answered by the last commit, already runnable,
        // queue their next call first: with a closed loop of callers this
        // nearly doubles the calls per commit, and costs a lone call nothing
        // measurable.
        tokio::task::yield_now().await;
        while rows < crate::db::BULK_CHUNK
            && let Ok(call) = calls.try_recv()
        {
            rows += call.rows.len();
            batch.push(call);
        }
        commit_together(&pool, queries, confirm_for, batch).await;
    }
}

/// Inserts every call's rows in one transaction and answers each call with
/// its share; if that fails, retries each call on its own.
async fn commit_together(
    pool: &PgPool,
    queries: &'static Queries,
    confirm_for: Duration,
    batch: Vec<Call>,
) {
    let counts: Vec<usize> = batch.iter().map(|call| call.rows.len()).collect();
    let mut answers = Vec::with_capacity(batch.len());
    let mut rows = Vec::with_capacity(counts.iter().sum());
    for call in batch {
        rows.extend(call.rows);
        answers.push(call.answer);
    }
    let result = insert_alone(pool, queries, confirm_for, &rows).await;
    if answers.len() == 1 {
        if let Some(answer) = answers.pop() {
            let _ = answer.send(result);
        }
        return;
    }
    let error = match result {
        Ok(found) => {
            let mut found = found.into_iter();
            for (answer, n) in answers.into_iter().zip(counts) {
                let _ = answer.send(Ok(found.by_ref().take(n).collect()));
            }
            return;
        }
        Err(error) => error,
    };
    tracing::debug!(
        %error,
        calls = answers.len(),
        "conveyor: a merged enqueue failed; retrying its calls one by one"
    );
    let mut rows = rows.into_iter();
    let calls = answers.into_iter().zip(counts).map(|(answer, n)| {
        let rows: Vec<InsertRow> = rows.by_ref().take(n).collect();
        (answer, rows)
    });
    if refused(&error) {
        // PostgreSQL refused some row and the connection is fine: one call
        // after another, so a large batch does not take the whole pool.
        for (answer, rows) in calls {
            let _ = answer.send(insert_alone(pool, queries, confirm_for, &rows).await);
        }
    } else {
        // The connection failed (or the pool): each call tries again as it
        // would have without group commit, with a connection of its own.
        let mut retries = tokio::task::JoinSet::new();
        for (answer, rows) in calls {
            let pool = pool.clone();
            retries.spawn(async move {
                // The merged commit may have happened.
                let _ = answer
                    .send(crate::confirm::insert(&pool, queries, confirm_for, &rows, true).await);
            });
        }
        while retries.join_next().await.is_some() {}
    }
}

/// Whether PostgreSQL refused a row of the batch (so it rolled the
/// transaction back and the connection still works), rather than the
/// connection or pool failing.
fn refused(error: &Error) -> bool {
    error.is_refusal() || matches!(error, Error::NotFound(_))
}

/// Inserts `rows` in a transaction of their own, confirming the commit if
/// the connection fails (see `crate::confirm`). The insert trigger wakes
/// idle workers at commit.
async fn insert_alone(
    pool: &PgPool,
    queries: &'static Queries,
    confirm_for: Duration,
    rows: &[InsertRow],
) -> Result<Vec<Inserted>> {
    crate::confirm::insert(pool, queries, confirm_for, rows, false).await
}
