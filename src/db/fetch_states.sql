-- The states of existing jobs, by id (what an insert that found them taken
-- returns to its caller).
SELECT id, state FROM conveyor.jobs WHERE id = ANY($1::uuid[])
