-- The ready ring's claim order as one all-ascending key:
-- (queue, -priority, run_at, job_id) instead of (queue, priority DESC,
-- run_at, job_id). The order is the same; written this way a claim can
-- start after a given key with one row comparison the index serves, which
-- the per-slot floors need (docs/decisions/2026-11-24-ring-floors.md).
-- priority is widened to bigint first: -(-2147483648) does not fit an int.
DROP INDEX conveyor.ready_claim_idx;

CREATE INDEX ready_claim_idx ON conveyor.ready (queue, (-(priority::bigint)), run_at, job_id);

COMMENT ON INDEX conveyor.ready_claim_idx IS
    'Claims: runnable jobs of one queue in claim order (highest priority first, then oldest run_at, then id), as one ascending key.';
