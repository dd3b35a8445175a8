-- Delete up to $3 finished jobs in state $1 that finished more than $2
-- seconds ago, oldest first. Small batches with SKIP LOCKED: never waits on
-- (or blocks) a worker for long.
--
-- Finished jobs live in a table per day (conveyor.jobs_success_<day>, …):
-- with a retention of
-- a day or more ($4 false) the pruner drops those tables whole, and this
-- deletes only jobs below the oldest of them (the state's default
-- partition); with less than a day ($4 true), it deletes every job
-- past the retention, one by one.
WITH doomed AS (
    SELECT id FROM conveyor.job_rows
    WHERE state = $1 AND finished_at < now() - make_interval(secs => $2)
      AND ($4::boolean
           OR finished_at < coalesce(conveyor_internal.history_days_start($1), 'infinity'))
      -- Members of a workflow still running stay: its results need them.
      AND NOT EXISTS (SELECT 1 FROM conveyor.workflows w
                      WHERE w.id = conveyor.job_rows.workflow_id AND w.state = 'running')
    ORDER BY finished_at
    LIMIT $3
    FOR UPDATE SKIP LOCKED
)
-- By primary key even under a cached generic plan (see claim.sql).
DELETE FROM conveyor.job_rows j WHERE j.id = ANY(ARRAY(SELECT id FROM doomed)) AND j.state = $1
