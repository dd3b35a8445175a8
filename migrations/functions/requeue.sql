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
    requeued AS (
        UPDATE conveyor.jobs
        SET state = 'pending', attempt = 0, run_at = now(), finished_at = NULL,
            started_at = NULL, cancel_requested_at = NULL, result = NULL,
            retry_backoff = NULL
        WHERE id = ANY(ARRAY(SELECT id FROM candidates)) AND state IN ('failure', 'cancelled')
        RETURNING queue
    ),
    woken AS (
        SELECT pg_notify('conveyor.job_ready',
                         json_build_object('queue', q.queue, 'scheduled', false)::text)
        FROM (SELECT DISTINCT queue FROM requeued) AS q
    )
    SELECT (SELECT count(*) FROM requeued) + 0 * (SELECT count(*) FROM woken) INTO n;
    RETURN n;
END
$$;

COMMENT ON FUNCTION conveyor.requeue(uuid[]) IS
    'Re-queue failed or cancelled jobs (by id) with attempts reset; returns how many. Skips a unique job whose key an active job holds.';
