-- Materialise a workflow spec built by src/workflow (migrations/functions/spawn.sql).
SELECT conveyor_internal.spawn($1::jsonb, NULL)
