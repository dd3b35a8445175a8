-- Materialise a workflow spec built by src/workflow (sql/workflow/spawn.sql).
SELECT conveyor_internal.spawn($1::jsonb, NULL)
