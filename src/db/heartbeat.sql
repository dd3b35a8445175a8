-- Extend the leases of the jobs this worker process is running: (id,
-- lease_token) pairs, so a lease lost to the rescuer (and the job claimed
-- again, or re-queued) is not touched. Returns every lease renewed, and
-- whether its cancellation was asked for (in case the NOTIFY was missed);
-- `busy` marks a lease not renewed this time because another transaction
-- holds its row. A pair missing from the answer is a lease lost.
--
-- Never waits for a row lock, so it cannot be part of a deadlock cycle: the
-- leases are locked with SKIP LOCKED (in id order) and only those are
-- renewed. A row another transaction holds right now (this worker's own
-- outcome batch, an operator's cancel) is skipped; `present` reads, without
-- locking, which pairs still exist as started jobs under these tokens in
-- this statement's snapshot, and those not renewed are answered as busy: the
-- lease is still held, and the next beat renews it. (A job that ended or
-- was rescued after the snapshot is seen as busy once more, and as lost at
-- the next beat.) The outcome batch (complete.sql) locks its jobs in
-- whatever order its plan meets them; this statement no longer waits for
-- them (docs/decisions/2026-11-25-lock-order.md).
WITH lease AS (
    SELECT * FROM unnest($1::uuid[], $2::bigint[]) AS r(id, lease_token)
),
held AS MATERIALIZED (
    SELECT j.id
    FROM conveyor.jobs_unfinished j
    WHERE j.id = ANY($1::uuid[])
      AND (j.id, j.lease_token) IN (SELECT id, lease_token FROM lease)
      AND j.state = 'started'
    ORDER BY j.id
    FOR NO KEY UPDATE OF j SKIP LOCKED
),
renewed AS (
    -- Only rows locked above (the array is read to its end before the scan).
    UPDATE conveyor.jobs_unfinished j
    SET lease_expires_at = now() + make_interval(secs => $3)
    FROM lease r
    WHERE j.id = ANY(ARRAY(SELECT id FROM held)) AND j.id = r.id
      AND j.lease_token = r.lease_token AND j.state = 'started'
    RETURNING j.id, j.lease_token, j.cancel_requested_at IS NOT NULL AS cancel
),
present AS (
    SELECT j.id, j.lease_token, j.cancel_requested_at IS NOT NULL AS cancel
    FROM conveyor.jobs_unfinished j
    WHERE j.id = ANY($1::uuid[])
      AND (j.id, j.lease_token) IN (SELECT id, lease_token FROM lease)
      AND j.state = 'started'
)
SELECT id, lease_token, cancel, false AS busy FROM renewed
UNION ALL
SELECT id, lease_token, cancel, true AS busy FROM present
WHERE id NOT IN (SELECT id FROM renewed)
