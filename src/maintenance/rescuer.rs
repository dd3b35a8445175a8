//! The lease rescuer: jobs whose lease expired (their worker died, hung, or
//! lost the database for longer than the lease) are made runnable again, or
//! failed with "lease expired" when no retry is left.
//!
//! Every worker runs this loop; an advisory lock lets one process at a time do
//! the work, and `FOR UPDATE SKIP LOCKED` keeps even overlapping runs apart.
//! The same loop marks workers dead in the registry when they have been
//! silent for three beats (an idempotent UPDATE; no lock needed).

use std::time::Duration;

use crate::client::Client;
use crate::db;
use crate::supervise::Checkpoint;

/// Jobs recovered per statement (also bounds the finished-ids payload).
const BATCH: i64 = 200;

pub(crate) async fn run(client: Client, every: Duration, checkpoint: Checkpoint) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        checkpoint();
        let inner = &client.inner;
        match db::mark_dead_workers(&inner.pool, inner.queries).await {
            Ok(0) => {}
            Ok(dead) => {
                tracing::warn!(dead, "conveyor: workers silent for three beats marked dead")
            }
            Err(error) => tracing::warn!(%error, "conveyor: cannot mark silent workers dead"),
        }
        loop {
            let inner = &client.inner;
            match db::rescue(&inner.pool, inner.queries, BATCH).await {
                Ok(Some(rescued)) if rescued > 0 => {
                    tracing::warn!(rescued, "conveyor: recovered jobs whose lease expired");
                    if rescued < BATCH {
                        break;
                    }
                }
                Ok(_) => break,
                Err(error) => {
                    tracing::warn!(%error, "conveyor: lease rescue failed");
                    break;
                }
            }
        }
    }
}
