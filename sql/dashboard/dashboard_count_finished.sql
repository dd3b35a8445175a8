-- Dashboard, before a bulk action: how many jobs in one final state ($1)
-- match a list's filter (queue $2, task $3, args $4, error text $5,
-- finished in the last $6 seconds; as dashboard_jobs_finished.sql), counted
-- up to $7. Without args or error text it is an index-only count over
-- the day tables' index on finished_at, or on (queue, finished_at) / (task, finished_at)
-- when a queue or task is given (or a sequential scan, when the planner
-- expects most rows to match). Not polled; run under a statement_timeout.
SELECT count(*) FROM (
    SELECT FROM conveyor.job_rows j
    WHERE j.state = $1
      AND j.finished_at IS NOT NULL
      AND ($2::text IS NULL OR j.queue = $2)
      AND ($3::text IS NULL OR j.task = $3)
      AND ($6::float8 IS NULL OR j.finished_at > now() - make_interval(secs => $6))
      AND ($4::jsonb IS NULL OR j.args @> $4)
      AND ($5::text IS NULL OR strpos(lower(j.last_error), lower($5)) > 0)
    LIMIT $7
) AS matching
