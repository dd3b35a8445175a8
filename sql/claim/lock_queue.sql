-- Serialises claims on a queue with a concurrency or rate limit: locks its
-- row, starts a new rate window if the current one is over, and returns the
-- limits (room left in the rate window, and when that window ends).
--
-- The row is locked with FOR UPDATE and written only when a rate window
-- starts. Written at every claim (as it was, even for a queue with only a
-- concurrency limit), it got a new version per claim, which vacuum may not
-- remove while another session holds a snapshot: the row's chain grew with
-- the hold and every lock, pause check and read of the row walked it
-- (bench S with a limited queue: pickup p99 past 100 ms within minutes).
-- A lock alone marks the row in place. (A rate-limited queue still counts
-- each claim's starts in its row: count_starts.sql.)
WITH q AS (
    SELECT name, concurrency_limit, rate_limit, rate_period, window_start, window_count,
           rate_period IS NOT NULL
               AND (window_start IS NULL OR window_start + rate_period <= now()) AS new_window
    FROM conveyor.queues
    WHERE name = $1 AND (concurrency_limit IS NOT NULL OR rate_limit IS NOT NULL)
    FOR UPDATE
),
started AS (
    UPDATE conveyor.queues u SET window_start = now(), window_count = 0
    FROM q
    WHERE u.name = q.name AND q.new_window
    RETURNING u.name
)
SELECT q.concurrency_limit,
       q.rate_limit - CASE WHEN q.new_window THEN 0 ELSE q.window_count END AS rate_room,
       CASE WHEN q.new_window THEN now() ELSE q.window_start END + q.rate_period AS window_end
FROM q
