-- Dashboard: jobs whose id starts with a hex prefix, i.e. lies between $1
-- (the prefix padded with 0s) and $2 (padded with fs), in id order; at most
-- $3. A range of the primary key.
SELECT j.id, j.queue, j.task, j.state, j.priority, j.attempt, j.max_retries,
       j.run_at, j.created_at, j.started_at, j.finished_at, j.worker_id,
       left(j.last_error, 300) AS last_error
FROM conveyor.jobs j
WHERE j.id BETWEEN $1 AND $2
ORDER BY j.id
LIMIT $3
