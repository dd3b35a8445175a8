-- Conveyor schema, version 10: guarantees that hold against stale workers
-- and hand-written rows.
--
-- 1. Fencing tokens. Outcomes, heartbeats and releases were fenced on
--    (id, attempt), but re-queue resets the attempt and release decrements
--    it, so a stale worker's late result could land on a newer run. Every
--    claim statement now takes a fresh value from the sequence
--    conveyor.lease_tokens into jobs.lease_token of the jobs it claims, and
--    those writes must present (id, lease_token). Nothing ever resets the
--    sequence, and a statement claims a job at most once, so a job never
--    sees the same token twice.
--    Workers of an older version cannot claim once this is applied (their
--    claim leaves lease_token NULL): upgrade them together.
-- 2. Timestamps a reader can represent. PostgreSQL accepts 'infinity' and
--    years up to 294276; Rust's chrono (and JSON's RFC 3339) do not, and one
--    such row used to stop a worker. Every timestamp column a reader decodes
--    now holds a finite time from year 1 to year 9999 (cancel_requested_at
--    and unique_until are only ever tested for NULL); rows already outside
--    are clamped.
-- 3. Follow-ups that cannot fail an outcome. conveyor.after_finish() no
--    longer raises when one job's follow-up work (a hand-written or invalid
--    callback spec, say) cannot be enqueued: that job alone ends `failure`
--    with the reason, and every other job's outcome and follow-ups are kept.

CREATE SEQUENCE conveyor.lease_tokens AS bigint;

COMMENT ON SEQUENCE conveyor.lease_tokens IS
    'Fencing tokens: each claim statement takes the next value for the jobs it claims (jobs.lease_token); never reset.';

ALTER TABLE conveyor.jobs ADD COLUMN lease_token bigint;

COMMENT ON COLUMN conveyor.jobs.lease_token IS
    'Fencing token of the latest claim (conveyor.lease_tokens; shared by the jobs one claim statement took): outcome, lease renewal and release must present (id, lease_token). Kept after that claim''s worker records the outcome; NULL before any claim and after a claim ended without its worker (rescue, release).';

UPDATE conveyor.jobs SET lease_token = nextval('conveyor.lease_tokens') WHERE state = 'started';

ALTER TABLE conveyor.jobs ADD CONSTRAINT jobs_lease_token_check
    CHECK (state <> 'started' OR lease_token IS NOT NULL);

-- Clamp what is out of range (NULLs stay NULL), then forbid it.
UPDATE conveyor.jobs SET
    run_at = least(greatest(run_at, '0001-01-01 00:00:00+00'), '9999-12-31 23:59:59+00'),
    created_at = least(greatest(created_at, '0001-01-01 00:00:00+00'), '9999-12-31 23:59:59+00'),
    started_at = least(greatest(started_at, '0001-01-01 00:00:00+00'), '9999-12-31 23:59:59+00'),
    finished_at = least(greatest(finished_at, '0001-01-01 00:00:00+00'), '9999-12-31 23:59:59+00'),
    lease_expires_at = least(greatest(lease_expires_at, '0001-01-01 00:00:00+00'), '9999-12-31 23:59:59+00')
WHERE NOT (run_at >= '0001-01-01 00:00:00+00' AND run_at < '10000-01-01 00:00:00+00'
       AND created_at >= '0001-01-01 00:00:00+00' AND created_at < '10000-01-01 00:00:00+00'
       AND coalesce(started_at >= '0001-01-01 00:00:00+00' AND started_at < '10000-01-01 00:00:00+00', true)
       AND coalesce(finished_at >= '0001-01-01 00:00:00+00' AND finished_at < '10000-01-01 00:00:00+00', true)
       AND coalesce(lease_expires_at >= '0001-01-01 00:00:00+00' AND lease_expires_at < '10000-01-01 00:00:00+00', true));

-- least() and greatest() skip NULLs; an all-NULL list gives NULL, which a
-- CHECK accepts. (Two comparisons in all: a comparison per column bound
-- cost 6 % of insert throughput, this 3 %; docs/benchmarks.md.)
ALTER TABLE conveyor.jobs ADD CONSTRAINT jobs_timestamps_check CHECK (
    least(run_at, created_at, started_at, finished_at, lease_expires_at)
        >= '0001-01-01 00:00:00+00'
    AND greatest(run_at, created_at, started_at, finished_at, lease_expires_at)
        < '10000-01-01 00:00:00+00');

UPDATE conveyor.workflows SET
    created_at = least(greatest(created_at, '0001-01-01 00:00:00+00'), '9999-12-31 23:59:59+00'),
    finished_at = least(greatest(finished_at, '0001-01-01 00:00:00+00'), '9999-12-31 23:59:59+00')
WHERE NOT (created_at >= '0001-01-01 00:00:00+00' AND created_at < '10000-01-01 00:00:00+00'
       AND coalesce(finished_at >= '0001-01-01 00:00:00+00' AND finished_at < '10000-01-01 00:00:00+00', true));

ALTER TABLE conveyor.workflows ADD CONSTRAINT workflows_timestamps_check CHECK (
    created_at >= '0001-01-01 00:00:00+00' AND created_at < '10000-01-01 00:00:00+00'
    AND finished_at >= '0001-01-01 00:00:00+00' AND finished_at < '10000-01-01 00:00:00+00');

