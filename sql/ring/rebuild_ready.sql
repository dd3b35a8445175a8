-- Puts the ready ring (conveyor.ready) back in step with conveyor.jobs: adds
-- the ring row of every pending job that has none, and removes ring rows
-- whose job is gone or no longer pending. Triggers keep the ring in step on
-- their own; run this after rows were written with triggers off (pg_restore
-- --disable-triggers, session_replication_role = replica, a logical
-- replication subscriber), which would otherwise leave pending jobs that no
-- worker ever claims. Reads the whole jobs table once. Safe while workers
-- run: a row it adds for a job being claimed at that moment is deleted by
-- the next claim that reaches it. Returns the rows added.
CREATE OR REPLACE FUNCTION conveyor.rebuild_ready() RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    added bigint;
BEGIN
    DELETE FROM conveyor.ready r
    WHERE (r.tableoid, r.ctid) IN (
        SELECT s.tableoid, s.ctid FROM conveyor.ready s
        WHERE NOT EXISTS (SELECT 1 FROM conveyor.jobs j
                          WHERE j.id = s.job_id AND j.state = 'pending')
        FOR UPDATE SKIP LOCKED);
    INSERT INTO conveyor.ready (slot, queue, priority, run_at, job_id, task)
    SELECT (SELECT conveyor_internal.ready_slot()), j.queue, j.priority, j.run_at, j.id, j.task
    FROM conveyor.jobs j
    WHERE j.state = 'pending'
      AND NOT EXISTS (SELECT 1 FROM conveyor.ready r WHERE r.job_id = j.id);
    GET DIAGNOSTICS added = ROW_COUNT;
    RETURN added;
END
$$;

COMMENT ON FUNCTION conveyor.rebuild_ready() IS
    'Re-syncs the ready ring with conveyor.jobs after rows were written with triggers off (pg_restore --disable-triggers, logical replication). Returns the ring rows added.';
