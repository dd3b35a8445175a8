-- Dashboard: every periodic schedule the database knows (conveyor.periodic,
-- one row per schedule: a few), with the state of the job enqueued for its
-- last slot (primary key; NULL once pruned).
SELECT p.name, p.schedule, p.task, p.queue, p.missed, p.last_slot, p.last_job_id,
       j.state AS last_job_state, p.next_slot, p.on_leader, p.updated_at
FROM conveyor.periodic p
LEFT JOIN conveyor.jobs j ON j.id = p.last_job_id
ORDER BY p.name
