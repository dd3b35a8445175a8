-- One job by id, wherever it is: reads the id index of every partition.
SELECT {job_columns} FROM conveyor.jobs j WHERE j.id = $1
