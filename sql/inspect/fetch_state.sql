-- A job's state by id, bounded as in fetch_job.sql.
SELECT state FROM conveyor.jobs
WHERE id = $1 AND state IN ('pending', 'scheduled', 'started', 'retry')
UNION ALL
SELECT state FROM conveyor.jobs
WHERE id = $1 AND state IN ('success', 'failure', 'cancelled') AND finished_at >= $2
LIMIT 1
