-- A job's state by id, wherever it is.
SELECT state FROM conveyor.jobs WHERE id = $1
