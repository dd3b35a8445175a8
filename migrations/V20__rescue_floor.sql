-- The rescuer reads the claims of conveyor.claims from a floor up (issue
-- 31; docs/decisions/2026-11-29-rescue-floor.md).
--
-- The rescuer looks for claims whose lease has expired: lease_expires_at <
-- now(). Every claim ever ended matches that once its lease has passed, so
-- while a pg_dump (or any session) holds its snapshot, the versions of
-- every claim ended since the dump began stay in the index, and each pass
-- walked them all: 900,000 entries after ten minutes at 1,500 jobs/s
-- (`bench --only dump`, claims-reads/claim rising in every third sample).
--
-- 1. An index on the lease alone, so that a range of leases is one stretch
--    of the index (claims_live_idx leads with the queue, and a range of
--    leases across queues walked all of it).
CREATE INDEX claims_lease_idx ON conveyor.claims (lease_expires_at);

COMMENT ON INDEX conveyor.claims_lease_idx IS
    'Claims by lease, for the rescuer''s range from its floor (conveyor_internal.rescue_floor) to now.';

-- 2. The floor: no claim has a lease below it. The rescuer reads from the
--    floor up, and raises it after each pass to a minute below the lowest
--    lease left (conveyor_internal.settle_expired_claims() says why a
--    minute). Claims and heartbeats write leases in the future; a lease
--    written in the past (by hand, in psql) lowers the floor to it, through
--    the trigger below.
CREATE TABLE conveyor_internal.rescue_floor (
    only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    at timestamptz NOT NULL
);

INSERT INTO conveyor_internal.rescue_floor (at) VALUES ('-infinity');

COMMENT ON TABLE conveyor_internal.rescue_floor IS
    'Internal, one row. No claim in conveyor.claims has a lease below `at`: the rescuer looks for expired claims from there up. Deleting the row is harmless (the next pass reads from the start and writes it again); raising `at` by hand can leave expired claims unrescued.';
COMMENT ON COLUMN conveyor_internal.rescue_floor.at IS
    'Every claim''s lease_expires_at is at or above this.';

CREATE TRIGGER claims_lease_in_the_past
    AFTER INSERT OR UPDATE OF lease_expires_at ON conveyor.claims
    FOR EACH ROW WHEN (NEW.lease_expires_at < now())
    EXECUTE FUNCTION conveyor_internal.claim_lease_in_the_past();

COMMENT ON TRIGGER claims_lease_in_the_past ON conveyor.claims IS
    'A lease written in the past (by hand) lowers the rescuer''s floor to it (conveyor_internal.rescue_floor).';
