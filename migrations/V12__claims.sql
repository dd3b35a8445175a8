-- A claim that leaves the job row alone (issue 16;
-- docs/decisions/2026-11-25-batch-claims.md).
--
-- Until now a claim rewrote every job it took (state, attempt, token, lease,
-- worker, started_at: a new version of a wide row and its index entries).
-- From here on a claim statement writes one row, in conveyor.claims, listing
-- the jobs it took under its fencing token; the jobs' rows stay as they were
-- enqueued ('pending' on disk). A job is started when
--   * its row says 'started' (a lease of its own, as before: rows started
--     before this migration, and jobs "settled" since, see below), or
--   * its row says 'pending' and a claim lists it whose token is above the
--     job row's lease_token (the token it was last made runnable with: every
--     write that makes a job runnable again gives it a token at least that of
--     the claim that last held it, so at most one claim holds a job).
--
-- conveyor.jobs keeps its 29 columns and their meaning: it becomes a view
-- over the stored rows (the table is renamed conveyor.job_rows) that shows a
-- claimed job as started, with its attempt, token, lease, worker and
-- started_at. INSTEAD OF triggers keep INSERT, UPDATE and DELETE on it
-- working as before.
--
-- Operations on single jobs (cancel, delete, an UPDATE through the view,
-- release, rescue) first "settle" the claims of their jobs
-- (conveyor_internal.settle_claims): the claimed jobs' rows are rewritten
-- as started, with the claim's lease, and the claim no longer counts them.
-- After that the stored row is the whole truth and the older statements
-- apply unchanged.

CREATE TABLE conveyor.claims (
    lease_token bigint PRIMARY KEY,
    queue conveyor.queue_name NOT NULL,
    worker_id text NOT NULL,
    started_at conveyor.finite_timestamptz NOT NULL,
    lease_expires_at conveyor.finite_timestamptz NOT NULL,
    job_ids uuid[] NOT NULL,
    jobs_left integer NOT NULL CHECK (jobs_left >= 0)
);

COMMENT ON TABLE conveyor.claims IS
    'One row per claim statement: the jobs it took, still pending on disk, and their shared lease. A job listed here is started when its row says pending and its lease_token is below this claim''s (see the view conveyor.jobs).';
COMMENT ON COLUMN conveyor.claims.lease_token IS
    'The claim''s fencing token (conveyor.lease_tokens): every job it took carries it while running.';
COMMENT ON COLUMN conveyor.claims.queue IS 'The queue the claim took its jobs from.';
COMMENT ON COLUMN conveyor.claims.worker_id IS 'The worker process holding the claim (conveyor.workers).';
COMMENT ON COLUMN conveyor.claims.started_at IS 'When the claim was made: the started_at of each job it holds.';
COMMENT ON COLUMN conveyor.claims.job_ids IS
    'The jobs the claim took. A job stops being held by this claim when its row is written: finished, retried, or settled (rewritten as started with this token).';
COMMENT ON COLUMN conveyor.claims.jobs_left IS
    'How many listed jobs are still held with their row pending on disk; the row is deleted when it reaches 0.';
COMMENT ON COLUMN conveyor.claims.lease_expires_at IS
    'The lease of every job the claim still holds: renewed by its worker''s heartbeat, one update per claim; the rescuer takes the claim''s jobs back after it.';

-- The tokens must be handed out in call order (no CACHE above 1): the fence
-- relies on a claim that sees a job's ring row drawing its token after the
-- write that made the job runnable drew the job's.
ALTER SEQUENCE conveyor.lease_tokens CACHE 1;

ALTER TABLE conveyor.jobs RENAME TO job_rows;

COMMENT ON TABLE conveyor.job_rows IS
    'The stored rows of conveyor.jobs, partitioned by state (jobs_unfinished, and one table per day for each final state). A job that a claim holds (conveyor.claims) is stored as pending: read conveyor.jobs for the state as workers see it.';

-- The outcome statement ends claimed jobs (pending on disk, with no ring row
-- left) and marks its statement in this setting so the ring trigger skips
-- them: looking for their ring rows would cost a lookup per job for nothing.
DROP TRIGGER jobs_ready_delete ON conveyor.job_rows;
CREATE TRIGGER jobs_ready_delete
    AFTER DELETE ON conveyor.job_rows
    FOR EACH ROW
    WHEN (OLD.state = 'pending'
          AND current_setting('conveyor.ending_claimed_jobs', true) IS DISTINCT FROM statement_timestamp()::text)
    EXECUTE FUNCTION conveyor_internal.ready_sync();

