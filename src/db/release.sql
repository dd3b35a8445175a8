-- Give jobs back without spending an attempt (graceful shutdown): they become
-- pending again and idle workers of their queues are woken. A job whose
-- cancellation was asked for ends cancelled instead.
WITH released AS (
    UPDATE conveyor.jobs j SET
        state = CASE WHEN j.cancel_requested_at IS NULL THEN 'pending' ELSE 'cancelled' END,
        finished_at = CASE WHEN j.cancel_requested_at IS NULL THEN NULL ELSE now() END,
        attempt = CASE WHEN j.cancel_requested_at IS NULL THEN j.attempt - 1 ELSE j.attempt END,
        lease_expires_at = NULL,
        worker_id = NULL
    FROM unnest($1::uuid[], $2::int[]) AS r(id, attempt)
    WHERE j.id = ANY($1::uuid[]) AND j.id = r.id AND j.attempt = r.attempt AND j.state = 'started' AND j.worker_id = $3
    RETURNING j.queue
),
woken AS (
    SELECT pg_notify($4, json_build_object('queue', q.queue, 'scheduled', false)::text) FROM (SELECT DISTINCT queue FROM released) AS q
)
SELECT (SELECT count(*) FROM released) AS released, (SELECT count(*) FROM woken) AS notifications
