//! Integration tests against a real PostgreSQL: each test makes a database of
//! its own (see `common::TestDb`), so they run in parallel. Modules for the
//! optional features (`cli`, `dashboard`, `metrics`, `otel`, `cron`) build
//! with them: the test command is `cargo test --all-features`.

mod backup;
mod claim_ahead;
#[cfg(feature = "cli")]
mod cli;
mod common;
#[cfg(feature = "dashboard")]
mod dashboard;
mod enqueue;
mod faults;
mod group_commit;
mod guarantees;
mod history;
mod host_list;
mod insert_paths;
mod lock_order;
#[cfg(feature = "metrics")]
mod metrics;
mod migrate;
// The known workload of the chart tests.
#[cfg(feature = "dashboard")]
mod outcomes;
mod periodic;
// Also runs the `conveyor` command on every poison row.
#[cfg(feature = "cli")]
mod poison;
mod proxy;
mod queues;
mod rescue;
mod retries;
mod ring;
mod ring_upkeep;
mod stats;
#[cfg(feature = "otel")]
mod traces;
mod worker;
mod workers;
mod workflows;
