SELECT state FROM conveyor.jobs WHERE id = $1
