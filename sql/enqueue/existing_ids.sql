-- Which of these job ids are taken already: workflows choose their job ids up
-- front and must not reuse one; an insert that skipped an id checks that its
-- job is there.
SELECT id FROM conveyor.jobs WHERE id = ANY($1::uuid[])
