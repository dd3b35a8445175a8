//! Writes outcomes in batches: whatever has arrived while the previous batch
//! was being written goes in the next statement (up to [`MAX_BATCH`]).

use std::time::Duration;

use backoff::ExponentialBackoff;
use tokio::sync::mpsc::UnboundedReceiver;

use crate::client::Client;
use crate::db::{self, OutcomeRow};

/// Outcomes per statement; also keeps the finished-ids notification payload
/// under PostgreSQL's 8000-byte limit (37 bytes per id).
pub(crate) const MAX_BATCH: usize = 200;

/// Runs until every sender is dropped and every outcome is written (or given
/// up on after `give_up_after`: the job then stays started until its lease
/// expires).
pub(crate) async fn run(
    client: Client,
    mut outcomes: UnboundedReceiver<OutcomeRow>,
    give_up_after: Duration,
) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    while outcomes.recv_many(&mut batch, MAX_BATCH).await > 0 {
        write(&client, &batch, give_up_after).await;
        batch.clear();
    }
}

async fn write(client: &Client, batch: &[OutcomeRow], give_up_after: Duration) {
    let policy = ExponentialBackoff {
        initial_interval: Duration::from_millis(50),
        max_interval: Duration::from_secs(2),
        max_elapsed_time: Some(give_up_after),
        ..ExponentialBackoff::default()
    };
    let written = backoff::future::retry_notify(
        policy,
        || async {
            write_once(client, batch)
                .await
                .map_err(backoff::Error::transient)
        },
        |error, wait| tracing::warn!(%error, ?wait, "conveyor: cannot record outcomes, retrying"),
    )
    .await;
    match written {
        Ok(updated) if updated < batch.len() as i64 => tracing::warn!(
            lost = batch.len() as i64 - updated,
            "conveyor: some outcomes were not recorded: those jobs are no longer held by this attempt"
        ),
        Ok(_) => {}
        Err(error) => tracing::error!(
            %error,
            jobs = batch.len(),
            "conveyor: gave up recording outcomes; the jobs will be retried when their leases expire"
        ),
    }
}

/// One attempt at writing a batch. Plain jobs: one statement. Jobs with
/// follow-ups: the same statement plus `conveyor.after_finish()`, in one
/// transaction, so next steps and callbacks exist exactly when the outcome does.
async fn write_once(client: &Client, batch: &[OutcomeRow]) -> crate::Result<i64> {
    let inner = &client.inner;
    if !batch.iter().any(|o| o.follow_up) {
        return Ok(db::complete(&inner.pool, inner.queries, batch).await?.0);
    }
    let mut tx = inner.pool.begin().await?;
    let (updated, follow_ups) = db::complete(&mut *tx, inner.queries, batch).await?;
    db::after_finish(&mut tx, inner.queries, &follow_ups).await?;
    tx.commit().await?;
    Ok(updated)
}
