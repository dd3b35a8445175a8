-- The ready ring's upkeep (conveyor.ready, banks of 8 one-second slots;
-- conveyor.ready_bank). Run by every worker's maintenance a few times a
-- second (src/maintenance/rotator.rs); one process at a time does the work
-- (a transaction-level advisory lock; the others return at once).
--
-- 1. Empties sealed slots of the current bank (every slot but the one
--    taking inserts now) with TRUNCATE, which frees a slot's space and its
--    dead index entries at once even while another transaction holds the
--    xmin horizon (VACUUM could not). A slot still holding at most
--    carry_at_most runnable rows (a few jobs no worker has claimed yet: a
--    queue nobody serves, a row with a future run_at, a straggler committed
--    late) has them carried into the current slot first, their claim order
--    unchanged; a slot holding more (a backlog being drained) is left for a
--    later pass.
-- 2. Switches banks. A transaction open for more than hold_age that holds a
--    lock on a slot (pg_dump locks every table it dumps for its whole run; a
--    session that read conveyor.ready and left its transaction open) keeps
--    that slot from being emptied, and claims would walk more dead entries
--    the longer it lasts. A lock covers only tables that existed when it was
--    taken: so when a slot of the current bank is held, the lowest bank of
--    0 … max_banks - 1 that nobody holds is made current, its tables created
--    and attached if missing (ATTACH PARTITION takes SHARE UPDATE EXCLUSIVE
--    on conveyor.ready, which the holder's ACCESS SHARE does not block) or
--    emptied, conveyor.ready_bank names it and inserts go there
--    (conveyor_internal.define_ready_slot()). Once the holder is gone, a
--    lower bank (bank 0 in the end) becomes current again the same way.
--    Claims read the current bank only (its slots are named in the body of
--    conveyor_internal.claim_ready(), rewritten with ready_slot()); every change is
--    announced on the channel conveyor.ring (payload: the bank).
-- 3. Carries the runnable rows left in other banks (the held bank's at the
--    switch, stragglers later) into the current slot, waking the workers of
--    their queues (conveyor.job_ready), and empties those banks' slots once
--    nobody holds them.
-- 4. Drops banks other than 0 that have been empty and unheld for
--    retire_after since the ring left them (DETACH and DROP take ACCESS
--    EXCLUSIVE on conveyor.ready: each is waited for at most lock_wait).
--
-- A call less than min_gap after the last pass began (by any process;
-- conveyor_internal.ring_pass_at_ms) returns at once, as
-- does one made while another process is doing a pass: every worker
-- process calls this a few times a second, and a fleet of them needs no
-- more passes than one process does.
--
-- Every lock the pass takes is waited for at most lock_wait: while it
-- waits, claims queue behind it (its commit's is not: see the end).
-- Returns the current bank, the slots emptied, whether a long transaction
-- holds any slot, and whether it holds the current bank (no bank was free
-- to switch to: claims slow down until it ends).
CREATE OR REPLACE FUNCTION conveyor_internal.rotate_ring(
    carry_at_most integer DEFAULT 1000,
    lock_wait interval DEFAULT '5 milliseconds',
    max_banks integer DEFAULT 4,
    retire_after interval DEFAULT '1 minute',
    hold_age interval DEFAULT '1 second',
    min_gap interval DEFAULT '0'
) RETURNS TABLE (current_bank smallint, emptied integer, held boolean, stuck boolean)
LANGUAGE plpgsql AS $$
DECLARE
    cur smallint;
    cur_since timestamptz;
    target smallint;
    now_slot smallint;
    n_emptied integer := 0;
    slots smallint[];
    tabs regclass[];
    holders text[];
    held_banks smallint[];
    live bigint;
    i integer;
    t regclass;
    carried text[];
    woken text[] := '{}';
    now_ms bigint := floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint;
    last_ms bigint;
    caller_lock_timeout text := current_setting('lock_timeout');
BEGIN
    SELECT b.bank, b.since INTO cur, cur_since FROM conveyor.ready_bank b;
    cur := coalesce(cur, 0);
    -- (A last pass "in the future", from a clock set back or a restore on
    -- another machine, does not count.)
    SELECT p.last_value INTO last_ms FROM conveyor_internal.ring_pass_at_ms p;
    IF last_ms BETWEEN now_ms - floor(extract(epoch FROM min_gap) * 1000)::bigint + 1 AND now_ms
       OR NOT pg_try_advisory_xact_lock(hashtextextended('conveyor.rotate_ring', 0)) THEN
        RETURN QUERY SELECT cur, 0, NULL::boolean, NULL::boolean;
        RETURN;
    END IF;
    PERFORM setval('conveyor_internal.ring_pass_at_ms', now_ms);
    PERFORM set_config('lock_timeout', (extract(epoch FROM lock_wait) * 1000)::bigint::text, true);

    -- The slot tables (named ready_<slot>), each with the oldest
    -- transaction older than hold_age that holds a lock on it, if any.
    -- (pg_locks shows every database's locks, and databases made from one
    -- template share their tables' oids.) A transaction that holds a claim
    -- turn (conveyor_internal.claim_turn_<n>, in SHARE
    -- UPDATE EXCLUSIVE mode: a pg_dump holds ACCESS SHARE on them too) is a
    -- worker's claim, which ends with its statement; it may have begun long
    -- before, waiting for its turn, and is not a holder.
    WITH locks AS MATERIALIZED (
        SELECT l.relation, l.pid, l.mode
        FROM pg_locks l
        WHERE l.locktype = 'relation' AND l.granted AND l.pid <> pg_backend_pid()
          AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
    ),
    claiming AS (
        SELECT DISTINCT l.pid FROM locks l JOIN pg_class c ON c.oid = l.relation
        WHERE l.mode = 'ShareUpdateExclusiveLock' AND c.relname ~ '^claim_turn_[0-9]+$'
          AND c.relnamespace = (SELECT t.relnamespace FROM pg_class t
                                WHERE t.oid = to_regclass('conveyor_internal.claim_turn_0'))
    )
    SELECT array_agg(s.slot ORDER BY s.slot), array_agg(s.tab ORDER BY s.slot),
           array_agg(s.holder ORDER BY s.slot)
    INTO slots, tabs, holders
    FROM (
        SELECT substr(c.relname, 7)::smallint AS slot, c.oid::regclass AS tab,
               (SELECT format('pid %s (%s)', a.pid,
                              coalesce(nullif(a.application_name, ''), a.usename::text, '?'))
                FROM locks l JOIN pg_stat_activity a ON a.pid = l.pid
                WHERE l.relation = c.oid
                  AND a.xact_start <= statement_timestamp() - hold_age
                  AND l.pid NOT IN (SELECT pid FROM claiming)
                ORDER BY a.xact_start LIMIT 1) AS holder
        FROM pg_inherits h JOIN pg_class c ON c.oid = h.inhrelid
        WHERE h.inhparent = 'conveyor.ready'::regclass AND c.relname ~ '^ready_[0-9]{1,5}$'
    ) AS s;
    slots := coalesce(slots, '{}');
    SELECT coalesce(array_agg(DISTINCT slots[k] / {ring_slots}), '{}') INTO held_banks
    FROM generate_subscripts(slots, 1) AS k WHERE holders[k] IS NOT NULL;

    -- The current bank's tables exist (they may not, if its row was
    -- written by hand).
    IF (SELECT count(*) FROM unnest(slots) AS x WHERE x / {ring_slots} = cur) < {ring_slots} THEN
        PERFORM conveyor_internal.ready_bank_tables(cur);
    END IF;
    -- Inserts go to the current bank (conveyor_internal.ready_slot()'s body
    -- names it: define_ready_slot() rewrites it should they disagree).
    PERFORM conveyor_internal.define_ready_slot(cur);

    -- 2. The bank to switch to, if any: the lowest that nobody holds, when
    -- the current one is held, or when it is lower than the current one.
    SELECT min(b) INTO target FROM generate_series(0, max_banks - 1) AS b
    WHERE b <> cur AND NOT (b::smallint = ANY(held_banks));
    IF target IS NOT NULL AND (cur = ANY(held_banks) OR target < cur) THEN
        BEGIN
            now_slot := conveyor_internal.ready_slot();
            PERFORM conveyor_internal.ready_bank_tables(target);
            FOR k IN 0 .. {ring_slots} - 1 LOOP
                t := format('conveyor.ready_%s', target * {ring_slots} + k)::regclass;
                IF pg_relation_size(t) > 0 THEN
                    -- Left over from an earlier use: carried into the slot
                    -- current until now, from where step 3 carries it back.
                    EXECUTE format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', t);
                    EXECUTE format(
                        'INSERT INTO conveyor.ready (slot, queue, priority, run_at, job_id, task)
                         SELECT $1, queue, priority, run_at, job_id, task FROM %s', t)
                        USING now_slot;
                    EXECUTE format('TRUNCATE %s', t);
                END IF;
            END LOOP;
            UPDATE conveyor.ready_bank
            SET bank = target, since = statement_timestamp(),
                held_by = CASE WHEN target = 0 THEN NULL
                               ELSE (SELECT holders[k] FROM generate_subscripts(slots, 1) AS k
                                     WHERE slots[k] / {ring_slots} = cur AND holders[k] IS NOT NULL LIMIT 1) END;
            PERFORM conveyor_internal.define_ready_slot(target);
            PERFORM pg_notify('conveyor.ring', target::text);
            cur := target;
            cur_since := statement_timestamp();
            -- The new tables, for steps 3 and 4.
            SELECT coalesce(array_agg(s.slot ORDER BY s.slot), '{}'), array_agg(s.tab ORDER BY s.slot),
                   array_agg(s.holder ORDER BY s.slot)
            INTO slots, tabs, holders
            FROM (SELECT substr(c.relname, 7)::smallint AS slot, c.oid::regclass AS tab,
                         holders[array_position(slots, substr(c.relname, 7)::smallint)] AS holder
                  FROM pg_inherits h JOIN pg_class c ON c.oid = h.inhrelid
                  WHERE h.inhparent = 'conveyor.ready'::regclass AND c.relname ~ '^ready_[0-9]{1,5}$') AS s;
        EXCEPTION WHEN lock_not_available THEN
            -- A slot of the target is busy: next pass.
            NULL;
        END;
    END IF;

    -- 1 and 3. Every slot but the current one.
    now_slot := conveyor_internal.ready_slot();
    FOR i IN 1 .. coalesce(array_length(slots, 1), 0) LOOP
        CONTINUE WHEN slots[i] = now_slot;
        t := tabs[i];
        BEGIN
            -- Already empty (its file has no page since the last TRUNCATE).
            -- Asking takes a lock too: a slot someone holds in ACCESS
            -- EXCLUSIVE mode (autovacuum truncating its end, a LOCK TABLE)
            -- is skipped, not the whole pass.
            CONTINUE WHEN pg_relation_size(t) = 0;
            IF holders[i] IS NOT NULL THEN
                -- Held: it cannot be emptied. In the current bank it is
                -- left alone (no other bank was free); in another, its
                -- runnable rows move to the current slot, row by row.
                IF slots[i] / {ring_slots} <> cur THEN
                    EXECUTE format(
                        'WITH moved AS (DELETE FROM %s RETURNING queue, priority, run_at, job_id, task),
                              added AS (INSERT INTO conveyor.ready (slot, queue, priority, run_at, job_id, task)
                                        SELECT $1, queue, priority, run_at, job_id, task FROM moved)
                         SELECT array_agg(DISTINCT queue) FROM moved', t)
                        INTO carried USING now_slot;
                    woken := woken || coalesce(carried, '{}');
                END IF;
                CONTINUE;
            END IF;
            IF slots[i] / {ring_slots} = cur THEN
                -- Too many rows to carry: checked before taking any lock.
                EXECUTE format('SELECT count(*) FROM (SELECT FROM %s LIMIT $1 + 1) AS r', t)
                    INTO live USING carry_at_most;
                CONTINUE WHEN live > carry_at_most;
            END IF;
            EXECUTE format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', t);
            IF slots[i] / {ring_slots} = cur THEN
                -- Again under the lock: rows committed since are counted now.
                EXECUTE format('SELECT count(*) FROM (SELECT FROM %s LIMIT $1 + 1) AS r', t)
                    INTO live USING carry_at_most;
                CONTINUE WHEN live > carry_at_most;
            END IF;
            EXECUTE format(
                'WITH added AS (INSERT INTO conveyor.ready (slot, queue, priority, run_at, job_id, task)
                                SELECT $1, queue, priority, run_at, job_id, task FROM %s
                                RETURNING queue)
                 SELECT array_agg(DISTINCT queue) FROM added', t)
                INTO carried USING now_slot;
            EXECUTE format('TRUNCATE %s', t);
            n_emptied := n_emptied + 1;
            IF slots[i] / {ring_slots} <> cur THEN
                woken := woken || coalesce(carried, '{}');
            END IF;
        EXCEPTION WHEN lock_not_available THEN
            -- Claims or a reader hold it: next pass.
            NULL;
        END;
    END LOOP;

    -- 4. Banks the ring left a while ago, empty and unheld: detached and
    -- dropped, all eight slots or none.
    IF cur_since < statement_timestamp() - retire_after THEN
        FOR target IN
            SELECT DISTINCT slots[k] / {ring_slots} FROM generate_subscripts(slots, 1) AS k
            WHERE slots[k] / {ring_slots} NOT IN (0, cur)
        LOOP
            BEGIN
                CONTINUE WHEN EXISTS (
                    SELECT 1 FROM generate_subscripts(slots, 1) AS k
                    WHERE slots[k] / {ring_slots} = target
                      AND (holders[k] IS NOT NULL OR pg_relation_size(tabs[k]) > 0));
                FOR i IN 1 .. array_length(slots, 1) LOOP
                    CONTINUE WHEN slots[i] / {ring_slots} <> target;
                    EXECUTE format('ALTER TABLE conveyor.ready DETACH PARTITION %s', tabs[i]);
                    EXECUTE format('DROP TABLE %s', tabs[i]);
                END LOOP;
            EXCEPTION WHEN lock_not_available THEN
                NULL;
            END;
        END LOOP;
    END IF;

    -- Rows carried from another bank were out of the claims' sight: wake
    -- the workers of their queues, as an enqueue does (a worker with nothing
    -- to do waits for this, or for its safety interval).
    PERFORM pg_notify('conveyor.job_ready', json_build_object('queue', q)::text)
    FROM (SELECT DISTINCT unnest(woken) AS q) AS w;

    -- The caller's lock_timeout again before the commit: a pass that
    -- notifies takes, at COMMIT, the lock with which PostgreSQL orders the
    -- notifying commits of the whole cluster, which any busy database's
    -- commits hold in turn. Bounded by lock_wait there too, the pass failed
    -- whole at COMMIT under load ("canceling statement due to lock
    -- timeout") and its bank switch was lost.
    PERFORM set_config('lock_timeout', caller_lock_timeout, true);
    RETURN QUERY SELECT cur, n_emptied, cardinality(held_banks) > 0, cur = ANY(held_banks);
END
$$;

COMMENT ON FUNCTION conveyor_internal.rotate_ring(integer, interval, integer, interval, interval, interval) IS
    'Internal. Upkeep of conveyor.ready: empties sealed slots with TRUNCATE, switches to another bank of slots while a long transaction (a pg_dump) holds the current one and back once it ends, carries rows left in other banks, drops banks left long ago. Returns the current bank, slots emptied, whether a long transaction holds a slot, and whether it holds the current bank (both NULL when it did no pass: another process did one less than min_gap ago or is doing one).';
