-- Unfinished jobs of a task whose args contain $2 (jsonb @>), oldest first:
-- what a test asks "was this enqueued?" (also inside an open transaction).
SELECT {job_columns} FROM conveyor.jobs j
WHERE j.task = $1 AND j.args @> $2
  AND j.state IN ('scheduled', 'pending', 'started', 'retry')
ORDER BY j.id
