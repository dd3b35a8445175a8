-- Follow-ups of jobs that just finished, called in the transaction that
-- recorded their outcomes. Never raises for one job's sake: if the batch
-- fails, each job is tried alone (a subtransaction each). A job whose
-- follow-up work cannot be enqueued is recorded as failed with the reason
-- (a success becomes `failure`; its error callbacks and workflow then run
-- as for any failure). If even that fails, the reason is appended to its
-- last_error and its workflows are marked failed without their callbacks.
CREATE OR REPLACE FUNCTION conveyor_internal.after_finish(finished uuid[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    job uuid;
    why text;
    again text;
    was text;
BEGIN
    BEGIN
        PERFORM conveyor_internal.run_follow_ups(finished);
        RETURN;
    EXCEPTION WHEN OTHERS THEN
        -- Everything the batch did is undone; go job by job below.
        NULL;
    END;
    FOREACH job IN ARRAY finished LOOP
        BEGIN
            PERFORM conveyor_internal.run_follow_ups(ARRAY[job]);
            CONTINUE;
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS why = MESSAGE_TEXT;
        END;
        why := 'follow-up work could not be enqueued: ' || why;
        SELECT state INTO was FROM conveyor.jobs WHERE id = job;
        UPDATE conveyor.jobs j
        SET state = CASE WHEN j.state = 'success' THEN 'failure' ELSE j.state END,
            last_error = why,
            errors = j.errors || jsonb_build_array(jsonb_build_object(
                'attempt', j.attempt, 'at', now(), 'error', why, 'worker_id', NULL))
        WHERE j.id = job;
        IF was = 'success' THEN
            -- Now a failure: its error callbacks and workflow may still work.
            BEGIN
                PERFORM conveyor_internal.run_follow_ups(ARRAY[job]);
                CONTINUE;
            EXCEPTION WHEN OTHERS THEN
                GET STACKED DIAGNOSTICS again = MESSAGE_TEXT;
                why := why || '; error callbacks could not be enqueued either: ' || again;
            END;
        END IF;
        UPDATE conveyor.jobs SET last_error = why WHERE id = job;
        -- No callback can run; still, no workflow waits forever for this job.
        WITH RECURSIVE enclosing AS (
            SELECT workflow_id AS id FROM conveyor.jobs WHERE id = job AND workflow_id IS NOT NULL
            UNION
            SELECT w.parent_id FROM conveyor.workflows w JOIN enclosing e ON w.id = e.id
            WHERE w.parent_id IS NOT NULL
        )
        UPDATE conveyor.workflows
        SET state = 'failure', finished_at = now(), error = why, failed_job_id = job
        WHERE id IN (SELECT id FROM enclosing) AND state = 'running';
    END LOOP;
END
$$;

COMMENT ON FUNCTION conveyor_internal.after_finish(uuid[]) IS
    'Enqueues follow-ups (next steps, callbacks, chord callbacks) and updates workflow counters for jobs that just finished; a job whose follow-ups cannot be enqueued fails alone.';
