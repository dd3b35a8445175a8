//! SQL written out per slot of the ready ring (`conveyor.ready_0` to `_7`,
//! migration V3): the claims' statements name each slot, so that each slot
//! is read and written by a plan of its own (see `claim.sql` and
//! `claim_floors.sql` for why).

/// Slots of the ready ring (the same number as in
/// `conveyor_internal.ready_slot()` and `rotate_ready()`).
pub(crate) const READY_SLOTS: usize = 8;

/// `claim.sql`'s deletion of the ring rows it picked: CTEs `taken_<k>`,
/// one TID scan per slot, then `taken` as their union.
pub(super) fn delete_picked() -> String {
    let deletes: Vec<String> = (0..READY_SLOTS)
        .map(|k| {
            format!(
                "taken_{k} AS (DELETE FROM conveyor.ready_{k} \
                 WHERE ctid = ANY(ARRAY(SELECT ctid FROM picked WHERE slot = {k})) RETURNING job_id),"
            )
        })
        .collect();
    let union: Vec<String> = (0..READY_SLOTS)
        .map(|k| format!("SELECT job_id FROM taken_{k}"))
        .collect();
    format!(
        "{}\ntaken AS ({})",
        deletes.join("\n"),
        union.join(" UNION ALL ")
    )
}

/// `claim_floors.sql`'s candidates: per slot, the head of the queue's rows
/// after this worker's floor for that slot (none for the current slot, or
/// for one current since the floor was taken), as a UNION ALL.
pub(super) fn candidates() -> String {
    let branches: Vec<String> = (0..READY_SLOTS)
        .map(|k| {
            let i = k + 1;
            // The floor holds until slot k is current again: the first
            // second after $11[i] that is k modulo the slot count.
            let valid = format!(
                "($11[{i}] IS NOT NULL AND {k} <> (SELECT slot FROM now_slot) \
                 AND (SELECT second FROM now_slot) < $11[{i}] + ((({k} - $11[{i}]) % {n} + {n}) % {n}))",
                n = READY_SLOTS
            );
            format!(
                "(SELECT {k}::smallint AS slot, ctid, -(priority::bigint) AS np, run_at, job_id \
                 FROM conveyor.ready_{k} \
                 WHERE queue = $1 AND task = ANY($2) AND run_at <= now() \
                 AND (-(priority::bigint), run_at, job_id) > ( \
                     coalesce(CASE WHEN {valid} THEN $8[{i}] END, -9223372036854775808), \
                     coalesce(CASE WHEN {valid} THEN $9[{i}] END, '-infinity'::timestamptz), \
                     coalesce(CASE WHEN {valid} THEN $10[{i}] END, '00000000-0000-0000-0000-000000000000'::uuid)) \
                 ORDER BY -(priority::bigint), run_at, job_id \
                 LIMIT (SELECT n FROM room))"
            )
        })
        .collect();
    branches.join("\nUNION ALL\n")
}

/// `claim_floors.sql`'s locking and deletion of the candidates, per slot:
/// CTEs `locked_<k>` (SKIP LOCKED by address) and `taken_<k>`, then
/// `taken` as their union, with each row's slot and claim key.
pub(super) fn lock_and_take() -> String {
    let per_slot: Vec<String> = (0..READY_SLOTS)
        .map(|k| {
            format!(
                "locked_{k} AS (SELECT ctid FROM conveyor.ready_{k} \
                 WHERE ctid = ANY(ARRAY(SELECT ctid FROM cand WHERE slot = {k})) FOR UPDATE SKIP LOCKED),\n\
                 taken_{k} AS (DELETE FROM conveyor.ready_{k} \
                 WHERE ctid = ANY(ARRAY(SELECT ctid FROM locked_{k})) \
                 RETURNING {k}::smallint AS slot, job_id, -(priority::bigint) AS np, run_at),"
            )
        })
        .collect();
    let union: Vec<String> = (0..READY_SLOTS)
        .map(|k| format!("SELECT slot, job_id, np, run_at FROM taken_{k}"))
        .collect();
    format!(
        "{}\ntaken AS ({})",
        per_slot.join("\n"),
        union.join(" UNION ALL ")
    )
}
