-- The slot of conveyor.ready that takes inserts now: the statement's start,
-- in whole seconds, modulo the 8 slots. A plain SQL function, so the planner
-- inlines it. (Changing the slot count or length means changing this, the
-- partitions of conveyor.ready and conveyor_internal.rotate_ready() together.)
CREATE OR REPLACE FUNCTION conveyor_internal.ready_slot() RETURNS smallint
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT (floor(extract(epoch FROM statement_timestamp()))::bigint % 8)::smallint
$$;

COMMENT ON FUNCTION conveyor_internal.ready_slot() IS
    'Internal. The conveyor.ready slot that takes inserts now (the statement''s second modulo 8).';
