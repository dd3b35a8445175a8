-- The rescuer's first step (migration V12): up to `max_claims` claims whose
-- lease expired are settled (their jobs' rows rewritten as started, with the
-- expired lease) and deleted, so that the rescue statement (rescue.sql),
-- which reads stored rows, takes their jobs back. Claims that a heartbeat or
-- an outcome holds at this moment are skipped (the next pass sees them).
-- Returns the claims settled.
CREATE OR REPLACE FUNCTION conveyor_internal.settle_expired_claims(max_claims integer)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    tokens bigint[];
    ids uuid[];
BEGIN
    SELECT coalesce(array_agg(lease_token), '{}') INTO tokens
    FROM (SELECT lease_token FROM conveyor.claims
          WHERE lease_expires_at < now()
          ORDER BY lease_expires_at
          LIMIT max_claims
          FOR UPDATE SKIP LOCKED) AS c;
    IF cardinality(tokens) = 0 THEN
        RETURN 0;
    END IF;
    SELECT coalesce(array_agg(u.job_id), '{}') INTO ids
    FROM conveyor.claims c, unnest(c.job_ids) AS u(job_id)
    WHERE c.lease_token = ANY(tokens);
    PERFORM conveyor_internal.settle_claims(ids);
    DELETE FROM conveyor.claims WHERE lease_token = ANY(tokens);
    RETURN cardinality(tokens);
END
$$;

COMMENT ON FUNCTION conveyor_internal.settle_expired_claims(integer) IS
    'Internal. Settles and deletes claims whose lease expired, for the rescuer.';
