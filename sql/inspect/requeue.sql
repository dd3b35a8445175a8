CREATE OR REPLACE FUNCTION conveyor.requeue(ids uuid[]) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    n integer;
BEGIN
    WITH candidates AS (
        -- One job per active unique key (jobs_unique_active_idx), and none
        -- whose key an active job already holds.
        SELECT DISTINCT ON (k.slot) j.id
        FROM conveyor.jobs j,
             LATERAL (SELECT CASE WHEN j.unique_key IS NOT NULL AND j.unique_until IS NULL
                                  THEN j.unique_key ELSE j.id::text END AS slot) AS k
        WHERE j.id = ANY(ids) AND j.state IN ('failure', 'cancelled')
          AND NOT (j.unique_key IS NOT NULL AND j.unique_until IS NULL AND EXISTS (
                SELECT 1 FROM conveyor.jobs o
                WHERE o.unique_key = j.unique_key AND o.unique_until IS NULL
                  AND o.state IN ('scheduled', 'pending', 'started', 'retry')))
        ORDER BY k.slot, j.id
    ),
    -- Locked first, in id order (ORDER BY sorts before FOR UPDATE locks):
    -- finished jobs are locked by operators' statements only (no claim or
    -- outcome batch touches them), and two re-queues of the same jobs taking
    -- them in id order cannot deadlock; the others never wait while holding
    -- a job row (docs/decisions/2026-11-25-lock-order.md). The first
    -- condition of the DELETE runs `held` to its end before the DELETE takes
    -- any row.
    held AS MATERIALIZED (
        SELECT id FROM conveyor.job_rows
        WHERE id = ANY(ARRAY(SELECT id FROM candidates)) AND state IN ('failure', 'cancelled')
        ORDER BY id
        FOR UPDATE
    ),
    -- Out of the final state's table, back into jobs_unfinished, whose
    -- insert triggers give each job its ready-ring row and wake
    -- the workers of its queue.
    taken AS (
        DELETE FROM conveyor.job_rows
        WHERE (SELECT count(*) FROM held) >= 0
          AND id = ANY(ARRAY(SELECT id FROM candidates)) AND state IN ('failure', 'cancelled')
        RETURNING *
    ),
    requeued AS (
        INSERT INTO conveyor.jobs_unfinished
        SELECT id, queue, task, args, headers, 'pending', priority, now(), 0, max_retries,
               retry_backoff_base, NULL, timeout, NULL, NULL, NULL, last_error, errors,
               created_at, NULL, NULL, workflow_id, workflow_index, on_success, on_error,
               NULL, unique_key, unique_until, lease_token
        FROM taken
        RETURNING 1
    )
    SELECT count(*) FROM requeued INTO n;
    RETURN n;
END
$$;

COMMENT ON FUNCTION conveyor.requeue(uuid[]) IS
    'Re-queue failed or cancelled jobs (by id) with attempts reset; returns how many. Skips a unique job whose key an active job holds.';