-- Unfinished jobs with the state workers see.
CREATE VIEW conveyor.active_jobs AS
SELECT j.id, j.queue, j.task, j.args, j.headers,
       CASE WHEN c.lease_token IS NULL THEN j.state ELSE 'started' END AS state,
       j.priority, j.run_at,
       CASE WHEN c.lease_token IS NULL THEN j.attempt
            ELSE (least(j.attempt, 2147483646) + 1)::conveyor.non_negative_int END AS attempt,
       j.max_retries, j.retry_backoff_base, j.retry_backoff, j.timeout,
       CASE WHEN c.lease_token IS NULL THEN j.lease_expires_at ELSE c.lease_expires_at END AS lease_expires_at,
       CASE WHEN c.lease_token IS NULL THEN j.worker_id ELSE c.worker_id END AS worker_id,
       j.result, j.last_error, j.errors, j.created_at,
       CASE WHEN c.lease_token IS NULL THEN j.started_at ELSE c.started_at END AS started_at,
       j.finished_at, j.workflow_id, j.workflow_index, j.on_success, j.on_error,
       j.cancel_requested_at, j.unique_key, j.unique_until,
       CASE WHEN c.lease_token IS NULL THEN j.lease_token ELSE c.lease_token END AS lease_token
FROM conveyor.jobs_unfinished j
LEFT JOIN (SELECT u.job_id, c.lease_token, c.worker_id, c.started_at, c.lease_expires_at
           FROM conveyor.claims c, unnest(c.job_ids) AS u(job_id)
           WHERE c.jobs_left > 0) c
  ON c.job_id = j.id AND j.state = 'pending' AND c.lease_token > coalesce(j.lease_token, 0);

COMMENT ON VIEW conveyor.active_jobs IS
    'Jobs not finished (scheduled, pending, started, retry), with the state workers see: a job a claim holds (conveyor.claims) reads started.';

CREATE VIEW conveyor.jobs AS
SELECT * FROM conveyor.jobs_success
UNION ALL
SELECT * FROM conveyor.jobs_failure
UNION ALL
SELECT * FROM conveyor.jobs_cancelled
UNION ALL
SELECT * FROM conveyor.active_jobs;

COMMENT ON VIEW conveyor.jobs IS
    'One row per job (task instance): its arguments, state, attempts, result and error history. Reads the stored rows (conveyor.job_rows) and the live claims (conveyor.claims); INSERT, UPDATE and DELETE work on it as on a table (INSTEAD OF triggers).';

-- The view's columns default as the table's did, for INSERTs through it,
-- and both views' columns are described as the table's are.
DO $$
DECLARE
    c record;
BEGIN
    FOR c IN
        SELECT a.attname, pg_get_expr(d.adbin, d.adrelid) AS def
        FROM pg_attribute a JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
        WHERE a.attrelid = 'conveyor.job_rows'::regclass
    LOOP
        EXECUTE format('ALTER VIEW conveyor.jobs ALTER COLUMN %I SET DEFAULT %s', c.attname, c.def);
    END LOOP;
    FOR c IN
        SELECT a.attname, col_description(a.attrelid, a.attnum) AS comment
        FROM pg_attribute a
        WHERE a.attrelid = 'conveyor.job_rows'::regclass AND a.attnum > 0 AND NOT a.attisdropped
          AND col_description(a.attrelid, a.attnum) IS NOT NULL
    LOOP
        EXECUTE format('COMMENT ON COLUMN conveyor.jobs.%I IS %L', c.attname, c.comment);
        EXECUTE format('COMMENT ON COLUMN conveyor.active_jobs.%I IS %L', c.attname, c.comment);
    END LOOP;
END
$$;
COMMENT ON COLUMN conveyor.jobs.state IS
    'scheduled, pending, started, retry, success, failure or cancelled. A job a claim holds (conveyor.claims) is started here and pending in its stored row.';
COMMENT ON COLUMN conveyor.active_jobs.state IS
    'scheduled, pending, started or retry. A job a claim holds (conveyor.claims) is started here and pending in its stored row.';

CREATE TRIGGER jobs_insert INSTEAD OF INSERT ON conveyor.jobs
    FOR EACH ROW EXECUTE FUNCTION conveyor_internal.jobs_view_write();
CREATE TRIGGER jobs_update INSTEAD OF UPDATE ON conveyor.jobs
    FOR EACH ROW EXECUTE FUNCTION conveyor_internal.jobs_view_write();
CREATE TRIGGER jobs_delete INSTEAD OF DELETE ON conveyor.jobs
    FOR EACH ROW EXECUTE FUNCTION conveyor_internal.jobs_view_write();
-- Under session_replication_role = replica these triggers, like every
-- trigger, do not fire, and a write through the view does nothing: restores
-- and replication write the stored rows (conveyor.job_rows), as they write
-- tables; conveyor.rebuild_ready() then repairs the ring.
