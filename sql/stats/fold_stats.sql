-- Folds the per-minute rollups (conveyor.stats) of the minutes from $1 up
-- to an hour later, or up to 10 minutes ago if that is sooner, into shard 0;
-- returns where it stopped (`until`), how many rows it folded into, and
-- whether it reached 10 minutes ago (`caught_up`).
--
-- Shards spread the writers of the current minute over rows, so that
-- concurrent completers rarely wait for each other; once the minute is past
-- they only multiply the rows a chart reads (up to 8 per queue, task and
-- minute). Sums are kept exactly: the other shards' rows are deleted and
-- added to shard 0 in one statement. A writer that adds to a folded minute
-- later (a transaction dated by its start, committed more than 10 minutes
-- after) makes a shard row again, which readers sum as ever. Reads the
-- primary key's range of minutes; a row another statement folds at the
-- same time is deleted once (the second waits for its lock, then skips it).
-- The rows deleted here are added to conveyor.stats_totals by the trigger
-- stats_totals, in this statement: the all-time totals the
-- metrics serve.
WITH bounds AS (
    SELECT $1::timestamptz AS since,
           least($1::timestamptz + interval '1 hour',
                 date_trunc('minute', now()) - interval '10 minutes') AS until
),
gone AS (
    DELETE FROM conveyor.stats s USING bounds b
    WHERE s.minute >= b.since AND s.minute < b.until AND s.shard <> 0
    RETURNING s.*
),
folded AS (
    INSERT INTO conveyor.stats AS s
        (minute, queue, task, shard, succeeded, failed, retried, rescued, cancelled, wait_ms, run_ms,
         enqueued, wait_ms_sum, run_ms_sum, leases_lost)
    SELECT minute, queue, task, 0,
           sum(succeeded), sum(failed), sum(retried), sum(rescued), sum(cancelled),
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
           sum(enqueued), sum(wait_ms_sum), sum(run_ms_sum), sum(leases_lost)
    FROM gone
    GROUP BY minute, queue, task
    ORDER BY minute, queue, task
    ON CONFLICT (minute, queue, task, shard) DO UPDATE SET
        succeeded = s.succeeded + EXCLUDED.succeeded,
        failed = s.failed + EXCLUDED.failed,
        retried = s.retried + EXCLUDED.retried,
        rescued = s.rescued + EXCLUDED.rescued,
        cancelled = s.cancelled + EXCLUDED.cancelled,
        wait_ms = conveyor_internal.histogram_add(s.wait_ms, EXCLUDED.wait_ms),
        run_ms = conveyor_internal.histogram_add(s.run_ms, EXCLUDED.run_ms),
        enqueued = s.enqueued + EXCLUDED.enqueued,
        wait_ms_sum = s.wait_ms_sum + EXCLUDED.wait_ms_sum,
        run_ms_sum = s.run_ms_sum + EXCLUDED.run_ms_sum,
        leases_lost = s.leases_lost + EXCLUDED.leases_lost
    RETURNING 1
)
SELECT greatest(b.since, b.until) AS until,
       (SELECT count(*) FROM folded) AS folded,
       b.until = date_trunc('minute', now()) - interval '10 minutes' AS caught_up
FROM bounds b
