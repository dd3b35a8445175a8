-- Conveyor schema, version 3: cancellation and re-queueing of finished jobs.

ALTER TABLE conveyor.jobs ADD COLUMN cancel_requested_at timestamptz;

COMMENT ON COLUMN conveyor.jobs.cancel_requested_at IS
    'When cancellation was asked for. A started job keeps running until its worker stops it (state then becomes cancelled).';

-- Cancels a job. A job that has not started becomes cancelled at once and
-- never runs. A started job is marked, and the worker holding it is told
-- (NOTIFY conveyor.job_cancel): its handler sees the cancellation, gets a
-- grace period, and the job ends cancelled. A finished job is left alone.
-- Returns the job's state after the call (NULL: no such job).
CREATE FUNCTION conveyor.cancel(job uuid) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    j conveyor.jobs;
BEGIN
    UPDATE conveyor.jobs
    SET state = 'cancelled', finished_at = now(), cancel_requested_at = now(),
        last_error = 'cancelled'
    WHERE id = job AND state IN ('pending', 'scheduled', 'retry')
    RETURNING * INTO j;
    IF FOUND THEN
        PERFORM pg_notify('conveyor.job_finished', j.id::text);
        IF j.workflow_id IS NOT NULL OR j.on_success IS NOT NULL OR j.on_error IS NOT NULL THEN
            PERFORM conveyor.after_finish(ARRAY[j.id]);
        END IF;
        RETURN j.state;
    END IF;
    UPDATE conveyor.jobs SET cancel_requested_at = coalesce(cancel_requested_at, now())
    WHERE id = job AND state = 'started'
    RETURNING * INTO j;
    IF FOUND THEN
        PERFORM pg_notify('conveyor.job_cancel', j.id::text);
        RETURN j.state;
    END IF;
    RETURN (SELECT state FROM conveyor.jobs WHERE id = job);
END
$$;

COMMENT ON FUNCTION conveyor.cancel(uuid) IS
    'Cancel a job: queued jobs at once, running ones through their worker. Returns the resulting state.';

-- Puts finished jobs that did not succeed (failure, cancelled: the dead
-- letter) back to pending with a fresh attempt count. Their error history is
-- kept. Pass ids, or a filter: conveyor.requeue(ARRAY(SELECT id FROM
-- conveyor.jobs WHERE state = 'failure' AND task = 'x')). Returns how many.
CREATE FUNCTION conveyor.requeue(ids uuid[]) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    n integer;
BEGIN
    WITH requeued AS (
        UPDATE conveyor.jobs
        SET state = 'pending', attempt = 0, run_at = now(), finished_at = NULL,
            started_at = NULL, cancel_requested_at = NULL, result = NULL,
            retry_backoff = NULL
        WHERE id = ANY(ids) AND state IN ('failure', 'cancelled')
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
    'Re-queue failed or cancelled jobs (by id) with attempts reset; returns how many.';
