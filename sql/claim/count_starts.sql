-- Counts jobs just started against the queue's rate window.
UPDATE conveyor.queues SET window_count = window_count + $2
WHERE name = $1 AND rate_limit IS NOT NULL
