-- Dashboard: a page of pending jobs, newest first, optionally of one queue
-- ($1) and task ($2); $3 pages: only ids below it; $4 rows. Pending jobs
-- are exactly the ready ring's (conveyor.ready): the newest ids are taken
-- there (a sort of the backlog, whatever the history) and only those rows
-- are read, from the stored rows (conveyor.job_rows: a job in the ring is
-- held by no claim, so its row is what conveyor.jobs shows; through the
-- view, the page was joined to every job waiting: 2.9 s with a million).
-- Same columns as dashboard_jobs_active.sql.
--
-- A search adds $5 (args contain this JSON) and $6 (last_error contains
-- this text, any case): then every pending job of the queue and task is a
-- candidate (the ring's LIMIT is lifted) and its row is read, so the caller
-- runs it under a statement_timeout (db/dashboard.rs).
SELECT j.id, j.queue, j.task, j.state, j.priority, j.attempt, j.max_retries,
       j.run_at, j.created_at, j.started_at, j.finished_at, j.worker_id,
       left(j.last_error, 300) AS last_error
FROM (SELECT DISTINCT r.job_id FROM conveyor.ready r
      WHERE ($1::text IS NULL OR r.queue = $1)
        AND ($2::text IS NULL OR r.task = $2)
        AND ($3::uuid IS NULL OR r.job_id < $3)
      ORDER BY r.job_id DESC
      LIMIT CASE WHEN $5::jsonb IS NULL AND $6::text IS NULL THEN $4 END) AS newest
JOIN conveyor.job_rows j ON j.id = newest.job_id AND j.state = 'pending'
WHERE ($5::jsonb IS NULL OR j.args @> $5)
  AND ($6::text IS NULL OR strpos(lower(j.last_error), lower($6)) > 0)
ORDER BY j.id DESC
LIMIT $4
