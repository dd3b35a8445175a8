-- Fleets of many small worker processes (issue 31;
-- docs/decisions/2026-11-28-fleets.md).
--
-- 1. Every worker process calls conveyor_internal.rotate_ring() four times
--    a second, and the ring needs a pass that often in all, not per
--    process: with 50 processes one pass followed another all the time,
--    about 4 ms of server CPU each. The time the last pass began is kept
--    in a sequence (written by setval, which is not transactional: no row
--    versions pile up while a pg_dump holds its snapshot); a call made
--    less than min_gap after it returns at once.
CREATE SEQUENCE conveyor_internal.ring_pass_at_ms AS bigint MINVALUE 0;

COMMENT ON SEQUENCE conveyor_internal.ring_pass_at_ms IS
    'When the last pass of conveyor_internal.rotate_ring() began, in milliseconds since 1970 (its last_value; setval by the pass).';

-- The signature before min_gap was added (a call naming some of the
-- arguments would otherwise match both).
DROP FUNCTION IF EXISTS conveyor_internal.rotate_ring(integer, interval, integer, interval, interval);

-- 2. Outcome counts go to 64 rollup shards instead of 8
--    (conveyor_internal.count_outcomes()): a writer holds its shard's row
--    from the count to its commit, which waits for the WAL flush, and with
--    50 processes recording small batches, 4 backends on average waited for
--    each other's rows.
COMMENT ON COLUMN conveyor.stats.shard IS
    'Spreads concurrent writers over rows: 1 to 64 for outcomes and leases lost (writer''s backend pid modulo 64, plus 1), minus the backend pid for enqueues, 0 for rows the fold made (already in conveyor.stats_totals). Sum over it.';
