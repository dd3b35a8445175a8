-- A clean stop: the worker's row goes.
DELETE FROM conveyor.workers WHERE id = $1
