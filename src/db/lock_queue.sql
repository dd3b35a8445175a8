-- Serialises claims on a queue with a concurrency or rate limit: locks its
-- row, starts a new rate window if the current one is over, and returns the
-- limits (room left in the rate window, and when that window ends).
UPDATE conveyor.queues
SET window_start = CASE WHEN rate_period IS NOT NULL
                         AND (window_start IS NULL OR window_start + rate_period <= now())
                        THEN now() ELSE window_start END,
    window_count = CASE WHEN rate_period IS NOT NULL
                         AND (window_start IS NULL OR window_start + rate_period <= now())
                        THEN 0 ELSE window_count END
WHERE name = $1 AND (concurrency_limit IS NOT NULL OR rate_limit IS NOT NULL)
RETURNING concurrency_limit,
          rate_limit - window_count AS rate_room,
          window_start + rate_period AS window_end
