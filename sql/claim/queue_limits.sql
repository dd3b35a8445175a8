-- Which of the given queues have a concurrency or rate limit.
SELECT name FROM conveyor.queues
WHERE name = ANY($1) AND (concurrency_limit IS NOT NULL OR rate_limit IS NOT NULL)
