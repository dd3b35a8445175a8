-- The rescuer's first step: up to `max_claims` claims whose
-- lease expired are settled (their jobs' rows rewritten as started, with the
-- expired lease) and deleted, so that the rescue statement (rescue.sql),
-- which reads stored rows, takes their jobs back. Claims that a heartbeat or
-- an outcome holds at this moment are skipped (the next pass sees them).
-- Returns the claims settled.
--
-- Expired claims are looked for from the floor up
-- (conveyor_internal.rescue_floor: no claim has a lease below it), so that a
-- pass walks the index entries of claims ended in the last minute or so,
-- not those of every claim ended since a pg_dump began. After the pass the
-- floor rises to a minute below the lowest lease left (a claim skipped
-- above, a live one; now() if none). The minute is for claims not yet
-- committed, which this pass cannot see: a claim's lease is the statement
-- time plus its lease duration (claim_statement()), so a claim is missed
-- only if it commits more than its lease plus a minute after its statement
-- began. A lease written in the past, by hand, lowers the floor (the
-- trigger claims_lease_in_the_past); the floor rises only under the
-- advisory lock that trigger shares, so that no such write is in flight
-- while the lowest lease is read. If another transaction holds that lock
-- (a psql session that wrote a past lease and is still open), the pass
-- settles from the floor and leaves it where it is.
CREATE OR REPLACE FUNCTION conveyor_internal.settle_expired_claims(max_claims integer)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    may_raise boolean := pg_try_advisory_xact_lock(hashtextextended('conveyor_internal.rescue_floor', 0));
    floor_at timestamptz;
    lowest timestamptz;
    tokens bigint[];
    ids uuid[];
BEGIN
    SELECT f.at INTO floor_at FROM conveyor_internal.rescue_floor f;
    SELECT coalesce(array_agg(lease_token), '{}') INTO tokens
    FROM (SELECT lease_token FROM conveyor.claims
          WHERE lease_expires_at >= coalesce(floor_at, '-infinity') AND lease_expires_at < now()
          ORDER BY lease_expires_at
          LIMIT max_claims
          FOR UPDATE SKIP LOCKED) AS c;
    IF cardinality(tokens) > 0 THEN
        SELECT coalesce(array_agg(u.job_id), '{}') INTO ids
        FROM conveyor.claims c, unnest(c.job_ids) AS u(job_id)
        WHERE c.lease_token = ANY(tokens);
        PERFORM conveyor_internal.settle_claims(ids);
        DELETE FROM conveyor.claims WHERE lease_token = ANY(tokens);
    END IF;
    IF may_raise THEN
        IF floor_at IS NULL THEN
            -- The row was deleted (by hand): written again, at the start.
            INSERT INTO conveyor_internal.rescue_floor (at) VALUES ('-infinity')
            ON CONFLICT (only_row) DO NOTHING;
        ELSE
            SELECT c.lease_expires_at INTO lowest FROM conveyor.claims c
            WHERE c.lease_expires_at >= floor_at
            ORDER BY c.lease_expires_at LIMIT 1;
            UPDATE conveyor_internal.rescue_floor
            SET at = least(coalesce(lowest, now()), now()) - interval '1 minute'
            WHERE least(coalesce(lowest, now()), now()) - interval '1 minute' > at;
        END IF;
    END IF;
    RETURN cardinality(tokens);
END
$$;

COMMENT ON FUNCTION conveyor_internal.settle_expired_claims(integer) IS
    'Internal. Settles and deletes claims whose lease expired, for the rescuer, looking from its floor (conveyor_internal.rescue_floor) up, and raises the floor.';
