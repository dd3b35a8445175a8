-- Concurrency limits of the given queues (queues without one are absent).
SELECT name, concurrency_limit FROM conveyor.queues
WHERE name = ANY($1) AND concurrency_limit IS NOT NULL
