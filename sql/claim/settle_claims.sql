-- Settles the claims of some jobs (conveyor.claims): every job in `ids` that a
-- claim holds while its row says pending gets that row rewritten as started
-- (attempt, token, lease, worker and started_at from the claim), and the
-- claim stops counting it. Afterwards each job's stored row alone says
-- what it is, so a statement that acts on single jobs (cancel, delete, an
-- UPDATE or DELETE through conveyor.jobs, release, rescue) can read and
-- lock conveyor.job_rows as before.
--
-- A claim being made at this moment is waited for first: the ring rows of
-- the jobs still pending are locked (a claim in flight holds its ring rows
-- until it commits, deleted; those still there are held by this
-- transaction from now on, so no claim can take them before it ends). The
-- claims are read after that, in a statement of their own, so every claim
-- that took one of these jobs is seen. Returns the jobs settled.
CREATE OR REPLACE FUNCTION conveyor_internal.settle_claims(ids uuid[]) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    settled integer;
    tokens bigint[];
    counts integer[];
BEGIN
    PERFORM 1
    FROM conveyor.jobs_unfinished j
    JOIN conveyor.ready r
      ON r.queue = j.queue AND -(r.priority::bigint) = -(j.priority::bigint)
     AND r.run_at = j.run_at AND r.job_id = j.id
    WHERE j.id = ANY(ids) AND j.state = 'pending'
    ORDER BY j.id
    FOR UPDATE OF r;

    WITH held AS (
        SELECT u.job_id AS id, c.lease_token, c.worker_id, c.started_at, c.lease_expires_at
        FROM conveyor.claims c, unnest(c.job_ids) AS u(job_id)
        WHERE c.job_ids && ids AND c.jobs_left > 0 AND u.job_id = ANY(ids)
    ),
    moved AS (
        UPDATE conveyor.jobs_unfinished j SET
            state = 'started',
            attempt = least(j.attempt, 2147483646) + 1,
            lease_token = h.lease_token,
            worker_id = h.worker_id,
            started_at = h.started_at,
            lease_expires_at = h.lease_expires_at
        FROM held h
        WHERE j.id = ANY(ids) AND j.id = h.id AND j.state = 'pending'
          AND h.lease_token > coalesce(j.lease_token, 0)
        RETURNING h.lease_token
    ),
    per_claim AS (
        SELECT lease_token, count(*)::int AS n FROM moved GROUP BY lease_token
    )
    SELECT array_agg(lease_token), array_agg(n), coalesce(sum(n), 0)
    INTO tokens, counts, settled
    FROM per_claim;
    -- The claims no longer hold the jobs settled (one call for them all).
    PERFORM conveyor_internal.claims_done(tokens, counts);
    RETURN settled;
END
$$;

COMMENT ON FUNCTION conveyor_internal.settle_claims(uuid[]) IS
    'Internal. Rewrites claimed jobs (pending on disk, held by a conveyor.claims row) as started rows of their own, after waiting for claims in flight.';
