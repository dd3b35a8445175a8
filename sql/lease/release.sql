-- Give jobs back without spending an attempt (graceful shutdown), fenced on
-- their (id, lease_token) and this worker's id: they become
-- pending again and idle workers of their queues are woken. A job whose
-- cancellation was asked for ends cancelled instead (moved into
-- conveyor.jobs_cancelled): waiters hear of it, and its workflow and
-- callbacks are returned for conveyor_internal.after_finish(), which the
-- caller runs in the same transaction. The held jobs are locked first, so
-- what decides each one's fate is the row as it is now.
WITH held AS (
    SELECT j.id, j.cancel_requested_at IS NOT NULL AS cancel
    FROM conveyor.jobs_unfinished j
    JOIN unnest($1::uuid[], $2::bigint[]) AS r(id, lease_token)
      ON j.id = r.id AND j.lease_token = r.lease_token
    WHERE j.id = ANY($1::uuid[]) AND j.state = 'started' AND j.worker_id = $3
    FOR UPDATE OF j
),
back AS (
    UPDATE conveyor.jobs_unfinished j SET
        state = 'pending',
        attempt = greatest(j.attempt - 1, 0),
        lease_expires_at = NULL,
        -- The claim ended without its worker. A fresh token, above the claim's:
        -- a job pending on disk counts as held by any claim with a higher
        -- token that lists it (conveyor.claims), so the old claim must not.
        lease_token = (SELECT nextval('conveyor.lease_tokens')),
        worker_id = NULL
    WHERE j.id = ANY(ARRAY(SELECT id FROM held WHERE NOT cancel))
    RETURNING j.id, j.queue, j.task, j.state, false AS follow_up
),
ended AS (
    DELETE FROM conveyor.jobs_unfinished j
    WHERE j.id = ANY(ARRAY(SELECT id FROM held WHERE cancel))
    RETURNING j.id, j.queue, j.task, j.args, j.headers,
        'cancelled'::text AS state,
        j.priority, j.run_at, j.attempt, j.max_retries, j.retry_backoff_base,
        j.retry_backoff, j.timeout,
        NULL::timestamptz AS lease_expires_at,
        NULL::text AS worker_id,
        j.result, j.last_error, j.errors, j.created_at, j.started_at,
        now() AS finished_at,
        j.workflow_id, j.workflow_index, j.on_success, j.on_error, j.cancel_requested_at,
        j.unique_key, j.unique_until,
        -- (A fresh token here too: re-queued later, the job must not count as
        -- held by the claim that lost it.)
        (SELECT nextval('conveyor.lease_tokens')) AS lease_token
),
into_cancelled AS (
    INSERT INTO conveyor.jobs_cancelled SELECT * FROM ended
),
released AS (
    SELECT id, queue, task, state, follow_up FROM back
    UNION ALL
    SELECT id, queue, task, state,
           (workflow_id IS NOT NULL OR on_success IS NOT NULL OR on_error IS NOT NULL)
    FROM ended
),
counted AS (
    -- The per-minute rollups (conveyor.stats): only jobs that ended (cancelled).
    SELECT conveyor_internal.count_outcomes(
               array_agg(queue), array_agg(task), array_agg(state))
    FROM released WHERE state = 'cancelled'
),
woken AS (
    SELECT pg_notify($4, json_build_object('queue', q.queue, 'scheduled', false)::text)
    FROM (SELECT DISTINCT queue FROM released WHERE state = 'pending') AS q
),
finished AS (
    SELECT pg_notify($5, string_agg(id::text, ',')) FROM released
    WHERE state = 'cancelled' HAVING count(*) > 0
)
SELECT (SELECT count(*) FROM released) AS released,
       (SELECT coalesce(array_agg(id), '{}') FROM released WHERE follow_up AND state = 'cancelled') AS follow_ups,
       (SELECT count(*) FROM woken) + (SELECT count(*) FROM finished) AS notifications,
       (SELECT count(*) FROM counted) AS counted
