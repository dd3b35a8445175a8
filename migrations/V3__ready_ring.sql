-- The ready ring: runnable jobs in claim order, kept apart from
-- conveyor.jobs so that a held snapshot cannot slow the claim down
-- (docs/storage.md, docs/decisions/2026-11-24-ready-ring.md).
--
-- Every job whose state is 'pending' has one row here (a few stale rows may
-- exist for moments: see below). Claims read this table's index from its
-- head, lock rows with SKIP LOCKED, delete them and update the jobs they
-- name. A deleted row leaves a dead index entry at the head of the claim
-- order; while another transaction holds the xmin horizon, VACUUM may not
-- remove it and every later claim would walk it. So rows are only ever
-- inserted and deleted, into slots that rotate with time: each slot takes the
-- inserts of one second (conveyor_internal.ready_slot()), then is sealed,
-- and once nearly drained its few remaining rows are carried into the current
-- slot and the slot is emptied with TRUNCATE, which frees its space at once,
-- whatever snapshots are held (conveyor_internal.rotate_ready()). A claim
-- therefore walks at most the dead entries of the slots not yet emptied.
--
-- Rows are written by triggers on conveyor.jobs, so every way a job becomes
-- pending (enqueue, COPY, a plain INSERT, promotion of a due scheduled or
-- retrying job, release, rescue, re-queue, an UPDATE by hand) adds its row,
-- and every way it stops being pending other than a claim (cancel, delete, an
-- UPDATE by hand) removes it. A row whose job is no longer pending (the
-- removal met a row a claim had locked) is deleted by the next claim that
-- reaches it, which then leaves the job alone.
CREATE TABLE conveyor.ready (
    slot     smallint    NOT NULL,
    queue    text        NOT NULL,
    priority integer     NOT NULL,
    run_at   timestamptz NOT NULL,
    job_id   uuid        NOT NULL,
    task     text        NOT NULL
) PARTITION BY LIST (slot);

COMMENT ON TABLE conveyor.ready IS
    'Runnable (pending) jobs in claim order, one row each, in slots that rotate every second and are emptied by TRUNCATE. Written by triggers on conveyor.jobs; read by claims.';
COMMENT ON COLUMN conveyor.ready.slot IS 'Ring slot (0-7): the second the row was inserted, modulo 8.';
COMMENT ON COLUMN conveyor.ready.queue IS 'The job''s queue (conveyor.jobs.queue).';
COMMENT ON COLUMN conveyor.ready.priority IS 'The job''s priority (conveyor.jobs.priority).';
COMMENT ON COLUMN conveyor.ready.run_at IS 'The job''s run_at (conveyor.jobs.run_at).';
COMMENT ON COLUMN conveyor.ready.job_id IS 'The job (conveyor.jobs.id).';
COMMENT ON COLUMN conveyor.ready.task IS 'The job''s task (conveyor.jobs.task): workers claim only tasks they have handlers for.';

CREATE TABLE conveyor.ready_0 PARTITION OF conveyor.ready FOR VALUES IN (0);
CREATE TABLE conveyor.ready_1 PARTITION OF conveyor.ready FOR VALUES IN (1);
CREATE TABLE conveyor.ready_2 PARTITION OF conveyor.ready FOR VALUES IN (2);
CREATE TABLE conveyor.ready_3 PARTITION OF conveyor.ready FOR VALUES IN (3);
CREATE TABLE conveyor.ready_4 PARTITION OF conveyor.ready FOR VALUES IN (4);
CREATE TABLE conveyor.ready_5 PARTITION OF conveyor.ready FOR VALUES IN (5);
CREATE TABLE conveyor.ready_6 PARTITION OF conveyor.ready FOR VALUES IN (6);
CREATE TABLE conveyor.ready_7 PARTITION OF conveyor.ready FOR VALUES IN (7);

COMMENT ON TABLE conveyor.ready_0 IS 'Slot 0 of conveyor.ready.';
COMMENT ON TABLE conveyor.ready_1 IS 'Slot 1 of conveyor.ready.';
COMMENT ON TABLE conveyor.ready_2 IS 'Slot 2 of conveyor.ready.';
COMMENT ON TABLE conveyor.ready_3 IS 'Slot 3 of conveyor.ready.';
COMMENT ON TABLE conveyor.ready_4 IS 'Slot 4 of conveyor.ready.';
COMMENT ON TABLE conveyor.ready_5 IS 'Slot 5 of conveyor.ready.';
COMMENT ON TABLE conveyor.ready_6 IS 'Slot 6 of conveyor.ready.';
COMMENT ON TABLE conveyor.ready_7 IS 'Slot 7 of conveyor.ready.';

-- The claim order within a queue (each slot has its copy; a claim merges
-- them). The claim filters on task from the row it locks anyway.
CREATE INDEX ready_claim_idx ON conveyor.ready (queue, priority DESC, run_at, job_id);

COMMENT ON INDEX conveyor.ready_claim_idx IS
    'Claims: runnable jobs of one queue, highest priority first, then oldest run_at.';

-- The claim no longer reads conveyor.jobs in claim order.
DROP INDEX conveyor.jobs_claim_idx;

-- Pending jobs: into the ring at once (one statement per inserting statement).
CREATE TRIGGER jobs_ready_insert
    AFTER INSERT ON conveyor.jobs
    REFERENCING NEW TABLE AS new_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION conveyor_internal.ready_insert();

-- A job that becomes pending, stops being pending (other than by a claim,
-- which takes its row itself), or changes a column of the claim order while
-- pending. Claims and outcomes never match the WHEN clause, so they pay for
-- its test only.
CREATE TRIGGER jobs_ready_update
    AFTER UPDATE OF state, queue, task, priority, run_at ON conveyor.jobs
    FOR EACH ROW
    WHEN ((OLD.state = 'pending' OR NEW.state = 'pending') AND NEW.state <> 'started'
          AND (OLD.state, OLD.queue, OLD.task, OLD.priority, OLD.run_at)
              IS DISTINCT FROM (NEW.state, NEW.queue, NEW.task, NEW.priority, NEW.run_at))
    EXECUTE FUNCTION conveyor_internal.ready_sync();

CREATE TRIGGER jobs_ready_delete
    AFTER DELETE ON conveyor.jobs
    FOR EACH ROW
    WHEN (OLD.state = 'pending')
    EXECUTE FUNCTION conveyor_internal.ready_sync();

-- Jobs pending before this migration.
INSERT INTO conveyor.ready (slot, queue, priority, run_at, job_id, task)
SELECT conveyor_internal.ready_slot(), queue, priority, run_at, id, task
FROM conveyor.jobs WHERE state = 'pending';
