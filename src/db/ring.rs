//! The ready ring's shape as the worker needs it (`conveyor.ready`,
//! `conveyor.ready_bank`). The claim names the slots of the current bank in
//! SQL (`conveyor_internal.claim_statement()`), not here.

/// Banks of the ready ring: `rotate_ring()`'s default `max_banks` (bank 0,
/// and the banks used while long transactions hold others:
/// `docs/storage.md`). A bank announced outside `0..READY_BANKS` is ignored.
pub(crate) const READY_BANKS: usize = 4;
