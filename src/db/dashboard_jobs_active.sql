-- Dashboard: a page of jobs in one unfinished state ($1: scheduled, started
-- or retry; pending jobs have dashboard_jobs_pending.sql), newest first,
-- optionally of one queue ($2) and task ($3); $4 pages: only ids below it;
-- $5 rows. Planned afresh with the actual values, so the state's partial
-- index (jobs_waiting_idx, jobs_running_idx) finds a small backlog and the
-- primary key, read backwards, a big one. Light columns only: args and
-- results stay in the detail view.
--
-- A search adds $6 (args contain this JSON) and $7 (last_error contains
-- this text, any case): those read each candidate row of the state, so the
-- caller runs them under a statement_timeout (db/dashboard.rs).
SELECT j.id, j.queue, j.task, j.state, j.priority, j.attempt, j.max_retries,
       j.run_at, j.created_at, j.started_at, j.finished_at, j.worker_id,
       left(j.last_error, 300) AS last_error
FROM conveyor.jobs j
WHERE j.state = $1
  AND ($2::text IS NULL OR j.queue = $2)
  AND ($3::text IS NULL OR j.task = $3)
  AND ($4::uuid IS NULL OR j.id < $4)
  AND ($6::jsonb IS NULL OR j.args @> $6)
  AND ($7::text IS NULL OR strpos(lower(j.last_error), lower($7)) > 0)
ORDER BY j.id DESC
LIMIT $5
