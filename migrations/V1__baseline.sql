-- Conveyor's schema as of its first release: every table, view, index,
-- sequence and trigger, with its COMMENT, in one file. The first migration;
-- any later change of the schema is a migration of its own after it (see
-- below). The pre-release migrations were squashed into it before the first
-- release (docs/decisions/2026-11-29-one-baseline.md).
--
-- Every object lives in the schema `conveyor`, and what only the library
-- uses in `conveyor_internal`. The library rewrites both names when a client
-- is configured with another schema (so every name below is written
-- schema-qualified, exactly so), and creates both schemas before this file
-- runs.
--
-- Function bodies are not here. Each function has one file in
-- migrations/functions/, which `conveyor::migrate` applies (CREATE OR
-- REPLACE, bodies unchecked) on every call, before the migrations: the body
-- you read there is the one the database runs. So this file may name
-- functions (a column default, the triggers) and call them: the ready
-- ring's slot tables, its insert slot and its claim, and the day tables of
-- the history are made by the functions that make them while the queue runs
-- (conveyor_internal.ready_bank_tables, define_ready_slot,
-- create_history_partitions), so their shape is written once.
--
-- This schema is a public interface: users query it with plain SQL, and
-- psql shows the COMMENTs below. Column names and state values are
-- documented in README.md ("The SQL interface") and docs/sql.md.
--
-- refinery keeps each applied migration's name and checksum in
-- conveyor.schema_history, and `conveyor::migrate` refuses a database whose
-- history disagrees with the files (such as one migrated by a build from
-- before the first release: recreate its schema). So, after the first
-- release:
-- * A change of the schema (a table, column, index, view, trigger, comment,
--   a row the migrations seed) is a new file, V<n>__<what>.sql, with the
--   next number. A released file is never edited, this one included.
-- * A change of a function body is an edit of its file alone: the next
--   migrate replaces the body, in the same transaction as any new migration
--   (the bodies first). Whatever a new body reads must be in place once that
--   transaction's migrations have run. A migration that calls a function
--   (this one calls the three above) runs with the body of the day it runs,
--   not the one it was written with: the body must keep working on the
--   schema as of that call, or a new database could not be made.
-- * Other arguments or another result type are not a body change: other
--   arguments make a second function beside the old one, which a new
--   migration drops (DROP FUNCTION IF EXISTS); CREATE OR REPLACE cannot
--   change a result type, and the function files run before the migrations,
--   so a new result type takes a new name (the old function dropped by a
--   migration, its file deleted).
--
-- Reading order: the stored job rows and their partitions, the claims, the
-- views that show jobs as workers see them (they read both), unique keys;
-- the ready ring; queues, workflows, statistics, workers, periodic
-- schedules; conveyor_internal's tables; then the triggers, by table.

-- ---------------------------------------------------------------- domains

