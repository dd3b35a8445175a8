-- Recover jobs whose lease expired: their worker died, hung, or lost the
-- database. The attempt that was running counts: with retries left the job is
-- runnable again at once, otherwise it fails with "lease expired". A job whose
-- cancellation was asked for ends cancelled.
WITH expired AS (
    SELECT id FROM conveyor.jobs
    WHERE state = 'started' AND lease_expires_at < now()
    ORDER BY lease_expires_at
    LIMIT $1
    FOR UPDATE SKIP LOCKED
),
rescued AS (
    UPDATE conveyor.jobs j SET
        state = CASE WHEN j.cancel_requested_at IS NOT NULL THEN 'cancelled'
                     WHEN j.attempt <= j.max_retries THEN 'pending'
                     ELSE 'failure' END,
        last_error = 'lease expired',
        errors = j.errors || jsonb_build_array(jsonb_build_object(
            'attempt', j.attempt, 'at', now(), 'error', 'lease expired',
            'worker_id', j.worker_id)),
        run_at = CASE WHEN j.attempt <= j.max_retries THEN now() ELSE j.run_at END,
        finished_at = CASE WHEN j.attempt <= j.max_retries AND j.cancel_requested_at IS NULL
                           THEN NULL ELSE now() END,
        lease_expires_at = NULL,
        -- The claim ended without its worker: its token no longer counts.
        lease_token = NULL,
        worker_id = NULL
    WHERE j.id = ANY(ARRAY(SELECT id FROM expired))
    RETURNING j.id, j.queue, j.task, j.state,
              (j.workflow_id IS NOT NULL OR j.on_success IS NOT NULL OR j.on_error IS NOT NULL) AS follow_up
),
counted AS (
    -- The per-minute rollups (conveyor.stats): rescued, and failed or cancelled.
    SELECT conveyor_internal.count_outcomes(
               array_agg(queue), array_agg(task), array_agg(state), rescued => true)
    FROM rescued
),
woken AS (
    SELECT pg_notify($2, json_build_object('queue', q.queue, 'scheduled', false)::text)
    FROM (SELECT DISTINCT queue FROM rescued WHERE state = 'pending') AS q
),
finished AS (
    SELECT pg_notify($3, string_agg(id::text, ',')) FROM rescued
    WHERE state <> 'pending' HAVING count(*) > 0
)
SELECT (SELECT count(*) FROM rescued) AS rescued,
       (SELECT coalesce(array_agg(id), '{}') FROM rescued WHERE follow_up AND state <> 'pending') AS follow_ups,
       (SELECT count(*) FROM woken) + (SELECT count(*) FROM finished) AS notifications,
       (SELECT count(*) FROM counted) AS counted
