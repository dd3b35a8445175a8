-- Finished jobs in day partitions (issue 16; docs/storage.md,
-- docs/decisions/2026-11-24-history-partitions.md).
--
-- conveyor.jobs stays one table to every reader and writer (same columns,
-- same meaning, INSERT / UPDATE / DELETE by hand still work), but it is now
-- partitioned by state:
--
--   conveyor.jobs                      PARTITION BY LIST (state)
--     conveyor.jobs_unfinished           pending, scheduled, started, retry
--     conveyor.jobs_success              PARTITION BY RANGE (finished_at)
--       conveyor.jobs_success_20261124     one table per UTC day
--       conveyor.jobs_success_default      anything no day table covers
--     conveyor.jobs_failure              likewise
--     conveyor.jobs_cancelled            likewise
--
-- Work in flight lives in the small jobs_unfinished, updated in place as
-- before. A job that ends is deleted from it and inserted into its state's
-- table for the day it finished, which is only ever inserted into. Retention
-- drops a whole day's table (conveyor_internal.drop_history_partitions),
-- instead of deleting rows one by one and leaving VACUUM the rest, so a
-- history of any size costs the queue nothing: claims read the ready ring,
-- enqueues and outcomes touch jobs_unfinished and today's tables.
--
-- What changes for a reader: there is no index that makes job ids unique
-- across the partitions (PostgreSQL has no global indexes). jobs_unfinished
-- has a primary key on id; every way the library inserts a job checks that
-- the id is not taken by a finished job either (see insert_job.sql). A plain
-- INSERT INTO conveyor.jobs by hand is checked against unfinished jobs only.
-- A lookup by id reads the id index of every partition (a few dozen at the
-- default retention).
--
-- This migration rewrites conveyor.jobs: it copies every row into the new
-- tables (about 10 s per million rows on a small machine; workers must be
-- stopped, as for any migration that changes a table).

-- enqueue_unique() takes a fourth argument now (whether the job's id may be
-- taken already); its file creates the new one.
DROP FUNCTION IF EXISTS conveyor_internal.enqueue_unique(jsonb, text, interval);

ALTER TABLE conveyor.jobs RENAME TO jobs_before_v8;
DROP TRIGGER jobs_notify_job_ready ON conveyor.jobs_before_v8;
DROP TRIGGER jobs_ready_insert ON conveyor.jobs_before_v8;
DROP TRIGGER jobs_ready_update ON conveyor.jobs_before_v8;
DROP TRIGGER jobs_ready_delete ON conveyor.jobs_before_v8;

CREATE TABLE conveyor.jobs (
    id                  uuid        NOT NULL DEFAULT conveyor.uuid_v7(),
    queue               text        NOT NULL DEFAULT 'default',
    task                text        NOT NULL,
    args                jsonb       NOT NULL DEFAULT '{}'::jsonb,
    headers             jsonb       NOT NULL DEFAULT '{}'::jsonb,
    state               text        NOT NULL DEFAULT 'pending',
    priority            integer     NOT NULL DEFAULT 0,
    run_at              timestamptz NOT NULL DEFAULT statement_timestamp(),
    attempt             integer     NOT NULL DEFAULT 0,
    max_retries         integer     NOT NULL DEFAULT 25,
    retry_backoff_base  interval    NOT NULL DEFAULT '1 second',
    retry_backoff       interval,
    timeout             interval,
    lease_expires_at    timestamptz,
    worker_id           text,
    result              jsonb,
    last_error          text,
    errors              jsonb       NOT NULL DEFAULT '[]'::jsonb,
    created_at          timestamptz NOT NULL DEFAULT now(),
    started_at          timestamptz,
    finished_at         timestamptz,
    workflow_id         uuid,
    workflow_index      integer,
    on_success          jsonb,
    on_error            jsonb,
    cancel_requested_at timestamptz,
    unique_key          text,
    unique_until        timestamptz,
    lease_token         bigint,

    -- The constraints of migration V1, unchanged (each partition has them).
    CONSTRAINT jobs_state_check CHECK (state IN
        ('pending', 'scheduled', 'started', 'retry', 'success', 'failure', 'cancelled')),
    CONSTRAINT jobs_queue_check CHECK (queue <> '' AND length(queue) <= 128),
    CONSTRAINT jobs_task_check CHECK (task <> '' AND length(task) <= 255),
    CONSTRAINT jobs_attempt_check CHECK (attempt >= 0),
    CONSTRAINT jobs_max_retries_check CHECK (max_retries >= 0),
    CONSTRAINT jobs_retry_backoff_base_check CHECK (retry_backoff_base >= '0'::interval),
    CONSTRAINT jobs_timeout_check CHECK (timeout IS NULL OR timeout > '0'::interval),
    CONSTRAINT jobs_errors_check CHECK (jsonb_typeof(errors) = 'array'),
    CONSTRAINT jobs_headers_check CHECK (jsonb_typeof(headers) = 'object'),
    CONSTRAINT jobs_lease_check CHECK ((state = 'started') = (lease_expires_at IS NOT NULL)),
    CONSTRAINT jobs_lease_token_check CHECK (state <> 'started' OR lease_token IS NOT NULL),
    CONSTRAINT jobs_finished_check CHECK
        ((state IN ('success', 'failure', 'cancelled')) = (finished_at IS NOT NULL)),
    CONSTRAINT jobs_timestamps_check CHECK (
        least(run_at, created_at, started_at, finished_at, lease_expires_at)
            >= '0001-01-01 00:00:00+00'
        AND greatest(run_at, created_at, started_at, finished_at, lease_expires_at)
            < '10000-01-01 00:00:00+00')
) PARTITION BY LIST (state);

