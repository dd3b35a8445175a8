-- Dashboard: the jobs of one workflow (members or steps in order, then a
-- chord's callback: NULLs sort last), read in order from jobs_workflow_idx;
-- at most $2, so a big group costs $2 rows.
SELECT j.id, j.queue, j.task, j.state, j.priority, j.attempt, j.max_retries,
       j.run_at, j.created_at, j.started_at, j.finished_at, j.worker_id,
       left(j.last_error, 300) AS last_error, j.workflow_index
FROM conveyor.jobs j
WHERE j.workflow_id = $1
ORDER BY j.workflow_index
LIMIT $2