-- The rules on one column are domains, not table CHECK constraints.
-- PostgreSQL reads back and plans every CHECK expression of a table again
-- for each INSERT or UPDATE statement; only a domain's constraints are kept
-- ready per connection. As 13 table checks, the rules of the job rows cost
-- a one-job enqueue about 380,000 server instructions, and the 3 of
-- conveyor.stats 140,000 (the enqueue counter's upsert), against 47,000 as
-- domains: about a third of the whole statement. Rows per batch statement
-- cost less too: a domain is checked only when its column is written
-- (docs/decisions/2026-11-25-checks-as-domains.md).
--
-- What a reader sees: columns whose types are domains over base types
-- (psql's \d shows conveyor.queue_name, not text; clients receive the base
-- type). A violation names the domain's constraint (e.g. `queue_name_check`).
-- Rules on several columns are table checks, on the partition where they
-- mean something (below).
--
-- Every timestamp a reader decodes is a finite time in years 1 to 9999
-- (conveyor.finite_timestamptz): PostgreSQL accepts 'infinity' and years up
-- to 294276; chrono and RFC 3339 do not.

CREATE DOMAIN conveyor.finite_timestamptz AS timestamptz
    CONSTRAINT finite_timestamptz_check
    CHECK (VALUE >= '0001-01-01 00:00:00+00' AND VALUE < '10000-01-01 00:00:00+00');
CREATE DOMAIN conveyor.queue_name AS text
    CONSTRAINT queue_name_check CHECK (VALUE <> '' AND length(VALUE) <= 128);
CREATE DOMAIN conveyor.task_name AS text
    CONSTRAINT task_name_check CHECK (VALUE <> '' AND length(VALUE) <= 255);
CREATE DOMAIN conveyor.non_negative_int AS integer
    CONSTRAINT non_negative_int_check CHECK (VALUE >= 0);
CREATE DOMAIN conveyor.non_negative_bigint AS bigint
    CONSTRAINT non_negative_bigint_check CHECK (VALUE >= 0);
CREATE DOMAIN conveyor.non_negative_interval AS interval
    CONSTRAINT non_negative_interval_check CHECK (VALUE >= '0'::interval);
CREATE DOMAIN conveyor.positive_interval AS interval
    CONSTRAINT positive_interval_check CHECK (VALUE > '0'::interval);
CREATE DOMAIN conveyor.json_array AS jsonb
    CONSTRAINT json_array_check CHECK (jsonb_typeof(VALUE) = 'array');
CREATE DOMAIN conveyor.json_object AS jsonb
    CONSTRAINT json_object_check CHECK (jsonb_typeof(VALUE) = 'object');
CREATE DOMAIN conveyor.histogram_ms AS bigint[]
    CONSTRAINT histogram_ms_check CHECK (cardinality(VALUE) = 19);

COMMENT ON DOMAIN conveyor.finite_timestamptz IS
    'A time a reader can decode: finite, in years 1 to 9999 (PostgreSQL accepts ''infinity'' and years up to 294276; chrono and RFC 3339 do not).';
COMMENT ON DOMAIN conveyor.queue_name IS 'A queue name: 1 to 128 characters.';
COMMENT ON DOMAIN conveyor.task_name IS 'A task name: 1 to 255 characters.';
COMMENT ON DOMAIN conveyor.non_negative_int IS 'A count: 0 or more.';
COMMENT ON DOMAIN conveyor.non_negative_bigint IS 'A count: 0 or more.';
COMMENT ON DOMAIN conveyor.non_negative_interval IS 'A duration of 0 or more.';
COMMENT ON DOMAIN conveyor.positive_interval IS 'A duration of more than 0.';
COMMENT ON DOMAIN conveyor.json_array IS 'A JSON array.';
COMMENT ON DOMAIN conveyor.json_object IS 'A JSON object.';
COMMENT ON DOMAIN conveyor.histogram_ms IS
    'Counts per bucket of conveyor.stats_buckets_ms() (19 buckets).';

-- ---------------------------------------------------------------- job rows

-- One row per job (task instance), partitioned by state
-- (docs/storage.md, docs/decisions/2026-11-24-history-partitions.md):
--
--   conveyor.job_rows                  PARTITION BY LIST (state)
--     conveyor.jobs_unfinished           pending, scheduled, started, retry
--     conveyor.jobs_success              PARTITION BY RANGE (finished_at)
--       conveyor.jobs_success_20261124     one table per UTC day
--       conveyor.jobs_success_default      anything no day table covers
--     conveyor.jobs_failure              likewise
--     conveyor.jobs_cancelled            likewise
--
-- Work in flight lives in the small jobs_unfinished, updated in place. A job
-- that ends is deleted from it and inserted into its state's table for the
-- day it finished, which is only ever inserted into. Retention drops a whole
-- day's table (conveyor_internal.drop_history_partitions), instead of
-- deleting rows one by one and leaving VACUUM the rest, so a history of any
-- size costs the queue nothing: claims read the ready ring, enqueues and
-- outcomes touch jobs_unfinished and today's tables.
--
-- No index makes job ids unique across the partitions (PostgreSQL has no
-- global indexes). jobs_unfinished has a primary key on id; every way the
-- library inserts a job checks that the id is not taken by a finished job
-- either (see src/db/insert_job.sql). A plain INSERT by hand is checked
-- against unfinished jobs only. A lookup by id reads the id index of every
-- partition (a few dozen at the default retention).
--
-- A job that a claim holds (conveyor.claims, below) is stored as pending:
-- readers read the view conveyor.jobs, which shows it started, and write
-- through it as through a table.
CREATE TABLE conveyor.job_rows (
    id                  uuid                           NOT NULL DEFAULT conveyor.uuid_v7(),
    queue               conveyor.queue_name            NOT NULL DEFAULT 'default',
    task                conveyor.task_name             NOT NULL,
    args                jsonb                          NOT NULL DEFAULT '{}'::jsonb,
    headers             conveyor.json_object           NOT NULL DEFAULT '{}'::jsonb,
    state               text                           NOT NULL DEFAULT 'pending',
    priority            integer                        NOT NULL DEFAULT 0,
    run_at              conveyor.finite_timestamptz    NOT NULL DEFAULT statement_timestamp(),
    attempt             conveyor.non_negative_int      NOT NULL DEFAULT 0,
    max_retries         conveyor.non_negative_int      NOT NULL DEFAULT 25,
    retry_backoff_base  conveyor.non_negative_interval NOT NULL DEFAULT '1 second',
    retry_backoff       interval,
    timeout             conveyor.positive_interval,
    lease_expires_at    conveyor.finite_timestamptz,
    worker_id           text,
    result              jsonb,
    last_error          text,
    errors              conveyor.json_array            NOT NULL DEFAULT '[]'::jsonb,
    created_at          conveyor.finite_timestamptz    NOT NULL DEFAULT now(),
    started_at          conveyor.finite_timestamptz,
    -- The day tables' partition key (it cannot be a domain): days take only
    -- their own times, and the default partitions check the range.
    finished_at         timestamptz,
    workflow_id         uuid,
    workflow_index      integer,
    on_success          jsonb,
    on_error            jsonb,
    -- Only ever tested for NULL, as is unique_until.
    cancel_requested_at timestamptz,
    unique_key          text,
    unique_until        timestamptz,
    lease_token         bigint
) PARTITION BY LIST (state);

-- `state` is the partition key: a row whose state no partition takes is
-- refused by PostgreSQL's routing, so the states need no check of their own.
-- Updated in place many times per job: room is left on each page for HOT
-- updates (lease renewals of settled jobs, promotions) and it is vacuumed
-- early. A running job always has a lease and the fencing token of its
-- claim; a waiting job has neither a lease nor an end.
CREATE TABLE conveyor.jobs_unfinished PARTITION OF conveyor.job_rows (
    CONSTRAINT jobs_unfinished_pkey PRIMARY KEY (id),
    CONSTRAINT jobs_unfinished_lease_check CHECK (
        CASE WHEN state = 'started' THEN lease_expires_at IS NOT NULL AND lease_token IS NOT NULL
             ELSE lease_expires_at IS NULL END
        AND finished_at IS NULL)
) FOR VALUES IN ('pending', 'scheduled', 'started', 'retry')
WITH (
    fillfactor = 90,
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_analyze_scale_factor = 0.02
);

-- Finished jobs: a table per final state, each partitioned by the UTC day of
-- finished_at. A finished job holds no lease; its finished_at is never NULL
-- and within the day of its table. The default partitions take any time,
-- and a NULL partition key too, so they check that finished_at is set and
-- in the range a reader can decode.
CREATE TABLE conveyor.jobs_success PARTITION OF conveyor.job_rows (
    CONSTRAINT jobs_success_lease_check CHECK (lease_expires_at IS NULL)
) FOR VALUES IN ('success') PARTITION BY RANGE (finished_at);
CREATE TABLE conveyor.jobs_failure PARTITION OF conveyor.job_rows (
    CONSTRAINT jobs_failure_lease_check CHECK (lease_expires_at IS NULL)
) FOR VALUES IN ('failure') PARTITION BY RANGE (finished_at);
CREATE TABLE conveyor.jobs_cancelled PARTITION OF conveyor.job_rows (
    CONSTRAINT jobs_cancelled_lease_check CHECK (lease_expires_at IS NULL)
) FOR VALUES IN ('cancelled') PARTITION BY RANGE (finished_at);

CREATE TABLE conveyor.jobs_success_default PARTITION OF conveyor.jobs_success (
    CONSTRAINT jobs_success_default_finished_check CHECK (
        finished_at IS NOT NULL AND finished_at >= '0001-01-01 00:00:00+00' AND finished_at < '10000-01-01 00:00:00+00')
) DEFAULT;
CREATE TABLE conveyor.jobs_failure_default PARTITION OF conveyor.jobs_failure (
    CONSTRAINT jobs_failure_default_finished_check CHECK (
        finished_at IS NOT NULL AND finished_at >= '0001-01-01 00:00:00+00' AND finished_at < '10000-01-01 00:00:00+00')
) DEFAULT;
CREATE TABLE conveyor.jobs_cancelled_default PARTITION OF conveyor.jobs_cancelled (
    CONSTRAINT jobs_cancelled_default_finished_check CHECK (
        finished_at IS NOT NULL AND finished_at >= '0001-01-01 00:00:00+00' AND finished_at < '10000-01-01 00:00:00+00')
) DEFAULT;

COMMENT ON TABLE conveyor.job_rows IS
    'The stored rows of conveyor.jobs, partitioned by state (jobs_unfinished, and one table per day for each final state). A job that a claim holds (conveyor.claims) is stored as pending: read conveyor.jobs for the state as workers see it.';
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

-- The views below copy these descriptions (and the defaults) from here.
COMMENT ON COLUMN conveyor.job_rows.id IS 'Job id: a UUIDv7 by default, or the id the caller gave (idempotent enqueue).';
COMMENT ON COLUMN conveyor.job_rows.queue IS 'Queue name (machinery''s routing key). Workers claim from the queues they serve.';
COMMENT ON COLUMN conveyor.job_rows.task IS 'Registered task name; selects the handler.';
COMMENT ON COLUMN conveyor.job_rows.args IS 'JSON arguments given to the handler.';
COMMENT ON COLUMN conveyor.job_rows.headers IS 'Free-form JSON object of metadata (e.g. tracing context).';
COMMENT ON COLUMN conveyor.job_rows.state IS 'pending | scheduled | started | retry | success | failure | cancelled (see README). Also the partition key.';
COMMENT ON COLUMN conveyor.job_rows.priority IS 'Higher runs first within a queue.';
COMMENT ON COLUMN conveyor.job_rows.run_at IS 'Earliest time the job may start (ETA, or when the next retry is due).';
COMMENT ON COLUMN conveyor.job_rows.attempt IS 'Number of attempts started so far (1 while the first attempt runs).';
COMMENT ON COLUMN conveyor.job_rows.max_retries IS 'Retries allowed after the first attempt: at most 1 + max_retries attempts.';
COMMENT ON COLUMN conveyor.job_rows.retry_backoff_base IS 'Fibonacci backoff unit: the n-th retry waits fib(n) times this.';
COMMENT ON COLUMN conveyor.job_rows.retry_backoff IS 'Delay used for the latest retry (machinery''s RetryTimeout); NULL before any retry.';
COMMENT ON COLUMN conveyor.job_rows.timeout IS 'Per-attempt time limit; NULL means the worker''s default for the task.';
COMMENT ON COLUMN conveyor.job_rows.lease_expires_at IS 'While started: when the worker''s claim lapses unless renewed.';
COMMENT ON COLUMN conveyor.job_rows.worker_id IS 'While started: the worker holding the job.';
COMMENT ON COLUMN conveyor.job_rows.result IS 'JSON result of a successful job.';
COMMENT ON COLUMN conveyor.job_rows.last_error IS 'Error message of the latest failed attempt.';
COMMENT ON COLUMN conveyor.job_rows.errors IS 'Every failed attempt, oldest first: [{"attempt", "at", "error", "worker_id"}].';
COMMENT ON COLUMN conveyor.job_rows.created_at IS 'When the job was enqueued.';
COMMENT ON COLUMN conveyor.job_rows.started_at IS 'When the latest attempt started.';
COMMENT ON COLUMN conveyor.job_rows.finished_at IS 'When the job reached success, failure or cancelled (the day partition key of finished jobs).';
COMMENT ON COLUMN conveyor.job_rows.workflow_id IS 'The chain, group or chord this job belongs to (conveyor.workflows.id).';
COMMENT ON COLUMN conveyor.job_rows.workflow_index IS 'Position: member index in a group/chord, step index in a chain; NULL for a chord callback.';
COMMENT ON COLUMN conveyor.job_rows.on_success IS 'Specs of jobs or workflows to enqueue when this job succeeds (next chain step, success callbacks).';
COMMENT ON COLUMN conveyor.job_rows.on_error IS 'Specs of jobs to enqueue when this job fails for good (error callbacks).';
COMMENT ON COLUMN conveyor.job_rows.cancel_requested_at IS
    'When cancellation was asked for. A started job keeps running until its worker stops it (state then becomes cancelled).';
COMMENT ON COLUMN conveyor.job_rows.unique_key IS
    'Uniqueness key: no other unfinished job (or, with unique_until, no other job until then) has it.';
COMMENT ON COLUMN conveyor.job_rows.unique_until IS
    'For a TTL-scoped unique job: when its key may be used again. NULL: unique until finished.';
COMMENT ON COLUMN conveyor.job_rows.lease_token IS
    'Fencing token of the latest claim (conveyor.lease_tokens; shared by the jobs one claim statement took): outcome, lease renewal and release must present (id, lease_token). Kept after that claim''s worker records the outcome; NULL before any claim and after a claim ended without its worker (rescue, release).';

-- Unfinished jobs. Claims read the ready ring (conveyor.ready), not these.
--
-- Running jobs are keyed on the queue, not on the lease: the rescuer reads
-- all of them, and a claim counts them per queue for a queue with a
-- concurrency limit; a lease renewal, which changes only lease_expires_at,
-- is then a HOT update (one new row version on the same page, no index
-- entry) instead of a new entry in every index of the table, for every
-- running job, every third of a lease
-- (docs/decisions/2026-11-24-hot-heartbeats.md).
CREATE INDEX jobs_waiting_idx ON conveyor.jobs_unfinished (queue, run_at)
    WHERE state IN ('scheduled', 'retry');
CREATE INDEX jobs_running_idx ON conveyor.jobs_unfinished (queue) WHERE state = 'started';
-- Unique jobs. "Until finished": at most one unfinished job per key, held by
-- this partial unique index. "For a TTL": a key row in conveyor.unique_keys
-- that a new job may take over only once it expired.
CREATE UNIQUE INDEX jobs_unique_active_idx ON conveyor.jobs_unfinished (unique_key)
    WHERE unique_key IS NOT NULL AND unique_until IS NULL;

-- Members and steps of a workflow, in order: in every partition.
CREATE INDEX jobs_workflow_idx ON conveyor.job_rows (workflow_id, workflow_index)
    WHERE workflow_id IS NOT NULL;

-- Finished jobs, in each final state's day tables (every new day table gets
-- them): by id, and for the dashboard's lists newest first, all of them, of
-- one queue, of one task. A queue or task that is rare among millions of
-- kept successes would otherwise make its list walk every success to fill a
-- page. Each of the last two also carries the other filter column and the
-- id, so a list narrowed to both a queue and a task (even a pair that never
-- occurs) and the keyset tie-break on id are answered from the index alone.
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

