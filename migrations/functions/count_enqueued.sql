-- Trigger function of jobs_count_enqueued and jobs_unfinished_count_enqueued
-- (migration V9): adds the unfinished jobs an INSERT or COPY stored to the
-- `enqueued` count of the per-minute rollups (conveyor.stats), one upsert
-- per statement and (queue, task), in that order. The row is this backend's
-- own (shard = minus its pid): an enqueue inside a long transaction holds
-- it until commit, and no other backend ever waits for it. It has no
-- histograms (NULL), which keeps the row, and the WAL each enqueue
-- statement writes for it, small. Counts new jobs
-- and jobs conveyor.requeue() brings back, so that enqueued minus ended
-- (succeeded, failed, cancelled) is the unfinished jobs; a finished job
-- written by hand is not counted.
CREATE OR REPLACE FUNCTION conveyor_internal.count_enqueued() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO conveyor.stats AS s (minute, queue, task, shard, enqueued)
    SELECT date_trunc('minute', now()), n.queue, n.task, -pg_backend_pid(), count(*)
    FROM new_jobs n
    WHERE n.state IN ('pending', 'scheduled', 'started', 'retry')
    GROUP BY n.queue, n.task
    ORDER BY n.queue, n.task
    ON CONFLICT (minute, queue, task, shard) DO UPDATE SET enqueued = s.enqueued + EXCLUDED.enqueued;
    RETURN NULL;
END
$$;

COMMENT ON FUNCTION conveyor_internal.count_enqueued() IS
    'Internal. Statement trigger on inserts into conveyor.jobs and jobs_unfinished: counts the unfinished jobs inserted in conveyor.stats.enqueued.';
