-- Dashboard: a page of jobs in one final state ($1: success, failure or
-- cancelled), most recently finished first, optionally of one queue ($2)
-- and task ($3). Keyset paging on (finished_at, id): $4 and $5 are the last
-- row of the previous page; $6 rows.
--
-- Reads the stored rows (conveyor.job_rows), not the view conveyor.jobs: a
-- finished job's row is what the view shows, and only the table lets the
-- planner probe the page's rows one by one (through the view it joined the
-- page to every success kept: 5 s with 10M finished jobs; see
-- docs/decisions/2026-11-28-reads-at-scale.md).
--
-- The page's ids are found first, in order, from the state's day tables
-- (conveyor.jobs_success_<day>, …), merged newest first: their index on
-- finished_at, or on (queue, finished_at) / (task, finished_at) when a
-- queue or task is given: those carry queue, task and id, so even a
-- queue-and-task pair that matches nothing is ruled out from the index
-- alone. Then only the page's rows are read. A page costs about its own
-- rows however many finished jobs are kept.
--
-- A search adds $7 (args contain this JSON), $8 (last_error contains this
-- text, any case) and $9 (finished in the last $9 seconds): the window is a
-- range of the same indexes, and within it each candidate row is read, so
-- the caller runs it under a statement_timeout (db/dashboard.rs).
WITH page AS (
    SELECT j.id, j.finished_at
    FROM conveyor.job_rows j
    WHERE j.state = $1
      AND j.finished_at IS NOT NULL
      AND ($2::text IS NULL OR j.queue = $2)
      AND ($3::text IS NULL OR j.task = $3)
      AND ($4::timestamptz IS NULL
           OR (j.finished_at <= $4 AND (j.finished_at, j.id) < ($4, $5::uuid)))
      AND ($9::float8 IS NULL OR j.finished_at > now() - make_interval(secs => $9))
      AND ($7::jsonb IS NULL OR j.args @> $7)
      AND ($8::text IS NULL OR strpos(lower(j.last_error), lower($8)) > 0)
    ORDER BY j.finished_at DESC, j.id DESC
    LIMIT $6
)
SELECT j.id, j.queue, j.task, j.state, j.priority, j.attempt, j.max_retries,
       j.run_at, j.created_at, j.started_at, j.finished_at, j.worker_id,
       left(j.last_error, 300) AS last_error
FROM page p
-- (The state and finish time name the row's partition: one probe each.)
JOIN conveyor.job_rows j ON j.id = p.id AND j.state = $1 AND j.finished_at = p.finished_at
ORDER BY p.finished_at DESC, p.id DESC
