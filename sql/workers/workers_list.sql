-- Every registered worker, live ones first. A live row whose beat is older
-- than three intervals counts as dead even before maintenance marks it.
SELECT id, host, pid, version, queues, concurrency, busy, started_at, last_beat_at,
       extract(epoch FROM beat_interval)::float8 AS beat_interval_secs,
       coalesce(dead_at, CASE WHEN last_beat_at < now() - 3 * beat_interval
                              THEN last_beat_at + 3 * beat_interval END) AS dead_at
FROM conveyor.workers
ORDER BY (dead_at IS NOT NULL OR last_beat_at < now() - 3 * beat_interval), started_at, id
