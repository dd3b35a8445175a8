-- Trigger function of jobs_moved_to_pending: an UPDATE naming conveyor.jobs
-- that moved finished jobs back to pending (an operator's `SET state =
-- 'pending', finished_at = NULL`) moved their rows into jobs_unfinished,
-- which PostgreSQL runs as a delete and an insert, firing no row UPDATE
-- trigger: give them their ready-ring rows, and wake the workers of their
-- queues. Rows that stayed in their partition were handled by the row
-- triggers already (jobs_ready_update).
CREATE OR REPLACE FUNCTION conveyor_internal.ready_moved() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO conveyor.ready (slot, queue, priority, run_at, job_id, task)
    SELECT (SELECT conveyor_internal.ready_slot()), n.queue, n.priority, n.run_at, n.id, n.task
    FROM new_jobs n JOIN old_jobs o ON o.id = n.id
    WHERE n.state = 'pending' AND o.state IN ('success', 'failure', 'cancelled');
    PERFORM pg_notify(TG_TABLE_SCHEMA || '.job_ready',
                      json_build_object('queue', q.queue, 'scheduled', q.scheduled)::text)
    FROM (SELECT DISTINCT n.queue, n.state <> 'pending' AS scheduled
          FROM new_jobs n JOIN old_jobs o ON o.id = n.id
          WHERE n.state IN ('pending', 'scheduled', 'retry')
            AND o.state IN ('success', 'failure', 'cancelled')) AS q;
    RETURN NULL;
END
$$;

COMMENT ON FUNCTION conveyor_internal.ready_moved() IS
    'Internal. Statement trigger on UPDATE of conveyor.jobs: ready-ring rows and a job_ready notification for finished jobs an UPDATE moved back to pending.';
