-- A claim from a queue with a global concurrency limit counts the jobs the
-- queue's claims still hold (issue 16). Summed over every conveyor.claims
-- row of the queue, that was a sequential scan of the table; while another
-- session holds a snapshot, every claim and count-down leaves a version in
-- it that vacuum may not remove, so each such claim read more the longer
-- the hold lasted (pickup p99 past 100 ms after 450 s of hold at 1,500
-- jobs/s; docs/benchmarks.md, "S with a concurrency-limited queue"). The
-- count now takes the claims whose lease is live
-- (conveyor_internal.live_leases(), lease_expires_at in the future) through
-- this index: the versions written within one lease period, whatever the
-- length of the hold.
CREATE INDEX claims_live_idx ON conveyor.claims (queue, lease_expires_at);

COMMENT ON INDEX conveyor.claims_live_idx IS
    'A queue''s claims with a live lease, for the concurrency limit''s count (conveyor_internal.live_leases).';
