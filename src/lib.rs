#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod client;
mod db;
mod error;
mod handle;
mod job;
mod maintenance;
mod migrate;
mod notify;
mod retry;
mod task;
mod worker;

pub use client::{
    BULK_CHUNK, Client, ClientBuilder, DEFAULT_MAX_RETRIES, DEFAULT_QUEUE,
    DEFAULT_RETRY_BACKOFF_BASE, NewJob,
};
pub use error::{Error, Result};
pub use handle::JobHandle;
pub use job::{AttemptError, Job, JobId, JobState, job_id_from_key};
pub use migrate::{migrate, migrate_schema};
pub use retry::{MAX_BACKOFF, fibonacci, fibonacci_backoff};
pub use task::{Failure, Task, TaskContext, TaskError};
pub use worker::{
    DEFAULT_CONCURRENCY, DEFAULT_LEASE, DEFAULT_SAFETY_INTERVAL, ShutdownReport, Worker,
    WorkerBuilder, WorkerHandle,
};