-- The day tables from today to two days ahead. Every worker's maintenance
-- calls the same function, so a day's table exists well before its first
-- job finishes.
SELECT conveyor_internal.create_history_partitions(2);

-- ---------------------------------------------------------------- claims

-- A claim leaves the job rows alone (docs/decisions/2026-11-25-batch-claims.md).
-- A claim statement writes one row, in conveyor.claims, listing the jobs it
-- took under its fencing token; the jobs' rows stay as they were enqueued
-- ('pending' on disk). A job is started when
--   * its row says 'started' (a lease of its own: a job whose claim was
--     settled, see below), or
--   * its row says 'pending' and a claim lists it whose token is above the
--     job row's lease_token (the token it was last made runnable with: every
--     write that makes a job runnable again gives it a token at least that
--     of the claim that last held it, so at most one claim holds a job).
-- The views below show such a job as started, with its attempt, token,
-- lease, worker and started_at.
--
-- Operations on single jobs (cancel, delete, an UPDATE through the view,
-- release, rescue) first "settle" the claims of their jobs
-- (conveyor_internal.settle_claims): the claimed jobs' rows are rewritten
-- as started, with the claim's lease, and the claim no longer counts them.
-- After that the stored row is the whole truth.

-- Fencing tokens. Every claim statement takes a fresh value for the jobs it
-- claims (conveyor.claims.lease_token, and job_rows.lease_token of a settled
-- job), and outcomes, lease renewals and releases must present (id,
-- lease_token): a stale worker's late write can never land on a newer run,
-- even after a re-queue reset the attempt count. Nothing ever resets the
-- sequence, and a statement claims a job at most once. The tokens are
-- handed out in call order (no CACHE above 1): the fence relies on a claim
-- that sees a job's ring row drawing its token after the write that made
-- the job runnable drew the job's.
CREATE SEQUENCE conveyor.lease_tokens AS bigint CACHE 1;

COMMENT ON SEQUENCE conveyor.lease_tokens IS
    'Fencing tokens: each claim statement takes the next value for the jobs it claims (jobs.lease_token); never reset.';

CREATE TABLE conveyor.claims (
    lease_token      bigint                      NOT NULL,
    queue            conveyor.queue_name         NOT NULL,
    worker_id        text                        NOT NULL,
    started_at       conveyor.finite_timestamptz NOT NULL,
    lease_expires_at conveyor.finite_timestamptz NOT NULL,
    job_ids          uuid[]                      NOT NULL,
    jobs_left        integer                     NOT NULL,
    CONSTRAINT claims_pkey PRIMARY KEY (lease_token),
    CONSTRAINT claims_jobs_left_check CHECK (jobs_left >= 0)
);

-- The job ids of a large claim (above about 125 jobs) are kept out of line
-- without trying to compress them first: random uuids do not compress, and
-- the attempt showed in profiles of claims of 500 (pglz_compress, 0.9 % of
-- all samples).
ALTER TABLE conveyor.claims ALTER COLUMN job_ids SET STORAGE EXTERNAL;

COMMENT ON TABLE conveyor.claims IS
    'One row per claim statement: the jobs it took, still pending on disk, and their shared lease. A job listed here is started when its row says pending and its lease_token is below this claim''s (see the view conveyor.jobs).';
COMMENT ON COLUMN conveyor.claims.lease_token IS
    'The claim''s fencing token (conveyor.lease_tokens): every job it took carries it while running.';
COMMENT ON COLUMN conveyor.claims.queue IS 'The queue the claim took its jobs from.';
COMMENT ON COLUMN conveyor.claims.worker_id IS 'The worker process holding the claim (conveyor.workers).';
COMMENT ON COLUMN conveyor.claims.started_at IS 'When the claim was made: the started_at of each job it holds.';
COMMENT ON COLUMN conveyor.claims.lease_expires_at IS
    'The lease of every job the claim still holds: renewed by its worker''s heartbeat, one update per claim; the rescuer takes the claim''s jobs back after it.';
COMMENT ON COLUMN conveyor.claims.job_ids IS
    'The jobs the claim took. A job stops being held by this claim when its row is written: finished, retried, or settled (rewritten as started with this token).';
COMMENT ON COLUMN conveyor.claims.jobs_left IS
    'How many listed jobs are still held with their row pending on disk; the row is deleted when it reaches 0.';

