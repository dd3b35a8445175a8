-- Delete one job by id unless it is running: what delete_jobs.sql left to
-- its caller because another transaction held the row. Waits for that
-- transaction, but holds no other job row meanwhile, so it cannot be part
-- of a deadlock cycle; the fence is checked again on the row as it is then
-- (a job claimed meanwhile is running: not deleted).
DELETE FROM conveyor.jobs WHERE id = $1 AND state <> 'started'
