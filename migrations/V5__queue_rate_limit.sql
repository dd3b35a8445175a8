-- Conveyor schema, version 5: per-queue rate limit (at most rate_limit job
-- starts per rate_period, across all workers), counted in fixed windows on
-- the queue's row, under the same row lock as the concurrency limit.

ALTER TABLE conveyor.queues
    ADD COLUMN rate_limit   integer,
    ADD COLUMN rate_period  interval,
    ADD COLUMN window_start timestamptz,
    ADD COLUMN window_count integer NOT NULL DEFAULT 0,
    ADD CONSTRAINT queues_rate_limit_check CHECK
        ((rate_limit IS NULL) = (rate_period IS NULL)
         AND (rate_limit IS NULL OR rate_limit > 0)
         AND (rate_period IS NULL OR rate_period > '0'::interval));

COMMENT ON COLUMN conveyor.queues.rate_limit IS 'At most this many job starts per rate_period, across all workers.';
COMMENT ON COLUMN conveyor.queues.rate_period IS 'The rate limit''s window length.';
COMMENT ON COLUMN conveyor.queues.window_start IS 'Start of the current rate window.';
COMMENT ON COLUMN conveyor.queues.window_count IS 'Jobs started in the current rate window.';

CREATE FUNCTION conveyor.set_queue_rate_limit(queue text, rate_limit integer, rate_period interval)
RETURNS void
LANGUAGE sql AS $$
    INSERT INTO conveyor.queues (name, rate_limit, rate_period) VALUES (queue, rate_limit, rate_period)
    ON CONFLICT (name) DO UPDATE SET rate_limit = excluded.rate_limit,
                                     rate_period = excluded.rate_period,
                                     window_start = NULL, window_count = 0, updated_at = now();
    SELECT pg_notify('conveyor.queue_changed', queue);
$$;
