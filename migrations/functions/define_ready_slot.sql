-- The slot of conveyor.ready that takes inserts now,
-- conveyor_internal.ready_slot(): 8 times the current bank
-- (conveyor.ready_bank, migration V16) plus the statement's start, in whole
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
-- bank; this body is its copy. Returns whether the body changed. (Changing
-- the slot count or length means changing this, src/db/ring.rs and
-- conveyor_internal.rotate_ring() together.)
CREATE OR REPLACE FUNCTION conveyor_internal.define_ready_slot(bank integer) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    body text := format(
        'SELECT (%s + floor(extract(epoch FROM statement_timestamp()))::bigint %% 8)::smallint',
        define_ready_slot.bank * 8);
BEGIN
    IF (SELECT p.prosrc FROM pg_proc p
        WHERE p.oid = to_regprocedure('conveyor_internal.ready_slot()')) IS NOT DISTINCT FROM body THEN
        RETURN false;
    END IF;
    EXECUTE format(
        'CREATE OR REPLACE FUNCTION conveyor_internal.ready_slot() RETURNS smallint
         LANGUAGE sql STABLE PARALLEL SAFE AS %L', body);
    EXECUTE format(
        'COMMENT ON FUNCTION conveyor_internal.ready_slot() IS %L',
        format('Internal. The conveyor.ready slot that takes inserts now: 8 * bank %s '
               '(conveyor.ready_bank) + the statement''s second modulo 8. '
               'Redefined by conveyor_internal.define_ready_slot() when the bank changes.',
               define_ready_slot.bank));
    RETURN true;
END
$$;

COMMENT ON FUNCTION conveyor_internal.define_ready_slot(integer) IS
    'Internal. (Re)defines conveyor_internal.ready_slot() for ring bank `bank` (the bank as a constant in its body, so that inserts pay no lookup); returns whether it changed. Called by rotate_ring() and when the functions are applied.';

-- Before migration V16 there are no banks (bank 0).
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
