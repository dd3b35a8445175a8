-- The gauges' statement before 2026-11-25 (src/db/metrics_queues.sql at
-- 2937ed4): every unfinished job counted at every scrape. Scenario M times
-- it alone on the large backlog, beside the bounded scrape.
-- Per queue, for the metrics' gauges: unfinished jobs by state and the age
-- of the oldest pending job, from conveyor.jobs_unfinished alone (finished
-- jobs are counted by the rollups: metrics_totals.sql), and every queue
-- with settings (paused or not). The cost follows the jobs not finished,
-- never the history kept.
WITH counts AS (
    SELECT queue,
           count(*) FILTER (WHERE state = 'scheduled') AS scheduled,
           count(*) FILTER (WHERE state = 'pending') AS pending,
           count(*) FILTER (WHERE state = 'started') AS started,
           count(*) FILTER (WHERE state = 'retry') AS retry,
           greatest(extract(epoch FROM now() - min(run_at) FILTER (WHERE state = 'pending')), 0)::float8
               AS oldest_pending_secs
    FROM conveyor.jobs_unfinished
    GROUP BY queue
)
SELECT coalesce(c.queue, q.name) AS queue,
       coalesce(c.scheduled, 0) AS scheduled, coalesce(c.pending, 0) AS pending,
       coalesce(c.started, 0) AS started, coalesce(c.retry, 0) AS retry,
       coalesce(c.oldest_pending_secs, 0) AS oldest_pending_secs,
       q.paused_at IS NOT NULL AS paused
FROM counts c
FULL JOIN conveyor.queues q ON q.name = c.queue
ORDER BY 1
