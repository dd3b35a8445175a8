-- Leases lost, counted in the rollups (issue 17;
-- docs/decisions/2026-11-25-metrics.md).
--
-- A worker that learns it lost a job's lease (its renewal no longer finds
-- the job started under its token, the lease lapsed by its own clock, or
-- its outcome batch found the job gone) used to count it in a counter of
-- its own process only: a standalone `conveyor metrics` never saw it. Now
-- the worker also adds it to conveyor.stats, for the job's queue and task
-- in the current minute, in the outcome writers' shards (1 + its backend
-- pid modulo 8), one small upsert per batch of losses, off the path of
-- outcomes. Like every other count it is carried by the fold into shard 0
-- and into conveyor.stats_totals when its row is folded or pruned
-- (stats_to_totals), so the all-time total never goes down.
--
-- Rows that count losses only carry no histograms (NULL, as the enqueue
-- rows of V9): every reader sums the elements, which skips NULLs, and
-- histogram_add() treats a NULL side as zeros.

ALTER TABLE conveyor.stats
    ADD COLUMN leases_lost conveyor.non_negative_bigint NOT NULL DEFAULT 0;
ALTER TABLE conveyor.stats_totals
    ADD COLUMN leases_lost conveyor.non_negative_bigint NOT NULL DEFAULT 0;

COMMENT ON COLUMN conveyor.stats.leases_lost IS
    'Attempts whose worker learned it had lost the lease before its outcome was written (the outcome was not recorded), counted by that worker. Not the rescues: a lease the rescuer takes back is in `rescued` whether or not its worker ever hears of it.';
COMMENT ON COLUMN conveyor.stats_totals.leases_lost IS
    'Leases lost, as workers counted them (see conveyor.stats.leases_lost; since migration V11).';
COMMENT ON COLUMN conveyor.stats.wait_ms IS
    'Histogram of queue wait (started_at - run_at) of the attempts a worker ended: counts per bucket, bucket lower bounds in conveyor.stats_buckets_ms(). NULL in rows that count only enqueues or leases lost.';
COMMENT ON COLUMN conveyor.stats.run_ms IS
    'Histogram of run time (outcome - started_at) of the attempts a worker ended, buckets as wait_ms. NULL in rows that count only enqueues or leases lost.';
COMMENT ON COLUMN conveyor.stats.shard IS
    'Spreads concurrent writers over rows: 1 to 8 for outcomes and leases lost (writer''s backend pid modulo 8, plus 1), minus the backend pid for enqueues, 0 for rows the fold made (already in conveyor.stats_totals). Sum over it.';
