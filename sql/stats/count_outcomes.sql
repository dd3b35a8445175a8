-- Adds ended attempts to the per-minute rollups of conveyor.stats, in the
-- caller's transaction: one row per (queue, task) of the arguments (arrays
-- of one element per attempt; wait_ms and run_ms may be NULL or shorter,
-- then those attempts are counted but not timed). `rescued` marks attempts
-- the rescuer ended. Rows are upserted in (queue, task) order, so two
-- writers never wait for each other's rows in opposite orders. Writers use
-- shards 1 to 64 (shard 0 is the fold's; see conveyor.stats.shard): the
-- counts stay out of conveyor.stats_totals until their row is folded or
-- pruned.
CREATE OR REPLACE FUNCTION conveyor_internal.count_outcomes(
    queues text[],
    tasks text[],
    states text[],
    wait_ms float8[] DEFAULT NULL,
    run_ms float8[] DEFAULT NULL,
    rescued boolean DEFAULT false
) RETURNS void
-- (plpgsql, not sql: a SQL function's statement is planned at every call,
-- which cost as much as the outcome's own DELETE; plpgsql keeps the plan.)
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO conveyor.stats AS s
        (minute, queue, task, shard, succeeded, failed, retried, rescued, cancelled, wait_ms, run_ms,
         wait_ms_sum, run_ms_sum)
    SELECT date_trunc('minute', now()), e.queue, e.task, 1 + pg_backend_pid() % 64,
           coalesce(sum(e.n) FILTER (WHERE e.state = 'success'), 0)::bigint,
           coalesce(sum(e.n) FILTER (WHERE e.state = 'failure'), 0)::bigint,
           coalesce(sum(e.n) FILTER (WHERE e.state = 'retry'), 0)::bigint,
           CASE WHEN rescued THEN sum(e.n)::bigint ELSE 0 END,
           coalesce(sum(e.n) FILTER (WHERE e.state = 'cancelled'), 0)::bigint,
           -- The histograms (conveyor_internal.histogram()'s buckets): one
           -- aggregate each over the groups below (19 filtered counts each
           -- made the plan slower to set up at every call).
           conveyor_internal.histogram_count(e.wait_ms_bucket, e.n),
           conveyor_internal.histogram_count(e.run_ms_bucket, e.n),
           coalesce(sum(e.wait_ms), 0), coalesce(sum(e.run_ms), 0)
    -- Counted in two steps: jobs grouped by queue, task, state and buckets
    -- first (a batch has few such groups), then the groups summed per
    -- (queue, task); testing every job against the 42 filters this count
    -- once had cost twice as much (1.6 against 0.8 us per job, batches of
    -- 500).
    FROM (SELECT u.queue, u.task, u.state,
                 width_bucket(u.wait_ms, conveyor.stats_buckets_ms()) + 1 AS wait_ms_bucket,
                 width_bucket(u.run_ms, conveyor.stats_buckets_ms()) + 1 AS run_ms_bucket,
                 count(*) AS n, sum(u.wait_ms) AS wait_ms, sum(u.run_ms) AS run_ms
          FROM unnest(queues, tasks, states, wait_ms, run_ms) AS u(queue, task, state, wait_ms, run_ms)
          WHERE u.queue IS NOT NULL AND u.task IS NOT NULL
          GROUP BY 1, 2, 3, 4, 5)
         AS e
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
        run_ms_sum = s.run_ms_sum + EXCLUDED.run_ms_sum;
END
$$;

COMMENT ON FUNCTION conveyor_internal.count_outcomes(text[], text[], text[], float8[], float8[], boolean) IS
    'Internal. Adds ended attempts (queue, task, state, wait and run ms) to the per-minute rollups in conveyor.stats.';
