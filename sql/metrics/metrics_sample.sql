-- For gauges whose exact count reached its cap (metrics_queues.sql): an
-- estimate of every queue's unfinished jobs by state from a sample of
-- about $1 pages of conveyor.jobs_unfinished (TABLESAMPLE SYSTEM: whole
-- pages, each chosen with the same probability, the others never read),
-- scaled by the fraction sampled. The fraction comes from the table's size
-- on disk (pg_relation_size, always current), never from ANALYZE's
-- statistics (reltuples), which nothing keeps fresh when autovacuum is off.
-- Dead row versions in the sampled pages are not counted and empty pages
-- count as pages, so bloat widens the error but does not bias the estimate.
-- $2 seeds the choice of pages (REPEATABLE): the same seed samples the same
-- pages while the table keeps its size, so scrapes do not jitter.
-- A sample of the whole table (fewer pages than $1) is an exact count.
WITH fraction AS (
    SELECT least(100, 100.0 * $1::bigint / greatest(1,
               pg_relation_size('conveyor.jobs_unfinished')
                   / current_setting('block_size')::bigint))::float8 AS percent
)
SELECT j.queue, j.state,
       round(count(*) * 100 / (SELECT percent FROM fraction))::bigint AS estimate
FROM conveyor.jobs_unfinished j TABLESAMPLE SYSTEM ((SELECT percent FROM fraction))
     REPEATABLE ($2::float8)
GROUP BY j.queue, j.state
