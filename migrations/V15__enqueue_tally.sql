-- Enqueueing in many statements of one transaction (conveyor.enqueue()
-- once per row of a SELECT, or from a FOR EACH ROW trigger during an
-- import) cost more per row the more rows there were: each statement's
-- count_enqueued() upserted the same conveyor.stats row, and the versions
-- a transaction leaves of a row cannot be pruned before it ends, so the
-- k-th upsert walked k versions (docs/decisions/2026-11-28-bulk-enqueue-from-sql.md).
-- After its first 8 counting statements, a transaction tallies its counts
-- in a setting, which this deferred trigger writes at commit
-- (conveyor_internal.count_enqueued(), flush_enqueue_tally()). The WHEN
-- clause is evaluated as each row is inserted: only the rows of the one
-- statement that arms the tally queue an event.
CREATE CONSTRAINT TRIGGER jobs_flush_enqueue_tally
    AFTER INSERT ON conveyor.job_rows
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW
    WHEN (current_setting('conveyor.enqueue_tally', true) = 'arm')
    EXECUTE FUNCTION conveyor_internal.flush_enqueue_tally();

COMMENT ON TRIGGER jobs_flush_enqueue_tally ON conveyor.job_rows IS
    'At commit, writes the enqueue counts a transaction of many inserting statements tallied (conveyor_internal.count_enqueued) to conveyor.stats.';
