-- Per queue: jobs by state, age of the oldest runnable job, throughput over
-- the last minute and hour, and whether it is paused. (Counts scan the
-- table: fine for operators, not for a dashboard polling millions of rows.)
WITH counts AS (
    SELECT queue,
           count(*) FILTER (WHERE state = 'scheduled') AS scheduled,
           count(*) FILTER (WHERE state = 'pending') AS pending,
           count(*) FILTER (WHERE state = 'started') AS started,
           count(*) FILTER (WHERE state = 'retry') AS retry,
           count(*) FILTER (WHERE state = 'success') AS success,
           count(*) FILTER (WHERE state = 'failure') AS failure,
           count(*) FILTER (WHERE state = 'cancelled') AS cancelled,
           extract(epoch FROM now() - min(run_at) FILTER (WHERE state = 'pending'))::float8
               AS oldest_pending_secs,
           count(*) FILTER (WHERE state = 'success' AND finished_at > now() - interval '1 minute')
               AS processed_1m,
           count(*) FILTER (WHERE state = 'failure' AND finished_at > now() - interval '1 minute')
               AS failed_1m,
           count(*) FILTER (WHERE state = 'success' AND finished_at > now() - interval '1 hour')
               AS processed_1h,
           count(*) FILTER (WHERE state = 'failure' AND finished_at > now() - interval '1 hour')
               AS failed_1h
    FROM conveyor.jobs
    GROUP BY queue
)
SELECT coalesce(c.queue, q.name) AS queue,
       coalesce(c.scheduled, 0) AS scheduled, coalesce(c.pending, 0) AS pending,
       coalesce(c.started, 0) AS started, coalesce(c.retry, 0) AS retry,
       coalesce(c.success, 0) AS success, coalesce(c.failure, 0) AS failure,
       coalesce(c.cancelled, 0) AS cancelled, c.oldest_pending_secs,
       coalesce(c.processed_1m, 0) AS processed_1m, coalesce(c.failed_1m, 0) AS failed_1m,
       coalesce(c.processed_1h, 0) AS processed_1h, coalesce(c.failed_1h, 0) AS failed_1h,
       q.paused_at IS NOT NULL AS paused
FROM counts c
FULL JOIN conveyor.queues q ON q.name = c.queue
ORDER BY 1
