-- Where folding starts in a new process (see fold_stats.sql): the first
-- minute with a rollup row in a shard other than 0, or, when there is none,
-- 10 minutes ago. Walks the primary key from its oldest minute, past the
-- rows already folded (once per process).
SELECT coalesce(min(minute), date_trunc('minute', now()) - interval '10 minutes')
FROM conveyor.stats WHERE shard <> 0