CREATE TABLE conveyor.jobs_unfinished PARTITION OF conveyor.jobs
    FOR VALUES IN ('pending', 'scheduled', 'started', 'retry');
-- Updated in place many times per job: leave room on each page for HOT
-- updates (lease renewals) and vacuum early.
ALTER TABLE conveyor.jobs_unfinished SET (
    fillfactor = 90,
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_analyze_scale_factor = 0.02
);
CREATE TABLE conveyor.jobs_success PARTITION OF conveyor.jobs
    FOR VALUES IN ('success') PARTITION BY RANGE (finished_at);
CREATE TABLE conveyor.jobs_failure PARTITION OF conveyor.jobs
    FOR VALUES IN ('failure') PARTITION BY RANGE (finished_at);
CREATE TABLE conveyor.jobs_cancelled PARTITION OF conveyor.jobs
    FOR VALUES IN ('cancelled') PARTITION BY RANGE (finished_at);
CREATE TABLE conveyor.jobs_success_default PARTITION OF conveyor.jobs_success DEFAULT;
CREATE TABLE conveyor.jobs_failure_default PARTITION OF conveyor.jobs_failure DEFAULT;
CREATE TABLE conveyor.jobs_cancelled_default PARTITION OF conveyor.jobs_cancelled DEFAULT;

-- The history kept so far, one partition per final state for everything
-- finished before today (pruned row by row as it ages, like a default
-- partition, and dropped once all of it is past retention), and a table per
-- day from today on.
DO $$
DECLARE
    st text;
    today timestamptz := date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC';
BEGIN
    FOREACH st IN ARRAY ARRAY['success', 'failure', 'cancelled'] LOOP
        IF EXISTS (SELECT 1 FROM conveyor.jobs_before_v8 WHERE state = st AND finished_at < today) THEN
            EXECUTE format(
                'CREATE TABLE conveyor.%I PARTITION OF conveyor.%I FOR VALUES FROM (MINVALUE) TO (%L)',
                'jobs_' || st || '_until_' || to_char(today AT TIME ZONE 'UTC', 'YYYYMMDD'),
                'jobs_' || st, today);
            EXECUTE format('COMMENT ON TABLE conveyor.%I IS %L',
                'jobs_' || st || '_until_' || to_char(today AT TIME ZONE 'UTC', 'YYYYMMDD'),
                'Jobs in state ' || st || ' that finished before this history was partitioned (migration V8).');
        END IF;
    END LOOP;
END
$$;
SELECT conveyor_internal.create_history_partitions(2);

INSERT INTO conveyor.jobs SELECT * FROM conveyor.jobs_before_v8;
DROP TABLE conveyor.jobs_before_v8;

-- ---------------------------------------------------------------- indexes

-- Unfinished jobs: the primary key (jobs_unfinished_pkey), and the partial
-- indexes of migration V1 (claims read the ready ring, conveyor.ready).
ALTER TABLE conveyor.jobs_unfinished ADD CONSTRAINT jobs_unfinished_pkey PRIMARY KEY (id);

CREATE INDEX jobs_waiting_idx ON conveyor.jobs_unfinished (queue, run_at)
    WHERE state IN ('scheduled', 'retry');
CREATE INDEX jobs_running_idx ON conveyor.jobs_unfinished (queue) WHERE state = 'started';
CREATE UNIQUE INDEX jobs_unique_active_idx ON conveyor.jobs_unfinished (unique_key)
    WHERE unique_key IS NOT NULL AND unique_until IS NULL;

-- Members and steps of a workflow, in order: in every partition.
CREATE INDEX jobs_workflow_idx ON conveyor.jobs (workflow_id, workflow_index)
    WHERE workflow_id IS NOT NULL;

