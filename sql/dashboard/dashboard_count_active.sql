-- Dashboard, before a bulk action: how many jobs in one unfinished state
-- ($1: scheduled, started or retry) match a list's filter (queue $2, task
-- $3, args $4, error text $5; as dashboard_jobs_active.sql, and from the
-- same places), counted up to $6. Through the state's partial index
-- (jobs_waiting_idx, jobs_running_idx) and the live claims: the cost
-- follows the backlog. Not polled; run under a statement_timeout.
SELECT count(*) FROM (
    SELECT FROM conveyor.job_rows j
    WHERE $1::text IN ('scheduled', 'retry') AND j.state = $1
      AND ($2::text IS NULL OR j.queue = $2)
      AND ($3::text IS NULL OR j.task = $3)
      AND ($4::jsonb IS NULL OR j.args @> $4)
      AND ($5::text IS NULL OR strpos(lower(j.last_error), lower($5)) > 0)
    UNION ALL
    SELECT FROM conveyor.running_jobs j
    WHERE $1::text = 'started'
      AND ($2::text IS NULL OR j.queue = $2)
      AND ($3::text IS NULL OR j.task = $3)
      AND ($4::jsonb IS NULL OR j.args @> $4)
      AND ($5::text IS NULL OR strpos(lower(j.last_error), lower($5)) > 0)
    LIMIT $6
) AS matching
