-- Materialise a workflow spec built by src/workflow (see migrations/V2__workflows.sql).
SELECT conveyor.spawn($1::jsonb, NULL)
