-- The trigger claims_lease_in_the_past (on conveyor.claims): a claim written
-- with a lease already past (by hand: the library writes leases in the
-- future) lowers the rescuer's floor to it, so that the rescuer, which
-- reads claims from the floor up (conveyor_internal.settle_expired_claims()),
-- finds it. The shared lock waits for a rescuer pass that is raising the
-- floor, and keeps the next from raising it until this transaction ends:
-- that pass's statements, begun after, see this row.
CREATE OR REPLACE FUNCTION conveyor_internal.claim_lease_in_the_past() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(hashtextextended('conveyor_internal.rescue_floor', 0));
    UPDATE conveyor_internal.rescue_floor SET at = NEW.lease_expires_at
    WHERE at > NEW.lease_expires_at;
    RETURN NULL;
END
$$;

COMMENT ON FUNCTION conveyor_internal.claim_lease_in_the_past() IS
    'Internal. Trigger: a claim''s lease written in the past lowers the rescuer''s floor (conveyor_internal.rescue_floor) to it.';
