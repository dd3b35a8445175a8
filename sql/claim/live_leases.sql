-- The jobs of one queue that hold a live lease: started rows whose lease
-- has not expired, and the jobs still held by the queue's claims whose
-- lease has not expired (conveyor.claims). A queue's global
-- concurrency limit is checked against this count (claim.sql). A job whose lease has expired is not counted: its
-- worker stopped renewing it, and the rescuer gives it back.
--
-- Read through indexes only (sequential scans off inside the function:
-- jobs_running_idx and claims_live_idx), so that a snapshot
-- held elsewhere for minutes does not make the count read every version
-- that claims have left since; through claims_live_idx it reads the
-- versions of one lease period.
CREATE OR REPLACE FUNCTION conveyor_internal.live_leases(queue_name text) RETURNS bigint
LANGUAGE plpgsql STABLE
SET enable_seqscan = off
AS $$
BEGIN
    -- (plpgsql keeps the plan for the session; a SQL function with a SET
    -- clause is not inlined and was planned again at every call: 0.25 ms.)
    RETURN (SELECT count(*) FROM conveyor.jobs_unfinished
            WHERE state = 'started' AND queue = queue_name AND lease_expires_at > now())
         + (SELECT coalesce(sum(jobs_left), 0) FROM conveyor.claims
            WHERE queue = queue_name AND lease_expires_at > now());
END
$$;

COMMENT ON FUNCTION conveyor_internal.live_leases(text) IS
    'Internal. Jobs of a queue with a live lease (started rows and claims not expired), for its concurrency limit.';
