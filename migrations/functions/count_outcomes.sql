-- Adds ended attempts to the per-minute rollups of conveyor.stats, in the
-- caller's transaction: one row per (queue, task) of the arguments (arrays
-- of one element per attempt; wait_ms and run_ms may be NULL or shorter,
-- then those attempts are counted but not timed). `rescued` marks attempts
-- the rescuer ended. Rows are upserted in (queue, task) order, so two
-- writers never wait for each other's rows in opposite orders. Writers use
-- shards 1 to 8 (shard 0 is the fold's; migration V9): the counts stay out
-- of conveyor.stats_totals until their row is folded or pruned.
CREATE OR REPLACE FUNCTION conveyor_internal.count_outcomes(
    queues text[],
    tasks text[],
    states text[],
    wait_ms float8[] DEFAULT NULL,
    run_ms float8[] DEFAULT NULL,
    rescued boolean DEFAULT false
) RETURNS void
LANGUAGE sql AS $$
    INSERT INTO conveyor.stats AS s
        (minute, queue, task, shard, succeeded, failed, retried, rescued, cancelled, wait_ms, run_ms,
         wait_ms_sum, run_ms_sum)
    SELECT date_trunc('minute', now()), e.queue, e.task, 1 + pg_backend_pid() % 8,
           count(*) FILTER (WHERE e.state = 'success'),
           count(*) FILTER (WHERE e.state = 'failure'),
           count(*) FILTER (WHERE e.state = 'retry'),
           CASE WHEN rescued THEN count(*) ELSE 0 END,
           count(*) FILTER (WHERE e.state = 'cancelled'),
           conveyor_internal.histogram(array_agg(e.wait_ms)),
           conveyor_internal.histogram(array_agg(e.run_ms)),
           coalesce(sum(e.wait_ms), 0), coalesce(sum(e.run_ms), 0)
    FROM unnest(queues, tasks, states, wait_ms, run_ms) AS e(queue, task, state, wait_ms, run_ms)
    WHERE e.queue IS NOT NULL AND e.task IS NOT NULL
    GROUP BY e.queue, e.task
    ORDER BY e.queue, e.task
    ON CONFLICT (minute, queue, task, shard) DO UPDATE SET
        succeeded = s.succeeded + EXCLUDED.succeeded,
        failed = s.failed + EXCLUDED.failed,
        retried = s.retried + EXCLUDED.retried,
        rescued = s.rescued + EXCLUDED.rescued,
        cancelled = s.cancelled + EXCLUDED.cancelled,
        wait_ms = conveyor_internal.histogram_add(s.wait_ms, EXCLUDED.wait_ms),
        run_ms = conveyor_internal.histogram_add(s.run_ms, EXCLUDED.run_ms),
        wait_ms_sum = s.wait_ms_sum + EXCLUDED.wait_ms_sum,
        run_ms_sum = s.run_ms_sum + EXCLUDED.run_ms_sum
$$;

COMMENT ON FUNCTION conveyor_internal.count_outcomes(text[], text[], text[], float8[], float8[], boolean) IS
    'Internal. Adds ended attempts (queue, task, state, wait and run ms) to the per-minute rollups in conveyor.stats.';
