-- Trigger function of jobs_ready_insert and jobs_unfinished_ready_insert:
-- every job an INSERT or COPY into conveyor.jobs or jobs_unfinished stores
-- as pending gets its row in conveyor.ready, in one
-- statement per inserting statement.
CREATE OR REPLACE FUNCTION conveyor_internal.ready_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO conveyor.ready (slot, queue, priority, run_at, job_id, task)
    SELECT (SELECT conveyor_internal.ready_slot()), queue, priority, run_at, id, task
    FROM new_jobs WHERE state = 'pending';
    RETURN NULL;
END
$$;

COMMENT ON FUNCTION conveyor_internal.ready_insert() IS
    'Internal. Statement trigger on inserts into conveyor.jobs: a conveyor.ready row for each pending job inserted.';
