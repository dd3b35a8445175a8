-- The rules on one column move from table CHECK constraints to domains
-- (docs/decisions/2026-11-25-checks-as-domains.md).
--
-- Why: PostgreSQL reads back (stringToNode) and plans every CHECK expression
-- of a table again for each INSERT or UPDATE statement; only a domain's
-- constraints are kept ready per connection. A one-job enqueue paid about
-- 380,000 server instructions for the 13 checks of conveyor.jobs and
-- 140,000 for the 3 of conveyor.stats (the enqueue counter's upsert),
-- against 47,000 for the same rules as domains: about a third of the whole
-- statement. Rows per batch statement cost less too: a domain is checked
-- only when its column is written.
--
-- What a reader sees: the same columns, whose types are now domains over the
-- same base types (psql's \d shows conveyor.queue_name, not text; clients
-- receive the base type). The rules are the same; a violation names the
-- domain's constraint (e.g. `queue_name_check`) instead of `jobs_queue_check`.
-- Rules on several columns stay table checks, now on the partition where
-- they mean something: a running job's lease and token on jobs_unfinished,
-- no lease on finished jobs. `state` is the partition key: a row whose state
-- no partition takes is refused by PostgreSQL's routing, so jobs_state_check
-- had nothing left to do. `finished_at` is the day tables' partition key
-- (it cannot change type): days take only their own times, and the
-- default partitions of each final state keep the range check.
--
-- Existing rows met the same rules as table checks, so the domains start
-- without constraints (no table is rewritten to change a column's type) and
-- get them NOT VALID, then VALIDATE: one read of each table, no rewrite.

CREATE DOMAIN conveyor.finite_timestamptz AS timestamptz;
CREATE DOMAIN conveyor.queue_name AS text;
CREATE DOMAIN conveyor.task_name AS text;
CREATE DOMAIN conveyor.non_negative_int AS integer;
CREATE DOMAIN conveyor.non_negative_bigint AS bigint;
CREATE DOMAIN conveyor.non_negative_interval AS interval;
CREATE DOMAIN conveyor.positive_interval AS interval;
CREATE DOMAIN conveyor.json_array AS jsonb;
CREATE DOMAIN conveyor.json_object AS jsonb;
CREATE DOMAIN conveyor.histogram_ms AS bigint[];

-- ------------------------------------------------------------ conveyor.jobs

-- A trigger with a column list pins those columns' types: dropped and
-- created again, unchanged (migration V8's definition).
DROP TRIGGER jobs_ready_update ON conveyor.jobs;

ALTER TABLE conveyor.jobs
    DROP CONSTRAINT jobs_state_check,
    DROP CONSTRAINT jobs_queue_check,
    DROP CONSTRAINT jobs_task_check,
    DROP CONSTRAINT jobs_attempt_check,
    DROP CONSTRAINT jobs_max_retries_check,
    DROP CONSTRAINT jobs_retry_backoff_base_check,
    DROP CONSTRAINT jobs_timeout_check,
    DROP CONSTRAINT jobs_errors_check,
    DROP CONSTRAINT jobs_headers_check,
    DROP CONSTRAINT jobs_lease_check,
    DROP CONSTRAINT jobs_lease_token_check,
    DROP CONSTRAINT jobs_finished_check,
    DROP CONSTRAINT jobs_timestamps_check,
    ALTER queue TYPE conveyor.queue_name,
    ALTER task TYPE conveyor.task_name,
    ALTER headers TYPE conveyor.json_object,
    ALTER run_at TYPE conveyor.finite_timestamptz,
    ALTER attempt TYPE conveyor.non_negative_int,
    ALTER max_retries TYPE conveyor.non_negative_int,
    ALTER retry_backoff_base TYPE conveyor.non_negative_interval,
    ALTER timeout TYPE conveyor.positive_interval,
    ALTER lease_expires_at TYPE conveyor.finite_timestamptz,
    ALTER errors TYPE conveyor.json_array,
    ALTER created_at TYPE conveyor.finite_timestamptz,
    ALTER started_at TYPE conveyor.finite_timestamptz;

CREATE TRIGGER jobs_ready_update
    AFTER UPDATE OF state, queue, task, priority, run_at ON conveyor.jobs
    FOR EACH ROW
    WHEN ((OLD.state = 'pending' OR NEW.state = 'pending') AND NEW.state <> 'started'
          AND (OLD.state, OLD.queue, OLD.task, OLD.priority, OLD.run_at)
              IS DISTINCT FROM (NEW.state, NEW.queue, NEW.task, NEW.priority, NEW.run_at))
    EXECUTE FUNCTION conveyor_internal.ready_sync();

-- A running job always has a lease and the fencing token of its claim; a
-- waiting job has neither a lease nor an end.
ALTER TABLE conveyor.jobs_unfinished ADD CONSTRAINT jobs_unfinished_lease_check CHECK (
    CASE WHEN state = 'started' THEN lease_expires_at IS NOT NULL AND lease_token IS NOT NULL
         ELSE lease_expires_at IS NULL END
    AND finished_at IS NULL);

-- A finished job holds no lease (its finished_at is its table's partition
-- key: never NULL, and within the day of its table).
ALTER TABLE conveyor.jobs_success ADD CONSTRAINT jobs_success_lease_check CHECK (lease_expires_at IS NULL);
ALTER TABLE conveyor.jobs_failure ADD CONSTRAINT jobs_failure_lease_check CHECK (lease_expires_at IS NULL);
ALTER TABLE conveyor.jobs_cancelled ADD CONSTRAINT jobs_cancelled_lease_check CHECK (lease_expires_at IS NULL);

-- Outside every day table: the default partitions take any time, and a
-- NULL partition key too, so they check that finished_at is set and in the
-- range a reader can decode.
ALTER TABLE conveyor.jobs_success_default ADD CONSTRAINT jobs_success_default_finished_check CHECK (
    finished_at IS NOT NULL AND finished_at >= '0001-01-01 00:00:00+00' AND finished_at < '10000-01-01 00:00:00+00');
ALTER TABLE conveyor.jobs_failure_default ADD CONSTRAINT jobs_failure_default_finished_check CHECK (
    finished_at IS NOT NULL AND finished_at >= '0001-01-01 00:00:00+00' AND finished_at < '10000-01-01 00:00:00+00');
ALTER TABLE conveyor.jobs_cancelled_default ADD CONSTRAINT jobs_cancelled_default_finished_check CHECK (
    finished_at IS NOT NULL AND finished_at >= '0001-01-01 00:00:00+00' AND finished_at < '10000-01-01 00:00:00+00');

-- ------------------------------------------------------- conveyor.stats(_totals)

ALTER TABLE conveyor.stats
    DROP CONSTRAINT stats_counts_check,
    DROP CONSTRAINT stats_histograms_check,
    DROP CONSTRAINT stats_minute_check,
    ALTER minute TYPE conveyor.finite_timestamptz,
    ALTER succeeded TYPE conveyor.non_negative_bigint,
    ALTER failed TYPE conveyor.non_negative_bigint,
    ALTER retried TYPE conveyor.non_negative_bigint,
    ALTER rescued TYPE conveyor.non_negative_bigint,
    ALTER cancelled TYPE conveyor.non_negative_bigint,
    ALTER enqueued TYPE conveyor.non_negative_bigint,
    ALTER wait_ms TYPE conveyor.histogram_ms,
    ALTER run_ms TYPE conveyor.histogram_ms;

ALTER TABLE conveyor.stats_totals
    DROP CONSTRAINT stats_totals_histograms_check,
    ALTER wait_ms TYPE conveyor.histogram_ms,
    ALTER run_ms TYPE conveyor.histogram_ms;

-- ------------------------------------------------------------------ the rules

ALTER DOMAIN conveyor.finite_timestamptz ADD CONSTRAINT finite_timestamptz_check
    CHECK (VALUE >= '0001-01-01 00:00:00+00' AND VALUE < '10000-01-01 00:00:00+00') NOT VALID;
ALTER DOMAIN conveyor.queue_name ADD CONSTRAINT queue_name_check
    CHECK (VALUE <> '' AND length(VALUE) <= 128) NOT VALID;
ALTER DOMAIN conveyor.task_name ADD CONSTRAINT task_name_check
    CHECK (VALUE <> '' AND length(VALUE) <= 255) NOT VALID;
ALTER DOMAIN conveyor.non_negative_int ADD CONSTRAINT non_negative_int_check
    CHECK (VALUE >= 0) NOT VALID;
ALTER DOMAIN conveyor.non_negative_bigint ADD CONSTRAINT non_negative_bigint_check
    CHECK (VALUE >= 0) NOT VALID;
ALTER DOMAIN conveyor.non_negative_interval ADD CONSTRAINT non_negative_interval_check
    CHECK (VALUE >= '0'::interval) NOT VALID;
ALTER DOMAIN conveyor.positive_interval ADD CONSTRAINT positive_interval_check
    CHECK (VALUE > '0'::interval) NOT VALID;
ALTER DOMAIN conveyor.json_array ADD CONSTRAINT json_array_check
    CHECK (jsonb_typeof(VALUE) = 'array') NOT VALID;
ALTER DOMAIN conveyor.json_object ADD CONSTRAINT json_object_check
    CHECK (jsonb_typeof(VALUE) = 'object') NOT VALID;
ALTER DOMAIN conveyor.histogram_ms ADD CONSTRAINT histogram_ms_check
    CHECK (cardinality(VALUE) = 19) NOT VALID;

ALTER DOMAIN conveyor.finite_timestamptz VALIDATE CONSTRAINT finite_timestamptz_check;
ALTER DOMAIN conveyor.queue_name VALIDATE CONSTRAINT queue_name_check;
ALTER DOMAIN conveyor.task_name VALIDATE CONSTRAINT task_name_check;
ALTER DOMAIN conveyor.non_negative_int VALIDATE CONSTRAINT non_negative_int_check;
ALTER DOMAIN conveyor.non_negative_bigint VALIDATE CONSTRAINT non_negative_bigint_check;
ALTER DOMAIN conveyor.non_negative_interval VALIDATE CONSTRAINT non_negative_interval_check;
ALTER DOMAIN conveyor.positive_interval VALIDATE CONSTRAINT positive_interval_check;
ALTER DOMAIN conveyor.json_array VALIDATE CONSTRAINT json_array_check;
ALTER DOMAIN conveyor.json_object VALIDATE CONSTRAINT json_object_check;
ALTER DOMAIN conveyor.histogram_ms VALIDATE CONSTRAINT histogram_ms_check;

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
