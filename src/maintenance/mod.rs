//! Maintenance services: background work that keeps the queue healthy, run by
//! any worker, one process at a time (advisory locks), one service per file.

pub(crate) mod periodic;
pub(crate) mod pruner;
pub(crate) mod rescuer;
