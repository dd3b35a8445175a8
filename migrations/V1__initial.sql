-- Conveyor schema, version 1.
--
-- Every object lives in the schema `conveyor` (the library rewrites the name
-- when a client is configured with another schema). The schema itself is
-- created by `conveyor::migrate` before this file runs.
--
-- This schema is a public interface: users query it with plain SQL. Column
-- names and state values are documented in README.md ("The SQL interface").

-- A time-ordered UUID (version 7, RFC 9562): 48 bits of Unix milliseconds,
-- then random bits. PostgreSQL 18 has uuidv7(); this works on 13 and later.
CREATE FUNCTION conveyor.uuid_v7() RETURNS uuid
LANGUAGE sql VOLATILE PARALLEL SAFE AS $$
    SELECT encode(
        set_bit(set_bit(
            overlay(uuid_send(gen_random_uuid())
                    PLACING substring(int8send((extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3)
                    FROM 1 FOR 6),
            52, 1), 53, 1),
        'hex')::uuid
$$;

COMMENT ON FUNCTION conveyor.uuid_v7() IS
    'A new time-ordered UUID (version 7): the default job id.';

CREATE TABLE conveyor.jobs (
    id                 uuid        NOT NULL DEFAULT conveyor.uuid_v7(),
    queue              text        NOT NULL DEFAULT 'default',
    task               text        NOT NULL,
    args               jsonb       NOT NULL DEFAULT '{}'::jsonb,
    headers            jsonb       NOT NULL DEFAULT '{}'::jsonb,
    state              text        NOT NULL DEFAULT 'pending',
    priority           integer     NOT NULL DEFAULT 0,
    run_at             timestamptz NOT NULL DEFAULT now(),
    attempt            integer     NOT NULL DEFAULT 0,
    max_retries        integer     NOT NULL DEFAULT 25,
    retry_backoff_base interval    NOT NULL DEFAULT '1 second',
    retry_backoff      interval,
    timeout            interval,
    lease_expires_at   timestamptz,
    worker_id          text,
    result             jsonb,
    last_error         text,
    errors             jsonb       NOT NULL DEFAULT '[]'::jsonb,
    created_at         timestamptz NOT NULL DEFAULT now(),
    started_at         timestamptz,
    finished_at        timestamptz,

    CONSTRAINT jobs_pkey PRIMARY KEY (id),
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
    -- A running job always has a lease; a waiting or finished job never has one.
    CONSTRAINT jobs_lease_check CHECK ((state = 'started') = (lease_expires_at IS NOT NULL)),
    -- Finished jobs, and only finished jobs, carry finished_at.
    CONSTRAINT jobs_finished_check CHECK
        ((state IN ('success', 'failure', 'cancelled')) = (finished_at IS NOT NULL))
);

-- Jobs churn: many updates per row. Leave room on each page and vacuum early.
ALTER TABLE conveyor.jobs SET (
    fillfactor = 90,
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_analyze_scale_factor = 0.02
);

COMMENT ON TABLE conveyor.jobs IS
    'One row per job (task instance): its arguments, state, attempts, result and error history.';
COMMENT ON COLUMN conveyor.jobs.id IS 'Job id: a UUIDv7 by default, or the id the caller gave (idempotent enqueue).';
COMMENT ON COLUMN conveyor.jobs.queue IS 'Queue name (machinery''s routing key). Workers claim from the queues they serve.';
COMMENT ON COLUMN conveyor.jobs.task IS 'Registered task name; selects the handler.';
COMMENT ON COLUMN conveyor.jobs.args IS 'JSON arguments given to the handler.';
COMMENT ON COLUMN conveyor.jobs.headers IS 'Free-form JSON object of metadata (e.g. tracing context).';
COMMENT ON COLUMN conveyor.jobs.state IS 'pending | scheduled | started | retry | success | failure | cancelled (see README).';
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
COMMENT ON COLUMN conveyor.jobs.finished_at IS 'When the job reached success, failure or cancelled.';

-- The claim path reads only this index: pending rows, in claim order. Finished
-- and future jobs are not in it, so claim cost does not grow with history.
CREATE INDEX jobs_claim_idx ON conveyor.jobs (queue, priority DESC, run_at, id)
    WHERE state = 'pending';

-- Jobs waiting for their run_at (ETA or retry backoff), for promotion to pending.
CREATE INDEX jobs_waiting_idx ON conveyor.jobs (queue, run_at)
    WHERE state IN ('scheduled', 'retry');

-- Running jobs, for lease renewal and rescue of expired leases.
CREATE INDEX jobs_running_idx ON conveyor.jobs (worker_id, lease_expires_at)
    WHERE state = 'started';

-- Wake idle workers once per inserting statement and queue. The payload is
-- {"queue": ..., "scheduled": ...}; "scheduled" tells workers to look up the
-- next run_at. PostgreSQL folds identical notifications of one transaction
-- into one, so a transaction that enqueues many jobs sends at most two
-- notifications per queue, delivered at commit.
CREATE FUNCTION conveyor.notify_job_ready() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify(TG_TABLE_SCHEMA || '.job_ready',
                      json_build_object('queue', q.queue, 'scheduled', q.scheduled)::text)
    FROM (SELECT DISTINCT queue, state <> 'pending' AS scheduled FROM new_jobs) AS q;
    RETURN NULL;
END
$$;

CREATE TRIGGER jobs_notify_job_ready
    AFTER INSERT ON conveyor.jobs
    REFERENCING NEW TABLE AS new_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION conveyor.notify_job_ready();

-- Enqueue from SQL (psql, triggers, other languages). The defaults are the
-- same as the Rust client's. Returns the job id; when `id` is given and a job
-- with that id exists, returns it unchanged (idempotent submit).
CREATE FUNCTION conveyor.enqueue(
    task        text,
    args        jsonb       DEFAULT '{}'::jsonb,
    queue       text        DEFAULT 'default',
    priority    integer     DEFAULT 0,
    run_at      timestamptz DEFAULT NULL,
    max_retries integer     DEFAULT 25,
    retry_backoff_base interval DEFAULT '1 second',
    timeout     interval    DEFAULT NULL,
    headers     jsonb       DEFAULT '{}'::jsonb,
    id          uuid        DEFAULT NULL
) RETURNS uuid
LANGUAGE plpgsql AS $$
DECLARE
    new_id uuid := coalesce(enqueue.id, conveyor.uuid_v7());
BEGIN
    INSERT INTO conveyor.jobs AS j
        (id, queue, task, args, headers, state, priority, run_at,
         max_retries, retry_backoff_base, timeout)
    VALUES
        (new_id, enqueue.queue, enqueue.task, coalesce(enqueue.args, '{}'::jsonb),
         coalesce(enqueue.headers, '{}'::jsonb),
         CASE WHEN enqueue.run_at > now() THEN 'scheduled' ELSE 'pending' END,
         enqueue.priority, coalesce(enqueue.run_at, now()),
         enqueue.max_retries, enqueue.retry_backoff_base, enqueue.timeout)
    ON CONFLICT ON CONSTRAINT jobs_pkey DO NOTHING;
    RETURN new_id;
END
$$;

COMMENT ON FUNCTION conveyor.enqueue(text, jsonb, text, integer, timestamptz, integer, interval, interval, jsonb, uuid) IS
    'Enqueue a job; returns its id. Same defaults as the Rust client. An existing id is returned unchanged.';
