-- A page of jobs, newest first (ids are time-ordered), filtered; $6 pages:
-- only ids below it. Uses the primary key; with a state filter the planner
-- can also use the partial indexes.
SELECT {job_columns} FROM conveyor.jobs j
WHERE ($1::text IS NULL OR j.queue = $1)
  AND ($2::text IS NULL OR j.state = $2)
  AND ($3::text IS NULL OR j.task = $3)
  AND ($4::timestamptz IS NULL OR j.created_at >= $4)
  AND ($5::timestamptz IS NULL OR j.created_at < $5)
  AND ($6::uuid IS NULL OR j.id < $6)
ORDER BY j.id DESC
LIMIT $7
