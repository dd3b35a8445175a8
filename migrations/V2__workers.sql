-- ---------------------------------------------------------------- workers

-- The worker registry: every worker process has a row from its start. It
-- beats (last_beat_at, busy) every beat_interval; a clean shutdown deletes
-- the row; the maintenance service (any live worker's rescuer) sets dead_at
-- on a row whose beat is more than three intervals old (the process was
-- killed, hung or lost the database), and deletes rows dead for a day.
-- Updated in place, one small row per process: no scan walks it.
CREATE TABLE conveyor.workers (
    id            text        NOT NULL,
    host          text        NOT NULL,
    pid           integer     NOT NULL,
    version       text        NOT NULL,
    queues        text[]      NOT NULL,
    concurrency   integer     NOT NULL,
    busy          integer     NOT NULL DEFAULT 0,
    started_at    timestamptz NOT NULL DEFAULT now(),
    last_beat_at  timestamptz NOT NULL DEFAULT now(),
    beat_interval interval    NOT NULL,
    dead_at       timestamptz,
    CONSTRAINT workers_pkey PRIMARY KEY (id),
    CONSTRAINT workers_counts_check CHECK (concurrency >= 0 AND busy >= 0),
    CONSTRAINT workers_beat_interval_check CHECK
        (beat_interval > '0'::interval AND beat_interval <= interval '1 day'),
    CONSTRAINT workers_timestamps_check CHECK (
        started_at >= '0001-01-01 00:00:00+00' AND started_at < '10000-01-01 00:00:00+00'
        AND last_beat_at >= '0001-01-01 00:00:00+00' AND last_beat_at < '9000-01-01 00:00:00+00'
        AND dead_at >= '0001-01-01 00:00:00+00' AND dead_at < '10000-01-01 00:00:00+00')
);

COMMENT ON TABLE conveyor.workers IS
    'Worker processes: registered at start, beating every beat_interval, deleted at a clean stop, marked dead when silent for three intervals.';
COMMENT ON COLUMN conveyor.workers.id IS 'The worker''s id, as in conveyor.jobs.worker_id of the jobs it holds.';
COMMENT ON COLUMN conveyor.workers.host IS 'Host name of the process.';
COMMENT ON COLUMN conveyor.workers.pid IS 'Process id on that host.';
COMMENT ON COLUMN conveyor.workers.version IS 'Conveyor version the process runs.';
COMMENT ON COLUMN conveyor.workers.queues IS 'Queues it serves, in its claim order.';
COMMENT ON COLUMN conveyor.workers.concurrency IS 'Jobs it runs at once at most.';
COMMENT ON COLUMN conveyor.workers.busy IS 'Jobs it was running at its last beat.';
COMMENT ON COLUMN conveyor.workers.started_at IS 'When the process registered.';
COMMENT ON COLUMN conveyor.workers.last_beat_at IS 'Its latest beat.';
COMMENT ON COLUMN conveyor.workers.beat_interval IS 'How often it beats; silent for three of these, it is marked dead.';
COMMENT ON COLUMN conveyor.workers.dead_at IS 'Set when it was found silent (killed, hung or cut off); NULL while alive.';
