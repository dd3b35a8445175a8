-- Adds leases lost to the per-minute rollups (conveyor.stats.leases_lost):
-- $1 queues, $2 tasks, $3 counts, one element per (queue, task). A
-- worker that learns it lost leases sends them here, in a statement of its
-- own, off the path of outcomes. Written like the outcome batches'
-- (conveyor_internal.count_outcomes()): the current minute, the writer's
-- shard (1 + backend pid modulo 64; never shard 0, which is the fold's), rows
-- upserted in (queue, task) order; no histograms (NULL) in a row it makes.
-- The fold and retention carry the counts into conveyor.stats_totals, as
-- every other count.
INSERT INTO conveyor.stats AS s (minute, queue, task, shard, leases_lost)
SELECT date_trunc('minute', now()), l.queue, l.task, 1 + pg_backend_pid() % 64, sum(l.n)
FROM unnest($1::text[], $2::text[], $3::bigint[]) AS l(queue, task, n)
WHERE l.queue IS NOT NULL AND l.task IS NOT NULL AND l.n > 0
GROUP BY l.queue, l.task
ORDER BY l.queue, l.task
ON CONFLICT (minute, queue, task, shard) DO UPDATE SET
    leases_lost = s.leases_lost + EXCLUDED.leases_lost