-- Finished jobs, in each final state's day tables (every new day table gets
-- them): by id, and for the dashboard's lists newest first, all of them, of
-- one queue, of one task (carrying the other filter column and the id, so
-- a list narrowed to both is answered from the index alone).
CREATE INDEX jobs_success_id_idx ON conveyor.jobs_success (id);
CREATE INDEX jobs_failure_id_idx ON conveyor.jobs_failure (id);
CREATE INDEX jobs_cancelled_id_idx ON conveyor.jobs_cancelled (id);
CREATE INDEX jobs_success_finished_idx ON conveyor.jobs_success (finished_at);
CREATE INDEX jobs_failure_finished_idx ON conveyor.jobs_failure (finished_at);
CREATE INDEX jobs_cancelled_finished_idx ON conveyor.jobs_cancelled (finished_at);
CREATE INDEX jobs_success_queue_idx ON conveyor.jobs_success (queue, finished_at) INCLUDE (task, id);
CREATE INDEX jobs_failure_queue_idx ON conveyor.jobs_failure (queue, finished_at) INCLUDE (task, id);
CREATE INDEX jobs_cancelled_queue_idx ON conveyor.jobs_cancelled (queue, finished_at) INCLUDE (task, id);
CREATE INDEX jobs_success_task_idx ON conveyor.jobs_success (task, finished_at) INCLUDE (queue, id);
CREATE INDEX jobs_failure_task_idx ON conveyor.jobs_failure (task, finished_at) INCLUDE (queue, id);
CREATE INDEX jobs_cancelled_task_idx ON conveyor.jobs_cancelled (task, finished_at) INCLUDE (queue, id);

COMMENT ON INDEX conveyor.jobs_waiting_idx IS
    'Scheduled and retrying jobs by queue and due time: promotion to pending, and the next wake-up.';
COMMENT ON INDEX conveyor.jobs_running_idx IS
    'Started jobs by queue: the rescuer, the count of a limited queue''s started jobs, the dashboard. lease_expires_at is not indexed, so lease renewals are HOT updates.';
COMMENT ON INDEX conveyor.jobs_unique_active_idx IS
    'Unique jobs "until finished": at most one unfinished job per key.';
COMMENT ON INDEX conveyor.jobs_workflow_idx IS 'Members and steps of a workflow, in order.';

-- ---------------------------------------------------------------- triggers

-- Inserts: the ready ring's rows and the job_ready notification, once per
-- inserting statement, for statements on conveyor.jobs (a plain INSERT, by
-- hand or from conveyor.enqueue()) and on jobs_unfinished (the library's
-- inserts, which name it to use its primary key). A statement trigger fires
-- for the table the statement names only, so each has its pair.
CREATE TRIGGER jobs_notify_job_ready
    AFTER INSERT ON conveyor.jobs
    REFERENCING NEW TABLE AS new_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION conveyor_internal.notify_job_ready();
CREATE TRIGGER jobs_ready_insert
    AFTER INSERT ON conveyor.jobs
    REFERENCING NEW TABLE AS new_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION conveyor_internal.ready_insert();
CREATE TRIGGER jobs_unfinished_notify_job_ready
    AFTER INSERT ON conveyor.jobs_unfinished
    REFERENCING NEW TABLE AS new_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION conveyor_internal.notify_job_ready();
CREATE TRIGGER jobs_unfinished_ready_insert
    AFTER INSERT ON conveyor.jobs_unfinished
    REFERENCING NEW TABLE AS new_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION conveyor_internal.ready_insert();

-- Row triggers of migration V3, on every partition (PostgreSQL clones them).
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

-- An UPDATE by hand that moves a finished job back to pending (say `SET
-- state = 'pending', finished_at = NULL`) moves the row into another
-- partition: PostgreSQL runs that as a delete and an insert, and fires no
-- row UPDATE trigger for it. This statement trigger on the table such an
-- UPDATE names gives those jobs their ring rows and wakes workers. The
-- library's own statements name the partitions, so they never pay for it.
CREATE TRIGGER jobs_moved_to_pending
    AFTER UPDATE ON conveyor.jobs
    REFERENCING OLD TABLE AS old_jobs NEW TABLE AS new_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION conveyor_internal.ready_moved();

-- ---------------------------------------------------------------- comments

COMMENT ON TABLE conveyor.jobs IS
    'One row per job (task instance): its arguments, state, attempts, result and error history. Partitioned by state: jobs_unfinished, and one table per day for each final state (retention drops whole days).';
COMMENT ON TABLE conveyor.jobs_unfinished IS
    'Jobs not finished yet (pending, scheduled, started, retry), updated in place. Ids are unique here (primary key).';
