-- Extend the lease of every job worker $1 is running.
UPDATE conveyor.jobs
SET lease_expires_at = now() + make_interval(secs => $2)
WHERE state = 'started' AND worker_id = $1
