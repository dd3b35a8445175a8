//! Maintenance services: background work that keeps the queue healthy, run by
//! any worker, one process at a time (advisory locks, or locks that make
//! overlapping runs harmless), one service per file.

pub(crate) mod periodic;
pub(crate) mod pruner;
pub(crate) mod rescuer;
pub(crate) mod rotator;
