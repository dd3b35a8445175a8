-- Move jobs whose run_at has come (scheduled ETA or retry backoff) to pending,
-- so the claim only ever reads the small pending index; and report the
-- earliest run_at still in the future, so an idle worker knows when to wake.
WITH due AS (
    SELECT id FROM conveyor.jobs_unfinished
    WHERE state IN ('scheduled', 'retry') AND queue = ANY($1) AND run_at <= now()
    ORDER BY run_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
),
promoted AS (
    UPDATE conveyor.jobs_unfinished j SET state = 'pending'
    WHERE j.id = ANY(ARRAY(SELECT id FROM due))
    RETURNING j.id
)
SELECT (SELECT count(*) FROM promoted) AS promoted,
       (SELECT min((SELECT min(w.run_at) FROM conveyor.jobs_unfinished w
                    WHERE w.state IN ('scheduled', 'retry') AND w.queue = q.name
                      AND w.run_at > now()))
        FROM unnest($1::text[]) AS q(name)) AS next_run_at,
       now() AS db_now
