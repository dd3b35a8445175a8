-- A page of jobs, newest first (ids are time-ordered), filtered (queue
-- $1, state $2, task $3, created from $4 and before $5); $6 pages: only ids
-- below it; $7 rows.
--
-- Three branches, each newest first from its own indexes, merged: the
-- unfinished jobs with the state workers see (conveyor.active_jobs), the
-- running ones (conveyor.running_jobs) for a page of started jobs, and the
-- stored rows (conveyor.job_rows) of finished jobs, or of scheduled or
-- retrying ones (no claim holds those, so their row is what the view shows).
-- With the values planned in, only the branches the state filter allows are
-- read, and only the partitions of that state. Not one ORDER BY over
-- conveyor.jobs: the view cannot hand its unfinished jobs over in id
-- order, so a page of 20 sorted the whole backlog (700 ms with a million
-- jobs waiting; docs/decisions/2026-11-28-reads-at-scale.md).
SELECT * FROM (
    (SELECT {job_columns} FROM conveyor.active_jobs j
     WHERE ($2::text IS NULL OR $2 = 'pending') AND ($2 IS NULL OR j.state = $2)
       AND ($1::text IS NULL OR j.queue = $1)
       AND ($3::text IS NULL OR j.task = $3)
       AND ($4::timestamptz IS NULL OR j.created_at >= $4)
       AND ($5::timestamptz IS NULL OR j.created_at < $5)
       AND ($6::uuid IS NULL OR j.id < $6)
     ORDER BY j.id DESC
     LIMIT $7)
    UNION ALL
    (SELECT {job_columns} FROM conveyor.running_jobs j
     WHERE $2::text = 'started'
       AND ($1::text IS NULL OR j.queue = $1)
       AND ($3::text IS NULL OR j.task = $3)
       AND ($4::timestamptz IS NULL OR j.created_at >= $4)
       AND ($5::timestamptz IS NULL OR j.created_at < $5)
       AND ($6::uuid IS NULL OR j.id < $6)
     ORDER BY j.id DESC
     LIMIT $7)
    UNION ALL
    (SELECT {job_columns} FROM conveyor.job_rows j
     WHERE CASE WHEN $2::text IS NULL THEN j.state IN ('success', 'failure', 'cancelled')
                WHEN $2 IN ('pending', 'started') THEN false
                ELSE j.state = $2 END
       AND ($1::text IS NULL OR j.queue = $1)
       AND ($3::text IS NULL OR j.task = $3)
       AND ($4::timestamptz IS NULL OR j.created_at >= $4)
       AND ($5::timestamptz IS NULL OR j.created_at < $5)
       AND ($6::uuid IS NULL OR j.id < $6)
     ORDER BY j.id DESC
     LIMIT $7)
) AS page
ORDER BY page.id DESC
LIMIT $7