UPDATE conveyor.queues SET
    paused_at = least(greatest(paused_at, '0001-01-01 00:00:00+00'), '9999-12-31 23:59:59+00'),
    updated_at = least(greatest(updated_at, '0001-01-01 00:00:00+00'), '9999-12-31 23:59:59+00'),
    window_start = NULL,
    rate_period = least(rate_period, interval '100 years')
WHERE NOT (updated_at >= '0001-01-01 00:00:00+00' AND updated_at < '10000-01-01 00:00:00+00'
       AND coalesce(paused_at >= '0001-01-01 00:00:00+00' AND paused_at < '10000-01-01 00:00:00+00', true)
       AND coalesce(window_start >= '0001-01-01 00:00:00+00' AND window_start < '9900-01-01 00:00:00+00', true)
       AND coalesce(rate_period <= interval '100 years', true));

-- The rate window's end (window_start + rate_period) must be representable too.
ALTER TABLE conveyor.queues ADD CONSTRAINT queues_timestamps_check CHECK (
    updated_at >= '0001-01-01 00:00:00+00' AND updated_at < '10000-01-01 00:00:00+00'
    AND paused_at >= '0001-01-01 00:00:00+00' AND paused_at < '10000-01-01 00:00:00+00'
    AND window_start >= '0001-01-01 00:00:00+00' AND window_start < '9900-01-01 00:00:00+00'
    AND rate_period <= interval '100 years');

UPDATE conveyor.periodic SET
    last_slot = least(greatest(last_slot, '0001-01-01 00:00:00+00'), '9999-12-31 23:59:59+00'),
    updated_at = least(greatest(updated_at, '0001-01-01 00:00:00+00'), '9999-12-31 23:59:59+00')
WHERE NOT (last_slot >= '0001-01-01 00:00:00+00' AND last_slot < '10000-01-01 00:00:00+00'
       AND updated_at >= '0001-01-01 00:00:00+00' AND updated_at < '10000-01-01 00:00:00+00');

ALTER TABLE conveyor.periodic ADD CONSTRAINT periodic_timestamps_check CHECK (
    last_slot >= '0001-01-01 00:00:00+00' AND last_slot < '10000-01-01 00:00:00+00'
    AND updated_at >= '0001-01-01 00:00:00+00' AND updated_at < '10000-01-01 00:00:00+00');

-- The follow-up work of finished jobs, all or nothing: V9's after_finish
-- under a name of its own. Raises if any job's follow-up cannot be enqueued.
ALTER FUNCTION conveyor.after_finish(uuid[]) RENAME TO run_follow_ups;

COMMENT ON FUNCTION conveyor.run_follow_ups(uuid[]) IS
    'Internal: follow-ups and workflow counters of finished jobs, all or nothing (see conveyor.after_finish).';

-- Follow-ups of jobs that just finished, called in the transaction that
-- recorded their outcomes. Never raises for one job's sake: if the batch
-- fails, each job is tried alone (a subtransaction each). A job whose
-- follow-up work cannot be enqueued is recorded as failed with the reason
-- (a success becomes `failure`; its error callbacks and workflow then run
-- as for any failure). If even that fails, the reason is appended to its
-- last_error and its workflows are marked failed without their callbacks.
CREATE FUNCTION conveyor.after_finish(finished uuid[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    job uuid;
    why text;
    again text;
    was text;
BEGIN
    BEGIN
        PERFORM conveyor.run_follow_ups(finished);
        RETURN;
    EXCEPTION WHEN OTHERS THEN
        -- Everything the batch did is undone; go job by job below.
        NULL;
    END;
    FOREACH job IN ARRAY finished LOOP
        BEGIN
            PERFORM conveyor.run_follow_ups(ARRAY[job]);
            CONTINUE;
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS why = MESSAGE_TEXT;
        END;
        why := 'follow-up work could not be enqueued: ' || why;
        SELECT state INTO was FROM conveyor.jobs WHERE id = job;
        UPDATE conveyor.jobs j
        SET state = CASE WHEN j.state = 'success' THEN 'failure' ELSE j.state END,
            last_error = why,
            errors = j.errors || jsonb_build_array(jsonb_build_object(
                'attempt', j.attempt, 'at', now(), 'error', why, 'worker_id', NULL))
        WHERE j.id = job;
        IF was = 'success' THEN
            -- Now a failure: its error callbacks and workflow may still work.
            BEGIN
                PERFORM conveyor.run_follow_ups(ARRAY[job]);
                CONTINUE;
            EXCEPTION WHEN OTHERS THEN
                GET STACKED DIAGNOSTICS again = MESSAGE_TEXT;
                why := why || '; error callbacks could not be enqueued either: ' || again;
            END;
        END IF;
        UPDATE conveyor.jobs SET last_error = why WHERE id = job;
        -- No callback can run; still, no workflow waits forever for this job.
        WITH RECURSIVE enclosing AS (
            SELECT workflow_id AS id FROM conveyor.jobs WHERE id = job AND workflow_id IS NOT NULL
            UNION
            SELECT w.parent_id FROM conveyor.workflows w JOIN enclosing e ON w.id = e.id
            WHERE w.parent_id IS NOT NULL
        )
        UPDATE conveyor.workflows
        SET state = 'failure', finished_at = now(), error = why, failed_job_id = job
        WHERE id IN (SELECT id FROM enclosing) AND state = 'running';
    END LOOP;
END
$$;

COMMENT ON FUNCTION conveyor.after_finish(uuid[]) IS
    'Enqueues follow-ups (next steps, callbacks, chord callbacks) and updates workflow counters for jobs that just finished; a job whose follow-ups cannot be enqueued fails alone.';
