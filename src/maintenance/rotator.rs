//! The ready ring's rotator: empties sealed slots of `conveyor.ready` with
//! TRUNCATE (`conveyor_internal.rotate_ready()`), so the dead index entries
//! that claims leave behind never pile up, even while another session holds
//! a snapshot that keeps VACUUM from removing anything.
//!
//! Every worker runs this loop, a few times per slot length (one second), so
//! a slot is emptied soon after it is sealed and drained; one process at a
//! time does the work (an advisory lock inside the function). Each slot is
//! taken under an ACCESS EXCLUSIVE lock waited for at most 5 ms, and skipped
//! without waiting when it is already empty or a long transaction holds it.

use std::time::Duration;

use crate::client::Client;
use crate::db;
use crate::supervise::Checkpoint;

/// How often a worker tries to empty sealed slots.
pub(crate) const EVERY: Duration = Duration::from_millis(250);

pub(crate) async fn run(client: Client, checkpoint: Checkpoint) {
    let mut tick = tokio::time::interval(EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failing = false;
    loop {
        tick.tick().await;
        checkpoint();
        let inner = &client.inner;
        match db::rotate_ready(&inner.pool, inner.queries).await {
            Ok(emptied) => {
                if emptied > 0 {
                    tracing::trace!(emptied, "conveyor: emptied ready-ring slots");
                }
                failing = false;
            }
            // Once per stretch of failures: the database may be away for a while.
            Err(error) if !failing => {
                failing = true;
                tracing::warn!(%error, "conveyor: cannot rotate the ready ring");
            }
            Err(_) => {}
        }
    }
}
