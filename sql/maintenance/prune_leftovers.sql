-- Workflows finished more than $1 seconds ago whose jobs are all gone, and
-- expired unique keys.
WITH workflows AS (
    DELETE FROM conveyor.workflows w
    WHERE w.finished_at < now() - make_interval(secs => $1)
      AND NOT EXISTS (SELECT 1 FROM conveyor.jobs j WHERE j.workflow_id = w.id)
      AND NOT EXISTS (SELECT 1 FROM conveyor.workflows c WHERE c.parent_id = w.id)
    RETURNING 1
),
keys AS (
    DELETE FROM conveyor.unique_keys WHERE expires_at < now() RETURNING 1
)
SELECT (SELECT count(*) FROM workflows) + (SELECT count(*) FROM keys) AS deleted