-- A claim from a queue with a global concurrency limit counts the jobs the
-- queue's claims still hold. Summed over every conveyor.claims row of the
-- queue, that would be a sequential scan of the table; while another session
-- holds a snapshot, every claim and count-down leaves a version in it that
-- vacuum may not remove, so each such claim would read more the longer the
-- hold lasted (pickup p99 past 100 ms after 450 s of hold at 1,500 jobs/s;
-- docs/benchmarks.md, "S with a concurrency-limited queue"). The count takes
-- the claims whose lease is live (conveyor_internal.live_leases(),
-- lease_expires_at in the future) through this index: the versions written
-- within one lease period, whatever the length of the hold
-- (docs/decisions/2026-11-25-live-leases-count.md).
CREATE INDEX claims_live_idx ON conveyor.claims (queue, lease_expires_at);

COMMENT ON INDEX conveyor.claims_live_idx IS
    'A queue''s claims with a live lease, for the concurrency limit''s count (conveyor_internal.live_leases).';

-- The rescuer looks for claims whose lease has expired (lease_expires_at <
-- now()). Every claim ever ended matches that once its lease has passed, so
-- while a pg_dump (or any session) holds its snapshot the versions of every
-- claim ended since it began stay in the index: the rescuer reads from a
-- floor up (conveyor_internal.rescue_floor, below), and a range of leases
-- across queues is one stretch of this index, where claims_live_idx, which
-- leads with the queue, would be walked whole
-- (docs/decisions/2026-11-29-rescue-floor.md).
CREATE INDEX claims_lease_idx ON conveyor.claims (lease_expires_at);

COMMENT ON INDEX conveyor.claims_lease_idx IS
    'Claims by lease, for the rescuer''s range from its floor (conveyor_internal.rescue_floor) to now.';

-- ---------------------------------------------------------------- jobs as workers see them

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

-- Every job, with the state workers see: the columns and meaning of the
-- stored rows. INSTEAD OF triggers (below) make INSERT, UPDATE and DELETE on
-- it work as on a table.
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

-- The jobs running now, as conveyor.jobs shows them (state started), without
-- reading the other unfinished jobs (docs/decisions/2026-11-28-reads-at-scale.md).
-- In conveyor.jobs (and conveyor.active_jobs) a job's state is worked out
-- from its stored row and the live claims for every unfinished row, so a
-- filter on state cannot use an index there: "who is running what" would
-- read the whole backlog (133 ms with a million jobs waiting, against 1 ms
-- for a plain table). Here the two kinds of running job are read each where
-- it is: rows stored as started (a claim settled them: jobs_running_idx),
-- and pending rows a live claim holds (conveyor.claims, one row per claim).
CREATE VIEW conveyor.running_jobs AS
SELECT j.id, j.queue, j.task, j.args, j.headers, j.state, j.priority, j.run_at,
       j.attempt, j.max_retries, j.retry_backoff_base, j.retry_backoff, j.timeout,
       j.lease_expires_at, j.worker_id, j.result, j.last_error, j.errors, j.created_at,
       j.started_at, j.finished_at, j.workflow_id, j.workflow_index, j.on_success,
       j.on_error, j.cancel_requested_at, j.unique_key, j.unique_until, j.lease_token
FROM conveyor.jobs_unfinished j
WHERE j.state = 'started'
UNION ALL
SELECT j.id, j.queue, j.task, j.args, j.headers, 'started'::text AS state, j.priority,
       j.run_at,
       (least(j.attempt, 2147483646) + 1)::conveyor.non_negative_int AS attempt,
       j.max_retries, j.retry_backoff_base, j.retry_backoff, j.timeout,
       c.lease_expires_at, c.worker_id, j.result, j.last_error, j.errors, j.created_at,
       c.started_at, j.finished_at, j.workflow_id, j.workflow_index, j.on_success,
       j.on_error, j.cancel_requested_at, j.unique_key, j.unique_until, c.lease_token
FROM conveyor.claims c
CROSS JOIN LATERAL unnest(c.job_ids) AS u(job_id)
JOIN conveyor.jobs_unfinished j ON j.id = u.job_id
WHERE c.jobs_left > 0 AND j.state = 'pending' AND c.lease_token > coalesce(j.lease_token, 0);

COMMENT ON VIEW conveyor.running_jobs IS
    'The jobs running now (state started), with the same columns and values as in conveyor.jobs: rows stored as started, and pending rows a live claim (conveyor.claims) holds. Reads only those, however many jobs wait.';

-- conveyor.jobs's columns default as the stored rows' do, for INSERTs
-- through it, and the three views' columns are described as the stored
-- rows' are (but for state).
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
        EXECUTE format('COMMENT ON COLUMN conveyor.running_jobs.%I IS %L', c.attname, c.comment);
    END LOOP;
END
$$;
COMMENT ON COLUMN conveyor.jobs.state IS
    'scheduled, pending, started, retry, success, failure or cancelled. A job a claim holds (conveyor.claims) is started here and pending in its stored row.';
COMMENT ON COLUMN conveyor.active_jobs.state IS
    'scheduled, pending, started or retry. A job a claim holds (conveyor.claims) is started here and pending in its stored row.';
COMMENT ON COLUMN conveyor.running_jobs.state IS 'Always started.';

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

-- ---------------------------------------------------------------- the ready ring

-- Runnable jobs in claim order, kept apart from the job rows so that a held
-- snapshot cannot slow the claim down (docs/storage.md,
-- docs/decisions/2026-11-24-ready-ring.md).
--
-- Every job stored as pending that no claim holds has one row here (a few
-- stale rows may exist for moments: see below). Claims read this table's
-- index from its head, lock rows with SKIP LOCKED, delete them and list
-- their jobs in a conveyor.claims row. A deleted row leaves a dead index
-- entry at the head of the claim order; while another transaction holds
-- the xmin horizon, VACUUM may not remove it and every later claim would
-- walk it. So rows are only ever inserted and deleted, into slots that
-- rotate with time: each slot takes the inserts of one second
-- (conveyor_internal.ready_slot()), then is sealed, and once nearly drained
-- its few remaining rows are carried into the current slot and the slot is
-- emptied with TRUNCATE, which frees its space at once, whatever snapshots
-- are held (conveyor_internal.rotate_ring()). A claim therefore walks at
-- most the dead entries of the slots not yet emptied.
--
-- Slots come in banks of 8 (docs/decisions/2026-11-28-ready-banks.md).
-- pg_dump takes an ACCESS SHARE lock on every table it dumps and keeps it,
-- with its snapshot, for its whole run: a slot it locked cannot be emptied
-- by TRUNCATE, and every claim would walk the dead entries of every job
-- claimed since the dump began (at 1,500 jobs/s the queue fell behind about
-- 150 s into a real dump). A lock covers only the tables that exist when it
-- is taken. So bank 0 is slots 0-7 (tables conveyor.ready_0 … _7, always
-- there), bank b the slots 8b … 8b+7 (tables conveyor.ready_<8b> …
-- ready_<8b+7>, created on demand). Inserts go to the current bank, named in
-- conveyor.ready_bank. When a long transaction holds a slot of the current
-- bank, the rotator creates or empties another bank, attaches it (ATTACH
-- PARTITION takes SHARE UPDATE EXCLUSIVE on conveyor.ready, which a dump's
-- ACCESS SHARE does not block), makes it current and carries the held
-- bank's runnable rows into it; claims read the current bank only. Once the
-- holder is gone, the ring goes back to bank 0 and the other banks are
-- detached and dropped.
--
-- Rows are written by triggers on the job rows (below), so every way a job
-- becomes pending (enqueue, COPY, a plain INSERT, promotion of a due
-- scheduled or retrying job, release, rescue, re-queue, an UPDATE by hand)
-- adds its row, and every way it stops being pending other than a claim
-- (cancel, delete, an UPDATE by hand) removes it. A row whose job is no
-- longer pending (the removal met a row a claim had locked) is deleted by
-- the next claim that reaches it, which then leaves the job alone.
CREATE TABLE conveyor.ready (
    slot     smallint    NOT NULL,
    queue    text        NOT NULL,
    priority integer     NOT NULL,
    run_at   timestamptz NOT NULL,
    job_id   uuid        NOT NULL,
    task     text        NOT NULL
) PARTITION BY LIST (slot);

