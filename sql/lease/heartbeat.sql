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
--
-- Jobs held in their claim's row (pending on disk, conveyor.claims) are renewed
-- with it: one update per claim, whatever its number of jobs. A claim row
-- locked right now (an outcome batch counting it down, the rescuer) is
-- skipped like a job row, and its jobs answered as busy.
WITH lease AS (
    SELECT * FROM unnest($1::uuid[], $2::bigint[]) AS r(id, lease_token)
),
claim_held AS MATERIALIZED (
    SELECT c.lease_token
    FROM conveyor.claims c
    WHERE c.lease_token = ANY($2::bigint[])
    ORDER BY c.lease_token
    FOR NO KEY UPDATE OF c SKIP LOCKED
),
claim_renewed AS (
    UPDATE conveyor.claims c
    SET lease_expires_at = now() + make_interval(secs => $3)
    WHERE c.lease_token = ANY(ARRAY(SELECT lease_token FROM claim_held))
    RETURNING c.lease_token
),
-- Jobs their claim's row holds, in this statement's snapshot.
in_claim AS (
    SELECT j.id, r.lease_token
    FROM conveyor.jobs_unfinished j
    JOIN lease r ON r.id = j.id
    WHERE j.id = ANY($1::uuid[]) AND j.state = 'pending'
      AND r.lease_token > coalesce(j.lease_token, 0)
      AND r.lease_token IN (SELECT lease_token FROM conveyor.claims WHERE lease_token = ANY($2::bigint[]))
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
UNION ALL
SELECT id, lease_token, false AS cancel,
       lease_token NOT IN (SELECT lease_token FROM claim_renewed) AS busy
FROM in_claim
