CREATE OR REPLACE FUNCTION conveyor.set_queue_rate_limit(queue text, rate_limit integer, rate_period interval)
RETURNS void
LANGUAGE sql AS $$
    INSERT INTO conveyor.queues (name, rate_limit, rate_period) VALUES (queue, rate_limit, rate_period)
    ON CONFLICT (name) DO UPDATE SET rate_limit = excluded.rate_limit,
                                     rate_period = excluded.rate_period,
                                     window_start = NULL, window_count = 0, updated_at = now();
    SELECT pg_notify('conveyor.queue_changed', queue);
$$;

COMMENT ON FUNCTION conveyor.set_queue_rate_limit(text, integer, interval) IS
    'Sets (or with NULLs removes) the rate limit of a queue: at most rate_limit job starts per rate_period, across all workers.';