COMMENT ON TABLE conveyor.ready IS
    'Runnable (pending) jobs in claim order, one row each, in slots that rotate every second and are emptied by TRUNCATE, in banks of 8 slots (conveyor.ready_bank). Written by triggers on conveyor.jobs; read by claims.';
COMMENT ON COLUMN conveyor.ready.slot IS
    'Ring slot: 8 * bank + the second the row was inserted, modulo 8 (bank 0: slots 0-7; see conveyor.ready_bank).';
COMMENT ON COLUMN conveyor.ready.queue IS 'The job''s queue (conveyor.jobs.queue).';
COMMENT ON COLUMN conveyor.ready.priority IS 'The job''s priority (conveyor.jobs.priority).';
COMMENT ON COLUMN conveyor.ready.run_at IS 'The job''s run_at (conveyor.jobs.run_at).';
COMMENT ON COLUMN conveyor.ready.job_id IS 'The job (conveyor.jobs.id).';
COMMENT ON COLUMN conveyor.ready.task IS 'The job''s task (conveyor.jobs.task): workers claim only tasks they have handlers for.';

-- The claim order within a queue as one all-ascending key: (queue,
-- -priority, run_at, job_id), the order of (queue, priority DESC, run_at,
-- job_id). Written this way a claim can start after a given key with one
-- row comparison the index serves, which the per-slot floors need
-- (docs/decisions/2026-11-24-ring-floors.md). priority is widened to bigint
-- first: -(-2147483648) does not fit an int. Each slot has its copy (a claim
-- merges them); the claim filters on task from the row it locks anyway.
CREATE INDEX ready_claim_idx ON conveyor.ready (queue, (-(priority::bigint)), run_at, job_id);

COMMENT ON INDEX conveyor.ready_claim_idx IS
    'Claims: runnable jobs of one queue in claim order (highest priority first, then oldest run_at, then id), as one ascending key.';

CREATE TABLE conveyor.ready_bank (
    bank     smallint    NOT NULL DEFAULT 0 CHECK (bank >= 0 AND bank < 4096),
    since    timestamptz NOT NULL DEFAULT now(),
    held_by  text
);

-- One row, always.
CREATE UNIQUE INDEX ready_bank_one_row ON conveyor.ready_bank ((true));
INSERT INTO conveyor.ready_bank (bank) VALUES (0);

COMMENT ON TABLE conveyor.ready_bank IS
    'The bank of conveyor.ready slots that takes inserts now (one row, written by conveyor_internal.rotate_ring()). Bank 0 is conveyor.ready_0 … _7; another bank is used while a long transaction (a pg_dump) holds a slot of bank 0.';
COMMENT ON COLUMN conveyor.ready_bank.bank IS
    'The current bank b: new ring rows go to slot 8b + (the second modulo 8), table conveyor.ready_<slot>.';
COMMENT ON COLUMN conveyor.ready_bank.since IS 'When this bank became current.';
COMMENT ON COLUMN conveyor.ready_bank.held_by IS
    'Why: the transaction that held the previous bank (pid, application name), or NULL for bank 0.';

-- Bank 0's slot tables, conveyor.ready_0 … _7. And the functions whose
-- bodies name the current bank: conveyor_internal.ready_slot(), the slot
-- every insert into the ring asks for, and conveyor_internal.claim_ready(),
-- the workers' claim (its file says why the bank is a constant there). The
-- function files already wrote them for bank 0; this call checks it.
SELECT conveyor_internal.ready_bank_tables(bank) FROM conveyor.ready_bank;
SELECT conveyor_internal.define_ready_slot(bank) FROM conveyor.ready_bank;

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

-- The dashboard's workflow list: top-level workflows of one state, newest
-- first (ids are UUIDv7). Written when a workflow is created and when it
-- finishes; counter updates leave it alone
-- (docs/decisions/2026-11-24-dashboard-pages.md).
CREATE INDEX workflows_list_idx ON conveyor.workflows (state, id) WHERE parent_id IS NULL;

COMMENT ON TABLE conveyor.workflows IS
    'One row per chain, group or chord: its progress counters, state and callbacks.';
COMMENT ON COLUMN conveyor.workflows.id IS
    'The workflow''s id: a chain, group or chord enqueued together; members carry it in conveyor.jobs.workflow_id.';
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
COMMENT ON COLUMN conveyor.workflows.created_at IS 'When the workflow was enqueued.';
COMMENT ON COLUMN conveyor.workflows.finished_at IS
    'When the workflow reached succeeded or failed; NULL while running.';
COMMENT ON INDEX conveyor.workflows_list_idx IS
    'Dashboard: top-level workflows of one state, newest first.';

-- ---------------------------------------------------------------- statistics

-- Per-minute rollups of outcomes by queue and task, kept after the jobs
-- themselves are pruned (docs/decisions/2026-11-24-stats-rollups.md), and
-- the all-time totals a metrics scrape serves
-- (docs/decisions/2026-11-25-metrics.md).
--
-- Every statement that ends attempts adds its counts to conveyor.stats in the
-- same transaction (conveyor_internal.count_outcomes(): the completer's
-- batches, the rescuer, releases that end cancelled, conveyor.cancel()), one
-- upsert per statement and (queue, task), so a rollup counts exactly the
-- outcomes that committed. Enqueues are counted once per inserting statement
-- (conveyor_internal.count_enqueued(), by the triggers below). A worker that
-- learns it lost a job's lease (its renewal no longer finds the job started
-- under its token, the lease lapsed by its own clock, or its outcome batch
-- found the job gone) adds it too, one small upsert per batch of losses, off
-- the path of outcomes, so that every process serving metrics sees it. The
-- pruner deletes rows older than the statistics' retention (30 days by
-- default).
--
-- Rows are spread over shards, so that concurrent writers rarely wait for
-- each other's row lock; read them summed over shards:
-- * outcomes and leases lost go to shards 1 to 64 (the writer's backend pid
--   modulo 64, plus 1): a writer holds its shard's row from the count to its
--   commit, which waits for the WAL flush, and with 50 worker processes
--   recording small batches, 8 shards made 4 backends on average wait for
--   each other's rows (docs/decisions/2026-11-28-fleets.md);
-- * enqueues go to shard -pid (one row per inserting backend: an enqueue in
--   a long user transaction holds its row lock until commit, and no other
--   backend ever waits for it);
-- * shard 0 holds only what the fold (src/db/fold_stats.sql) moved there.
--
-- The counters a scrape serves (jobs enqueued, succeeded, failed, retried,
-- rescued, cancelled, leases lost; queue wait and run time histograms, by
-- queue and task) must be the same for every process, survive restarts and
-- the pruning of jobs, never go down when the rollups' own retention deletes
-- old minutes, and cost a bounded read whatever the history kept. So
-- conveyor.stats_totals holds, per queue and task, the sum of every row ever
-- deleted from a shard other than 0: the trigger stats_totals (below) adds
-- them as they are deleted, by the fold or by retention, in the deleting
-- statement. Every count is then, at any snapshot, in exactly one of: a row
-- of a shard other than 0 (at most about ten minutes of them, found through
-- stats_unfolded_idx), or conveyor.stats_totals. A scrape reads those two
-- (src/db/metrics_totals.sql): a cost that follows the queues, tasks and
-- writers of the last minutes, never the jobs or minutes kept.
--
-- Rows that count only enqueues or leases lost carry no histograms (NULL: a
-- row a third the size, and so a third of the WAL per enqueue statement):
-- every reader sums the elements, which skips NULLs, and histogram_add()
-- treats a NULL side as zeros.
CREATE TABLE conveyor.stats (
    minute      conveyor.finite_timestamptz  NOT NULL,
    queue       text                         NOT NULL,
    task        text                         NOT NULL,
    shard       integer                      NOT NULL,
    succeeded   conveyor.non_negative_bigint NOT NULL DEFAULT 0,
    failed      conveyor.non_negative_bigint NOT NULL DEFAULT 0,
    retried     conveyor.non_negative_bigint NOT NULL DEFAULT 0,
    rescued     conveyor.non_negative_bigint NOT NULL DEFAULT 0,
    cancelled   conveyor.non_negative_bigint NOT NULL DEFAULT 0,
    wait_ms     conveyor.histogram_ms,
    run_ms      conveyor.histogram_ms,
    enqueued    conveyor.non_negative_bigint NOT NULL DEFAULT 0,
    wait_ms_sum float8                       NOT NULL DEFAULT 0,
    run_ms_sum  float8                       NOT NULL DEFAULT 0,
    leases_lost conveyor.non_negative_bigint NOT NULL DEFAULT 0,
    CONSTRAINT stats_pkey PRIMARY KEY (minute, queue, task, shard)
);

