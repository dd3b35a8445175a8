-- Empties sealed slots of conveyor.ready (every slot but the one taking
-- inserts now) with TRUNCATE, which frees a slot's space and its dead index
-- entries at once even while another transaction holds the xmin horizon
-- (VACUUM could not). A slot still holding at most carry_at_most runnable
-- rows (a few jobs no worker has claimed yet: a queue nobody serves, a
-- pending row with a future run_at, a straggler committed late) has them
-- carried into the current slot first, their claim order unchanged; a slot
-- holding more (a backlog being drained) is left for a later pass.
--
-- Each slot is locked ACCESS EXCLUSIVE (nobody can claim from it or insert
-- into it meanwhile, so what is carried and truncated is exactly what it
-- holds) and waits at most lock_wait for claims in flight. While it waits,
-- new claims queue behind it, so it does not even try a slot that a
-- transaction older than a second holds a lock on (a pg_dump, a session
-- that read the ring and left its transaction open): claims take
-- milliseconds, and such a holder would make every attempt wait the full
-- lock_wait for nothing. One process rotates at a time (a transaction-level
-- advisory lock; the others return 0 at once). Returns how many slots were
-- emptied. Run by every worker's maintenance a few times a second
-- (src/maintenance/rotator.rs).
CREATE OR REPLACE FUNCTION conveyor_internal.rotate_ready(
    carry_at_most integer DEFAULT 1000,
    lock_wait interval DEFAULT '5 milliseconds'
) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    current smallint := conveyor_internal.ready_slot();
    slot_table regclass;
    live bigint;
    emptied integer := 0;
BEGIN
    IF NOT pg_try_advisory_xact_lock(hashtextextended('conveyor.rotate_ready', 0)) THEN
        RETURN 0;
    END IF;
    PERFORM set_config('lock_timeout', (extract(epoch FROM lock_wait) * 1000)::bigint::text, true);
    FOR s IN 0..7 LOOP
        CONTINUE WHEN s = current;
        slot_table := format('conveyor.ready_%s', s)::regclass;
        -- Already empty (its file has no page since the last TRUNCATE).
        CONTINUE WHEN pg_relation_size(slot_table) = 0;
        -- Locked by a long transaction: no use waiting.
        CONTINUE WHEN EXISTS (
            SELECT 1 FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
            WHERE l.relation = slot_table AND l.granted AND l.pid <> pg_backend_pid()
              -- (pg_locks shows every database's locks, and databases made
              -- from one template share their tables' oids.)
              AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
              AND a.xact_start < statement_timestamp() - interval '1 second');
        -- Too many rows to carry: checked before taking any lock.
        EXECUTE format('SELECT count(*) FROM (SELECT FROM %s LIMIT $1 + 1) AS r', slot_table)
            INTO live USING carry_at_most;
        CONTINUE WHEN live > carry_at_most;
        BEGIN
            EXECUTE format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', slot_table);
            -- Again under the lock: rows committed since are counted now.
            EXECUTE format('SELECT count(*) FROM (SELECT FROM %s LIMIT $1 + 1) AS r', slot_table)
                INTO live USING carry_at_most;
            CONTINUE WHEN live > carry_at_most;
            IF live > 0 THEN
                EXECUTE format(
                    'INSERT INTO conveyor.ready (slot, queue, priority, run_at, job_id, task)
                     SELECT $1, queue, priority, run_at, job_id, task FROM %s', slot_table)
                    USING current;
            END IF;
            EXECUTE format('TRUNCATE %s', slot_table);
            emptied := emptied + 1;
        EXCEPTION WHEN lock_not_available THEN
            -- Claims or a reader hold it: next pass.
            NULL;
        END;
    END LOOP;
    RETURN emptied;
END
$$;

COMMENT ON FUNCTION conveyor_internal.rotate_ready(integer, interval) IS
    'Internal. Empties sealed slots of conveyor.ready with TRUNCATE, carrying at most carry_at_most remaining rows into the current slot; skips slots it cannot lock within lock_wait. Returns the slots emptied.';
