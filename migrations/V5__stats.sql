-- Persisted statistics: per-minute rollups of outcomes by queue and task,
-- kept after the jobs themselves are pruned (docs/decisions/2026-11-24-stats-rollups.md).
--
-- Every statement that ends attempts adds its counts here in the same
-- transaction (conveyor_internal.count_outcomes(): the completer's batches,
-- the rescuer, releases that end cancelled, conveyor.cancel()), one upsert
-- per statement and (queue, task), so a rollup counts exactly the outcomes
-- that committed. Rows are spread over 8 shards (the writing backend's pid
-- modulo 8) so that concurrent writers rarely wait for each other's row
-- lock; read them summed over shards. The pruner deletes rows older than
-- the statistics' retention (30 days by default).
CREATE TABLE conveyor.stats (
    minute    timestamptz NOT NULL,
    queue     text        NOT NULL,
    task      text        NOT NULL,
    shard     smallint    NOT NULL,
    succeeded bigint      NOT NULL DEFAULT 0,
    failed    bigint      NOT NULL DEFAULT 0,
    retried   bigint      NOT NULL DEFAULT 0,
    rescued   bigint      NOT NULL DEFAULT 0,
    cancelled bigint      NOT NULL DEFAULT 0,
    wait_ms   bigint[]    NOT NULL,
    run_ms    bigint[]    NOT NULL,
    CONSTRAINT stats_pkey PRIMARY KEY (minute, queue, task, shard),
    CONSTRAINT stats_counts_check CHECK
        (succeeded >= 0 AND failed >= 0 AND retried >= 0 AND rescued >= 0 AND cancelled >= 0),
    CONSTRAINT stats_histograms_check CHECK
        (cardinality(wait_ms) = 19 AND cardinality(run_ms) = 19),
    CONSTRAINT stats_minute_check CHECK
        (minute >= '0001-01-01 00:00:00+00' AND minute < '10000-01-01 00:00:00+00')
);

COMMENT ON TABLE conveyor.stats IS
    'Per-minute rollups of attempt outcomes by queue and task (sum over shard), kept after jobs are pruned.';
COMMENT ON COLUMN conveyor.stats.minute IS 'Start of the minute (server clock) in which the outcomes committed.';
COMMENT ON COLUMN conveyor.stats.queue IS 'The jobs'' queue.';
COMMENT ON COLUMN conveyor.stats.task IS 'The jobs'' task.';
COMMENT ON COLUMN conveyor.stats.shard IS 'Spreads concurrent writers over rows (writer''s backend pid modulo 8); sum over it.';
COMMENT ON COLUMN conveyor.stats.succeeded IS 'Attempts that succeeded.';
COMMENT ON COLUMN conveyor.stats.failed IS 'Jobs that failed for good (an attempt with no retry left, or a lease expired with none left).';
COMMENT ON COLUMN conveyor.stats.retried IS 'Attempts that failed and will be retried.';
COMMENT ON COLUMN conveyor.stats.rescued IS 'Attempts whose lease expired, recovered by the rescuer (whatever state they went to).';
COMMENT ON COLUMN conveyor.stats.cancelled IS 'Jobs that ended cancelled.';
COMMENT ON COLUMN conveyor.stats.wait_ms IS
    'Histogram of queue wait (started_at - run_at) of the attempts a worker ended: counts per bucket, bucket lower bounds in conveyor.stats_buckets_ms().';
COMMENT ON COLUMN conveyor.stats.run_ms IS
    'Histogram of run time (outcome - started_at) of the attempts a worker ended, buckets as wait_ms.';
