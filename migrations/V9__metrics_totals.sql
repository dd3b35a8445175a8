-- All-time totals for the Prometheus counters, and enqueued jobs counted
-- in the rollups (docs/decisions/2026-11-25-metrics.md).
--
-- The counters a scrape serves (jobs enqueued, succeeded, failed, retried,
-- rescued, cancelled; queue wait and run time histograms, by queue and
-- task) must be the same for every process, survive restarts and the
-- pruning of jobs, never go down when the rollups' own retention deletes
-- old minutes, and cost a bounded read whatever the history kept. So:
--
-- * Writers add to rows of conveyor.stats in shards other than 0 only:
--   outcomes in shards 1 to 8 (the writer's backend pid modulo 8, plus 1),
--   enqueues in shard -pid (one row per inserting backend: an enqueue in a
--   long user transaction holds its row lock until commit, and no other
--   backend ever waits for it).
-- * Shard 0 holds only what the fold (fold_stats.sql) moved there, and
--   conveyor.stats_totals holds, per queue and task, the sum of every row
--   ever deleted from a shard other than 0: the trigger stats_totals
--   adds them as they are deleted, by the fold or by retention, in the
--   deleting statement.
-- * So every count is, at any snapshot, in exactly one of: a row of a shard
--   other than 0 (at most about ten minutes of them, found through
--   stats_unfolded_idx), or conveyor.stats_totals. A scrape reads those two
--   (src/db/metrics_totals.sql): a cost that follows the queues, tasks and
--   writers of the last minutes, never the jobs or minutes kept.

ALTER TABLE conveyor.stats ALTER COLUMN shard TYPE integer;
ALTER TABLE conveyor.stats
    ADD COLUMN enqueued bigint NOT NULL DEFAULT 0,
    ADD COLUMN wait_ms_sum float8 NOT NULL DEFAULT 0,
    ADD COLUMN run_ms_sum float8 NOT NULL DEFAULT 0;
-- Enqueue rows carry no histograms (NULL: a row a third the size, and so
-- a third of the WAL per enqueue statement); every reader sums the
-- elements, which skips NULLs, and the checks pass for NULL.
ALTER TABLE conveyor.stats ALTER COLUMN wait_ms DROP NOT NULL, ALTER COLUMN run_ms DROP NOT NULL;
ALTER TABLE conveyor.stats DROP CONSTRAINT stats_counts_check;
ALTER TABLE conveyor.stats ADD CONSTRAINT stats_counts_check CHECK
    (succeeded >= 0 AND failed >= 0 AND retried >= 0 AND rescued >= 0 AND cancelled >= 0
     AND enqueued >= 0);

CREATE INDEX stats_unfolded_idx ON conveyor.stats (minute) WHERE shard <> 0;

COMMENT ON COLUMN conveyor.stats.shard IS
    'Spreads concurrent writers over rows: 1 to 8 for outcomes (writer''s backend pid modulo 8, plus 1), minus the backend pid for enqueues, 0 for rows the fold made (already in conveyor.stats_totals). Sum over it.';
COMMENT ON COLUMN conveyor.stats.wait_ms IS
    'Histogram of queue wait (started_at - run_at) of the attempts a worker ended: counts per bucket, bucket lower bounds in conveyor.stats_buckets_ms(). NULL in rows that count enqueues only.';
COMMENT ON COLUMN conveyor.stats.run_ms IS
    'Histogram of run time (outcome - started_at) of the attempts a worker ended, buckets as wait_ms. NULL in rows that count enqueues only.';
COMMENT ON COLUMN conveyor.stats.enqueued IS
    'Jobs that entered the unfinished table: new jobs (any insert path) and jobs re-queued from failure or cancelled.';
COMMENT ON COLUMN conveyor.stats.wait_ms_sum IS 'Sum of the queue waits counted in wait_ms, in milliseconds (0 in rows written before migration V9).';
COMMENT ON COLUMN conveyor.stats.run_ms_sum IS 'Sum of the run times counted in run_ms, in milliseconds (0 in rows written before migration V9).';
COMMENT ON INDEX conveyor.stats_unfolded_idx IS
    'Rows not yet folded into shard 0 (and so not in conveyor.stats_totals): what a metrics scrape adds to the totals, and where folding starts.';

CREATE TABLE conveyor.stats_totals (
    queue       text     NOT NULL,
    task        text     NOT NULL,
    enqueued    bigint   NOT NULL DEFAULT 0,
    succeeded   bigint   NOT NULL DEFAULT 0,
    failed      bigint   NOT NULL DEFAULT 0,
    retried     bigint   NOT NULL DEFAULT 0,
    rescued     bigint   NOT NULL DEFAULT 0,
    cancelled   bigint   NOT NULL DEFAULT 0,
    wait_ms     bigint[] NOT NULL,
    run_ms      bigint[] NOT NULL,
    wait_ms_sum float8   NOT NULL DEFAULT 0,
    run_ms_sum  float8   NOT NULL DEFAULT 0,
    CONSTRAINT stats_totals_pkey PRIMARY KEY (queue, task),
    CONSTRAINT stats_totals_histograms_check CHECK
        (cardinality(wait_ms) = 19 AND cardinality(run_ms) = 19)
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
COMMENT ON COLUMN conveyor.stats_totals.wait_ms_sum IS 'Sum of the queue waits counted, in milliseconds (since migration V9).';
COMMENT ON COLUMN conveyor.stats_totals.run_ms_sum IS 'Sum of the run times counted, in milliseconds (since migration V9).';

-- What shard 0 holds so far is the starting total (rows of other shards
-- join it as they are folded). Before V9 writers also wrote to shard 0:
-- those counts are in it too, and no writer adds to shard 0 from now on.
INSERT INTO conveyor.stats_totals
    (queue, task, succeeded, failed, retried, rescued, cancelled, wait_ms, run_ms)
SELECT queue, task, sum(succeeded), sum(failed), sum(retried), sum(rescued), sum(cancelled),
       array_replace(ARRAY[
           sum(wait_ms[1]), sum(wait_ms[2]), sum(wait_ms[3]), sum(wait_ms[4]), sum(wait_ms[5]),
           sum(wait_ms[6]), sum(wait_ms[7]), sum(wait_ms[8]), sum(wait_ms[9]), sum(wait_ms[10]),
           sum(wait_ms[11]), sum(wait_ms[12]), sum(wait_ms[13]), sum(wait_ms[14]), sum(wait_ms[15]),
           sum(wait_ms[16]), sum(wait_ms[17]), sum(wait_ms[18]), sum(wait_ms[19])
       ], NULL, 0)::bigint[],
       array_replace(ARRAY[
           sum(run_ms[1]), sum(run_ms[2]), sum(run_ms[3]), sum(run_ms[4]), sum(run_ms[5]),
           sum(run_ms[6]), sum(run_ms[7]), sum(run_ms[8]), sum(run_ms[9]), sum(run_ms[10]),
           sum(run_ms[11]), sum(run_ms[12]), sum(run_ms[13]), sum(run_ms[14]), sum(run_ms[15]),
           sum(run_ms[16]), sum(run_ms[17]), sum(run_ms[18]), sum(run_ms[19])
       ], NULL, 0)::bigint[]
FROM conveyor.stats
WHERE shard = 0
GROUP BY queue, task;

CREATE TRIGGER stats_totals
    AFTER DELETE ON conveyor.stats
    REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION conveyor_internal.stats_to_totals();

-- Enqueues, counted once per inserting statement, like the ready ring's
-- rows (a statement trigger fires for the table the statement names only,
-- so each table has one).
CREATE TRIGGER jobs_count_enqueued
    AFTER INSERT ON conveyor.jobs
    REFERENCING NEW TABLE AS new_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION conveyor_internal.count_enqueued();
CREATE TRIGGER jobs_unfinished_count_enqueued
    AFTER INSERT ON conveyor.jobs_unfinished
    REFERENCING NEW TABLE AS new_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION conveyor_internal.count_enqueued();