CREATE INDEX stats_unfolded_idx ON conveyor.stats (minute) WHERE shard <> 0;

COMMENT ON TABLE conveyor.stats IS
    'Per-minute rollups of attempt outcomes by queue and task (sum over shard), kept after jobs are pruned.';
COMMENT ON COLUMN conveyor.stats.minute IS 'Start of the minute (server clock) in which the outcomes committed.';
COMMENT ON COLUMN conveyor.stats.queue IS 'The jobs'' queue.';
COMMENT ON COLUMN conveyor.stats.task IS 'The jobs'' task.';
COMMENT ON COLUMN conveyor.stats.shard IS
    'Spreads concurrent writers over rows: 1 to 64 for outcomes and leases lost (writer''s backend pid modulo 64, plus 1), minus the backend pid for enqueues, 0 for rows the fold made (already in conveyor.stats_totals). Sum over it.';
COMMENT ON COLUMN conveyor.stats.succeeded IS 'Attempts that succeeded.';
COMMENT ON COLUMN conveyor.stats.failed IS 'Jobs that failed for good (an attempt with no retry left, or a lease expired with none left).';
COMMENT ON COLUMN conveyor.stats.retried IS 'Attempts that failed and will be retried.';
COMMENT ON COLUMN conveyor.stats.rescued IS 'Attempts whose lease expired, recovered by the rescuer (whatever state they went to).';
COMMENT ON COLUMN conveyor.stats.cancelled IS 'Jobs that ended cancelled.';
COMMENT ON COLUMN conveyor.stats.wait_ms IS
    'Histogram of queue wait (started_at - run_at) of the attempts a worker ended: counts per bucket, bucket lower bounds in conveyor.stats_buckets_ms(). NULL in rows that count only enqueues or leases lost.';
COMMENT ON COLUMN conveyor.stats.run_ms IS
    'Histogram of run time (outcome - started_at) of the attempts a worker ended, buckets as wait_ms. NULL in rows that count only enqueues or leases lost.';
COMMENT ON COLUMN conveyor.stats.enqueued IS
    'Jobs that entered the unfinished table: new jobs (any insert path) and jobs re-queued from failure or cancelled.';
COMMENT ON COLUMN conveyor.stats.wait_ms_sum IS 'Sum of the queue waits counted in wait_ms, in milliseconds.';
COMMENT ON COLUMN conveyor.stats.run_ms_sum IS 'Sum of the run times counted in run_ms, in milliseconds.';
COMMENT ON COLUMN conveyor.stats.leases_lost IS
    'Attempts whose worker learned it had lost the lease before its outcome was written (the outcome was not recorded), counted by that worker. Not the rescues: a lease the rescuer takes back is in `rescued` whether or not its worker ever hears of it.';
COMMENT ON INDEX conveyor.stats_unfolded_idx IS
    'Rows not yet folded into shard 0 (and so not in conveyor.stats_totals): what a metrics scrape adds to the totals, and where folding starts.';

CREATE TABLE conveyor.stats_totals (
    queue       text                         NOT NULL,
    task        text                         NOT NULL,
    enqueued    bigint                       NOT NULL DEFAULT 0,
    succeeded   bigint                       NOT NULL DEFAULT 0,
    failed      bigint                       NOT NULL DEFAULT 0,
    retried     bigint                       NOT NULL DEFAULT 0,
    rescued     bigint                       NOT NULL DEFAULT 0,
    cancelled   bigint                       NOT NULL DEFAULT 0,
    wait_ms     conveyor.histogram_ms        NOT NULL,
    run_ms      conveyor.histogram_ms        NOT NULL,
    wait_ms_sum float8                       NOT NULL DEFAULT 0,
    run_ms_sum  float8                       NOT NULL DEFAULT 0,
    leases_lost conveyor.non_negative_bigint NOT NULL DEFAULT 0,
    CONSTRAINT stats_totals_pkey PRIMARY KEY (queue, task)
);

COMMENT ON TABLE conveyor.stats_totals IS
    'All-time sums, by queue and task, of the conveyor.stats rows deleted from shards other than 0 (folded or past retention); with the rows still in those shards, the all-time totals (never pruned).';
COMMENT ON COLUMN conveyor.stats_totals.queue IS 'The jobs'' queue.';
COMMENT ON COLUMN conveyor.stats_totals.task IS 'The jobs'' task.';
COMMENT ON COLUMN conveyor.stats_totals.enqueued IS 'Jobs that entered the unfinished table (see conveyor.stats.enqueued).';
COMMENT ON COLUMN conveyor.stats_totals.succeeded IS 'Attempts that succeeded.';
COMMENT ON COLUMN conveyor.stats_totals.failed IS 'Jobs that failed for good.';
COMMENT ON COLUMN conveyor.stats_totals.retried IS 'Attempts that failed and were retried.';
COMMENT ON COLUMN conveyor.stats_totals.rescued IS 'Attempts whose lease expired, recovered by the rescuer.';
COMMENT ON COLUMN conveyor.stats_totals.cancelled IS 'Jobs that ended cancelled.';
COMMENT ON COLUMN conveyor.stats_totals.wait_ms IS 'Histogram of queue waits (buckets of conveyor.stats_buckets_ms()).';
COMMENT ON COLUMN conveyor.stats_totals.run_ms IS 'Histogram of run times (buckets of conveyor.stats_buckets_ms()).';
COMMENT ON COLUMN conveyor.stats_totals.wait_ms_sum IS 'Sum of the queue waits counted, in milliseconds.';
COMMENT ON COLUMN conveyor.stats_totals.run_ms_sum IS 'Sum of the run times counted, in milliseconds.';
COMMENT ON COLUMN conveyor.stats_totals.leases_lost IS
    'Leases lost, as workers counted them (see conveyor.stats.leases_lost).';

-- ---------------------------------------------------------------- workers

