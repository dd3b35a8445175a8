-- Dashboard: a workflow ($1) and the workflows nested in it (a chain's
-- chord steps), oldest first: the primary key and workflows_parent_idx.
SELECT w.id, w.kind, w.state, w.parent_id, w.total, w.succeeded, w.failed,
       w.result_job_id, w.error, w.failed_job_id, w.created_at, w.finished_at,
       w.on_complete, w.on_error
FROM conveyor.workflows w
WHERE w.id = $1 OR w.parent_id = $1
ORDER BY w.created_at, w.id
