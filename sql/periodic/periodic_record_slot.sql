-- Remember the latest slot enqueued for a schedule ($2), the job enqueued
-- for it ($3), and the schedule's next slot ($4).
INSERT INTO conveyor.periodic (name, last_slot, last_job_id, next_slot) VALUES ($1, $2, $3, $4)
ON CONFLICT ON CONSTRAINT periodic_pkey DO UPDATE
SET last_job_id = CASE WHEN conveyor.periodic.last_slot IS NULL
                         OR excluded.last_slot >= conveyor.periodic.last_slot
                       THEN excluded.last_job_id ELSE conveyor.periodic.last_job_id END,
    last_slot = greatest(conveyor.periodic.last_slot, excluded.last_slot),
    next_slot = excluded.next_slot,
    updated_at = now()
