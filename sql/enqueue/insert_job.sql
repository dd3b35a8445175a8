-- Insert one job: insert_jobs.sql for a single row, as plain as a statement
-- can be (bound values, no set-returning function), so that it costs the
-- least to plan and run. The due time and first state follow the one rule,
-- conveyor_internal.due_at() and initial_state() (inlined by the planner).
-- No row comes back when a job with this id exists: the caller then checks
-- that it exists. The insert trigger wakes idle workers at commit.
-- Unfinished jobs have the primary key; with $14 the id is also looked for
-- among finished jobs (insert_jobs.sql says when).
INSERT INTO conveyor.jobs_unfinished
    (id, queue, task, args, headers, state, priority, run_at,
     max_retries, retry_backoff_base, timeout, on_success, on_error)
SELECT $1::uuid, $2::text, $3::text, $4::jsonb, $5::jsonb,
       conveyor_internal.initial_state(due.at),
       $6::int, due.at, $9::int, make_interval(secs => $10::float8),
       CASE WHEN $11::float8 IS NOT NULL THEN make_interval(secs => $11::float8) END,
       $12::jsonb, $13::jsonb
FROM (SELECT conveyor_internal.due_at($7::timestamptz, $8::float8) AS at) AS due
WHERE NOT $14::boolean OR NOT EXISTS (SELECT 1 FROM conveyor.jobs x WHERE x.id = $1::uuid)
ON CONFLICT ON CONSTRAINT jobs_unfinished_pkey DO NOTHING
RETURNING id
