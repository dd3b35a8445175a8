-- Enqueue from SQL (psql, triggers, other languages). The defaults are the
-- Rust client's (a test holds them equal), and the job goes in through the
-- same insert as workflow members and callbacks (insert_job_specs). Returns
-- the job id; when `id` is given and a job with that id exists, returns it
-- unchanged (idempotent submit).
CREATE OR REPLACE FUNCTION conveyor.enqueue(
    task        text,
    args        jsonb       DEFAULT '{}'::jsonb,
    queue       text        DEFAULT 'default',
    priority    integer     DEFAULT 0,
    run_at      timestamptz DEFAULT NULL,
    max_retries integer     DEFAULT 25,
    retry_backoff_base interval DEFAULT '1 second',
    timeout     interval    DEFAULT NULL,
    headers     jsonb       DEFAULT '{}'::jsonb,
    id          uuid        DEFAULT NULL
) RETURNS uuid
LANGUAGE plpgsql AS $$
DECLARE
    new_id uuid := coalesce(enqueue.id, conveyor.uuid_v7());
BEGIN
    -- A finished job keeps its id too, in a partition the insert's
    -- conflict check does not see (the day tables).
    IF enqueue.id IS NOT NULL AND EXISTS (SELECT 1 FROM conveyor.jobs j WHERE j.id = enqueue.id) THEN
        RETURN new_id;
    END IF;
    PERFORM conveyor_internal.insert_job_specs(jsonb_build_array(jsonb_build_object(
        'id', new_id,
        'queue', enqueue.queue,
        'task', enqueue.task,
        'args', coalesce(enqueue.args, '{}'::jsonb),
        'headers', coalesce(enqueue.headers, '{}'::jsonb),
        'priority', enqueue.priority,
        'run_at', enqueue.run_at,
        'max_retries', enqueue.max_retries,
        'retry_backoff_base_secs', extract(epoch FROM enqueue.retry_backoff_base),
        'timeout_secs', extract(epoch FROM enqueue.timeout))), NULL);
    RETURN new_id;
END
$$;

COMMENT ON FUNCTION conveyor.enqueue(text, jsonb, text, integer, timestamptz, integer, interval, interval, jsonb, uuid) IS
    'Enqueue a job; returns its id. Same defaults as the Rust client. An existing id is returned unchanged.';
