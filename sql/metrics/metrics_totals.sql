-- The all-time totals the Prometheus counters and histograms serve, by
-- queue and task: conveyor.stats_totals (everything folded or pruned out of
-- the rollups' shards) plus the rows still in shards other than 0 (the last
-- ten minutes or so, through stats_unfolded_idx). Both are read in one
-- snapshot, and a fold or a prune moves counts from the rows into the
-- totals in one statement, so no count is seen twice or missed and the sums
-- never go down (the trigger stats_totals). The cost follows the queues and
-- tasks, and the writers of the last minutes: never the jobs or the minutes
-- kept.
SELECT queue, task,
       sum(enqueued)::bigint AS enqueued, sum(succeeded)::bigint AS succeeded,
       sum(failed)::bigint AS failed, sum(retried)::bigint AS retried,
       sum(rescued)::bigint AS rescued, sum(cancelled)::bigint AS cancelled,
       array_replace(ARRAY[
           sum(wait_ms[1]), sum(wait_ms[2]), sum(wait_ms[3]), sum(wait_ms[4]), sum(wait_ms[5]),
           sum(wait_ms[6]), sum(wait_ms[7]), sum(wait_ms[8]), sum(wait_ms[9]), sum(wait_ms[10]),
           sum(wait_ms[11]), sum(wait_ms[12]), sum(wait_ms[13]), sum(wait_ms[14]), sum(wait_ms[15]),
           sum(wait_ms[16]), sum(wait_ms[17]), sum(wait_ms[18]), sum(wait_ms[19])
       ], NULL, 0)::bigint[] AS wait_ms,
       array_replace(ARRAY[
           sum(run_ms[1]), sum(run_ms[2]), sum(run_ms[3]), sum(run_ms[4]), sum(run_ms[5]),
           sum(run_ms[6]), sum(run_ms[7]), sum(run_ms[8]), sum(run_ms[9]), sum(run_ms[10]),
           sum(run_ms[11]), sum(run_ms[12]), sum(run_ms[13]), sum(run_ms[14]), sum(run_ms[15]),
           sum(run_ms[16]), sum(run_ms[17]), sum(run_ms[18]), sum(run_ms[19])
       ], NULL, 0)::bigint[] AS run_ms,
       sum(wait_ms_sum)::float8 AS wait_ms_sum, sum(run_ms_sum)::float8 AS run_ms_sum,
       sum(leases_lost)::bigint AS leases_lost
FROM (
    SELECT queue, task, enqueued, succeeded, failed, retried, rescued, cancelled,
           wait_ms, run_ms, wait_ms_sum, run_ms_sum, leases_lost
    FROM conveyor.stats_totals
    UNION ALL
    SELECT queue, task, enqueued, succeeded, failed, retried, rescued, cancelled,
           wait_ms, run_ms, wait_ms_sum, run_ms_sum, leases_lost
    FROM conveyor.stats
    WHERE shard <> 0
) AS t
GROUP BY queue, task
ORDER BY queue, task
