-- Conveyor's schema: tables, indexes, the sequence and the trigger.
--
-- Nothing released ever ran the nine migrations this baseline replaced
-- (docs/decisions/2026-11-23-schema-baseline-and-function-files.md). Every
-- object lives in the schema `conveyor` and internal functions in
-- `conveyor_internal` (the library rewrites both names when a client is
-- configured with another schema, and creates both schemas before this file
-- runs). Functions are not here: each has one file in migrations/functions/,
-- which `conveyor::migrate` applies (CREATE OR REPLACE) before the
-- migrations, so the body you read there is the one the database runs.
--
-- This schema is a public interface: users query it with plain SQL. Column
-- names and state values are documented in README.md ("The SQL interface").
-- Later migrations change only the schema (tables, columns, indexes), never a
-- function body.

-- ---------------------------------------------------------------- jobs

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
    -- A running job always carries the fencing token of its claim.
    CONSTRAINT jobs_lease_token_check CHECK (state <> 'started' OR lease_token IS NOT NULL),
    -- Finished jobs, and only finished jobs, carry finished_at.
    CONSTRAINT jobs_finished_check CHECK
        ((state IN ('success', 'failure', 'cancelled')) = (finished_at IS NOT NULL)),
    -- Every timestamp a reader decodes is a finite time in years 1 to 9999
    -- (PostgreSQL accepts 'infinity' and years up to 294276; chrono and RFC
    -- 3339 do not). cancel_requested_at and unique_until are only ever tested
    -- for NULL. least() and greatest() skip NULLs; an all-NULL list gives
    -- NULL, which a CHECK accepts. (Two comparisons in all: a comparison per
    -- column bound cost 6 % of insert throughput, this 3 %.)
    CONSTRAINT jobs_timestamps_check CHECK (
        least(run_at, created_at, started_at, finished_at, lease_expires_at)
            >= '0001-01-01 00:00:00+00'
        AND greatest(run_at, created_at, started_at, finished_at, lease_expires_at)
            < '10000-01-01 00:00:00+00')
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

-- Fencing tokens. Every claim statement takes a fresh value for the jobs it
-- claims (jobs.lease_token), and outcomes, lease renewals and releases must
-- present (id, lease_token): a stale worker's late write can never land on a
-- newer run, even after a re-queue reset the attempt count. Nothing ever
-- resets the sequence, and a statement claims a job at most once.
CREATE SEQUENCE conveyor.lease_tokens AS bigint;

COMMENT ON SEQUENCE conveyor.lease_tokens IS
    'Fencing tokens: each claim statement takes the next value for the jobs it claims (jobs.lease_token); never reset.';

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

-- Members and steps of a workflow, in order.
CREATE INDEX jobs_workflow_idx ON conveyor.jobs (workflow_id, workflow_index)
    WHERE workflow_id IS NOT NULL;

-- Unique jobs. "Until finished": at most one unfinished job per key, held by
-- this partial unique index. "For a TTL": a key row in conveyor.unique_keys
-- that a new job may take over only once it expired.
CREATE UNIQUE INDEX jobs_unique_active_idx ON conveyor.jobs (unique_key)
    WHERE unique_key IS NOT NULL AND unique_until IS NULL
      AND state IN ('scheduled', 'pending', 'started', 'retry');

-- Retention: the pruner walks finished jobs by state and age.
CREATE INDEX jobs_finished_idx ON conveyor.jobs (state, finished_at)
    WHERE finished_at IS NOT NULL;

-- The dashboard lists the jobs of one state, newest first, optionally
-- narrowed to a queue or a task. Unfinished states are found through their
-- partial indexes (jobs_claim_idx, jobs_waiting_idx, jobs_running_idx) and
-- finished ones through jobs_finished_idx (state, finished_at). That is
-- enough for a state alone, but a queue or task that is rare among millions
-- of kept successes would make the list walk every success to fill a page
-- (about 200 ms at 1M rows, growing with the history). These two indexes
-- serve those lists directly, newest first.
--
-- Each also carries the other filter column and the id, so a list narrowed
-- to both a queue and a task (even a pair that never occurs) and the keyset
-- tie-break on id are answered from the index alone (an index-only scan),
-- without reading every matching row from the table.
--
-- Both are partial over finished jobs: a job enters each once, when it
-- reaches its final state, and never while it waits, runs or retries, so
-- the claim path does not maintain them.
CREATE INDEX jobs_finished_queue_idx ON conveyor.jobs (queue, state, finished_at)
    INCLUDE (task, id) WHERE finished_at IS NOT NULL;

CREATE INDEX jobs_finished_task_idx ON conveyor.jobs (task, state, finished_at)
    INCLUDE (queue, id) WHERE finished_at IS NOT NULL;

