-- Trigger function of stats_totals (on conveyor.stats): the rows a DELETE took
-- from conveyor.stats in shards other than 0 (the fold moving them into
-- shard 0, retention dropping old minutes, or a hand) are added to the
-- all-time conveyor.stats_totals, in the same statement, one upsert per
-- (queue, task) in that order. Shard 0 rows are in the totals already.
-- So the totals plus the rows of shards other than 0 never go down.
CREATE OR REPLACE FUNCTION conveyor_internal.stats_to_totals() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO conveyor.stats_totals AS t
        (queue, task, enqueued, succeeded, failed, retried, rescued, cancelled,
         wait_ms, run_ms, wait_ms_sum, run_ms_sum, leases_lost)
    SELECT g.queue, g.task, sum(g.enqueued), sum(g.succeeded), sum(g.failed), sum(g.retried),
           sum(g.rescued), sum(g.cancelled),
           array_replace(ARRAY[
               sum(wait_ms[1]), sum(wait_ms[2]), sum(wait_ms[3]), sum(wait_ms[4]), sum(wait_ms[5]),
               sum(wait_ms[6]), sum(wait_ms[7]), sum(wait_ms[8]), sum(wait_ms[9]), sum(wait_ms[10]),
               sum(wait_ms[11]), sum(wait_ms[12]), sum(wait_ms[13]), sum(wait_ms[14]), sum(wait_ms[15]),
               sum(wait_ms[16]), sum(wait_ms[17]), sum(wait_ms[18]), sum(wait_ms[19])
           ], NULL, 0)::bigint[],
           array_replace(ARRAY[
               sum(run_ms[1]), sum(run_ms[2]), sum(run_ms[3]), sum(run_ms[4]), sum(run_ms[5]),
               sum(run_ms[6]), sum(run_ms[7]), sum(run_ms[8]), sum(run_ms[9]), sum(run_ms[10]),
               sum(run_ms[11]), sum(run_ms[12]), sum(run_ms[13]), sum(run_ms[14]), sum(run_ms[15]),
               sum(run_ms[16]), sum(run_ms[17]), sum(run_ms[18]), sum(run_ms[19])
           ], NULL, 0)::bigint[],
           sum(g.wait_ms_sum), sum(g.run_ms_sum), sum(g.leases_lost)
    FROM gone g
    WHERE g.shard <> 0
    GROUP BY g.queue, g.task
    ORDER BY g.queue, g.task
    ON CONFLICT (queue, task) DO UPDATE SET
        enqueued = t.enqueued + EXCLUDED.enqueued,
        succeeded = t.succeeded + EXCLUDED.succeeded,
        failed = t.failed + EXCLUDED.failed,
        retried = t.retried + EXCLUDED.retried,
        rescued = t.rescued + EXCLUDED.rescued,
        cancelled = t.cancelled + EXCLUDED.cancelled,
        wait_ms = conveyor_internal.histogram_add(t.wait_ms, EXCLUDED.wait_ms),
        run_ms = conveyor_internal.histogram_add(t.run_ms, EXCLUDED.run_ms),
        wait_ms_sum = t.wait_ms_sum + EXCLUDED.wait_ms_sum,
        run_ms_sum = t.run_ms_sum + EXCLUDED.run_ms_sum,
        leases_lost = t.leases_lost + EXCLUDED.leases_lost;
    RETURN NULL;
END
$$;

COMMENT ON FUNCTION conveyor_internal.stats_to_totals() IS
    'Internal. Statement trigger on deletes from conveyor.stats: adds the deleted rows of shards other than 0 to conveyor.stats_totals.';
