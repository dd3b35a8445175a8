-- Bulk enqueue: stream jobs that are due now with COPY (much cheaper per row
-- than INSERT). Unlisted columns take their defaults: state 'pending',
-- run_at statement_timestamp(), what conveyor_internal.due_at() and
-- initial_state() give a job with no run_at and no delay. COPY cannot skip
-- conflicts: a repeated id fails the whole statement, and the caller then
-- falls back to insert_jobs.sql. Only jobs whose ids the library generated
-- come this way (a finished job could hold a caller's id: insert_jobs.sql).
COPY conveyor.jobs_unfinished (id, queue, task, args, headers, priority, max_retries,
                    retry_backoff_base, timeout, on_success, on_error)
FROM STDIN
