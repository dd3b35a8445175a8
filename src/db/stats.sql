-- The per-minute rollups (conveyor.stats) from $1 to $2, summed over shards,
-- queues and tasks (or only queue $4, task $5) into buckets of $3 (an
-- interval of whole minutes), oldest first; histograms summed bucket by
-- bucket. Reads the primary key's range of minutes: the cost follows the
-- time range and the number of queues and tasks, never the jobs kept.
WITH rows AS (
    SELECT date_bin($3::interval, minute, timestamptz '2000-01-01 00:00:00+00') AS at,
           succeeded, failed, retried, rescued, cancelled, wait_ms, run_ms
    FROM conveyor.stats
    WHERE minute >= date_bin($3::interval, $1, timestamptz '2000-01-01 00:00:00+00')
      AND minute < $2
      AND ($4::text IS NULL OR queue = $4)
      AND ($5::text IS NULL OR task = $5)
),
counts AS (
    SELECT at, sum(succeeded)::bigint AS succeeded, sum(failed)::bigint AS failed,
           sum(retried)::bigint AS retried, sum(rescued)::bigint AS rescued,
           sum(cancelled)::bigint AS cancelled
    FROM rows GROUP BY at
),
waits AS (
    SELECT at, array_agg(n ORDER BY i) AS wait_ms
    FROM (SELECT r.at, h.i, sum(h.n)::bigint AS n
          FROM rows r, unnest(r.wait_ms) WITH ORDINALITY AS h(n, i) GROUP BY r.at, h.i) AS w
    GROUP BY at
),
runs AS (
    SELECT at, array_agg(n ORDER BY i) AS run_ms
    FROM (SELECT r.at, h.i, sum(h.n)::bigint AS n
          FROM rows r, unnest(r.run_ms) WITH ORDINALITY AS h(n, i) GROUP BY r.at, h.i) AS w
    GROUP BY at
)
SELECT c.at, c.succeeded, c.failed, c.retried, c.rescued, c.cancelled, w.wait_ms, r.run_ms
FROM counts c JOIN waits w USING (at) JOIN runs r USING (at)
ORDER BY c.at
