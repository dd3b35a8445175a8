SELECT id, kind, state, parent_id, total, succeeded, failed, result_job_id,
       error, failed_job_id, created_at, finished_at
FROM conveyor.workflows WHERE id = $1
