-- Conveyor schema, version 11: a comment on every table, column and
-- function, so `\d+` and `\df+` in psql explain the schema (checked by
-- tests/integration/migrate.rs).

COMMENT ON COLUMN conveyor.workflows.id IS
    'The workflow''s id: a chain, group or chord enqueued together; members carry it in conveyor.jobs.workflow_id.';
COMMENT ON COLUMN conveyor.workflows.created_at IS 'When the workflow was enqueued.';
COMMENT ON COLUMN conveyor.workflows.finished_at IS
    'When the workflow reached succeeded or failed; NULL while running.';

COMMENT ON COLUMN conveyor.unique_keys.key IS
    'The uniqueness key: given with .unique().key(...), or conveyor.unique_key(queue, task, args).';
COMMENT ON COLUMN conveyor.unique_keys.job_id IS 'The job that holds the key.';
COMMENT ON COLUMN conveyor.unique_keys.expires_at IS
    'The key is free again from this time on (enqueue time plus the TTL).';

COMMENT ON COLUMN conveyor.queues.name IS 'The queue''s name, as in conveyor.jobs.queue.';
COMMENT ON COLUMN conveyor.queues.updated_at IS 'When a setting of this queue last changed.';

COMMENT ON COLUMN conveyor.periodic.name IS 'The schedule''s name, as registered with Periodic on the worker.';
COMMENT ON COLUMN conveyor.periodic.last_slot IS
    'The latest slot of the schedule whose job was enqueued; a new leader enqueues from the next one.';
COMMENT ON COLUMN conveyor.periodic.updated_at IS 'When last_slot last moved.';

COMMENT ON FUNCTION conveyor.notify_job_ready() IS
    'Internal. Statement trigger on inserts into conveyor.jobs: NOTIFY <schema>.job_ready once per queue at commit, so idle workers wake; skipped when the transaction set conveyor.defer_notify (the library then notifies after its commit).';
COMMENT ON FUNCTION conveyor.failure_args(text, uuid, text, jsonb) IS
    'Internal. The arguments an error callback receives: the failed job''s error, id, task and own arguments.';
COMMENT ON FUNCTION conveyor.spawn(jsonb, jsonb) IS
    'Internal. Enqueues one follow-up spec (a job or a workflow) with the result of the job that finished as input.';
COMMENT ON FUNCTION conveyor.spawn_jobs(jsonb, jsonb) IS
    'Internal. Inserts an array of job specs (follow-ups and workflow members); a spec whose id or unique key exists is skipped.';
COMMENT ON FUNCTION conveyor.workflow_succeeded(uuid) IS
    'Internal. Marks a workflow succeeded (once) and counts it as a step of its enclosing workflow, which succeeds with it when this was its last step.';
COMMENT ON FUNCTION conveyor.workflow_failed(uuid, text, uuid, text) IS
    'Internal. Marks a workflow failed (once) with the failing member''s error, enqueues its error callbacks and fails the workflows that enclose it.';
COMMENT ON FUNCTION conveyor.unique_key(text, text, jsonb) IS
    'The default uniqueness key of a job: a SHA-256 of queue, task and arguments (hex).';
COMMENT ON FUNCTION conveyor.pause_queue(text) IS
    'Pauses a queue: no worker claims from it until conveyor.resume_queue; running jobs finish.';
COMMENT ON FUNCTION conveyor.resume_queue(text) IS 'Resumes a paused queue.';
COMMENT ON FUNCTION conveyor.set_queue_limit(text, integer) IS
    'Sets (or with NULL removes) the global concurrency limit of a queue: at most this many of its jobs started at once.';
COMMENT ON FUNCTION conveyor.set_queue_rate_limit(text, integer, interval) IS
    'Sets (or with NULLs removes) the rate limit of a queue: at most rate_limit job starts per rate_period, across all workers.';
