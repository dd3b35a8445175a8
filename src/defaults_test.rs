//! The defaults the public docs state as numbers (the constants behind them
//! are not exported): a change of a constant fails here until its docs
//! (and this list) say the new value.

use std::time::Duration;

#[test]
fn documented_defaults_match_the_constants() {
    // `ClientBuilder::confirm_for`, `Client::enqueue`.
    assert_eq!(crate::confirm::CONFIRM_FOR, Duration::from_secs(30));
    // `Client::enqueue_many`; the integration tests' `common::COPY_MIN`.
    assert_eq!(crate::db::COPY_MIN, 1_000);
    assert_eq!(crate::db::BULK_CHUNK, 5_000);
    // `Primary::connect`.
    assert_eq!(crate::failover::CHECK_EVERY, Duration::from_secs(1));
    // `Pooler::transaction_mode`, `Pooler::poll_every`.
    assert_eq!(crate::pooler::DEFAULT_POLL, Duration::from_secs(1));
    // `fibonacci_backoff`, `TaskError::retry_after`.
    assert_eq!(
        crate::retry::MAX_BACKOFF,
        Duration::from_secs(7 * 24 * 3600)
    );
    // `NewJob::queue`, `max_retries`, `retry_backoff_base`; `Task::QUEUE`,
    // `Task::MAX_RETRIES`; the CLI's `enqueue --queue`.
    assert_eq!(crate::task::DEFAULT_QUEUE, "default");
    assert_eq!(crate::task::DEFAULT_MAX_RETRIES, 25);
    let job = crate::NewJob::new("t", serde_json::json!({}));
    assert_eq!(job.retry_backoff_base, Duration::from_secs(1));
    // The `WorkerBuilder` methods of the same names; `bookkeeping_pool`,
    // `Worker::start` and `pool_options` for the 4 connections.
    use crate::worker::*;
    assert_eq!(DEFAULT_CONCURRENCY, 10);
    assert_eq!(DEFAULT_CLAIM_AHEAD, 1_000);
    assert_eq!(DEFAULT_LEASE, Duration::from_secs(60));
    assert_eq!(DEFAULT_PRUNE_INTERVAL, Duration::from_secs(60));
    assert_eq!(DEFAULT_CANCEL_GRACE, Duration::from_secs(5));
    assert_eq!(DEFAULT_SAFETY_INTERVAL, Duration::from_secs(30));
    assert_eq!(BOOKKEEPING_CONNECTIONS, 4);
}
