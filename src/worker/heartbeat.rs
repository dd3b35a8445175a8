//! Keeps the leases of running jobs alive: one UPDATE for all of them, every
//! third of the lease, and only while the worker runs something.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::client::Client;
use crate::db;

pub(crate) async fn run(client: Client, worker_id: Arc<str>, lease: Duration, running: Arc<AtomicUsize>) {
    let mut tick = tokio::time::interval(lease / 3);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        if running.load(Ordering::Relaxed) == 0 {
            continue;
        }
        let inner = &client.inner;
        if let Err(error) =
            db::heartbeat(&inner.pool, inner.queries, &worker_id, lease.as_secs_f64()).await
        {
            tracing::warn!(%error, "conveyor: cannot renew leases");
        }
    }
}
