-- Dashboard: a page of top-level workflows (chains, groups and chords that
-- are not a chain's step), newest first (ids are UUIDv7), optionally of one
-- state ($1) and kind ($2); $3 pages: only ids below it; $4 rows.
-- workflows_list_idx (state, id) WHERE parent_id IS NULL serves a state;
-- without one, the primary key read backwards. first_task is the task of
-- the first job of the workflow (jobs_workflow_idx), for a name.
SELECT w.id, w.kind, w.state, w.total, w.succeeded, w.failed, w.error,
       w.created_at, w.finished_at,
       (SELECT j.task FROM conveyor.jobs j
        WHERE j.workflow_id = w.id AND j.workflow_index IS NOT NULL
        ORDER BY j.workflow_index LIMIT 1) AS first_task
FROM conveyor.workflows w
WHERE w.parent_id IS NULL
  AND ($1::text IS NULL OR w.state = $1)
  AND ($2::text IS NULL OR w.kind = $2)
  AND ($3::uuid IS NULL OR w.id < $3)
ORDER BY w.id DESC
LIMIT $4
