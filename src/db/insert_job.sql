-- Insert one job: insert_jobs.sql for a single row, which PostgreSQL plans in
-- a fraction of the time (that planning cost more than the insert itself).
-- No row comes back when a job with this id exists: the caller then reads
-- its state. $14 defers the notification as in insert_jobs.sql.
WITH defer AS MATERIALIZED (
    SELECT set_config('conveyor.defer_notify', CASE WHEN $14::bool THEN 'on' ELSE 'off' END, true)
),
due AS (
    SELECT coalesce($7::timestamptz,
                    statement_timestamp() + make_interval(secs => coalesce($8::float8, 0))) AS at
)
INSERT INTO conveyor.jobs
    (id, queue, task, args, headers, state, priority, run_at,
     max_retries, retry_backoff_base, timeout, on_success, on_error)
SELECT $1::uuid, $2::text, $3::text, $4::jsonb, $5::jsonb,
       CASE WHEN due.at > statement_timestamp() THEN 'scheduled' ELSE 'pending' END,
       $6::int, due.at, $9::int, make_interval(secs => $10::float8),
       CASE WHEN $11::float8 IS NOT NULL THEN make_interval(secs => $11::float8) END,
       $12::jsonb, $13::jsonb
FROM defer, due
ON CONFLICT ON CONSTRAINT jobs_pkey DO NOTHING
RETURNING id, state
