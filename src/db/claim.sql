-- Claim up to $3 runnable jobs of one queue for worker $5, in one statement.
-- The SELECT sits in a CTE on purpose: it is an optimisation fence, so the
-- planner cannot lock (and update) more rows than the LIMIT. Only tasks the
-- worker has handlers for are claimed; run_at <= now() guards hand-inserted
-- rows that are 'pending' with a future run_at. A paused queue gives nothing.
-- $6 is the queue's global concurrency limit and $7 the room left in its
-- rate window (NULL: none): the caller then runs this right after locking the
-- queue's row (conveyor.queues) in the same transaction, so the count of
-- started jobs below is current.
-- (Rows are matched with = ANY(array): a cached generic plan then still
-- looks them up by primary key instead of hash-joining the whole table.)
WITH room AS (
    SELECT greatest(0, least(
               $3::bigint,
               coalesce($7::int, $3::bigint),
               CASE WHEN $6::int IS NULL THEN $3::bigint
                    ELSE $6::int - (SELECT count(*) FROM conveyor.jobs
                                    WHERE state = 'started' AND queue = $1) END)) AS n
),
picked AS (
    SELECT id FROM conveyor.jobs
    WHERE state = 'pending' AND queue = $1 AND task = ANY($2) AND run_at <= now()
      AND NOT EXISTS (SELECT 1 FROM conveyor.queues
                      WHERE name = $1 AND paused_at IS NOT NULL)
    ORDER BY priority DESC, run_at, id
    LIMIT (SELECT n FROM room)
    FOR UPDATE SKIP LOCKED
)
UPDATE conveyor.jobs j
SET state = 'started',
    -- (Saturating: a hand-written attempt of 2^31 - 1 must not fail the claim.)
    attempt = least(j.attempt, 2147483646) + 1,
    -- A fresh fencing token, one per statement (an InitPlan: nextval runs
    -- once, not per row): a job is claimed at most once per statement, so
    -- (id, lease_token) never repeats (see the sequence conveyor.lease_tokens).
    lease_token = (SELECT nextval('conveyor.lease_tokens')),
    started_at = now(),
    lease_expires_at = now() + make_interval(secs => $4),
    worker_id = $5
WHERE j.id = ANY(ARRAY(SELECT id FROM picked))
RETURNING {job_columns}
