CREATE OR REPLACE FUNCTION conveyor.resume_queue(queue text) RETURNS void
LANGUAGE sql AS $$
    UPDATE conveyor.queues SET paused_at = NULL, updated_at = now() WHERE name = queue;
    -- Wake idle workers of the queue now, not at their next safety tick.
    SELECT pg_notify('conveyor.job_ready', json_build_object('queue', queue, 'scheduled', true)::text);
$$;

COMMENT ON FUNCTION conveyor.resume_queue(text) IS 'Resumes a paused queue.';
