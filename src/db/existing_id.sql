-- One of these job ids that is taken already, if any (workflows choose their
-- job ids up front and must not reuse one).
SELECT id FROM conveyor.jobs WHERE id = ANY($1::uuid[]) LIMIT 1
