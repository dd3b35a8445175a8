//! Integration tests against a real PostgreSQL: each test makes a database of
//! its own (see `common::TestDb`), so they run in parallel.

mod cli;
mod common;
mod dashboard;
mod enqueue;
mod faults;
mod group_commit;
mod guarantees;
mod metrics;
mod migrate;
mod periodic;
mod poison;
mod proxy;
mod queues;
mod retries;
mod traces;
mod worker;
mod workflows;
