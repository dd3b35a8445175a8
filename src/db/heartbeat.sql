-- Extend the leases of the jobs this worker process is running: (id,
-- lease_token) pairs, so a lease lost to the rescuer (and the job claimed
-- again, or re-queued) is not touched. Returns every lease renewed (a pair
-- missing from the answer is a lease lost), and whether its cancellation
-- was asked for (in case the NOTIFY was missed).
UPDATE conveyor.jobs_unfinished j
SET lease_expires_at = now() + make_interval(secs => $3)
FROM unnest($1::uuid[], $2::bigint[]) AS r(id, lease_token)
WHERE j.id = ANY($1::uuid[]) AND j.id = r.id AND j.lease_token = r.lease_token
  AND j.state = 'started'
RETURNING j.id, j.lease_token, j.cancel_requested_at IS NOT NULL AS cancel
