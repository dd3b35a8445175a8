-- How many jobs list_jobs.sql's filter matches ($6: only ids below it).
SELECT count(*) FROM conveyor.jobs j
WHERE ($1::text IS NULL OR j.queue = $1)
  AND ($2::text IS NULL OR j.state = $2)
  AND ($3::text IS NULL OR j.task = $3)
  AND ($4::timestamptz IS NULL OR j.created_at >= $4)
  AND ($5::timestamptz IS NULL OR j.created_at < $5)
  AND ($6::uuid IS NULL OR j.id < $6)