COMMENT ON INDEX conveyor.jobs_finished_queue_idx IS
    'Dashboard: finished jobs of one queue and state, newest first.';
COMMENT ON INDEX conveyor.jobs_finished_task_idx IS
    'Dashboard: finished jobs of one task and state, newest first.';

-- Wakes idle workers at commit (conveyor_internal.notify_job_ready).
CREATE TRIGGER jobs_notify_job_ready
    AFTER INSERT ON conveyor.jobs
    REFERENCING NEW TABLE AS new_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION conveyor_internal.notify_job_ready();

-- ---------------------------------------------------------------- workflows

-- A workflow (chain, group, chord) is built in Rust as a tree of "specs"
-- (JSON) with every job and workflow id chosen up front, and materialised by
-- conveyor_internal.spawn(). Follow-up work (the next chain step, callbacks,
-- a chord's callback) is inserted by conveyor_internal.after_finish(), which
-- the worker calls in the same transaction that records a job's final
-- outcome. Group counters are updated there too, under a row lock, so a
-- chord callback is enqueued exactly once.
CREATE TABLE conveyor.workflows (
    id            uuid        NOT NULL,
    kind          text        NOT NULL,
    state         text        NOT NULL DEFAULT 'running',
    parent_id     uuid,
    total         integer     NOT NULL,
    succeeded     integer     NOT NULL DEFAULT 0,
    failed        integer     NOT NULL DEFAULT 0,
    result_job_id uuid,
    on_complete   jsonb,
    on_error      jsonb       NOT NULL DEFAULT '[]'::jsonb,
    error         text,
    failed_job_id uuid,
    created_at    timestamptz NOT NULL DEFAULT now(),
    finished_at   timestamptz,

    CONSTRAINT workflows_pkey PRIMARY KEY (id),
    CONSTRAINT workflows_parent_fkey FOREIGN KEY (parent_id) REFERENCES conveyor.workflows (id)
        ON DELETE CASCADE,
    CONSTRAINT workflows_kind_check CHECK (kind IN ('chain', 'group', 'chord')),
    CONSTRAINT workflows_state_check CHECK (state IN ('running', 'success', 'failure')),
    CONSTRAINT workflows_counts_check CHECK (total >= 0 AND succeeded >= 0 AND failed >= 0),
    CONSTRAINT workflows_finished_check CHECK ((state <> 'running') = (finished_at IS NOT NULL)),
    CONSTRAINT workflows_timestamps_check CHECK (
        created_at >= '0001-01-01 00:00:00+00' AND created_at < '10000-01-01 00:00:00+00'
        AND finished_at >= '0001-01-01 00:00:00+00' AND finished_at < '10000-01-01 00:00:00+00')
);

CREATE INDEX workflows_parent_idx ON conveyor.workflows (parent_id) WHERE parent_id IS NOT NULL;

COMMENT ON TABLE conveyor.workflows IS
    'One row per chain, group or chord: its progress counters, state and callbacks.';
COMMENT ON COLUMN conveyor.workflows.kind IS 'chain | group | chord.';
COMMENT ON COLUMN conveyor.workflows.state IS 'running | success | failure.';
COMMENT ON COLUMN conveyor.workflows.parent_id IS 'The enclosing workflow (a chord that is a step of a chain).';
COMMENT ON COLUMN conveyor.workflows.total IS 'Members (group, chord) or steps (chain).';
COMMENT ON COLUMN conveyor.workflows.succeeded IS 'Members or steps that succeeded (each counted once, retries included).';
COMMENT ON COLUMN conveyor.workflows.failed IS 'Members or steps that failed for good.';
COMMENT ON COLUMN conveyor.workflows.result_job_id IS 'The job whose result is the workflow''s: a chain''s last step, a chord''s callback (its id is known before it exists).';
COMMENT ON COLUMN conveyor.workflows.on_complete IS 'Chord: the callback spec, enqueued once with every member''s result.';
COMMENT ON COLUMN conveyor.workflows.on_error IS 'Specs enqueued once if the workflow fails, with the failing job''s error.';
COMMENT ON COLUMN conveyor.workflows.error IS 'Error of the job that made the workflow fail.';
COMMENT ON COLUMN conveyor.workflows.failed_job_id IS 'The job that made the workflow fail.';
COMMENT ON COLUMN conveyor.workflows.id IS
    'The workflow''s id: a chain, group or chord enqueued together; members carry it in conveyor.jobs.workflow_id.';
COMMENT ON COLUMN conveyor.workflows.created_at IS 'When the workflow was enqueued.';
COMMENT ON COLUMN conveyor.workflows.finished_at IS
    'When the workflow reached succeeded or failed; NULL while running.';

-- ---------------------------------------------------------------- unique keys

CREATE TABLE conveyor.unique_keys (
    key        text        NOT NULL,
    job_id     uuid        NOT NULL,
    expires_at timestamptz NOT NULL,
    CONSTRAINT unique_keys_pkey PRIMARY KEY (key)
);

COMMENT ON TABLE conveyor.unique_keys IS
    'Keys of TTL-scoped unique jobs: the job that holds each key, and until when.';
COMMENT ON COLUMN conveyor.unique_keys.key IS
    'The uniqueness key: given with .unique().key(...), or conveyor.unique_key(queue, task, args).';
COMMENT ON COLUMN conveyor.unique_keys.job_id IS 'The job that holds the key.';
COMMENT ON COLUMN conveyor.unique_keys.expires_at IS
    'The key is free again from this time on (enqueue time plus the TTL).';

-- ---------------------------------------------------------------- queues

-- Queue settings shared by every worker. A queue without a row has none. The
-- rate limit (at most rate_limit job starts per rate_period) is counted in
-- fixed windows on the queue's row, under the same row lock as the
-- concurrency limit.
CREATE TABLE conveyor.queues (
    name              text        NOT NULL,
    paused_at         timestamptz,
    concurrency_limit integer,
    updated_at        timestamptz NOT NULL DEFAULT now(),
    rate_limit        integer,
    rate_period       interval,
    window_start      timestamptz,
    window_count      integer     NOT NULL DEFAULT 0,
    CONSTRAINT queues_pkey PRIMARY KEY (name),
    CONSTRAINT queues_concurrency_limit_check CHECK (concurrency_limit IS NULL OR concurrency_limit > 0),
    CONSTRAINT queues_rate_limit_check CHECK
        ((rate_limit IS NULL) = (rate_period IS NULL)
         AND (rate_limit IS NULL OR rate_limit > 0)
         AND (rate_period IS NULL OR rate_period > '0'::interval)),
    -- The rate window's end (window_start + rate_period) must be representable too.
    CONSTRAINT queues_timestamps_check CHECK (
        updated_at >= '0001-01-01 00:00:00+00' AND updated_at < '10000-01-01 00:00:00+00'
        AND paused_at >= '0001-01-01 00:00:00+00' AND paused_at < '10000-01-01 00:00:00+00'
        AND window_start >= '0001-01-01 00:00:00+00' AND window_start < '9900-01-01 00:00:00+00'
        AND rate_period <= interval '100 years')
);

COMMENT ON TABLE conveyor.queues IS 'Per-queue settings: paused, the global concurrency limit, the rate limit.';
COMMENT ON COLUMN conveyor.queues.name IS 'The queue''s name, as in conveyor.jobs.queue.';
COMMENT ON COLUMN conveyor.queues.paused_at IS 'Set while the queue is paused: no worker claims from it; running jobs finish.';
COMMENT ON COLUMN conveyor.queues.concurrency_limit IS 'At most this many jobs of the queue started at once, across all workers.';
COMMENT ON COLUMN conveyor.queues.updated_at IS 'When a setting of this queue last changed.';
COMMENT ON COLUMN conveyor.queues.rate_limit IS 'At most this many job starts per rate_period, across all workers.';
COMMENT ON COLUMN conveyor.queues.rate_period IS 'The rate limit''s window length.';
COMMENT ON COLUMN conveyor.queues.window_start IS 'Start of the current rate window.';
COMMENT ON COLUMN conveyor.queues.window_count IS 'Jobs started in the current rate window.';

-- ---------------------------------------------------------------- periodic

-- Periodic schedules: the last slot enqueued for each, so a new leader knows
-- what it missed.
CREATE TABLE conveyor.periodic (
    name       text        NOT NULL,
    last_slot  timestamptz NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT periodic_pkey PRIMARY KEY (name),
    CONSTRAINT periodic_timestamps_check CHECK (
        last_slot >= '0001-01-01 00:00:00+00' AND last_slot < '10000-01-01 00:00:00+00'
        AND updated_at >= '0001-01-01 00:00:00+00' AND updated_at < '10000-01-01 00:00:00+00')
);

COMMENT ON TABLE conveyor.periodic IS 'Periodic schedules: the latest slot enqueued for each.';
COMMENT ON COLUMN conveyor.periodic.name IS 'The schedule''s name, as registered with Periodic on the worker.';
COMMENT ON COLUMN conveyor.periodic.last_slot IS
    'The latest slot of the schedule whose job was enqueued; a new leader enqueues from the next one.';
COMMENT ON COLUMN conveyor.periodic.updated_at IS 'When last_slot last moved.';
