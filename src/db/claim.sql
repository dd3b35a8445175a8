-- Claim up to $3 runnable jobs of one queue for worker $5, in one statement.
-- The SELECT sits in a CTE on purpose: it is an optimisation fence, so the
-- planner cannot lock (and update) more rows than the LIMIT. Only tasks the
-- worker has handlers for are claimed; run_at <= now() guards hand-inserted
-- rows that are 'pending' with a future run_at.
WITH picked AS (
    SELECT id FROM conveyor.jobs
    WHERE state = 'pending' AND queue = $1 AND task = ANY($2) AND run_at <= now()
    ORDER BY priority DESC, run_at, id
    LIMIT $3
    FOR UPDATE SKIP LOCKED
)
UPDATE conveyor.jobs j
SET state = 'started',
    attempt = j.attempt + 1,
    started_at = now(),
    lease_expires_at = now() + make_interval(secs => $4),
    worker_id = $5
FROM picked
WHERE j.id = picked.id
RETURNING {job_columns}
