-- Retention: drops every partition of finished jobs in state job_state whose
-- whole range finished before `cutoff` (the day tables: every partition
-- but the default one has a range), and returns how many. Jobs in such a
-- partition that belong to a workflow still running are kept: they are
-- moved to the state's default partition (their results may still be
-- needed), which the pruner empties row by row once they may go.
--
-- Detaching a partition locks the state's table (conveyor.jobs_success,
-- ...) in ACCESS EXCLUSIVE mode for a few milliseconds: outcomes of that
-- state wait that long. The lock is waited for at most lock_wait, and not
-- at all while a transaction older than a second holds a lock on that table
-- (a pg_dump, a long report): it would make outcomes wait the full lock_wait
-- for nothing. Partitions skipped that way are dropped by a later call. One
-- process at a time (a transaction-level advisory lock).
CREATE OR REPLACE FUNCTION conveyor_internal.drop_history_partitions(
    job_state text,
    cutoff timestamptz,
    lock_wait interval DEFAULT '100 milliseconds'
) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    parent regclass;
    part record;
    dropped integer := 0;
    caller_lock_timeout text := current_setting('lock_timeout');
BEGIN
    IF job_state NOT IN ('success', 'failure', 'cancelled') THEN
        RAISE EXCEPTION 'not a final state: %', job_state USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NOT pg_try_advisory_xact_lock(hashtextextended('conveyor.history_partitions', 0)) THEN
        RETURN 0;
    END IF;
    parent := format('conveyor.%I', 'jobs_' || job_state)::regclass;
    IF EXISTS (
        SELECT 1 FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
        WHERE l.relation = parent AND l.granted AND l.pid <> pg_backend_pid()
          AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
          AND a.xact_start < statement_timestamp() - interval '1 second') THEN
        RETURN 0;
    END IF;
    PERFORM set_config('lock_timeout', (extract(epoch FROM lock_wait) * 1000)::bigint::text, true);
    FOR part IN
        SELECT c.oid::regclass AS rel,
               substring(pg_get_expr(c.relpartbound, c.oid) FROM 'TO \(''([^'']+)''\)')::timestamptz AS upper_bound
        FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = parent
        ORDER BY 2
    LOOP
        CONTINUE WHEN part.upper_bound IS NULL OR part.upper_bound > cutoff;
        BEGIN
            EXECUTE format('ALTER TABLE %s DETACH PARTITION %s', parent, part.rel);
            EXECUTE format(
                'INSERT INTO %s SELECT * FROM %s j
                 WHERE j.workflow_id IN (SELECT id FROM conveyor.workflows WHERE state = ''running'')',
                parent, part.rel);
            EXECUTE format('DROP TABLE %s', part.rel);
            dropped := dropped + 1;
        EXCEPTION WHEN lock_not_available THEN
            EXIT;
        END;
    END LOOP;
    -- The caller's lock_timeout for the rest of its transaction and its
    -- commit (see conveyor_internal.rotate_ring()).
    PERFORM set_config('lock_timeout', caller_lock_timeout, true);
    RETURN dropped;
END
$$;

COMMENT ON FUNCTION conveyor_internal.drop_history_partitions(text, timestamptz, interval) IS
    'Internal. Retention: drops the partitions of finished jobs in a state whose range ends before cutoff, keeping members of running workflows; returns how many.';
