-- Remember the latest slot enqueued for a schedule.
INSERT INTO conveyor.periodic (name, last_slot) VALUES ($1, $2)
ON CONFLICT ON CONSTRAINT periodic_pkey DO UPDATE
SET last_slot = greatest(conveyor.periodic.last_slot, excluded.last_slot), updated_at = now()
