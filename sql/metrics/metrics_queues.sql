-- Per queue, for the metrics' gauges: unfinished jobs by state, counted
-- exactly up to a cap, and the age of the oldest pending job (exact), for
-- every queue with unfinished jobs or settings (paused or not). Bounded
-- whatever the backlog (docs/decisions/2026-11-25-bounded-gauges.md): no
-- part of it reads more than a fixed number of rows per queue.
--
-- $1 = cap: rows counted at most per queue and group (waiting = scheduled
-- and retry, which share jobs_waiting_idx; started; pending); $2 = budget:
-- rows counted at most over all queues, so the cap per group is
-- least($1, $2 / (3 × queues)), and at least 1 (a queue with jobs is never
-- reported as having none). A group whose count reached the cap is flagged
-- (*_capped) and the caller estimates it (metrics_sample.sql).
--
-- Queues are found by loose index scans (one index probe per queue and
-- index, never a scan of the jobs): jobs_waiting_idx for scheduled and
-- retry, jobs_running_idx for started, and the ready ring's claim index for
-- pending (conveyor.ready holds one row per pending job), whose scan also
-- yields each queue's distinct priorities (`keys`). The oldest pending job of
-- a queue is the oldest of each priority's first ring row in claim order
-- (-priority, run_at): one probe per queue and priority.
--
-- Ring rows are joined to their job and counted only if the job is pending
-- in that queue (a stale ring row, which a claim removes later, is not a
-- pending job), and distinct (a row a rolled-back claim left beside its
-- replacement counts once).
--
-- Every lateral count orders by its index's order, so the planner walks the
-- index and stops at the cap rather than reading the queue's whole range
-- (a bitmap scan would). Run with jit off (metrics.rs): the planner, with no
-- statistics, estimates costs high enough to compile it, which takes longer
-- than running it.
WITH RECURSIVE
waiting AS (
    SELECT (SELECT j.queue FROM conveyor.jobs_unfinished j
            WHERE j.state IN ('scheduled', 'retry') ORDER BY j.queue LIMIT 1) AS queue
    UNION ALL
    SELECT (SELECT j.queue FROM conveyor.jobs_unfinished j
            WHERE j.state IN ('scheduled', 'retry') AND j.queue > w.queue
            ORDER BY j.queue LIMIT 1)
    FROM waiting w WHERE w.queue IS NOT NULL
),
running AS (
    SELECT (SELECT j.queue FROM conveyor.jobs_unfinished j
            WHERE j.state = 'started' ORDER BY j.queue LIMIT 1) AS queue
    UNION ALL
    SELECT (SELECT j.queue FROM conveyor.jobs_unfinished j
            WHERE j.state = 'started' AND j.queue > w.queue ORDER BY j.queue LIMIT 1)
    FROM running w WHERE w.queue IS NOT NULL
),
keys AS (
    SELECT k.queue, k.key FROM (
        SELECT r.queue, -(r.priority::bigint) AS key FROM conveyor.ready r
        ORDER BY r.queue, -(r.priority::bigint) LIMIT 1) AS k
    UNION ALL
    SELECT n.queue, n.key FROM keys w, LATERAL (
        SELECT r.queue, -(r.priority::bigint) AS key FROM conveyor.ready r
        WHERE (r.queue, -(r.priority::bigint)) > (w.queue, w.key)
        ORDER BY r.queue, -(r.priority::bigint) LIMIT 1) AS n
),
names AS (
    SELECT queue FROM waiting WHERE queue IS NOT NULL
    UNION SELECT queue FROM running WHERE queue IS NOT NULL
    -- Jobs held in their claim's row (conveyor.claims).
    UNION SELECT queue FROM conveyor.claims WHERE jobs_left > 0
    UNION SELECT queue FROM keys
    UNION SELECT name FROM conveyor.queues
),
cap AS (
    SELECT greatest(1, least($1::bigint, $2::bigint / greatest(1, 3 * count(*))))::bigint AS n
    FROM names
)
SELECT q.queue,
       w.scheduled, p.pending, s.started, w.retry,
       w.seen >= cap.n AS waiting_capped,
       p.seen >= cap.n AS pending_capped,
       s.started >= cap.n AS started_capped,
       coalesce(greatest(extract(epoch FROM now() - o.run_at), 0), 0)::float8
           AS oldest_pending_secs,
       coalesce(qs.paused_at IS NOT NULL, false) AS paused
FROM names q
CROSS JOIN cap
LEFT JOIN conveyor.queues qs ON qs.name = q.queue
CROSS JOIN LATERAL (
    SELECT count(*) FILTER (WHERE x.state = 'scheduled') AS scheduled,
           count(*) FILTER (WHERE x.state = 'retry') AS retry,
           count(*) AS seen
    FROM (SELECT j.state FROM conveyor.jobs_unfinished j
          WHERE j.queue = q.queue AND j.state IN ('scheduled', 'retry')
          ORDER BY j.run_at
          LIMIT (SELECT n FROM cap)) AS x
) AS w
CROSS JOIN LATERAL (
    SELECT least((SELECT n FROM cap), count(*)
                 + (SELECT coalesce(sum(c.jobs_left), 0) FROM conveyor.claims c
                    WHERE c.queue = q.queue)) AS started
    FROM (SELECT FROM conveyor.jobs_unfinished j
          WHERE j.queue = q.queue AND j.state = 'started'
          LIMIT (SELECT n FROM cap)) AS x
) AS s
CROSS JOIN LATERAL (
    SELECT count(DISTINCT x.job_id) FILTER (WHERE x.pending) AS pending, count(*) AS seen
    FROM (SELECT r.job_id,
                 EXISTS (SELECT FROM conveyor.jobs_unfinished j
                         WHERE j.id = r.job_id AND j.state = 'pending' AND j.queue = r.queue)
                     AS pending
          FROM conveyor.ready r
          WHERE r.queue = q.queue
          ORDER BY -(r.priority::bigint), r.run_at, r.job_id
          LIMIT (SELECT n FROM cap)) AS x
) AS p
CROSS JOIN LATERAL (
    SELECT min(f.run_at) AS run_at FROM keys k, LATERAL (
        SELECT j.run_at FROM conveyor.ready r
        JOIN conveyor.jobs_unfinished j
          ON j.id = r.job_id AND j.state = 'pending' AND j.queue = r.queue
        WHERE r.queue = k.queue AND -(r.priority::bigint) = k.key
        ORDER BY r.run_at, r.job_id
        LIMIT 1) AS f
    WHERE k.queue = q.queue
) AS o
ORDER BY 1
