-- Delete jobs by id, except running ones (cancel those first).
DELETE FROM conveyor.jobs WHERE id = ANY($1) AND state <> 'started'
