-- The ids of a page of jobs, newest first, filtered as list_jobs.sql: bulk
-- actions page through them (keyset: $6 = the last id of the previous page)
-- without reading the rows.
SELECT j.id FROM conveyor.jobs j
WHERE ($1::text IS NULL OR j.queue = $1)
  AND ($2::text IS NULL OR j.state = $2)
  AND ($3::text IS NULL OR j.task = $3)
  AND ($4::timestamptz IS NULL OR j.created_at >= $4)
  AND ($5::timestamptz IS NULL OR j.created_at < $5)
  AND ($6::uuid IS NULL OR j.id < $6)
ORDER BY j.id DESC
LIMIT $7
