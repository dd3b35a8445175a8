//! SQL written out per slot of the ready ring (`conveyor.ready`, migrations
//! V3 and V16): the claim names each slot of the bank it reads, so that each
//! slot is read and written by a plan of its own (see `claim.sql` for why).

/// Slots in a bank of the ready ring (the same number as in
/// `conveyor_internal.ready_slot()` and `rotate_ring()`).
pub(crate) const READY_SLOTS: usize = 8;

/// Banks a claim statement is prepared for: `rotate_ring()`'s default
/// `max_banks` (bank 0, and the banks used while long transactions hold
/// others: `docs/storage.md`).
pub(crate) const READY_BANKS: usize = 4;

/// The first and last slot of `bank`, for `claim.sql`'s `{bank_slots}`
/// (constants, so the plan reads that bank's tables only).
pub(super) fn bank_slots(bank: usize) -> String {
    let first = bank * READY_SLOTS;
    format!("{first} AND {}", first + READY_SLOTS - 1)
}

/// `claim.sql`'s deletion of the ring rows it picked in `bank`: CTEs
/// `taken_<k>`, one TID scan per slot, then `taken` as their union.
pub(super) fn delete_picked(bank: usize) -> String {
    let slots = (0..READY_SLOTS).map(|k| bank * READY_SLOTS + k);
    let deletes: Vec<String> = slots
        .clone()
        .map(|k| {
            format!(
                "taken_{k} AS (DELETE FROM conveyor.ready_{k} \
                 WHERE ctid = ANY(ARRAY(SELECT ctid FROM picked WHERE slot = {k})) RETURNING job_id),"
            )
        })
        .collect();
    let union: Vec<String> = slots
        .map(|k| format!("SELECT job_id FROM taken_{k}"))
        .collect();
    format!(
        "{}\ntaken AS ({})",
        deletes.join("\n"),
        union.join(" UNION ALL ")
    )
}
