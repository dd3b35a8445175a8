CREATE OR REPLACE FUNCTION conveyor.set_queue_limit(queue text, concurrency_limit integer) RETURNS void
LANGUAGE sql AS $$
    INSERT INTO conveyor.queues (name, concurrency_limit) VALUES (queue, concurrency_limit)
    ON CONFLICT (name) DO UPDATE SET concurrency_limit = excluded.concurrency_limit,
                                     updated_at = now();
    SELECT pg_notify('conveyor.queue_changed', queue);
$$;

COMMENT ON FUNCTION conveyor.set_queue_limit(text, integer) IS
    'Sets (or with NULL removes) the global concurrency limit of a queue: at most this many of its jobs started at once.';
