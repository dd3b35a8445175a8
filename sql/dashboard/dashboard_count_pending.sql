-- Dashboard, before a bulk action: how many pending jobs match a list's
-- filter (queue $1, task $2, args $3, error text $4; as
-- dashboard_jobs_pending.sql), counted up to $5, through the ready ring
-- (conveyor.ready holds exactly the pending jobs). Without args or error
-- text, only the ring is read. Not polled; run under a statement_timeout.
SELECT count(*) FROM (
    SELECT FROM (SELECT DISTINCT r.job_id FROM conveyor.ready r
                 WHERE ($1::text IS NULL OR r.queue = $1)
                   AND ($2::text IS NULL OR r.task = $2)) AS ready
    WHERE ($3::jsonb IS NULL AND $4::text IS NULL)
       OR EXISTS (SELECT FROM conveyor.job_rows j
                  WHERE j.id = ready.job_id AND j.state = 'pending'
                    AND ($3::jsonb IS NULL OR j.args @> $3)
                    AND ($4::text IS NULL OR strpos(lower(j.last_error), lower($4)) > 0))
    LIMIT $5
) AS matching
