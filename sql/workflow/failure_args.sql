-- What an error callback receives: the error first (machinery's convention),
-- then which job failed, then the callback's own arguments.
CREATE OR REPLACE FUNCTION conveyor_internal.failure_args(error text, job_id uuid, task text, own_args jsonb)
RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$
    SELECT jsonb_build_object('error', error, 'job_id', job_id, 'task', task, 'args', own_args)
$$;

COMMENT ON FUNCTION conveyor_internal.failure_args(text, uuid, text, jsonb) IS
    'Internal. The arguments an error callback receives: the failed job''s error, id, task and own arguments.';
