-- Serialises claims on a queue with a concurrency limit; returns the limit.
SELECT concurrency_limit FROM conveyor.queues
WHERE name = $1 AND concurrency_limit IS NOT NULL
FOR UPDATE
