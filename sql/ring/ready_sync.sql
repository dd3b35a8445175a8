-- Trigger function of jobs_ready_update and jobs_ready_delete: keeps a job's
-- conveyor.ready row in step with it when it becomes pending (promotion,
-- release, rescue, re-queue, an UPDATE by hand), stops being pending other
-- than by a claim (cancel, delete, an UPDATE by hand), or changes a column of
-- the claim order while pending.
--
-- The old row is looked up by its claim-order key, written as the claim
-- index has it (`-(priority::bigint)`: matched by `priority` alone, the
-- index served only the queue, and every lookup read the queue's whole
-- backlog), and taken with SKIP LOCKED:
-- a claim that has it locked deletes it itself and then finds the job no
-- longer pending (it waits for this transaction's row lock on the job), so
-- neither waits for the other and no deadlock can form.
CREATE OR REPLACE FUNCTION conveyor_internal.ready_sync() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    r record;
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') AND OLD.state = 'pending' THEN
        FOR r IN
            SELECT tableoid::regclass AS slot_table, ctid FROM conveyor.ready
            WHERE queue = OLD.queue AND -(priority::bigint) = -(OLD.priority::bigint)
              AND run_at = OLD.run_at
              AND job_id = OLD.id
            FOR UPDATE SKIP LOCKED
        LOOP
            EXECUTE format('DELETE FROM %s WHERE ctid = $1', r.slot_table) USING r.ctid;
        END LOOP;
    END IF;
    IF TG_OP = 'UPDATE' AND NEW.state = 'pending' THEN
        INSERT INTO conveyor.ready (slot, queue, priority, run_at, job_id, task)
        VALUES (conveyor_internal.ready_slot(), NEW.queue, NEW.priority, NEW.run_at, NEW.id, NEW.task);
    END IF;
    RETURN NULL;
END
$$;

COMMENT ON FUNCTION conveyor_internal.ready_sync() IS
    'Internal. Row trigger on conveyor.jobs: adds, removes or replaces the job''s conveyor.ready row when it becomes pending, stops being pending other than by a claim, or changes a claim-order column.';
