-- Pause, resume and limit queues for every worker at once.
CREATE OR REPLACE FUNCTION conveyor.pause_queue(queue text) RETURNS void
LANGUAGE sql AS $$
    INSERT INTO conveyor.queues (name, paused_at) VALUES (queue, now())
    ON CONFLICT (name) DO UPDATE SET paused_at = coalesce(conveyor.queues.paused_at, now()),
                                     updated_at = now();
$$;

COMMENT ON FUNCTION conveyor.pause_queue(text) IS
    'Pauses a queue: no worker claims from it until conveyor.resume_queue; running jobs finish.';
