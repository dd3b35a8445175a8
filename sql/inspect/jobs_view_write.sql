-- INSTEAD OF trigger of the view conveyor.jobs: INSERT,
-- UPDATE and DELETE on it act on the stored rows (conveyor.job_rows), so
-- hand-written SQL keeps working as it did on the table. An UPDATE or DELETE
-- first settles the job's claim (conveyor_internal.settle_claims), so the
-- stored row is the row the statement saw, then writes it by id and state.
-- A job whose state changed between the statement's read and the settling
-- (it started, or finished) is left alone and not counted, as a row that no
-- longer matched.
CREATE OR REPLACE FUNCTION conveyor_internal.jobs_view_write() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    -- A runnable job's token must be below every claim still to come (a
    -- claim holds a job pending on disk only with a higher token): a token
    -- written by hand above the sequence's is replaced by a fresh one.
    IF TG_OP IN ('INSERT', 'UPDATE') AND NEW.state IN ('scheduled', 'pending', 'retry')
       AND NEW.lease_token > (SELECT last_value FROM conveyor.lease_tokens) THEN
        NEW.lease_token := nextval('conveyor.lease_tokens');
    END IF;
    IF TG_OP = 'INSERT' THEN
        INSERT INTO conveyor.job_rows SELECT NEW.*;
        RETURN NEW;
    END IF;
    PERFORM conveyor_internal.settle_claims(ARRAY[OLD.id]);
    IF TG_OP = 'UPDATE' THEN
        UPDATE conveyor.job_rows SET
            (id, queue, task, args, headers, state, priority, run_at, attempt, max_retries,
             retry_backoff_base, retry_backoff, timeout, lease_expires_at, worker_id, result,
             last_error, errors, created_at, started_at, finished_at, workflow_id,
             workflow_index, on_success, on_error, cancel_requested_at, unique_key,
             unique_until, lease_token)
          = (NEW.id, NEW.queue, NEW.task, NEW.args, NEW.headers, NEW.state, NEW.priority,
             NEW.run_at, NEW.attempt, NEW.max_retries, NEW.retry_backoff_base,
             NEW.retry_backoff, NEW.timeout, NEW.lease_expires_at, NEW.worker_id, NEW.result,
             NEW.last_error, NEW.errors, NEW.created_at, NEW.started_at, NEW.finished_at,
             NEW.workflow_id, NEW.workflow_index, NEW.on_success, NEW.on_error,
             NEW.cancel_requested_at, NEW.unique_key, NEW.unique_until, NEW.lease_token)
        WHERE id = OLD.id AND state = OLD.state
          AND (finished_at = OLD.finished_at OR (finished_at IS NULL AND OLD.finished_at IS NULL));
        IF NOT FOUND THEN
            RETURN NULL;
        END IF;
        RETURN NEW;
    END IF;
    DELETE FROM conveyor.job_rows
    WHERE id = OLD.id AND state = OLD.state
      AND (finished_at = OLD.finished_at OR (finished_at IS NULL AND OLD.finished_at IS NULL));
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    RETURN OLD;
END
$$;

COMMENT ON FUNCTION conveyor_internal.jobs_view_write() IS
    'Internal. INSTEAD OF trigger of the view conveyor.jobs: writes the stored rows (conveyor.job_rows), settling the job''s claim first.';
