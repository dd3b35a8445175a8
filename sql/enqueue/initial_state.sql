-- The state a new job starts in: scheduled when it is due later than now
-- (the statement's start), pending otherwise. See due_at() for where this
-- rule is applied; inlined by the planner.
CREATE OR REPLACE FUNCTION conveyor_internal.initial_state(due timestamptz) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN due > statement_timestamp() THEN 'scheduled' ELSE 'pending' END
$$;

COMMENT ON FUNCTION conveyor_internal.initial_state(timestamptz) IS
    'Internal. A new job''s first state: scheduled if due after the statement''s start, else pending.';
