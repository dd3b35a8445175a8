-- Marks a workflow failed (once), enqueues its error callbacks, and fails the
-- workflows that enclose it.
CREATE OR REPLACE FUNCTION conveyor_internal.workflow_failed(workflow uuid, error text, job_id uuid, task text)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    w conveyor.workflows;
    spec jsonb;
BEGIN
    UPDATE conveyor.workflows
    SET state = 'failure', finished_at = now(),
        error = workflow_failed.error, failed_job_id = workflow_failed.job_id
    WHERE id = workflow AND state = 'running'
    RETURNING * INTO w;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    PERFORM pg_notify('conveyor.job_finished', w.id::text);
    FOR spec IN SELECT s FROM jsonb_array_elements(w.on_error) AS s LOOP
        PERFORM conveyor_internal.spawn(spec,
            conveyor_internal.failure_args(error, job_id, task, coalesce(spec->'args', 'null'::jsonb)));
    END LOOP;
    IF w.parent_id IS NOT NULL THEN
        UPDATE conveyor.workflows SET failed = failed + 1 WHERE id = w.parent_id;
        PERFORM conveyor_internal.workflow_failed(w.parent_id, error, job_id, task);
    END IF;
END
$$;

COMMENT ON FUNCTION conveyor_internal.workflow_failed(uuid, text, uuid, text) IS
    'Internal. Marks a workflow failed (once) with the failing member''s error, enqueues its error callbacks and fails the workflows that enclose it.';
