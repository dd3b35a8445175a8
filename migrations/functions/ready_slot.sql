-- The slot of conveyor.ready that takes inserts now: 8 times the current
-- bank (conveyor.ready_bank, migration V16; 0 before that migration, or if
-- its row is missing) plus the statement's start, in whole seconds, modulo
-- 8. PL/pgSQL, so that migrations before V16, which insert into the ring
-- through it, run it without its table (a SQL function would be inlined,
-- and its table looked up, when the statement is planned); callers that
-- insert many rows take it once, as a scalar subquery. (Changing the slot
-- count or length means changing this, src/db/ring.rs and
-- conveyor_internal.rotate_ring() together.)
CREATE OR REPLACE FUNCTION conveyor_internal.ready_slot() RETURNS smallint
LANGUAGE plpgsql STABLE PARALLEL SAFE AS $$
DECLARE
    current_bank smallint;
BEGIN
    IF to_regclass('conveyor.ready_bank') IS NOT NULL THEN
        SELECT b.bank INTO current_bank FROM conveyor.ready_bank b LIMIT 1;
    END IF;
    RETURN (coalesce(current_bank, 0) * 8
            + floor(extract(epoch FROM statement_timestamp()))::bigint % 8)::smallint;
END
$$;

COMMENT ON FUNCTION conveyor_internal.ready_slot() IS
    'Internal. The conveyor.ready slot that takes inserts now (8 * the current bank + the statement''s second modulo 8).';
