-- When a new job is due: its run_at if given, else now plus its delay (none:
-- now). "Now" is the statement's start, the same for every job one statement
-- inserts. With initial_state(), this is the one definition of the rule every
-- way into conveyor.jobs applies (insert_job_specs() and the Rust client's
-- statements in sql/enqueue/insert_job.sql and insert_jobs.sql; COPY takes only
-- jobs due now, which the column defaults describe). A plain SQL function,
-- so the planner inlines it: it costs no call.
CREATE OR REPLACE FUNCTION conveyor_internal.due_at(run_at timestamptz, delay_secs float8)
RETURNS timestamptz
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT coalesce(run_at, statement_timestamp() + make_interval(secs => coalesce(delay_secs, 0)))
$$;

COMMENT ON FUNCTION conveyor_internal.due_at(timestamptz, float8) IS
    'Internal. When a new job is due: run_at if given, else the statement''s start plus delay_secs.';