COMMENT ON TABLE conveyor.jobs_success IS 'Jobs that succeeded, one partition per UTC day of finished_at.';
COMMENT ON TABLE conveyor.jobs_failure IS 'Jobs that failed for good, one partition per UTC day of finished_at.';
COMMENT ON TABLE conveyor.jobs_cancelled IS 'Cancelled jobs, one partition per UTC day of finished_at.';
COMMENT ON TABLE conveyor.jobs_success_default IS
    'Successes whose finished_at no day partition covers (written by hand, or before the day''s partition was created); pruned row by row.';
COMMENT ON TABLE conveyor.jobs_failure_default IS
    'Failures whose finished_at no day partition covers (written by hand, or before the day''s partition was created); pruned row by row.';
COMMENT ON TABLE conveyor.jobs_cancelled_default IS
    'Cancellations whose finished_at no day partition covers (written by hand, or before the day''s partition was created); pruned row by row.';

COMMENT ON COLUMN conveyor.jobs.id IS 'Job id: a UUIDv7 by default, or the id the caller gave (idempotent enqueue).';
COMMENT ON COLUMN conveyor.jobs.queue IS 'Queue name (machinery''s routing key). Workers claim from the queues they serve.';
COMMENT ON COLUMN conveyor.jobs.task IS 'Registered task name; selects the handler.';
COMMENT ON COLUMN conveyor.jobs.args IS 'JSON arguments given to the handler.';
COMMENT ON COLUMN conveyor.jobs.headers IS 'Free-form JSON object of metadata (e.g. tracing context).';
COMMENT ON COLUMN conveyor.jobs.state IS 'pending | scheduled | started | retry | success | failure | cancelled (see README). Also the partition key.';
COMMENT ON COLUMN conveyor.jobs.priority IS 'Higher runs first within a queue.';
COMMENT ON COLUMN conveyor.jobs.run_at IS 'Earliest time the job may start (ETA, or when the next retry is due).';
COMMENT ON COLUMN conveyor.jobs.attempt IS 'Number of attempts started so far (1 while the first attempt runs).';
COMMENT ON COLUMN conveyor.jobs.max_retries IS 'Retries allowed after the first attempt: at most 1 + max_retries attempts.';
COMMENT ON COLUMN conveyor.jobs.retry_backoff_base IS 'Fibonacci backoff unit: the n-th retry waits fib(n) times this.';
COMMENT ON COLUMN conveyor.jobs.retry_backoff IS 'Delay used for the latest retry (machinery''s RetryTimeout); NULL before any retry.';
COMMENT ON COLUMN conveyor.jobs.timeout IS 'Per-attempt time limit; NULL means the worker''s default for the task.';
COMMENT ON COLUMN conveyor.jobs.lease_expires_at IS 'While started: when the worker''s claim lapses unless renewed.';
COMMENT ON COLUMN conveyor.jobs.worker_id IS 'While started: the worker holding the job.';
COMMENT ON COLUMN conveyor.jobs.result IS 'JSON result of a successful job.';
COMMENT ON COLUMN conveyor.jobs.last_error IS 'Error message of the latest failed attempt.';
COMMENT ON COLUMN conveyor.jobs.errors IS 'Every failed attempt, oldest first: [{"attempt", "at", "error", "worker_id"}].';
COMMENT ON COLUMN conveyor.jobs.created_at IS 'When the job was enqueued.';
COMMENT ON COLUMN conveyor.jobs.started_at IS 'When the latest attempt started.';
COMMENT ON COLUMN conveyor.jobs.finished_at IS 'When the job reached success, failure or cancelled (the day partition key of finished jobs).';
COMMENT ON COLUMN conveyor.jobs.workflow_id IS 'The chain, group or chord this job belongs to (conveyor.workflows.id).';
COMMENT ON COLUMN conveyor.jobs.workflow_index IS 'Position: member index in a group/chord, step index in a chain; NULL for a chord callback.';
COMMENT ON COLUMN conveyor.jobs.on_success IS 'Specs of jobs or workflows to enqueue when this job succeeds (next chain step, success callbacks).';
COMMENT ON COLUMN conveyor.jobs.on_error IS 'Specs of jobs to enqueue when this job fails for good (error callbacks).';
COMMENT ON COLUMN conveyor.jobs.cancel_requested_at IS
    'When cancellation was asked for. A started job keeps running until its worker stops it (state then becomes cancelled).';
COMMENT ON COLUMN conveyor.jobs.unique_key IS
    'Uniqueness key: no other unfinished job (or, with unique_until, no other job until then) has it.';
COMMENT ON COLUMN conveyor.jobs.unique_until IS
    'For a TTL-scoped unique job: when its key may be used again. NULL: unique until finished.';
COMMENT ON COLUMN conveyor.jobs.lease_token IS
    'Fencing token of the latest claim (conveyor.lease_tokens; shared by the jobs one claim statement took): outcome, lease renewal and release must present (id, lease_token). Kept after that claim''s worker records the outcome; NULL before any claim and after a claim ended without its worker (rescue, release).';
