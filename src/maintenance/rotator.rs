//! The ready ring's rotator: empties sealed slots of `conveyor.ready` with
//! TRUNCATE, so the dead index entries that claims leave behind never pile
//! up, even while another session holds a snapshot that keeps VACUUM from
//! removing anything; and moves the ring to another bank of slots while a
//! long transaction holds slots of the current one, as `pg_dump` does for
//! its whole run (`conveyor_internal.rotate_ring()`, `conveyor.ready_bank`).
//!
//! Every worker runs this loop, a few times per slot length (one second),
//! so a slot is emptied soon after it is sealed and drained; one process at
//! a time does the work (an advisory lock inside the function), at most one
//! pass per 200 ms in all (`conveyor_internal.ring_pass_at_ms`). A process
//! whose calls find the work done by another calls less and less often,
//! down to once every [`AT_MOST_EVERY`], and four times a second again once
//! one of its calls does a pass: in a fleet, one process does the upkeep
//! and the others stand by, instead of each asking four times a second.
//! Each slot is taken under an ACCESS EXCLUSIVE lock waited for at most 5
//! ms, and skipped without waiting when it is already empty or a long
//! transaction holds it.
//!
//! Each pass returns the current bank, which this worker's claims then read
//! (a change is also announced on the channel `<schema>.ring`, which the
//! worker's listener hears at once).

use std::sync::Arc;
use std::time::Duration;

use crate::client::Client;
use crate::db;
use crate::supervise::Checkpoint;

/// Where the rotator reports what it finds (the worker's health, which its
/// claims read the bank from).
pub(crate) trait RingWatch: Send + Sync {
    /// The bank claims read now.
    fn bank(&self) -> usize;
    /// The ring is at `bank` now.
    fn set_bank(&self, bank: usize);
    /// A long transaction holds slots of the ring (`held`), of its current
    /// bank too (`stuck`).
    fn set_held(&self, held: bool, stuck: bool);
}

/// How often a worker tries to empty sealed slots.
pub(crate) const EVERY: Duration = Duration::from_millis(250);

/// How seldom, at most, a worker whose calls find the upkeep done by another
/// process calls (each such call doubles its interval, up to this).
pub(crate) const AT_MOST_EVERY: Duration = Duration::from_secs(4);

/// The interval after a call: [`EVERY`] if it did a pass (`did`), else
/// twice `now`, at most [`AT_MOST_EVERY`].
fn next_interval(now: Duration, did: bool) -> Duration {
    if did {
        EVERY
    } else {
        (now * 2).min(AT_MOST_EVERY)
    }
}

/// How often it looks for the transaction holding the current bank, to
/// name it in a warning, while the ring is stuck.
const HOLDER_AGE: Duration = Duration::from_secs(2);

/// A holder this old is reported (a warning, once per process and holder).
const REPORT_AGE: f64 = 30.0;

pub(crate) async fn run(client: Client, health: Arc<dyn RingWatch>, checkpoint: Checkpoint) {
    let mut every = EVERY;
    let mut failing = false;
    let mut next_look = tokio::time::Instant::now();
    let mut reported: Option<i32> = None;
    let mut stuck = false;
    loop {
        tokio::time::sleep(every).await;
        checkpoint();
        let inner = &client.inner;
        match db::rotate_ring(&inner.pool, inner.queries).await {
            Ok(pass) => {
                every = next_interval(every, pass.held.is_some());
                if pass.bank != health.bank() {
                    tracing::info!(
                        bank = pass.bank,
                        "conveyor: the ready ring moved to another bank of slots (a long transaction, \
                         such as a pg_dump, holds or held the previous one)"
                    );
                    health.set_bank(pass.bank);
                }
                if let (Some(held), Some(now_stuck)) = (pass.held, pass.stuck) {
                    health.set_held(held, now_stuck);
                    stuck = now_stuck;
                }
                if pass.emptied > 0 {
                    tracing::trace!(emptied = pass.emptied, "conveyor: emptied ready-ring slots");
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
        if !stuck {
            reported = None;
            continue;
        }
        if tokio::time::Instant::now() < next_look {
            continue;
        }
        next_look = tokio::time::Instant::now() + HOLDER_AGE;
        match db::ring_blocker(&inner.pool, inner.queries, REPORT_AGE).await {
            Ok(Some((pid, who, secs))) if reported != Some(pid) => {
                reported = Some(pid);
                tracing::warn!(
                    pid,
                    who,
                    secs,
                    "conveyor: a long transaction holds the ready ring's current bank of slots and no \
                     other bank is free: its slots cannot be emptied and claims slow down until it \
                     ends (see docs/operations.md, \"Backups and long transactions\")"
                );
            }
            Ok(_) => {}
            Err(error) => tracing::debug!(%error, "conveyor: cannot look for ring blockers"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_that_finds_the_upkeep_done_backs_off_until_it_does_a_pass() {
        let mut every = EVERY;
        for expected in [500, 1_000, 2_000, 4_000, 4_000] {
            every = next_interval(every, false);
            assert_eq!(every, Duration::from_millis(expected));
        }
        assert_eq!(next_interval(every, true), EVERY);
    }
}
