-- A dashboard chart's window by the database's clock (the clock that dated
-- the rollups): $2 buckets of $1 minutes, the last one holding now(),
-- aligned as stats.sql aligns them; and the queues and tasks with rollups
-- in it, for the page's filters. Reads the window's range of
-- conveyor.stats_pkey (minute first), never conveyor.jobs: a day of 20
-- busy queue-task pairs (230,000 rows, every shard) in 90 ms.
WITH w AS (
    SELECT $1::int * interval '1 minute' AS step,
           date_bin($1::int * interval '1 minute', now(), timestamptz '2000-01-01 00:00:00+00')
               + $1::int * interval '1 minute' AS until
),
bounds AS (
    SELECT until - $2::int * step AS since, until FROM w
),
seen AS (
    SELECT DISTINCT s.queue, s.task
    FROM conveyor.stats s, bounds b
    WHERE s.minute >= b.since AND s.minute < b.until
)
SELECT now() AS now, b.since, b.until,
       coalesce((SELECT array_agg(DISTINCT queue ORDER BY queue) FROM seen), '{}') AS queues,
       coalesce((SELECT array_agg(DISTINCT task ORDER BY task) FROM seen), '{}') AS tasks
FROM bounds b
