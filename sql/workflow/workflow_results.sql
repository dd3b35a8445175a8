-- Results of a group's or chord's members, in member order.
SELECT coalesce(result, 'null'::jsonb) AS result
FROM conveyor.jobs
WHERE workflow_id = $1 AND workflow_index IS NOT NULL
ORDER BY workflow_index
