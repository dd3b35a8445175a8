-- Dashboard: a page of jobs in one unfinished state ($1: scheduled, started
-- or retry; pending jobs have dashboard_jobs_pending.sql), newest first,
-- optionally of one queue ($2) and task ($3); $4 pages: only ids below it;
-- $5 rows. Planned afresh with the actual values, so only the branch for
-- $1 is planned: scheduled and retrying jobs from their stored rows
-- (conveyor.job_rows: a claim never holds them, so their row is what
-- conveyor.jobs shows), where the state's partial index (jobs_waiting_idx)
-- finds a small backlog and the primary key, read backwards, a big one;
-- running jobs from conveyor.running_jobs (settled rows and live claims).
-- Not through conveyor.jobs, which works out every unfinished job's state
-- before it can filter on it (230 ms for a page with a million jobs
-- waiting). Light columns only: args and results stay in the detail view.
--
-- A search adds $6 (args contain this JSON) and $7 (last_error contains
-- this text, any case): those read each candidate row of the state, so the
-- caller runs them under a statement_timeout (db/dashboard.rs).
SELECT * FROM (
    (SELECT j.id, j.queue, j.task, j.state, j.priority, j.attempt, j.max_retries,
            j.run_at, j.created_at, j.started_at, j.finished_at, j.worker_id,
            left(j.last_error, 300) AS last_error
     FROM conveyor.job_rows j
     WHERE $1::text IN ('scheduled', 'retry') AND j.state = $1
       AND ($2::text IS NULL OR j.queue = $2)
       AND ($3::text IS NULL OR j.task = $3)
       AND ($4::uuid IS NULL OR j.id < $4)
       AND ($6::jsonb IS NULL OR j.args @> $6)
       AND ($7::text IS NULL OR strpos(lower(j.last_error), lower($7)) > 0)
     ORDER BY j.id DESC
     LIMIT $5)
    UNION ALL
    (SELECT j.id, j.queue, j.task, j.state, j.priority, j.attempt, j.max_retries,
            j.run_at, j.created_at, j.started_at, j.finished_at, j.worker_id,
            left(j.last_error, 300) AS last_error
     FROM conveyor.running_jobs j
     WHERE $1::text = 'started'
       AND ($2::text IS NULL OR j.queue = $2)
       AND ($3::text IS NULL OR j.task = $3)
       AND ($4::uuid IS NULL OR j.id < $4)
       AND ($6::jsonb IS NULL OR j.args @> $6)
       AND ($7::text IS NULL OR strpos(lower(j.last_error), lower($7)) > 0)
     ORDER BY j.id DESC
     LIMIT $5)
) AS page
ORDER BY page.id DESC
LIMIT $5
