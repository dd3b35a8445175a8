-- Marks a workflow succeeded (once) and counts it as a step of its parent;
-- a parent whose result is this workflow's result succeeds with it.
CREATE OR REPLACE FUNCTION conveyor_internal.workflow_succeeded(workflow uuid) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    w conveyor.workflows;
    parent conveyor.workflows;
BEGIN
    UPDATE conveyor.workflows SET state = 'success', finished_at = now()
    WHERE id = workflow AND state = 'running'
    RETURNING * INTO w;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    PERFORM pg_notify('conveyor.job_finished', w.id::text);
    IF w.parent_id IS NOT NULL THEN
        UPDATE conveyor.workflows SET succeeded = succeeded + 1
        WHERE id = w.parent_id
        RETURNING * INTO parent;
        IF parent.state = 'running' AND parent.result_job_id = w.result_job_id THEN
            PERFORM conveyor_internal.workflow_succeeded(parent.id);
        END IF;
    END IF;
END
$$;

COMMENT ON FUNCTION conveyor_internal.workflow_succeeded(uuid) IS
    'Internal. Marks a workflow succeeded (once) and counts it as a step of its enclosing workflow, which succeeds with it when this was its last step.';
