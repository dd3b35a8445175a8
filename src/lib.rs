//! Conveyor: a durable job queue for Rust that lives entirely in PostgreSQL.
//!
//! Jobs are rows in `conveyor.jobs`; workers claim them with
//! `SELECT … FOR UPDATE SKIP LOCKED`, hold a lease while running them, and
//! sleep on `LISTEN/NOTIFY` when idle. Enqueue inside your own sqlx
//! transaction, await results, and query the history with SQL.
//!
//! | item | what for |
//! | --- | --- |
//! | [`migrate`] | create or upgrade the schema (idempotent, safe to race) |
//! | [`Task`] | a typed task: name, args, output, handler, defaults |
//! | [`Client`] | enqueue on a pool, in a transaction, in bulk; [`JobHandle`]s |
//! | [`NewJob`] | a job to enqueue, with its options |
//! | [`Worker`] | run handlers for claimed jobs; graceful shutdown |
//! | [`TaskError`] | retry, retry after a delay, or fail now |
//! | [`Job`], [`JobState`] | a row of `conveyor.jobs` and its state |
//! | `dashboard` | the web dashboard as an axum router (feature `dashboard`) |
//!
//! ```no_run
//! use std::time::Duration;
//! use conveyor::{Client, NewJob, Worker};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let client = Client::connect("postgres://postgres@127.0.0.1/postgres").await?;
//! conveyor::migrate(client.pool()).await?;
//! let worker = Worker::builder(&client)
//!     .register_fn("double", |_ctx, args| async move {
//!         Ok(serde_json::json!(args["n"].as_i64().unwrap_or(0) * 2))
//!     })
//!     .start()?;
//! let handle = client.enqueue(NewJob::new("double", serde_json::json!({"n": 21}))).await?;
//! assert_eq!(handle.wait(Duration::from_secs(10)).await?, serde_json::json!(42));
//! worker.shutdown(Duration::from_secs(10)).await?;
//! # Ok(()) }
//! ```
//!
//! The book in `docs/` (`docs/SUMMARY.md`) documents the SQL interface
//! (`docs/sql.md`: tables, states, `conveyor.enqueue`), the worker's behaviour
//! (`docs/workers.md`) and what happens on each kind of failure
//! (`docs/operations.md`).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

#[cfg(test)]
mod architecture_test;
mod client;
mod confirm;
#[cfg(feature = "dashboard")]
pub mod dashboard;
mod db;
#[cfg(test)]
mod defaults_test;
mod enqueue;
mod error;
mod failover;
mod group_commit;
mod handle;
mod inspect;
mod job;
mod maintenance;
#[cfg(feature = "metrics")]
mod metrics;
mod migrate;
mod notify;
mod pooler;
mod records;
mod retry;
mod supervise;
mod task;
pub mod testing;
mod trace;
mod worker;
mod workflow;

pub use client::{Client, ClientBuilder, pool_options};
pub use error::{Error, Result};
pub use failover::Primary;
pub use handle::JobHandle;
pub use job::{AttemptError, Job, JobId, JobState, job_id_from_key};
pub use maintenance::periodic::{Missed, Periodic};
pub use maintenance::pruner::{Pruned, Retention};
#[cfg(feature = "metrics")]
pub use metrics::Metrics;
pub use migrate::{migrate, migrate_schema};
pub use pooler::Pooler;
pub use records::{
    Histogram, JobFailure, JobFilter, QueueStats, StatsPoint, StatsQuery, WorkerInfo, WorkflowRun,
    WorkflowState,
};
pub use retry::{fibonacci, fibonacci_backoff};
/// The sqlx this crate is built with: share a pool or a transaction with
/// Conveyor through `conveyor::sqlx` and the versions always match.
pub use sqlx;
pub use task::{Failure, NewJob, Task, TaskContext, TaskError, Unique};
pub use worker::{ShutdownReport, Worker, WorkerBuilder, WorkerHandle, WorkerHealth, WorkerTask};
pub use workflow::{Chain, Chord, Group, GroupHandle, PipedJob, Workflow, WorkflowHandle};
