-- The ids of a page of jobs, newest first, filtered as list_jobs.sql (and
-- read as it is): bulk actions page through them (keyset: $6 = the last id
-- of the previous page) without reading the rows.
SELECT page.id FROM (
    (SELECT j.id FROM conveyor.active_jobs j
     WHERE ($2::text IS NULL OR $2 = 'pending') AND ($2 IS NULL OR j.state = $2)
       AND ($1::text IS NULL OR j.queue = $1)
       AND ($3::text IS NULL OR j.task = $3)
       AND ($4::timestamptz IS NULL OR j.created_at >= $4)
       AND ($5::timestamptz IS NULL OR j.created_at < $5)
       AND ($6::uuid IS NULL OR j.id < $6)
     ORDER BY j.id DESC
     LIMIT $7)
    UNION ALL
    (SELECT j.id FROM conveyor.job_rows j
     WHERE $2::text IN ('scheduled', 'retry') AND j.state = $2
       AND ($1::text IS NULL OR j.queue = $1)
       AND ($3::text IS NULL OR j.task = $3)
       AND ($4::timestamptz IS NULL OR j.created_at >= $4)
       AND ($5::timestamptz IS NULL OR j.created_at < $5)
       AND ($6::uuid IS NULL OR j.id < $6)
     ORDER BY j.id DESC
     LIMIT $7)
    UNION ALL
    (SELECT j.id FROM conveyor.running_jobs j
     WHERE $2::text = 'started'
       AND ($1::text IS NULL OR j.queue = $1)
       AND ($3::text IS NULL OR j.task = $3)
       AND ($4::timestamptz IS NULL OR j.created_at >= $4)
       AND ($5::timestamptz IS NULL OR j.created_at < $5)
       AND ($6::uuid IS NULL OR j.id < $6)
     ORDER BY j.id DESC
     LIMIT $7)
    UNION ALL
    (SELECT j.id FROM conveyor.job_rows j
     WHERE ($2::text IS NULL OR $2 IN ('success', 'failure', 'cancelled'))
       AND j.state IN ('success', 'failure', 'cancelled') AND ($2 IS NULL OR j.state = $2)
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
