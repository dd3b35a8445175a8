-- Dashboard overview, one row per queue that has unfinished jobs, finished
-- some recently, or has settings. Polled every few seconds, so it never
-- counts the whole table:
--   * unfinished states are counted exactly: pending jobs in the ready ring
--     (conveyor.ready, which holds nothing else), scheduled and retrying ones
--     through jobs_waiting_idx, running ones in conveyor.running_jobs
--     (jobs_running_idx and the live claims): the cost follows the backlog,
--     not the history;
--   * all from the stored rows (conveyor.job_rows), not the view
--     conveyor.jobs, which works out every unfinished job's state from the
--     claims before it can filter on it (750 ms with a million jobs waiting);
--   * finished jobs are counted over recent windows only, through the
--     final states' day tables, by finished_at: successes over the last
--     hour, failures and cancellations (rare) over the last day, so the cost
--     follows recent throughput, not how many finished jobs are kept.
-- Run with fresh plans (not a prepared generic plan) so the literal states
-- match the partial indexes. The queue's settings (conveyor.queues, a row
-- per queue with settings) come along for the settings page.
WITH active AS (
    SELECT queue, 'pending'::text AS state, count(*) AS n,
           extract(epoch FROM now() - min(run_at))::float8 AS oldest_pending_secs
    FROM conveyor.ready
    GROUP BY queue
    UNION ALL
    SELECT queue, state, count(*), NULL
    FROM conveyor.job_rows WHERE state IN ('scheduled', 'retry')
    GROUP BY queue, state
    UNION ALL
    SELECT queue, 'started', count(*), NULL
    FROM conveyor.running_jobs
    GROUP BY queue
),
recent AS (
    SELECT queue, state,
           count(*) FILTER (WHERE finished_at > now() - interval '1 minute') AS n_1m,
           count(*) AS n_1h,
           NULL::bigint AS n_24h
    FROM conveyor.job_rows
    WHERE state = 'success' AND finished_at > now() - interval '1 hour'
    GROUP BY queue, state
    UNION ALL
    SELECT queue, state,
           count(*) FILTER (WHERE finished_at > now() - interval '1 minute'),
           count(*) FILTER (WHERE finished_at > now() - interval '1 hour'),
           count(*)
    FROM conveyor.job_rows
    WHERE state IN ('failure', 'cancelled') AND finished_at > now() - interval '24 hours'
    GROUP BY queue, state
),
a AS (
    SELECT queue,
           sum(n) FILTER (WHERE state = 'scheduled') AS scheduled,
           sum(n) FILTER (WHERE state = 'pending') AS pending,
           sum(n) FILTER (WHERE state = 'started') AS started,
           sum(n) FILTER (WHERE state = 'retry') AS retry,
           max(oldest_pending_secs) AS oldest_pending_secs
    FROM active GROUP BY queue
),
r AS (
    SELECT queue,
           sum(n_1m) FILTER (WHERE state = 'success') AS succeeded_1m,
           sum(n_1m) FILTER (WHERE state = 'failure') AS failed_1m,
           sum(n_1h) FILTER (WHERE state = 'success') AS succeeded_1h,
           sum(n_1h) FILTER (WHERE state = 'failure') AS failed_1h,
           sum(n_24h) FILTER (WHERE state = 'failure') AS failed_24h,
           sum(n_24h) FILTER (WHERE state = 'cancelled') AS cancelled_24h
    FROM recent GROUP BY queue
),
names AS (
    SELECT queue FROM a UNION SELECT queue FROM r UNION SELECT name FROM conveyor.queues
)
SELECT n.queue,
       coalesce(a.scheduled, 0)::bigint AS scheduled,
       coalesce(a.pending, 0)::bigint AS pending,
       coalesce(a.started, 0)::bigint AS started,
       coalesce(a.retry, 0)::bigint AS retry,
       a.oldest_pending_secs,
       coalesce(r.succeeded_1m, 0)::bigint AS succeeded_1m,
       coalesce(r.failed_1m, 0)::bigint AS failed_1m,
       coalesce(r.succeeded_1h, 0)::bigint AS succeeded_1h,
       coalesce(r.failed_1h, 0)::bigint AS failed_1h,
       coalesce(r.failed_24h, 0)::bigint AS failed_24h,
       coalesce(r.cancelled_24h, 0)::bigint AS cancelled_24h,
       coalesce(q.paused_at IS NOT NULL, false) AS paused,
       q.concurrency_limit, q.rate_limit,
       extract(epoch FROM q.rate_period)::float8 AS rate_period_secs,
       -- Starts counted in the current rate window (0 once it has ended).
       CASE WHEN q.window_start + q.rate_period > now() THEN q.window_count ELSE 0 END
           AS rate_window_count
FROM names n
LEFT JOIN a ON a.queue = n.queue
LEFT JOIN r ON r.queue = n.queue
LEFT JOIN conveyor.queues q ON q.name = n.queue
ORDER BY n.queue
