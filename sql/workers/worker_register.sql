-- Register (or re-register, after a restart with the same id) a worker.
INSERT INTO conveyor.workers AS w
    (id, host, pid, version, queues, concurrency, busy, beat_interval)
VALUES ($1, $2, $3, $4, $5, $6, 0, make_interval(secs => $7))
ON CONFLICT (id) DO UPDATE SET
    host = EXCLUDED.host, pid = EXCLUDED.pid, version = EXCLUDED.version,
    queues = EXCLUDED.queues, concurrency = EXCLUDED.concurrency, busy = 0,
    started_at = now(), last_beat_at = now(),
    beat_interval = EXCLUDED.beat_interval, dead_at = NULL
