-- Recover jobs whose lease expired: their worker died, hung, or lost the
-- database. The attempt that was running counts: with retries left the job is
-- runnable again at once, otherwise it fails with "lease expired". A job whose
-- cancellation was asked for ends cancelled. The expired jobs are locked
-- first (so what decides each one's fate is the row as it is now), then the
-- runnable ones are updated in place and the ended ones moved into their
-- final state's table (conveyor.jobs_failure, jobs_cancelled).
WITH expired AS (
    SELECT id,
           CASE WHEN cancel_requested_at IS NOT NULL THEN 'cancelled'
                WHEN attempt <= max_retries THEN 'pending'
                ELSE 'failure' END AS new_state
    FROM conveyor.jobs_unfinished
    WHERE state = 'started' AND lease_expires_at < now()
    ORDER BY lease_expires_at
    LIMIT $1
    FOR UPDATE SKIP LOCKED
),
again AS (
    UPDATE conveyor.jobs_unfinished j SET
        state = 'pending',
        last_error = 'lease expired',
        errors = j.errors || jsonb_build_array(jsonb_build_object(
            'attempt', j.attempt, 'at', now(), 'error', 'lease expired',
            'worker_id', j.worker_id)),
        run_at = now(),
        lease_expires_at = NULL,
        -- The claim ended without its worker. A fresh token, above the claim's:
        -- a job pending on disk counts as held by any claim with a higher
        -- token that lists it (conveyor.claims), so the old claim must not.
        lease_token = (SELECT nextval('conveyor.lease_tokens')),
        worker_id = NULL
    WHERE j.id = ANY(ARRAY(SELECT id FROM expired WHERE new_state = 'pending'))
    RETURNING j.id, j.queue, j.task, j.state, false AS follow_up
),
ended AS (
    DELETE FROM conveyor.jobs_unfinished j
    USING expired e
    WHERE j.id = ANY(ARRAY(SELECT id FROM expired WHERE new_state <> 'pending'))
      AND e.id = j.id
    RETURNING j.id, j.queue, j.task, j.args, j.headers,
        e.new_state AS state,
        j.priority, j.run_at, j.attempt, j.max_retries, j.retry_backoff_base,
        j.retry_backoff, j.timeout,
        NULL::timestamptz AS lease_expires_at,
        NULL::text AS worker_id,
        j.result,
        'lease expired'::text AS last_error,
        j.errors || jsonb_build_array(jsonb_build_object(
            'attempt', j.attempt, 'at', now(), 'error', 'lease expired',
            'worker_id', j.worker_id)) AS errors,
        j.created_at, j.started_at,
        now() AS finished_at,
        j.workflow_id, j.workflow_index, j.on_success, j.on_error, j.cancel_requested_at,
        j.unique_key, j.unique_until,
        -- (A fresh token here too: re-queued later, the job must not count as
        -- held by the claim that lost it.)
        (SELECT nextval('conveyor.lease_tokens')) AS lease_token
),
into_failure AS (
    INSERT INTO conveyor.jobs_failure SELECT * FROM ended WHERE state = 'failure'
),
into_cancelled AS (
    INSERT INTO conveyor.jobs_cancelled SELECT * FROM ended WHERE state = 'cancelled'
),
rescued AS (
    SELECT id, queue, task, state, follow_up FROM again
    UNION ALL
    SELECT id, queue, task, state,
           (workflow_id IS NOT NULL OR on_success IS NOT NULL OR on_error IS NOT NULL)
    FROM ended
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
