-- The slot of conveyor.ready that takes inserts now,
-- conveyor_internal.ready_slot(): 8 times the current bank
-- (conveyor.ready_bank) plus the statement's start, in whole
-- seconds, modulo 8.
--
-- Every insert into the ring asks for it, so it must cost nothing: a plain
-- SQL expression that the planner inlines into the caller's plan. Reading
-- the bank from its table on each insert (a PL/pgSQL function, or a
-- subquery) cost 8-16 µs more CPU per single-job enqueue, about 10 %
-- (docs/decisions/2026-11-28-ready-banks.md). So the current bank is
-- written into the function's body as a constant, and the function is
-- redefined when the bank changes: define_ready_slot(bank) here, called by
-- conveyor_internal.rotate_ring() when it switches banks (and on each pass,
-- should the body and conveyor.ready_bank disagree: a row written by hand,
-- a migration that ran during a switch) and by the block below whenever the
-- functions are (re)applied. Replacing a function invalidates the plans
-- that inlined it, in every session, so the next insert goes to the new
-- bank; an insert planned just before lands in the old bank, from where
-- rotate_ring() carries it. conveyor.ready_bank stays the record of the
-- bank; this body is its copy.
--
-- The same call writes the workers' claim, conveyor_internal.claim_ready(),
-- for the bank: its body is conveyor_internal.claim_statement(bank), which
-- names the bank's slots as constants. A PL/pgSQL function keeps its plans
-- per connection, through PgBouncer too, where the statement sent as such
-- was parsed and planned at every claim (about 1.5 ms of the server's CPU
-- each); and the workers need not know the bank to claim from it. Replaced,
-- it is compiled and planned again by each session at its next call.
--
-- Claims of a queue with no concurrency or rate limit take turns, two at a
-- time, on two empty tables (conveyor_internal.claim_turn_<n>), which a
-- claim locks in SHARE UPDATE EXCLUSIVE mode until its transaction ends.
-- Claims running at once all start from the head of the same ring slots and
-- each skips the rows the others hold locked (SKIP LOCKED): with 50 worker
-- processes of 4 slots, 200 connections, a claim of ~90 jobs took 215 ms,
-- and the fleet ran at 27.5 % of one process of 200 slots; with claims
-- taking turns, at 55 % (docs/decisions/2026-11-28-claims-take-turns.md). A
-- claim tries both turns without waiting; if both are taken it returns one
-- row, id NULL and state 'turn', whose priority names the turn to wait for,
-- and the worker waits for it with `LOCK TABLE` in a transaction of its
-- own, sets conveyor.claim_turn for the transaction, and claims in it:
-- `LOCK TABLE` waits without a snapshot, where a claim waiting inside its
-- statement held back the removal of every ring row claimed meanwhile
-- (docs/decisions/2026-11-29-claim-turns-without-a-snapshot.md). Turns only
-- spare claims each other's locked rows: SKIP LOCKED keeps claims correct
-- without them.
-- Returns whether either body changed. (The slot count is written once, as
-- the placeholder ring_slots in braces, which the library replaces with
-- RING_SLOTS of src/db/ring.rs in this file, claim_statement(),
-- ready_bank_tables() and rotate_ring(); the slot length, one second, is
-- written here and in rotate_ring(). Changing either also needs a migration
-- for the slot tables bank 0 has.)
CREATE OR REPLACE FUNCTION conveyor_internal.define_ready_slot(bank integer) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    body text := format(
        'SELECT (%s + floor(extract(epoch FROM statement_timestamp()))::bigint %% {ring_slots})::smallint',
        define_ready_slot.bank * {ring_slots});
    claim text := format($claim$#variable_conflict use_column
DECLARE
    -- The queue's two turns: claim_turn_<turn> and claim_turn_<turn + 1>.
    turn integer := (hashtext(from_queue) & 15) * 2;
BEGIN
    -- Unlimited claims of a queue take turns, two at a time (limited ones
    -- already do, on the queue's row), unless the caller waited for one
    -- (conveyor.claim_turn set): see conveyor_internal.define_ready_slot().
    IF concurrency_limit IS NULL AND rate_room IS NULL
       AND coalesce(current_setting('conveyor.claim_turn', true), '') = '' THEN
        BEGIN
            EXECUTE format('LOCK TABLE conveyor_internal.claim_turn_%%s IN SHARE UPDATE EXCLUSIVE MODE NOWAIT', turn);
        EXCEPTION WHEN lock_not_available THEN
            BEGIN
                EXECUTE format('LOCK TABLE conveyor_internal.claim_turn_%%s IN SHARE UPDATE EXCLUSIVE MODE NOWAIT', turn + 1);
            EXCEPTION WHEN lock_not_available THEN
                -- Both taken: no jobs, one row that names the turn to wait
                -- for (id NULL, state 'turn', priority the turn's number).
                queue := from_queue;
                state := 'turn';
                priority := turn + (random() < 0.5)::int;
                RETURN NEXT;
                RETURN;
            END;
        END;
    END IF;
    RETURN QUERY %s;
END$claim$, conveyor_internal.claim_statement(define_ready_slot.bank));
    changed boolean := false;
BEGIN
    -- (Missing, or another body or setting: written.)
    IF (SELECT p.prosrc IS DISTINCT FROM claim
               OR p.proconfig IS DISTINCT FROM '{plan_cache_mode=force_generic_plan}'::text[]
        FROM pg_proc p
        WHERE p.oid = to_regprocedure('conveyor_internal.claim_ready(text, text[], bigint, float8, text, integer, integer)'))
       IS NOT FALSE THEN
        -- (The column names are OUT parameters; the body's names are columns.)
        EXECUTE format(
            'CREATE OR REPLACE FUNCTION conveyor_internal.claim_ready(
                 from_queue text, for_tasks text[], most bigint, lease_secs float8,
                 for_worker text, concurrency_limit integer, rate_room integer)
             RETURNS TABLE (id uuid, queue text, task text, args jsonb, headers jsonb, state text,
                 priority integer, run_at timestamptz, attempt integer, max_retries integer,
                 retry_backoff_base_secs float8, retry_backoff_secs float8, timeout_secs float8,
                 lease_expires_at timestamptz, worker_id text, result jsonb, last_error text,
                 errors jsonb, created_at timestamptz, started_at timestamptz,
                 finished_at timestamptz, workflow_id uuid, workflow_index integer,
                 on_success jsonb, on_error jsonb, lease_token bigint)
             LANGUAGE plpgsql
             -- One plan per connection, not five custom plans first: the
             -- plan kept after them is this one anyway, and each took about
             -- a millisecond (2 to 8 on a busy server) on each connection a
             -- worker claims on, again after each emptied ring slot.
             SET plan_cache_mode = force_generic_plan
             AS %L', claim);
        EXECUTE format(
            'COMMENT ON FUNCTION conveyor_internal.claim_ready(text, text[], bigint, float8, text, integer, integer) IS %L',
            format('Internal. The workers'' claim: up to `most` runnable jobs of `from_queue` for `for_worker`, '
                   'from bank %s of the ready ring (conveyor_internal.claim_statement() says how). '
                   'Redefined by conveyor_internal.define_ready_slot() when the bank changes.',
                   define_ready_slot.bank));
        changed := true;
    END IF;
    IF (SELECT p.prosrc FROM pg_proc p
        WHERE p.oid = to_regprocedure('conveyor_internal.ready_slot()')) IS NOT DISTINCT FROM body THEN
        RETURN changed;
    END IF;
    EXECUTE format(
        'CREATE OR REPLACE FUNCTION conveyor_internal.ready_slot() RETURNS smallint
         LANGUAGE sql STABLE PARALLEL SAFE AS %L', body);
    EXECUTE format(
        'COMMENT ON FUNCTION conveyor_internal.ready_slot() IS %L',
        format('Internal. The conveyor.ready slot that takes inserts now: {ring_slots} * bank %s '
               '(conveyor.ready_bank) + the statement''s second modulo {ring_slots}. '
               'Redefined by conveyor_internal.define_ready_slot() when the bank changes.',
               define_ready_slot.bank));
    RETURN true;
END
$$;

COMMENT ON FUNCTION conveyor_internal.define_ready_slot(integer) IS
    'Internal. (Re)defines conveyor_internal.ready_slot() and conveyor_internal.claim_ready() for ring bank `bank` (the bank as a constant in their bodies, so that inserts pay no lookup and claims read that bank''s slots); returns whether either changed. Called by rotate_ring() and when the functions are applied.';

-- On a new database the functions come before the baseline migration,
-- which creates conveyor.ready_bank (and calls this again): bank 0.
DO $$
DECLARE
    current_bank integer;
BEGIN
    IF to_regclass('conveyor.ready_bank') IS NOT NULL THEN
        EXECUTE 'SELECT bank FROM conveyor.ready_bank LIMIT 1' INTO current_bank;
    END IF;
    PERFORM conveyor_internal.define_ready_slot(coalesce(current_bank, 0));
END
$$;
