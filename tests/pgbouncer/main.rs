//! The integration suite again, with each test's client (and so its
//! workers, handles, periodic scheduler) going through PgBouncer in
//! transaction mode with `conveyor::Pooler` set: `common` sees the crate
//! name `pgbouncer` and starts one PgBouncer for the binary
//! (tests/integration/common/bouncer.rs). A test's own checks and
//! adversaries use its direct pool. `pooled` holds the tests of the
//! setting itself. Run alone: `cargo test --all-features --test pgbouncer`.

#[path = "../integration/claim_ahead.rs"]
mod claim_ahead;
#[cfg(feature = "cli")]
#[path = "../integration/cli/mod.rs"]
mod cli;
#[path = "../integration/common.rs"]
mod common;
#[cfg(feature = "dashboard")]
#[path = "../integration/dashboard/mod.rs"]
mod dashboard;
#[path = "../integration/enqueue.rs"]
mod enqueue;
#[path = "../integration/faults.rs"]
mod faults;
#[path = "../integration/group_commit.rs"]
mod group_commit;
#[path = "../integration/guarantees.rs"]
mod guarantees;
#[path = "../integration/history.rs"]
mod history;
#[path = "../integration/host_list.rs"]
mod host_list;
#[path = "../integration/insert_paths.rs"]
mod insert_paths;
// (Its statements run on the test's direct pool: what it checks is the
// order in which PostgreSQL locks rows, the same behind a pooler.)
#[path = "../integration/lock_order.rs"]
mod lock_order;
#[cfg(feature = "metrics")]
#[path = "../integration/metrics.rs"]
mod metrics;
#[path = "../integration/migrate.rs"]
mod migrate;
// The known workload of the chart tests.
#[cfg(feature = "dashboard")]
#[path = "../integration/outcomes.rs"]
mod outcomes;
#[path = "../integration/periodic.rs"]
mod periodic;
// Also runs the `conveyor` command on every poison row.
#[cfg(feature = "cli")]
#[path = "../integration/poison/mod.rs"]
mod poison;
mod pooled;
#[path = "../integration/proxy.rs"]
mod proxy;
#[path = "../integration/queues.rs"]
mod queues;
#[path = "../integration/rescue.rs"]
mod rescue;
#[path = "../integration/retries.rs"]
mod retries;
#[path = "../integration/ring.rs"]
mod ring;
#[path = "../integration/stats.rs"]
mod stats;
#[cfg(feature = "otel")]
#[path = "../integration/traces.rs"]
mod traces;
#[path = "../integration/worker.rs"]
mod worker;
#[path = "../integration/workers.rs"]
mod workers;
#[path = "../integration/workflows.rs"]
mod workflows;
