//! The ready ring's shape as the worker needs it (`conveyor.ready`,
//! `conveyor.ready_bank`). The claim names the slots of the current bank in
//! SQL (`conveyor_internal.claim_statement()`), not here.

/// Slots in a bank of the ready ring (`conveyor.ready_<bank * RING_SLOTS +
/// k>`, k below it). Written once here: the function files that shape the
/// ring (`sql/ring/`, `sql/claim/claim_statement.sql`) say `{ring_slots}`,
/// replaced with this value when the functions are applied
/// ([`super::migrations::function_text`]). The baseline made bank 0's
/// eight tables, so changing it needs a migration as well.
pub(crate) const RING_SLOTS: usize = 8;

/// Banks of the ready ring: `rotate_ring()`'s default `max_banks` (bank 0,
/// and the banks used while long transactions hold others:
/// `docs/storage.md`). A bank announced outside `0..READY_BANKS` is ignored.
pub(crate) const READY_BANKS: usize = 4;
