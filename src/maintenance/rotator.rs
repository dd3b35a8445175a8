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
//!
//! Every couple of seconds it also looks for such a holder (a pg_dump, a
//! session that read the ring and stayed in its transaction): while there is
//! one, no slot can be emptied, and the worker's claims start each sealed
//! slot after where they stopped last (`claim_floors.sql`) instead of
//! walking its dead entries again.

use std::sync::Arc;
use std::time::Duration;

use crate::client::Client;
use crate::db;
use crate::supervise::Checkpoint;

/// Told whether a long transaction holds the ring (checked every couple of
/// seconds): the worker's claims use floors while it does.
pub(crate) type RingHeld = Arc<dyn Fn(bool) + Send + Sync>;

/// How often a worker tries to empty sealed slots.
pub(crate) const EVERY: Duration = Duration::from_millis(250);

/// A transaction holding the ring longer than this makes claims use floors
/// (see [`RingHeld`]), looked for this often.
const HOLDER_AGE: Duration = Duration::from_secs(2);

/// A holder this old is reported (a warning, once per process).
const REPORT_AGE: f64 = 30.0;

pub(crate) async fn run(client: Client, ring_held: RingHeld, checkpoint: Checkpoint) {
    let mut tick = tokio::time::interval(EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failing = false;
    let mut next_look = tokio::time::Instant::now() + HOLDER_AGE;
    let mut reported: Option<i32> = None;
    loop {
        tick.tick().await;
        checkpoint();
        let inner = &client.inner;
        if tokio::time::Instant::now() >= next_look {
            next_look += HOLDER_AGE;
            let holder =
                db::ring_blocker(&inner.pool, inner.queries, HOLDER_AGE.as_secs_f64()).await;
            if let Ok(found) = &holder {
                ring_held(found.is_some());
            }
            match holder {
                Ok(Some((pid, who, secs))) if secs >= REPORT_AGE && reported != Some(pid) => {
                    reported = Some(pid);
                    tracing::warn!(
                        pid,
                        who,
                        secs,
                        "conveyor: a transaction has held the ready ring (conveyor.ready) for a long time: \
                         its slots cannot be emptied and claims slow down until it ends (a pg_dump? see README, \
                         \"Indexes and upkeep\")"
                    );
                }
                Ok(Some(_)) => {}
                Ok(None) => reported = None,
                Err(error) => tracing::debug!(%error, "conveyor: cannot look for ring blockers"),
            }
        }
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
