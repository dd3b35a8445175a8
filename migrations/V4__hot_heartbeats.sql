-- Lease renewals that touch no index (docs/decisions/2026-11-24-hot-heartbeats.md).
--
-- jobs_running_idx was (worker_id, lease_expires_at): every heartbeat
-- changed an indexed column, so PostgreSQL could not update the row in
-- place on its page (a HOT update) and wrote a new entry into every index
-- of the table, for every running job, every third of a lease. Keyed on
-- the queue instead, the index still finds the started jobs (the rescuer
-- reads all of them, a worker's concurrency at most per worker, and the
-- claim counts them per queue for a queue with a concurrency limit), and a
-- heartbeat, which changes only lease_expires_at, is a HOT update: one new
-- row version on the same page, no index entry.
DROP INDEX conveyor.jobs_running_idx;

CREATE INDEX jobs_running_idx ON conveyor.jobs (queue) WHERE state = 'started';

COMMENT ON INDEX conveyor.jobs_running_idx IS
    'Started jobs by queue: the rescuer, the count of a limited queue''s started jobs, the dashboard. lease_expires_at is not indexed, so lease renewals are HOT updates.';
