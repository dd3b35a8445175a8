-- Give jobs back without spending an attempt (graceful shutdown), fenced on
-- their (id, lease_token) and this worker's id: they become
-- pending again and idle workers of their queues are woken. A job whose
-- cancellation was asked for ends cancelled instead: waiters hear of it, and
-- its workflow and callbacks are returned for conveyor_internal.after_finish(), which
-- the caller runs in the same transaction.
WITH released AS (
    UPDATE conveyor.jobs j SET
        state = CASE WHEN j.cancel_requested_at IS NULL THEN 'pending' ELSE 'cancelled' END,
        finished_at = CASE WHEN j.cancel_requested_at IS NULL THEN NULL ELSE now() END,
        attempt = CASE WHEN j.cancel_requested_at IS NULL THEN greatest(j.attempt - 1, 0) ELSE j.attempt END,
        lease_expires_at = NULL,
        lease_token = NULL,
        worker_id = NULL
    FROM unnest($1::uuid[], $2::bigint[]) AS r(id, lease_token)
    WHERE j.id = ANY($1::uuid[]) AND j.id = r.id AND j.lease_token = r.lease_token
      AND j.state = 'started' AND j.worker_id = $3
    RETURNING j.id, j.queue, j.task, j.state,
              (j.workflow_id IS NOT NULL OR j.on_success IS NOT NULL OR j.on_error IS NOT NULL) AS follow_up
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
