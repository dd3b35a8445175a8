-- Cancels a job. A job that has not started becomes cancelled at once and
-- never runs. A started job is marked, and the worker holding it is told
-- (NOTIFY conveyor.job_cancel): its handler sees the cancellation, gets a
-- grace period, and the job ends cancelled. A finished job is left alone.
-- Returns the job's state after the call (NULL: no such job). The row is
-- locked first, so a job changing state meanwhile (a completer recording a
-- retry, the rescuer) cannot make the request vanish. A job that ends here
-- moves from conveyor.jobs_unfinished into jobs_cancelled.
CREATE OR REPLACE FUNCTION conveyor.cancel(job uuid) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    j conveyor.jobs;
BEGIN
    -- A job its claim holds (conveyor.claims) gets a stored row of its own
    -- first, so the row locked below says what the job is.
    PERFORM conveyor_internal.settle_claims(ARRAY[job]);
    SELECT * INTO j FROM conveyor.job_rows WHERE id = job FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF j.state IN ('pending', 'scheduled', 'retry') THEN
        DELETE FROM conveyor.jobs_unfinished WHERE id = job;
        j.state := 'cancelled';
        j.finished_at := now();
        j.cancel_requested_at := now();
        j.last_error := 'cancelled';
        INSERT INTO conveyor.jobs_cancelled SELECT (j).*;
        PERFORM pg_notify('conveyor.job_finished', j.id::text);
        PERFORM conveyor_internal.count_outcomes(ARRAY[j.queue], ARRAY[j.task], ARRAY['cancelled']);
        IF j.workflow_id IS NOT NULL OR j.on_success IS NOT NULL OR j.on_error IS NOT NULL THEN
            PERFORM conveyor_internal.after_finish(ARRAY[j.id]);
        END IF;
    ELSIF j.state = 'started' THEN
        UPDATE conveyor.jobs_unfinished SET cancel_requested_at = coalesce(cancel_requested_at, now())
        WHERE id = job;
        PERFORM pg_notify('conveyor.job_cancel', j.id::text);
    END IF;
    RETURN j.state;
END
$$;

COMMENT ON FUNCTION conveyor.cancel(uuid) IS
    'Cancel a job: queued jobs at once, running ones through their worker. Returns the resulting state.';
