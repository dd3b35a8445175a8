-- Extend the leases of the jobs this worker process is running: (id, attempt)
-- pairs, so a lease lost to the rescuer and claimed again is not touched.
-- Returns the ones whose cancellation was asked for (in case the NOTIFY was
-- missed).
UPDATE conveyor.jobs j
SET lease_expires_at = now() + make_interval(secs => $3)
FROM unnest($1::uuid[], $2::int[]) AS r(id, attempt)
WHERE j.id = ANY($1::uuid[]) AND j.id = r.id AND j.attempt = r.attempt AND j.state = 'started'
RETURNING j.id, j.cancel_requested_at IS NOT NULL AS cancel
