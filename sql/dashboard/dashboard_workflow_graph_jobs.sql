-- Dashboard: the jobs of the workflows $1 (members or steps in order, at
-- most $2 of each, read in order from jobs_workflow_idx (workflow_id,
-- workflow_index), so a group of 10,000 costs $2 rows), and the jobs $3 (chords'
-- callbacks, by primary key), with on_success: a step's spec of the steps
-- that follow it. A job may come twice (a callback among the members).
SELECT j.id, j.queue, j.task, j.state, j.priority, j.attempt, j.max_retries,
       j.run_at, j.created_at, j.started_at, j.finished_at, j.worker_id,
       left(j.last_error, 300) AS last_error, j.workflow_id, j.workflow_index, j.on_success
FROM unnest($1::uuid[]) AS w (id)
CROSS JOIN LATERAL (
    SELECT * FROM conveyor.jobs j
    WHERE j.workflow_id = w.id
    ORDER BY j.workflow_index
    LIMIT $2
) AS j
UNION ALL
SELECT j.id, j.queue, j.task, j.state, j.priority, j.attempt, j.max_retries,
       j.run_at, j.created_at, j.started_at, j.finished_at, j.worker_id,
       left(j.last_error, 300) AS last_error, j.workflow_id, j.workflow_index, j.on_success
FROM conveyor.jobs j
WHERE j.id = ANY($3::uuid[])
