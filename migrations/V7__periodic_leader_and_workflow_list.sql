-- What the dashboard shows of periodic schedules and workflows
-- (docs/decisions/2026-11-24-dashboard-pages.md).
--
-- Periodic schedules are registered in code, on every worker process, and
-- one process at a time leads (a session advisory lock) and enqueues them.
-- The database knew only each schedule's last slot. Now the process that
-- takes the lead writes, once, who it is (conveyor.periodic_leader) and the
-- schedules it runs (conveyor.periodic: schedule text, task, queue, next
-- slot; on_leader = false for rows it does not have), and each slot it
-- enqueues also moves next_slot and last_job_id. Followers write nothing.
-- Whether the leader still leads is read from pg_locks (its backend still
-- holds the lock), so no beat is needed.

ALTER TABLE conveyor.periodic ALTER COLUMN last_slot DROP NOT NULL;
ALTER TABLE conveyor.periodic ADD COLUMN last_job_id uuid;
ALTER TABLE conveyor.periodic ADD COLUMN next_slot timestamptz;
ALTER TABLE conveyor.periodic ADD COLUMN schedule text;
ALTER TABLE conveyor.periodic ADD COLUMN task text;
ALTER TABLE conveyor.periodic ADD COLUMN queue text;
ALTER TABLE conveyor.periodic ADD COLUMN missed text;
ALTER TABLE conveyor.periodic ADD COLUMN on_leader boolean NOT NULL DEFAULT false;
ALTER TABLE conveyor.periodic ADD CONSTRAINT periodic_next_slot_check CHECK (
    next_slot >= '0001-01-01 00:00:00+00' AND next_slot < '10000-01-01 00:00:00+00');
ALTER TABLE conveyor.periodic ADD CONSTRAINT periodic_missed_check CHECK (
    missed IN ('skip', 'enqueue_once'));

COMMENT ON COLUMN conveyor.periodic.last_slot IS
    'The latest slot of the schedule whose job was enqueued; a new leader enqueues from the next one. NULL: none yet.';
COMMENT ON COLUMN conveyor.periodic.updated_at IS 'When the row last changed (a slot enqueued, a leader took over).';
COMMENT ON COLUMN conveyor.periodic.last_job_id IS 'The job enqueued for last_slot (it may have been pruned since).';
COMMENT ON COLUMN conveyor.periodic.next_slot IS 'The next slot the leader will enqueue, as of its latest write.';
COMMENT ON COLUMN conveyor.periodic.schedule IS 'The schedule, as the leader describes it: "every 30s", or a cron expression and its time zone.';
COMMENT ON COLUMN conveyor.periodic.task IS 'Task of the job each slot enqueues.';
COMMENT ON COLUMN conveyor.periodic.queue IS 'Queue of the job each slot enqueues.';
COMMENT ON COLUMN conveyor.periodic.missed IS 'What a new leader does with slots missed while none led: skip | enqueue_once.';
COMMENT ON COLUMN conveyor.periodic.on_leader IS
    'Whether the process that last took the lead registered this schedule; a schedule it lacks is not enqueued.';

-- One row: the process that last took the periodic scheduler's lead. It
-- leads while its session (backend_pid) holds the advisory lock.
CREATE TABLE conveyor.periodic_leader (
    one         boolean     NOT NULL DEFAULT true,
    host        text        NOT NULL,
    pid         integer     NOT NULL,
    version     text        NOT NULL,
    backend_pid integer     NOT NULL,
    since       timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT periodic_leader_pkey PRIMARY KEY (one),
    CONSTRAINT periodic_leader_one_check CHECK (one),
    CONSTRAINT periodic_leader_timestamps_check CHECK (
        since >= '0001-01-01 00:00:00+00' AND since < '10000-01-01 00:00:00+00')
);

COMMENT ON TABLE conveyor.periodic_leader IS
    'The process that last took the lead of the periodic scheduler (one row); it leads while backend_pid holds the advisory lock.';
COMMENT ON COLUMN conveyor.periodic_leader.one IS 'Always true: there is one row.';
COMMENT ON COLUMN conveyor.periodic_leader.host IS 'Host name of the leading process (conveyor.workers.host).';
COMMENT ON COLUMN conveyor.periodic_leader.pid IS 'Process id of the leading process on that host (conveyor.workers.pid).';
COMMENT ON COLUMN conveyor.periodic_leader.version IS 'Conveyor version it runs.';
COMMENT ON COLUMN conveyor.periodic_leader.backend_pid IS
    'The PostgreSQL backend of its leadership session (pg_locks.pid while it holds the lock).';
COMMENT ON COLUMN conveyor.periodic_leader.since IS 'When it took the lead.';

-- The dashboard's workflow list: top-level workflows of one state, newest
-- first (ids are UUIDv7). Written when a workflow is created and when it
-- finishes; counter updates leave it alone.
CREATE INDEX workflows_list_idx ON conveyor.workflows (state, id) WHERE parent_id IS NULL;

COMMENT ON INDEX conveyor.workflows_list_idx IS
    'Dashboard: top-level workflows of one state, newest first.';
