-- One job by id. $2 is the earliest time the job can have finished (from a
-- time-ordered id; see `db::inspect::finished_since`): finished jobs are
-- looked for only in the day tables from then on, so a lookup reads a
-- couple of partitions instead of every day of history. A miss here is
-- retried by the caller without the bound (fetch_job_anywhere.sql).
SELECT {job_columns} FROM conveyor.jobs j
WHERE j.id = $1 AND j.state IN ('pending', 'scheduled', 'started', 'retry')
UNION ALL
SELECT {job_columns} FROM conveyor.jobs j
WHERE j.id = $1 AND j.state IN ('success', 'failure', 'cancelled') AND j.finished_at >= $2
LIMIT 1