-- The worker registry: every worker process has a row from its start. It
-- beats (last_beat_at, busy) every beat_interval; a clean shutdown deletes
-- the row; the maintenance service (any live worker's rescuer) sets dead_at
-- on a row whose beat is more than three intervals old (the process was
-- killed, hung or lost the database), and deletes rows dead for a day.
-- Updated in place, one small row per process: no scan walks it.
CREATE TABLE conveyor.workers (
    id            text        NOT NULL,
    host          text        NOT NULL,
    pid           integer     NOT NULL,
    version       text        NOT NULL,
    queues        text[]      NOT NULL,
    concurrency   integer     NOT NULL,
    busy          integer     NOT NULL DEFAULT 0,
    started_at    timestamptz NOT NULL DEFAULT now(),
    last_beat_at  timestamptz NOT NULL DEFAULT now(),
    beat_interval interval    NOT NULL,
    dead_at       timestamptz,
    CONSTRAINT workers_pkey PRIMARY KEY (id),
    CONSTRAINT workers_counts_check CHECK (concurrency >= 0 AND busy >= 0),
    CONSTRAINT workers_beat_interval_check CHECK
        (beat_interval > '0'::interval AND beat_interval <= interval '1 day'),
    CONSTRAINT workers_timestamps_check CHECK (
        started_at >= '0001-01-01 00:00:00+00' AND started_at < '10000-01-01 00:00:00+00'
        AND last_beat_at >= '0001-01-01 00:00:00+00' AND last_beat_at < '9000-01-01 00:00:00+00'
        AND dead_at >= '0001-01-01 00:00:00+00' AND dead_at < '10000-01-01 00:00:00+00')
);

COMMENT ON TABLE conveyor.workers IS
    'Worker processes: registered at start, beating every beat_interval, deleted at a clean stop, marked dead when silent for three intervals.';
COMMENT ON COLUMN conveyor.workers.id IS 'The worker''s id, as in conveyor.jobs.worker_id of the jobs it holds.';
COMMENT ON COLUMN conveyor.workers.host IS 'Host name of the process.';
COMMENT ON COLUMN conveyor.workers.pid IS 'Process id on that host.';
COMMENT ON COLUMN conveyor.workers.version IS 'Conveyor version the process runs.';
COMMENT ON COLUMN conveyor.workers.queues IS 'Queues it serves, in its claim order.';
COMMENT ON COLUMN conveyor.workers.concurrency IS 'Jobs it runs at once at most.';
COMMENT ON COLUMN conveyor.workers.busy IS 'Jobs it was running at its last beat.';
COMMENT ON COLUMN conveyor.workers.started_at IS 'When the process registered.';
COMMENT ON COLUMN conveyor.workers.last_beat_at IS 'Its latest beat.';
COMMENT ON COLUMN conveyor.workers.beat_interval IS 'How often it beats; silent for three of these, it is marked dead.';
COMMENT ON COLUMN conveyor.workers.dead_at IS 'Set when it was found silent (killed, hung or cut off); NULL while alive.';

-- ---------------------------------------------------------------- periodic

-- Periodic schedules are registered in code, on every worker process, and
-- one process at a time leads (a session advisory lock) and enqueues them
-- (docs/decisions/2026-11-24-dashboard-pages.md). The process that takes
-- the lead writes, once, who it is (conveyor.periodic_leader) and the
-- schedules it runs (conveyor.periodic: schedule text, task, queue, next
-- slot; on_leader = false for rows it does not have), and each slot it
-- enqueues moves last_slot, next_slot and last_job_id, so that a new leader
-- knows what it missed. Followers write nothing. Whether the leader still
-- leads is read from pg_locks (its backend still holds the lock), so no beat
-- is needed.
CREATE TABLE conveyor.periodic (
    name        text        NOT NULL,
    last_slot   timestamptz,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    last_job_id uuid,
    next_slot   timestamptz,
    schedule    text,
    task        text,
    queue       text,
    missed      text,
    on_leader   boolean     NOT NULL DEFAULT false,
    CONSTRAINT periodic_pkey PRIMARY KEY (name),
    CONSTRAINT periodic_timestamps_check CHECK (
        last_slot >= '0001-01-01 00:00:00+00' AND last_slot < '10000-01-01 00:00:00+00'
        AND updated_at >= '0001-01-01 00:00:00+00' AND updated_at < '10000-01-01 00:00:00+00'),
    CONSTRAINT periodic_next_slot_check CHECK (
        next_slot >= '0001-01-01 00:00:00+00' AND next_slot < '10000-01-01 00:00:00+00'),
    CONSTRAINT periodic_missed_check CHECK (missed IN ('skip', 'enqueue_once'))
);

COMMENT ON TABLE conveyor.periodic IS 'Periodic schedules: the latest slot enqueued for each.';
COMMENT ON COLUMN conveyor.periodic.name IS 'The schedule''s name, as registered with Periodic on the worker.';
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

-- ---------------------------------------------------------------- internal

-- Claims of a queue take turns, two at a time
-- (docs/decisions/2026-11-28-claims-take-turns.md,
-- docs/decisions/2026-11-29-claim-turns-without-a-snapshot.md). A turn is a
-- lock on one of these empty tables, in SHARE UPDATE EXCLUSIVE mode (the
-- weakest mode that conflicts with itself: a pg_dump's ACCESS SHARE lock
-- does not stand in its way), taken with `LOCK TABLE`, the one statement
-- that waits for a lock without taking a snapshot: a claim that waited for
-- its turn inside its statement would hold its snapshot meanwhile, and so
-- hold back the removal of every ring row claimed since it began (with 50
-- worker processes, where about 45 claims waited at any moment, a backlog
-- of 500,000 jobs ran at a fifth of the rate of one process). A queue's two
-- turns are claim_turn_<2k> and claim_turn_<2k+1>, k = hashtext(queue) & 15:
-- queues that share k share their turns. A claim first tries both (NOWAIT);
-- if both are taken, it returns at once and the worker waits in a
-- transaction of its own, `BEGIN; LOCK TABLE …; SET LOCAL
-- conveyor.claim_turn = '<n>'`, then claims in it
-- (conveyor_internal.claim_ready(), written by define_ready_slot()).
-- Nothing else locks these tables or writes them; they stay empty.
DO $$
BEGIN
    FOR k IN 0..31 LOOP
        EXECUTE format('CREATE TABLE conveyor_internal.claim_turn_%s ()', k);
        EXECUTE format(
            'COMMENT ON TABLE conveyor_internal.claim_turn_%s IS %L', k,
            'Internal, always empty. A turn to claim: claims lock it (SHARE UPDATE EXCLUSIVE) while they run; a queue''s two turns are claim_turn_<2k> and claim_turn_<2k+1>, k = hashtext(queue) & 15 (conveyor_internal.claim_ready()).');
    END LOOP;
END
$$;

-- Every worker process calls conveyor_internal.rotate_ring() four times a
-- second, and the ring needs a pass that often in all, not per process:
-- with 50 processes one pass would follow another all the time, about 4 ms
-- of server CPU each (docs/decisions/2026-11-28-fleets.md). The time the
-- last pass began is kept in this sequence (written by setval, which is not
-- transactional: no row versions pile up while a pg_dump holds its
-- snapshot); a call made less than min_gap after it returns at once.
CREATE SEQUENCE conveyor_internal.ring_pass_at_ms AS bigint MINVALUE 0;

COMMENT ON SEQUENCE conveyor_internal.ring_pass_at_ms IS
    'When the last pass of conveyor_internal.rotate_ring() began, in milliseconds since 1970 (its last_value; setval by the pass).';

-- The rescuer's floor: no claim has a lease below it. The rescuer reads the
-- claims from the floor up (claims_lease_idx), and raises it after each pass
-- to a minute below the lowest lease left
-- (conveyor_internal.settle_expired_claims() says why a minute). Claims and
-- heartbeats write leases in the future; a lease written in the past (by
-- hand, in psql) lowers the floor to it, through the trigger
-- claims_lease_in_the_past (below).
CREATE TABLE conveyor_internal.rescue_floor (
    only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    at timestamptz NOT NULL
);

INSERT INTO conveyor_internal.rescue_floor (at) VALUES ('-infinity');

COMMENT ON TABLE conveyor_internal.rescue_floor IS
    'Internal, one row. No claim in conveyor.claims has a lease below `at`: the rescuer looks for expired claims from there up. Deleting the row is harmless (the next pass reads from the start and writes it again); raising `at` by hand can leave expired claims unrescued.';
COMMENT ON COLUMN conveyor_internal.rescue_floor.at IS
    'Every claim''s lease_expires_at is at or above this.';

-- Enqueueing in many statements of one transaction (conveyor.enqueue() once
-- per row of a SELECT, or from a FOR EACH ROW trigger during an import)
-- would cost more per row the more rows there were: each statement's
-- count_enqueued() would upsert the same conveyor.stats row, and the
-- versions a transaction leaves of a row cannot be pruned before it ends,
-- so the k-th upsert would walk k versions
-- (docs/decisions/2026-11-28-bulk-enqueue-from-sql.md). So a statement that
-- finds its rollup row already written by its own transaction adds its
-- counts to a tally in the transaction-local setting
-- `conveyor.enqueue_tally` instead, and the first such statement inserts a
-- row here, whose deferred trigger (enqueue_tally_flush, below) writes the
-- tally at commit and deletes the row (conveyor_internal.count_enqueued(),
-- flush_enqueue_tally()). A transaction of one enqueue statement never
-- touches this table, nor pays for a trigger per job row
-- (docs/decisions/2026-11-29-enqueue-tally-armed-once.md).
CREATE TABLE conveyor_internal.enqueue_tally_flush (
    backend_pid integer NOT NULL
);

COMMENT ON TABLE conveyor_internal.enqueue_tally_flush IS
    'Internal. One row per transaction that tallies enqueue counts (many enqueue statements in one transaction), inserted by its first tallying statement and deleted at its commit by the deferred trigger enqueue_tally_flush, which writes the tally to conveyor.stats. Empty between transactions.';
COMMENT ON COLUMN conveyor_internal.enqueue_tally_flush.backend_pid IS
    'The backend of the transaction (pg_backend_pid()), for a reader.';

-- ================================================================ triggers

-- ---------------------------------------------------------------- on conveyor.job_rows

-- Inserts: the ready ring's rows, the job_ready notification that wakes idle
-- workers at commit, and the enqueue count, once per inserting statement.
-- A statement trigger fires for the table the statement names only, so each
-- has a twin on jobs_unfinished (below): these fire for statements on
-- conveyor.job_rows (an INSERT through the view conveyor.jobs,
-- conveyor.enqueue(), an INSERT or COPY by hand), those for the library's
-- inserts, which name jobs_unfinished to use its primary key.
CREATE TRIGGER jobs_notify_job_ready
    AFTER INSERT ON conveyor.job_rows
    REFERENCING NEW TABLE AS new_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION conveyor_internal.notify_job_ready();
CREATE TRIGGER jobs_ready_insert
    AFTER INSERT ON conveyor.job_rows
    REFERENCING NEW TABLE AS new_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION conveyor_internal.ready_insert();
CREATE TRIGGER jobs_count_enqueued
    AFTER INSERT ON conveyor.job_rows
    REFERENCING NEW TABLE AS new_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION conveyor_internal.count_enqueued();

-- Row triggers, on every partition (PostgreSQL clones them, onto each new
-- day table too).
--
-- A job that becomes pending, stops being pending (other than by a claim,
-- which takes its ring row itself), or changes a column of the claim order
-- while pending. Claims and outcomes never match the WHEN clause, so they
-- pay for its test only.
CREATE TRIGGER jobs_ready_update
    AFTER UPDATE OF state, queue, task, priority, run_at ON conveyor.job_rows
    FOR EACH ROW
    WHEN ((OLD.state = 'pending' OR NEW.state = 'pending') AND NEW.state <> 'started'
          AND (OLD.state, OLD.queue, OLD.task, OLD.priority, OLD.run_at)
              IS DISTINCT FROM (NEW.state, NEW.queue, NEW.task, NEW.priority, NEW.run_at))
    EXECUTE FUNCTION conveyor_internal.ready_sync();

-- A pending job deleted. The outcome statement ends claimed jobs (pending on
-- disk, with no ring row left) and marks its statement in this setting so
-- that this trigger skips them: looking for their ring rows would cost a
-- lookup per job for nothing.
CREATE TRIGGER jobs_ready_delete
    AFTER DELETE ON conveyor.job_rows
    FOR EACH ROW
    WHEN (OLD.state = 'pending'
          AND current_setting('conveyor.ending_claimed_jobs', true) IS DISTINCT FROM statement_timestamp()::text)
    EXECUTE FUNCTION conveyor_internal.ready_sync();

-- An UPDATE by hand that moves a finished job back to pending (say `SET
-- state = 'pending', finished_at = NULL`) moves the row into another
-- partition: PostgreSQL runs that as a delete and an insert, and fires no
-- row UPDATE trigger for it. This statement trigger on the table such an
-- UPDATE names gives those jobs their ring rows and wakes workers. The
-- library's own statements name the partitions, so they never pay for it.
CREATE TRIGGER jobs_moved_to_pending
    AFTER UPDATE ON conveyor.job_rows
    REFERENCING OLD TABLE AS old_jobs NEW TABLE AS new_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION conveyor_internal.ready_moved();

-- ---------------------------------------------------------------- on conveyor.jobs_unfinished

-- The twins of the insert triggers on conveyor.job_rows (above).
CREATE TRIGGER jobs_unfinished_notify_job_ready
    AFTER INSERT ON conveyor.jobs_unfinished
    REFERENCING NEW TABLE AS new_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION conveyor_internal.notify_job_ready();
CREATE TRIGGER jobs_unfinished_ready_insert
    AFTER INSERT ON conveyor.jobs_unfinished
    REFERENCING NEW TABLE AS new_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION conveyor_internal.ready_insert();
CREATE TRIGGER jobs_unfinished_count_enqueued
    AFTER INSERT ON conveyor.jobs_unfinished
    REFERENCING NEW TABLE AS new_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION conveyor_internal.count_enqueued();

-- ---------------------------------------------------------------- on the view conveyor.jobs

-- INSERT, UPDATE and DELETE through the view (conveyor_internal.jobs_view_write).
-- Under session_replication_role = replica these triggers, like every
-- trigger, do not fire, and a write through the view does nothing: restores
-- and replication write the stored rows (conveyor.job_rows), as they write
-- tables; conveyor.rebuild_ready() then repairs the ring.
CREATE TRIGGER jobs_insert INSTEAD OF INSERT ON conveyor.jobs
    FOR EACH ROW EXECUTE FUNCTION conveyor_internal.jobs_view_write();
CREATE TRIGGER jobs_update INSTEAD OF UPDATE ON conveyor.jobs
    FOR EACH ROW EXECUTE FUNCTION conveyor_internal.jobs_view_write();
CREATE TRIGGER jobs_delete INSTEAD OF DELETE ON conveyor.jobs
    FOR EACH ROW EXECUTE FUNCTION conveyor_internal.jobs_view_write();

-- ---------------------------------------------------------------- on conveyor.claims

-- A claim deleted other than by counting it down (by hand, in psql) gives
-- its jobs back instead of leaving them stored as pending with no ring row,
-- where nothing would ever run them (conveyor_internal.claims_given_back(),
-- docs/decisions/2026-11-25-claims-given-back.md). The outcome statement's
-- own deletions (conveyor_internal.claims_done()) mark their statement in
-- this setting and skip the trigger.
CREATE TRIGGER claims_given_back
    AFTER DELETE ON conveyor.claims
    REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT
    WHEN (current_setting('conveyor.counting_claims_down', true) IS DISTINCT FROM statement_timestamp()::text)
    EXECUTE FUNCTION conveyor_internal.claims_given_back();

CREATE TRIGGER claims_lease_in_the_past
    AFTER INSERT OR UPDATE OF lease_expires_at ON conveyor.claims
    FOR EACH ROW WHEN (NEW.lease_expires_at < now())
    EXECUTE FUNCTION conveyor_internal.claim_lease_in_the_past();

COMMENT ON TRIGGER claims_lease_in_the_past ON conveyor.claims IS
    'A lease written in the past (by hand) lowers the rescuer''s floor to it (conveyor_internal.rescue_floor).';

-- ---------------------------------------------------------------- on conveyor.stats

-- Rows deleted from shards other than 0 (by the fold or by retention) are
-- added to conveyor.stats_totals in the deleting statement.
CREATE TRIGGER stats_totals
    AFTER DELETE ON conveyor.stats
    REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION conveyor_internal.stats_to_totals();

-- ---------------------------------------------------------------- on conveyor_internal.enqueue_tally_flush

-- At commit (or at SET CONSTRAINTS ... IMMEDIATE), writes what the
-- transaction tallied (see the table above) and deletes the row.
CREATE CONSTRAINT TRIGGER enqueue_tally_flush
    AFTER INSERT ON conveyor_internal.enqueue_tally_flush
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION conveyor_internal.flush_enqueue_tally();

COMMENT ON TRIGGER enqueue_tally_flush ON conveyor_internal.enqueue_tally_flush IS
    'At commit, writes the enqueue counts a transaction of many inserting statements tallied (conveyor_internal.count_enqueued) to conveyor.stats, and deletes its row.';
