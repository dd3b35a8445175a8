SELECT {job_columns} FROM conveyor.jobs j WHERE j.id = $1
